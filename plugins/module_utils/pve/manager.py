# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the pve modules do. pve_lxc: ``ensure_ct(connect, params, check_mode, diff)``. pve_lxc_conf, as one class:
``ConfManager(params, check_mode, diff, run, pct).ensure()`` returns the module's result or raises ``ConfFailed`` with
the message and the facts. ``run(argv)`` runs a command
and returns (rc, stdout, stderr); ``pct()`` is the path of pct (both from the module).

Every input is checked before the file is read; the file is read, compared and written under Proxmox's own lock
(not in check mode, which writes nothing); a backup comes before any write; a locked CT and pending devN lines are
refused; the passed nodes are opened in the running CT only when the config did not change.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re
import stat

from ..host import Failed
from .conf import (CONFIG_LOCK_DIR, PveConfError, backup_config, line_owner, locked_problem, open_nodes_argv, parse,
                   pending_over_devices, pending_problem, plan_devices, raw_device_lines, set_options, set_raw_lines,
                   take_config_lock, vmid_problem)
from .lxc import OPTION_KEYS, PveLxcError, reconcile, wanted_options

CONF_ARGUMENT_SPEC = dict(
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
)


class ConfFailed(Failed):
    """pve_lxc or pve_lxc_conf refused or failed: ``msg`` and ``result``."""


def rdev(path):
    """(kind, major, minor) of a device node."""
    st = os.stat(path)
    return ("c" if stat.S_ISCHR(st.st_mode) else "b", os.major(st.st_rdev), os.minor(st.st_rdev))


