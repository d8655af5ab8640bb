#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: pve_lxc_conf
short_description: Manage device passthrough lines in a Proxmox container config, in place
version_added: 0.1.0
description:
  - Edits C(/etc/pve/lxc/<vmid>.conf) on a Proxmox VE node so that the container's device
    passthrough is exactly what is asked, as C(devN) options (PVE 8.1 and later) and/or raw C(lxc.*) lines.
  - Every line the operator wrote is kept byte for byte; only lines this module owns change (C(devN)
    options whose path matches O(owned_paths), device rules for O(owned_majors), mounts matching O(owned_mounts)). Raw lines go at the end
    of the main section, before any C([snapshot]) section, where Proxmox reads them.
  - Writes the file in place (pmxcfs refuses the chmod/rename of Ansible's atomic copy), after a backup
    outside C(/etc/pve).
  - A C(devN) whose device node does not exist on the node is refused, as Proxmox refuses it.
  - A change to a CT whose config carries Proxmox's guest lock (its C(lock) option - C(backup), C(migrate),
    C(snapshot), ...) is refused with what the lock means and how to clear it, in check mode too - Proxmox itself
    changes nothing in a locked CT. A config already as asked is no change, locked or not.
  - A write refused by C(/etc/pve) (read-only while the node has no quorum) fails naming that, the config unchanged.
  - Pending changes (the C([pve:pending]) section, which Proxmox applies at the next start) that set or delete a
    C(devN) this module owns or writes are refused with the ways out (restart the CT, or C(pct set --revert)),
    every run, changed or not - they would overwrite the passthrough at the next start. PVE 8 puts a C(devN) set
    on a running CT there.
  - Changes take effect when the container starts; the result says whether a restart is needed.
author:
  - gpuserve.sglang contributors (@gpuserve)
