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
backup_file:
  description: Copy of the previous file, when a change was written.
  returned: changed and not check mode
  type: str
pending:
  description: "The pending changes that refused the run, as C(dev0: <value>) or C(delete dev1)."
  returned: failed on pending devN changes
  type: list
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
  elements: dict
diff:
  description: C(before)/C(after) of the file, in diff mode.
  returned: diff mode and changed
  type: dict
"""

import os
import re
import stat

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuserve.sglang.plugins.module_utils.pve_conf import (
    CONFIG_LOCK_DIR, PveConfError, backup_config, line_owner, locked_problem, open_nodes_argv, parse,
    pending_over_devices, pending_problem, plan_devices, raw_device_lines, set_options, set_raw_lines,
    take_config_lock,
)


def _write(module, p, path, after, result):
    """The backup, then the file rewritten in place (pmxcfs refuses the chmod and rename of an atomic copy)."""
    if not os.path.isdir(p["backup_dir"]):
        os.makedirs(p["backup_dir"], 0o700)
    result["backup_file"] = backup_config(path, p["backup_dir"], p["vmid"], p["backup_keep"])
    try:
        fh = open(path, "r+")
    except (IOError, OSError) as exc:
        module.fail_json(msg="cannot write %s: %s. /etc/pve is read-only while this node is not part of a quorate "
                             "cluster (`pvecm status`; pmxcfs answers 'Permission denied'); bring the cluster back "
                             "to quorum and run again. The config is unchanged (a copy is in %s)."
                             % (path, exc.strerror or exc, result["backup_file"]), **result)
    try:
        with fh:
            fh.write(after)
            fh.truncate()
    except (IOError, OSError) as exc:     # opened, then refused: the file may be half written
        module.fail_json(msg="writing %s failed partway: %s. Put the previous config back with `cp %s %s` before "
                             "anything starts the CT, then run again." % (path, exc.strerror or exc,
                                                                          result["backup_file"], path), **result)


def _rdev(path):
    """(kind, major, minor) of a device node."""
    st = os.stat(path)
    return ("c" if stat.S_ISCHR(st.st_mode) else "b", os.major(st.st_rdev), os.minor(st.st_rdev))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            vmid=dict(type="int", required=True),
            passthrough=dict(type="str", default="devn", choices=["devn", "raw"]),
            conf_dir=dict(type="path", default="/etc/pve/lxc"),
            devices=dict(type="list", elements="dict", default=[], options=dict(
                path=dict(type="path", required=True),
                mode=dict(type="str"),
                gid=dict(type="int"),
                uid=dict(type="int"),
                deny_write=dict(type="bool", default=False),
            )),
            raw=dict(type="list", elements="list", default=[]),
            owned_paths=dict(type="str", default="^/dev/nvidia"),
            owned_majors=dict(type="list", elements="int", default=[195]),
            owned_mounts=dict(type="str", default="^/dev/nvidia"),
            backup_dir=dict(type="path", default="/var/lib/gpuserve-sglang/pve-backups"),
            backup_keep=dict(type="int", default=10),
            status=dict(type="bool", default=False),
            open_if_unchanged=dict(type="list", elements="path", default=[]),
            lock_dir=dict(type="path", default=CONFIG_LOCK_DIR),
            lock_timeout=dict(type="int", default=10),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if p["open_if_unchanged"] and not p["status"]:
        module.fail_json(msg="open_if_unchanged needs status=true (the nodes are opened only in a running container)")
    path = os.path.join(p["conf_dir"], "%d.conf" % p["vmid"])
    result = dict(changed=False, path=path, restart_needed=False, devices=[])
    if not os.path.exists(path):
        module.fail_json(msg="CT %d has no config at %s on this node: create the container first, run this on the "
                             "node that holds it, or fix vmid; nothing was changed" % (p["vmid"], path), **result)
    if p["status"]:
        argv = [module.get_bin_path("pct", required=True), "status", str(p["vmid"])]
        rc, out, err = module.run_command(argv)
        m = re.search(r"^status:\s*(\S+)", out, re.M)
        if rc != 0 or not m:
            module.fail_json(msg="pct status %d: %s" % (p["vmid"], (err or out).strip() or "rc %d" % rc), **result)
        result["status"] = m.group(1)
    for spec in p["devices"]:
        try:
            st = os.stat(spec["path"])
        except OSError:
            module.fail_json(msg="devices: %s does not exist on this node (Proxmox refuses such a devN). For "
                                 "nvidia-uvm, load it at boot (nvidia-modprobe -u -c=0; role nvidia_driver does)."
                                 % spec["path"], **result)
        if not (stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)):
            module.fail_json(msg="devices: %s is not a device node" % spec["path"], **result)
        if spec["mode"] is not None and not re.match(r"^0?[0-7]{3}$", spec["mode"]):
            module.fail_json(msg="devices: mode=%s for %s is not an octal mode like 0666" % (spec["mode"], spec["path"]),
                             **result)
    raw = []
    if p["passthrough"] == "raw":
        raw.extend(raw_device_lines([dict(spec, rdev=_rdev(spec["path"])) for spec in p["devices"]]))
    for item in p["raw"]:
        if len(item) != 2 or not str(item[0]).startswith("lxc."):
            module.fail_json(msg="raw: %r is not a [lxc.key, value] pair" % (item,), **result)
        raw.append((str(item[0]), str(item[1])))
    try:
        owns = line_owner(set(p["owned_majors"]) | set(_rdev(spec["path"])[1] for spec in p["devices"]),
                          p["owned_mounts"])
        re.compile(p["owned_paths"])
    except re.error as exc:
        module.fail_json(msg="owned_mounts/owned_paths: not a regular expression: %s" % exc, **result)

    for key, value in raw:
        if not owns(key, value):
            module.fail_json(msg="raw: %s: %s is not a line this module owns (see owned_majors/owned_mounts), so a "
                                 "second run could not find it" % (key, value), **result)

    # read, compared and written under Proxmox's own lock on the file (not in check mode, which writes nothing)
    held = None
    try:
        if not module.check_mode:
            try:
                held = take_config_lock(p["vmid"], p["lock_dir"], p["lock_timeout"])
            except PveConfError as exc:
                module.fail_json(msg=str(exc), **result)
        with open(path) as fh:
            before = fh.read()
        try:
            opts = parse(before)
            devn = p["devices"] if p["passthrough"] == "devn" else []
            changes, deletes, final = plan_devices(opts, devn, p["owned_paths"])
            after = set_options(before, changes, deletes)
            after = set_raw_lines(after, raw, owns)
        except PveConfError as exc:
            module.fail_json(msg="%s: %s" % (path, exc), **result)
        result["devices"] = final
        # pending devN (PVE 8's pct set on a running CT) would overwrite these lines at the next start
        over = pending_over_devices(before, final, p["owned_paths"])
        if over:
            module.fail_json(msg=pending_problem(p["vmid"], path, over), pending=over, **result)
        if after != before:
            # a locked CT (a backup, a migration...) is changed by nothing in Proxmox; check mode says so too
            if opts.get("lock"):
                module.fail_json(msg=locked_problem(p["vmid"], opts["lock"], path), lock=opts["lock"], **result)
            result.update(changed=True, restart_needed=True)
            if module._diff:
                result["diff"] = {"before": before, "after": after, "before_header": path, "after_header": path}
            if not module.check_mode:
                _write(module, p, path, after, result)
    finally:
        if held is not None:
            os.close(held)
    if after == before and p["open_if_unchanged"] and result.get("status") == "running":
        # the devices in the config are the ones the running CT started with only if the config did not change
        rc, _out, err = module.run_command(open_nodes_argv(p["vmid"], p["open_if_unchanged"],
                                                           pct=module.get_bin_path("pct", required=True)))
        if rc not in (0, 1):
            module.fail_json(msg="pct exec %d (opening the passed nodes): rc %d: %s" % (p["vmid"], rc, err.strip()),
                             **result)
        result["opened"] = dict(rc=rc, stderr=err, stderr_lines=err.splitlines())
    module.exit_json(**result)


if __name__ == "__main__":
    main()