class ConfManager(object):
    """One CT's passthrough lines in /etc/pve/lxc/<vmid>.conf, made so (see the module docstring)."""

    def __init__(self, params, check_mode, diff, run, pct):
        self.p = params
        self.check_mode = check_mode
        self.diff = diff
        self.run = run
        self.pct = pct
        self.path = os.path.join(params["conf_dir"], "%d.conf" % params["vmid"])
        self.result = dict(changed=False, path=self.path, restart_needed=False, devices=[])

    def fail(self, msg, **facts):
        raise ConfFailed(msg, dict(self.result, **facts))

    def ensure(self):
        p = self.p
        if p["open_if_unchanged"] and not p["status"]:
            raise ConfFailed("open_if_unchanged needs status=true (the nodes are opened only in a running container)",
                             {})
        if not os.path.exists(self.path):
            self.fail("CT %d has no config at %s on this node: create the container first, run this on the node "
                      "that holds it, or fix vmid; nothing was changed" % (p["vmid"], self.path))
        if p["status"]:
            self.result["status"] = self.ct_status()
        self.check_devices()
        raw, owns = self.raw_lines()
        before, after = self.edit(raw, owns)
        if after == before and p["open_if_unchanged"] and self.result.get("status") == "running":
            self.open_nodes()
        return self.result

    def ct_status(self):
        rc, out, err = self.run([self.pct(), "status", str(self.p["vmid"])])
        m = re.search(r"^status:\s*(\S+)", out, re.M)
        if rc != 0 or not m:
            self.fail("pct status %d: %s" % (self.p["vmid"], (err or out).strip() or "rc %d" % rc))
        return m.group(1)

    def check_devices(self):
        for spec in self.p["devices"]:
            try:
                st = os.stat(spec["path"])
            except OSError:
                self.fail("devices: %s does not exist on this node (Proxmox refuses such a devN). For nvidia-uvm, "
                          "load it at boot (nvidia-modprobe -u -c=0; role nvidia_driver does)." % spec["path"])
            if not (stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)):
                self.fail("devices: %s is not a device node" % spec["path"])
            if spec["mode"] is not None and not re.match(r"^0?[0-7]{3}$", spec["mode"]):
                self.fail("devices: mode=%s for %s is not an octal mode like 0666" % (spec["mode"], spec["path"]))

    def raw_lines(self):
        """The raw lxc.* lines wanted (the devices' in raw mode, then the given ones) and the test of a line this
        module owns."""
        p = self.p
        raw = []
        if p["passthrough"] == "raw":
            raw.extend(raw_device_lines([dict(spec, rdev=rdev(spec["path"])) for spec in p["devices"]]))
        for item in p["raw"]:
            if len(item) != 2 or not str(item[0]).startswith("lxc."):
                self.fail("raw: %r is not a [lxc.key, value] pair" % (item,))
            raw.append((str(item[0]), str(item[1])))
        try:
            owns = line_owner(set(p["owned_majors"]) | set(rdev(spec["path"])[1] for spec in p["devices"]),
                              p["owned_mounts"])
            re.compile(p["owned_paths"])
        except re.error as exc:
            self.fail("owned_mounts/owned_paths: not a regular expression: %s" % exc)
        for key, value in raw:
            if not owns(key, value):
                self.fail("raw: %s: %s is not a line this module owns (see owned_majors/owned_mounts), so a second "
                          "run could not find it" % (key, value))
        return raw, owns

    def edit(self, raw, owns):
        """Read, compared and written under Proxmox's own lock on the file (not in check mode, which writes
        nothing); (before, after)."""
        p, path = self.p, self.path
        held = None
        try:
            if not self.check_mode:
                try:
                    held = take_config_lock(p["vmid"], p["lock_dir"], p["lock_timeout"])
                except PveConfError as exc:
                    self.fail(str(exc))
            with open(path) as fh:
                before = fh.read()
            try:
                opts = parse(before)
                devn = p["devices"] if p["passthrough"] == "devn" else []
                changes, deletes, final = plan_devices(opts, devn, p["owned_paths"])
                after = set_raw_lines(set_options(before, changes, deletes), raw, owns)
            except PveConfError as exc:
                self.fail("%s: %s" % (path, exc))
            self.result["devices"] = final
            # pending devN (PVE 8's pct set on a running CT) would overwrite these lines at the next start
            over = pending_over_devices(before, final, p["owned_paths"])
            if over:
                self.fail(pending_problem(p["vmid"], path, over), pending=over)
            if after != before:
                self.change(opts, before, after)
        finally:
            if held is not None:
                os.close(held)
        return before, after

    def change(self, opts, before, after):
        # a locked CT (a backup, a migration...) is changed by nothing in Proxmox; check mode says so too
        if opts.get("lock"):
            self.fail(locked_problem(self.p["vmid"], opts["lock"], self.path), lock=opts["lock"])
        self.result.update(changed=True, restart_needed=True)
        if self.diff:
            self.result["diff"] = {"before": before, "after": after, "before_header": self.path,
                                   "after_header": self.path}
        if not self.check_mode:
            self.write(after)

    def write(self, after):
        """The backup, then the file rewritten in place (pmxcfs refuses the chmod and rename of an atomic copy)."""
        p, path = self.p, self.path
        if not os.path.isdir(p["backup_dir"]):
            os.makedirs(p["backup_dir"], 0o700)
        backup = self.result["backup_file"] = backup_config(path, p["backup_dir"], p["vmid"], p["backup_keep"])
        try:
            fh = open(path, "r+")
        except (IOError, OSError) as exc:
            self.fail("cannot write %s: %s. /etc/pve is read-only while this node is not part of a quorate cluster "
                      "(`pvecm status`; pmxcfs answers 'Permission denied'); bring the cluster back to quorum and run "
                      "again. The config is unchanged (a copy is in %s)." % (path, exc.strerror or exc, backup))
        try:
            with fh:
                fh.write(after)
                fh.truncate()
        except (IOError, OSError) as exc:     # opened, then refused: the file may be half written
            self.fail("writing %s failed partway: %s. Put the previous config back with `cp %s %s` before anything "
                      "starts the CT, then run again." % (path, exc.strerror or exc, backup, path))

    def open_nodes(self):
        """The devices in the config are the ones the running CT started with only if the config did not change:
        then each passed node is opened inside the CT."""
        vmid = self.p["vmid"]
        rc, _out, err = self.run(open_nodes_argv(vmid, self.p["open_if_unchanged"], pct=self.pct()))
        if rc not in (0, 1):
            self.fail("pct exec %d (opening the passed nodes): rc %d: %s" % (vmid, rc, err.strip()))
        self.result["opened"] = dict(rc=rc, stderr=err, stderr_lines=err.splitlines())