options:
  vmid:
    description: Container ID.
    type: int
    required: true
  conf_dir:
    description: Directory of the container configs.
    type: path
    default: /etc/pve/lxc
  passthrough:
    description:
      - How O(devices) are written. C(devn) as C(devN) options (PVE 8.1 and later; Proxmox creates the node
        in the CT and an exact cgroup rule). C(raw) as an exact C(lxc.cgroup2.devices.allow) C(c MAJOR:MINOR rwm)
        rule (major/minor read from the node itself) plus a bind C(lxc.mount.entry) per node.
      - Lines of the other form that this module owns are removed, so switching modes leaves no stale line.
    type: str
    choices: [devn, raw]
    default: devn
  devices:
    description:
      - Device nodes to pass. In C(devn) form, existing C(devN) of the same path keep their index.
      - An empty list removes every passthrough line this module owns.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: Device node on the node, e.g. C(/dev/nvidia0).
        type: path
        required: true
      mode:
        description: Mode of the node inside the container.
        type: str
      gid:
        description: Group inside the container (needed for unprivileged containers when mode is not 0666).
        type: int
      uid:
        description: Owner inside the container.
        type: int
      deny_write:
        description: Read-only access.
        type: bool
        default: false
  raw:
    description: Extra raw LXC lines as C([key, value]) pairs, in order, after the ones O(passthrough=raw) generates.
    type: list
    elements: list
    default: []
  owned_paths:
    description: Regular expression of device paths whose C(devN) entries this module owns.
    type: str
    default: ^/dev/nvidia
  owned_majors:
    description:
      - Character-device majors whose C(lxc.cgroup2.devices.allow) (and cgroup v1 C(lxc.cgroup.devices.allow))
        rules this module owns, besides the majors of O(devices). Pass the NVIDIA majors of C(/proc/devices)
        (C(nvidia_gpu_facts) C(device_majors)) so rules for them that an earlier run or guide wrote are replaced.
      - Rules for other majors (an iGPU's 226, ...) are never touched.
    type: list
    elements: int
    default: [195]
  owned_mounts:
    description: Regular expression of C(lxc.mount.entry) sources this module owns.
    type: str
    default: ^/dev/nvidia
  backup_dir:
    description: Where the previous config is copied before a change (never inside C(/etc/pve)).
    type: path
    default: /var/lib/gpuserve-sglang/pve-backups
  backup_keep:
    description: Backups kept per container; older ones are removed after a new one is written.
    type: int
    default: 10
  status:
    description:
      - Also ask C(pct status) for the container and return RV(status), read before this module writes anything,
        so a role needs no second call for it. A C(pct) that fails fails the task with its words.
    type: bool
    default: false
  open_if_unchanged:
    description:
      - Device nodes to open inside the container, in this same call, when the config needs no change and the
        container is running (O(status) must be true) - C(pct exec <vmid> -- head -q -c 0 -- <paths>) opens each
        read-only and reads nothing, and names each one it cannot open on stderr. Returned as RV(opened) for the
        caller to classify. Not done when the config changes (the devices take effect only after a restart) or the
        container is not running - RV(opened) is then absent and the caller opens them itself after the restart.
      - Read-only, so also done in check mode.
    type: list
    elements: path
    default: []
    version_added: 0.7.0
  lock_dir:
    description:
      - Where Proxmox keeps its config locks. The file is read, compared and written holding
        C(<lock_dir>/pve-config-<vmid>.lock) (flock), the lock C(pct set), the API and C(vzdump) take, so a
        write here never interleaves with theirs. Not taken in check mode.
    type: path
    default: /run/lock/lxc
    version_added: 0.7.0
  lock_timeout:
    description: Seconds to wait for that lock (Proxmox's own default), then fail naming it, with nothing changed.
    type: int
    default: 10
    version_added: 0.7.0
extends_documentation_fragment:
  - gpuserve.sglang.attributes
attributes:
  diff_mode:
    support: full
notes:
  - Raw C(lxc.*) keys cannot be set through the Proxmox API or C(pct set); this module is the way to manage them.
  - C(devN) needs root@pam on the API; this module writes the file on the node, which only root can.
seealso:
  - module: gpuserve.sglang.nvidia_gpu_facts
"""

EXAMPLES = r"""
- name: Pass both GPUs, nvidiactl and nvidia-uvm as devN
  gpuserve.sglang.pve_lxc_conf:
    vmid: 129
    devices:
      - {path: /dev/nvidia0, mode: "0666"}
      - {path: /dev/nvidia1, mode: "0666"}
      - {path: /dev/nvidiactl, mode: "0666"}
      - {path: /dev/nvidia-uvm, mode: "0666"}
      - {path: /dev/nvidia-uvm-tools, mode: "0666"}

- name: Or as raw lines (exact c MAJOR:MINOR rules read from the nodes, bind mounts)
  gpuserve.sglang.pve_lxc_conf:
    vmid: 129
    passthrough: raw
    devices:
      - {path: /dev/nvidia0}
      - {path: /dev/nvidiactl}
      - {path: /dev/nvidia-uvm}
"""

RETURN = r"""
opened:
  description:
    - "What opening O(open_if_unchanged) inside the container said: C(rc) (0 all opened, 1 one or more could not be),
      C(stderr) and C(stderr_lines) (C(head: cannot open '/dev/nvidia0' for reading: Operation not permitted))."
  returned: when O(open_if_unchanged) is set, the config needed no change and the container is running
  type: dict
  sample: {"rc": 0, "stderr": "", "stderr_lines": []}
status:
  description: The container's state as C(pct status) says it (C(running), C(stopped)), before any change.
  returned: when O(status) is true
  type: str
  sample: running
path:
  description: The config file.
  returned: always
  type: str
  sample: /etc/pve/lxc/129.conf
restart_needed:
  description: True when the file changed and the container must be restarted for it to take effect.
  returned: always
  type: bool
  sample: true
backup_file:
  description: Copy of the previous file, when a change was written.
  returned: changed and not check mode
  type: str
  sample: /etc/pve/lxc/129.conf.20261206-211852.bak
pending:
  description: "The pending changes that refused the run, as C(dev0: <value>) or C(delete dev1)."
  returned: failed on pending devN changes
  type: list
  sample: ["dev0: /dev/nvidia0,gid=44,mode=0666", "delete dev1"]
  elements: str
lock:
  description: The CT's Proxmox guest lock that refused the change.
  returned: failed on a locked CT
  type: str
  sample: backup
devices:
  description: The C(devN) entries this module owns after the change, as C({index, value}).
  returned: always
  type: list
  sample: [{"index": 0, "value": "/dev/nvidia0"}, {"index": 1, "value": "/dev/nvidiactl"}]
  elements: dict
diff:
  description: C(before)/C(after) of the file, in diff mode.
  returned: diff mode and changed
  type: dict
  sample: {"before": "arch: amd64\ncores: 16\n", "after": "arch: amd64\ncores: 16\ndev0: /dev/nvidia0\n"}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuserve.sglang.plugins.module_utils.pve import CONF_ARGUMENT_SPEC, ConfFailed, ConfManager


def main():
    module = AnsibleModule(argument_spec=CONF_ARGUMENT_SPEC, supports_check_mode=True)
    manager = ConfManager(module.params, module.check_mode, module._diff, run=module.run_command,
                          pct=lambda: module.get_bin_path("pct", required=True))
    try:
        module.exit_json(**manager.ensure())
    except ConfFailed as exc:
        module.fail_json(msg=exc.msg, **exc.result)


if __name__ == "__main__":
    main()
