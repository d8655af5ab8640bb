#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: sglang_rendezvous
short_description: Check, before launch, that every rank of a multi-node SGLang server reaches rank 0's rendezvous
version_added: 0.8.0
description:
  - One SGLang server across several containers meets at C(--dist-init-addr) (rank 0's address and port, where
    torch.distributed's TCPStore listens). A blocked port shows only after launch, as every rank hanging until
    C(--dist-timeout). This module checks it first, with real TCP.
  - O(mode=listen) on rank 0 listens on that address and port and accepts up to O(peers) connections within
    O(timeout) seconds (run it asynchronously); a port already in use (the running group's own store, on a
    re-run) is reported as C(in_use), not as an error.
  - O(mode=connect) on every other rank connects to it and reports whether it was reached and, if not, what the
    socket said (refused, timed out, no route). It never fails on an unreachable rendezvous; the playbook names the
    rank and the fix.
  - The logic is plain Python in C(plugins/module_utils/server/group.py).
author:
  - gpuserve.sglang contributors (@gpuserve)
options:
  mode:
    description: C(listen) on rank 0, C(connect) on the other ranks.
    type: str
    choices: [listen, connect]
    required: true
  addr:
    description: Rank 0's address (C(sglang_server_group_addr)); IPv6 with or without brackets.
    type: str
    required: true
  port:
    description: The rendezvous port (C(sglang_server_dist_port)).
    type: int
    required: true
  peers:
    description: With O(mode=listen), how many connections to wait for (the other ranks).
    type: int
    default: 1
  timeout:
    description: Seconds to listen (O(mode=listen)) or to try the connect (O(mode=connect)).
    type: float
    default: 5
attributes:
  check_mode:
    support: full
    description: The probe changes nothing, so it runs in check mode too.
  diff_mode:
    support: none
    description: Nothing is changed, so there is nothing to show.
extends_documentation_fragment:
  - gpuserve.sglang.attributes
"""

EXAMPLES = r"""
- name: Rank 0 listens where the TCPStore will
  gpuserve.sglang.sglang_rendezvous:
    mode: listen
    addr: 10.0.3.27
    port: 5000
    peers: 1
    timeout: 30
  async: 60
  poll: 0
  register: listener

- name: Rank 1 reaches it
  gpuserve.sglang.sglang_rendezvous:
    mode: connect
    addr: 10.0.3.27
    port: 5000
  register: reach
"""

RETURN = r"""
listening:
  description: O(mode=listen) - whether the port was bound and listened on.
  returned: mode is listen
  type: bool
  sample: true
in_use:
  description: O(mode=listen) - the port was already bound (the running group's store on a re-run).
  returned: mode is listen
  type: bool
  sample: false
accepted:
  description: O(mode=listen) - the addresses of the connections accepted.
  returned: mode is listen
  type: list
  sample: ["10.0.3.101"]
  elements: str
reachable:
  description: O(mode=connect) - whether the TCP connect succeeded.
  returned: mode is connect
  type: bool
  sample: true
error:
  description: What the socket said when it failed (None when it did not).
  returned: always
  type: str
  sample: null
interface:
  description:
    - The network interface this container reaches O(addr) through (for rank 0, the one holding O(addr)) - what
      C(NCCL_SOCKET_IFNAME) and C(GLOO_SOCKET_IFNAME) must name so NCCL and Gloo use the network the rendezvous
      uses (IPv4 or IPv6); null when it cannot be told.
  returned: always
  type: str
  sample: eth0
address:
  description:
    - This container's own address towards O(addr) (for rank 0, O(addr) itself) - what C(SGLANG_HOST_IP) must say,
      so that SGLang's scheduler broadcast to the other ranks is reached on the rendezvous network rather than at the
      default route's address; null when it cannot be told.
  returned: always
  type: str
  sample: 10.0.3.100
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuserve.sglang.plugins.module_utils.server import connect, interface_to, listen, source_address


def main():
    module = AnsibleModule(
        argument_spec=dict(
            mode=dict(type="str", required=True, choices=["listen", "connect"]),
            addr=dict(type="str", required=True),
            port=dict(type="int", required=True),
            peers=dict(type="int", default=1),
            timeout=dict(type="float", default=5),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if not 0 < p["port"] < 65536:
        module.fail_json(msg="port=%s: a TCP port, 1-65535 (sglang_server_dist_port)" % p["port"])
    if p["mode"] == "listen":
        result = listen(p["addr"], p["port"], p["peers"], p["timeout"])
        if result["error"]:
            module.fail_json(msg=result["error"], changed=False, interface=None, address=None,
                             **dict((k, v) for k, v in result.items() if k != "error"))
    else:
        result = connect(p["addr"], p["port"], p["timeout"])
    result["interface"] = interface_to(p["addr"], p["port"])
    result["address"] = source_address(p["addr"], p["port"]) if result["interface"] else None
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