CT_ARGUMENT_SPEC = dict(
    node=dict(type="str", required=True),
    vmid=dict(type="int", required=True),
    state=dict(type="str", default="present", choices=["present", "started", "stopped"]),
    ostemplate=dict(type="str"),
    hostname=dict(type="str"),
    rootfs=dict(type="str"),
    cores=dict(type="int"),
    memory=dict(type="int"),
    swap=dict(type="int"),
    net=dict(type="dict"),
    unprivileged=dict(type="bool"),
    features=dict(type="str"),
    onboot=dict(type="bool"),
    timeout=dict(type="int", default=300),
)


def api_auth(api_user, api_port, validate_certs, ca_file=None, api_password=None, api_token_id=None,
             api_token_secret=None):
    """proxmoxer's keyword arguments for the API, or ConfFailed naming the setting to fix. requests takes a CA bundle
    path as verify: the cluster's own CA verifies its self-signed node certificates."""
    if ca_file and not validate_certs:
        raise ConfFailed("ca_file=%s with validate_certs=false: the CA would not be used; drop validate_certs: false"
                         % ca_file, {})
    if ca_file and not os.path.isfile(ca_file):
        raise ConfFailed("ca_file=%s does not exist on the controller: copy the cluster's /etc/pve/pve-root-ca.pem "
                         "there" % ca_file, {})
    auth = dict(user=api_user, verify_ssl=ca_file or validate_certs, port=api_port)
    if api_token_id:
        auth.update(token_name=api_token_id, token_value=api_token_secret)
    else:
        auth.update(password=api_password)
    return auth


def ensure_ct(connect, p, check_mode=False, diff=False):
    """What the pve_lxc module does: CT ``p['vmid']`` on ``p['node']`` brought to the options and state asked for,
    through ``connect(host, **auth)`` (proxmoxer's ProxmoxAPI). (result, warnings), or ConfFailed."""
    problem = vmid_problem(p["vmid"])
    if problem:
        raise ConfFailed(problem + "; nothing was changed", {})
    auth = api_auth(p["api_user"], p["api_port"], p["validate_certs"], p["ca_file"], p["api_password"],
                    p["api_token_id"], p["api_token_secret"])
    result = dict(changed=False, created=False, changes={}, task_warnings=[], before=None)
    wanted = wanted_options(net=p["net"], **dict((key, p[key]) for key in OPTION_KEYS))
    try:
        reconcile(connect(p["api_host"], **auth), p["node"], p["vmid"], wanted, p["state"], p["timeout"], check_mode,
                  result)
    except PveLxcError as exc:
        result.pop("before", None)
        raise ConfFailed(str(exc), result)
    except Exception as exc:  # proxmoxer raises its own and requests' errors; name the call's target
        hint = ""
        if "CERTIFICATE_VERIFY_FAILED" in str(exc) or "SSLError" in type(exc).__name__:
            hint = (" - the node's certificate is not trusted: set ca_file to a copy of the cluster's "
                    "/etc/pve/pve-root-ca.pem (keep validate_certs on)")
        result.pop("before", None)
        raise ConfFailed("Proxmox API at %s:%s: %s%s" % (p["api_host"], p["api_port"], exc, hint), result)
    before = result.pop("before")
    warnings = ["%s: %s" % (w["task"], line) for w in result["task_warnings"] for line in w["lines"]]
    if diff and result["changed"] and before is not None:
        result["diff"] = {"before": before, "after": wanted if result["created"] else result["changes"]}
    return result, warnings
