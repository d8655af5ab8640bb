#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: pve_lxc
short_description: Create or adopt a Proxmox VE LXC container through the API, with check and diff mode
version_added: 0.1.0
description:
  - Ensures container O(vmid) exists on O(node) with the given options, through the Proxmox VE API (proxmoxer).
  - An existing container is adopted, never recreated. Only the options given are compared, the way Proxmox
    stores them (property strings such as C(net0) key by key), and only differing ones are sent in one
    C(PUT /nodes/{node}/lxc/{vmid}/config) with the config digest.
  - Options fixed at creation (O(ostemplate), O(unprivileged), the O(rootfs) size) that differ on an existing
    container are an error naming them; nothing is changed.
  - A O(vmid) that exists on another node of the cluster is an error.
  - A change (options, start, stop) to a container carrying Proxmox's guest lock (the C(lock) of its config - a
    backup, a migration, a snapshot) is refused before any call, in check mode too, naming the lock, what it
    means and how to clear it; Proxmox itself refuses it (C(CT is locked)). A container already as asked is no
    change, locked or not.
  - Device passthrough (C(devN), raw C(lxc.*)) is M(gpuserve.sglang.pve_lxc_conf)'s job on the node.
author:
  - gpuserve.sglang contributors (@gpuserve)
requirements:
  - proxmoxer >= 2.0
  - requests
options:
  node:
    description: Node the container lives on.
    type: str
    required: true
  vmid:
    description: Container ID.
    type: int
    required: true
  state:
    description: V(present) (exists, power state untouched), V(started) or V(stopped) (clean shutdown).
    type: str
    choices: [present, started, stopped]
    default: present
  ostemplate:
    description: Template volume used only to create the container, e.g. C(local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst).
    type: str
  hostname:
    description: Hostname.
    type: str
  rootfs:
    description: Root disk at creation, C(<storage>:<GiB>), e.g. C(local-lvm:64); on an existing CT only the size is compared.
    type: str
  cores:
    description: CPU cores.
    type: int
  memory:
    description: Memory in MiB.
    type: int
  swap:
    description: Swap in MiB.
    type: int
  net:
    description:
      - Network devices by index, for example index C(0) with C(name=eth0,bridge=vmbr0,ip=dhcp).
      - Keys Proxmox adds (C(hwaddr)) are not compared.
    type: dict
  unprivileged:
    description: Unprivileged container (fixed at creation).
    type: bool
  features:
    description: Feature flags, e.g. C(nesting=1). Flags other than nesting need root@pam.
    type: str
  onboot:
    description: Start at node boot.
    type: bool
  timeout:
    description: Seconds to wait for a create/start/shutdown task.
    type: int
    default: 300
extends_documentation_fragment:
  - gpuserve.sglang.attributes
  - gpuserve.sglang.proxmox
attributes:
  diff_mode:
    support: full
notes:
  - Every request's path, method and parameter names are checked in the tests against the real PVE 8.4 and 9.1
    API schema by an HTTP-level fake server (C(tests/integration/pve_fake.py)).
seealso:
  - module: gpuserve.sglang.pve_lxc_conf
"""

EXAMPLES = r"""
- name: CT 129 exists and runs (adopted if it is already there)
  gpuserve.sglang.pve_lxc:
    api_host: pve1.example.org
    api_user: root@pam
    api_password: "{{ vault_pve_root_password }}"
    node: pve1
    vmid: 129
    ostemplate: local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst
    hostname: sglang
    rootfs: local-lvm:200
    cores: 16
    memory: 65536
    swap: 0
    net: {0: "name=eth0,bridge=vmbr0,ip=dhcp"}
    unprivileged: true
    features: nesting=1
    onboot: true
    state: started
"""

RETURN = r"""
task_warnings:
  description: Tasks that succeeded with the exit status C(WARNINGS) and a count, each with its warning lines from the
    task log (also shown as warnings).
  returned: always
  type: list
  sample: [{"upid": "UPID:pve1:0001A2B3:00C4D5E6:6750A1B2:vzstart:129:root@pam:", "count": 1,
          "lines": ["WARN: old cgroup setting ignored"]}]
  elements: dict
created:
  description: True when the container was (or, in check mode, would be) created.
  returned: always
  type: bool
  sample: false
changes:
  description: Options sent (or that would be sent) to C(PUT .../config).
  returned: always
  type: dict
  sample: {"memory": 65536, "cores": 16}
status:
  description: Power state after the run, C(running) or C(stopped).
  returned: always
  type: str
  sample: running
diff:
  description: C(before)/C(after) of the compared options, in diff mode.
  returned: diff mode
  type: dict
  sample: {"before": {"memory": 32768}, "after": {"memory": 65536}}
"""

import traceback

from ansible.module_utils.basic import AnsibleModule, env_fallback, missing_required_lib
from ansible_collections.gpuserve.sglang.plugins.module_utils.pve import (API_ARGUMENT_SPEC, API_ENV, CT_ARGUMENT_SPEC,
                                                                          ConfFailed, ensure_ct)

try:
    from proxmoxer import ProxmoxAPI
    HAS_PROXMOXER = True
    PROXMOXER_ERR = None
except ImportError:
    HAS_PROXMOXER = False
    PROXMOXER_ERR = traceback.format_exc()


def api_argument_spec():
    """The shared API options (module_utils.pve), each falling back to its environment variable."""
    return dict((name, dict(spec, fallback=(env_fallback, [API_ENV[name]]))) for name, spec in API_ARGUMENT_SPEC.items())


def main():
    module = AnsibleModule(argument_spec=dict(api_argument_spec(), **CT_ARGUMENT_SPEC),
                           required_one_of=[("api_password", "api_token_id")],
                           required_together=[("api_token_id", "api_token_secret")], supports_check_mode=True)
    if not HAS_PROXMOXER:
        module.fail_json(msg=missing_required_lib("proxmoxer"), exception=PROXMOXER_ERR)
    try:
        result, warnings = ensure_ct(ProxmoxAPI, module.params, module.check_mode, module._diff)
    except ConfFailed as exc:
        module.fail_json(msg=exc.msg, **exc.result)
    for warning in warnings:
        module.warn(warning)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
