# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What to send to the Proxmox API so a container has the asked-for options. Standard library only.

Values compare the way Proxmox stores them: numbers as text, booleans as 0/1, property strings
(``net0``, ``features``, ``rootfs``) key by key, and only the keys the operator gave (Proxmox adds
``hwaddr=`` to a net0, an operator's own ``firewall=1`` stays theirs).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
import time

from .conf import locked_problem, parse_property_string

# The API connection every module that calls the Proxmox API takes (doc fragment gpuserve.sglang.proxmox, action group
# gpuserve.sglang.proxmox): each option with the environment variable it falls back to - community.proxmox's names.
API_ARGUMENT_SPEC = {
    "api_host": {"type": "str", "required": True},
    "api_port": {"type": "int", "default": 8006},
    "api_user": {"type": "str", "required": True},
    "api_password": {"type": "str", "no_log": True},
    "api_token_id": {"type": "str", "no_log": False},
    "api_token_secret": {"type": "str", "no_log": True},
    "validate_certs": {"type": "bool", "default": True},
    "ca_file": {"type": "path"},
}
API_ENV = {
    "api_host": "PROXMOX_HOST", "api_port": "PROXMOX_PORT", "api_user": "PROXMOX_USER",
    "api_password": "PROXMOX_PASSWORD", "api_token_id": "PROXMOX_TOKEN_ID", "api_token_secret": "PROXMOX_TOKEN_SECRET",
    "validate_certs": "PROXMOX_VALIDATE_CERTS", "ca_file": "PROXMOX_CA_FILE",
}

# Options fixed at creation: an existing CT with another value is an error, never a silent re-create.
CREATE_ONLY = ("ostemplate", "unprivileged", "storage", "arch")
PROPERTY_STRINGS = {"net": "name", "features": None, "rootfs": "volume", "mp": "volume", "dev": "path"}


class PveLxcError(ValueError):
    """Asked-for state that Proxmox cannot reach from the current one; the message names the option."""


def pve_value(value):
    """Python value -> the text Proxmox stores (bool -> 0/1, numbers -> str)."""
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def _family(key):
    return key.rstrip("0123456789")


def parse_prop(value, default_key=None):
    """A property string the API returned, as a dict (pve_conf.parse_property_string, bare flags allowed)."""
    return parse_property_string(value, default_key, flags=True)


# What GET config leaves out when an option has its schema default (PVE 8/9 lxc config schema): a CT
# created without ``unprivileged`` has no such key, and asking ``unprivileged: false`` of it changes nothing.
SCHEMA_DEFAULTS = {"unprivileged": "0", "onboot": "0", "memory": "512", "swap": "512", "arch": "amd64"}


def same(key, current, wanted):
    """Does the current value already satisfy the wanted one? (an absent option has its schema default)"""
    if current is None:
        current = SCHEMA_DEFAULTS.get(key)
    if current is None:
        return False
    fam = _family(key)
    if fam in PROPERTY_STRINGS:
        cur = parse_prop(current, PROPERTY_STRINGS[fam])
        want = parse_prop(wanted, PROPERTY_STRINGS[fam])
        if fam == "rootfs":
            # "local-lvm:32" (32 GiB at creation) becomes a volume id with size=32G: compare the size only
            vol = want.pop("volume", "")
            _head, _sep, tail = vol.partition(":")
            if tail.isdigit() and "size" not in want:
                want["size"] = tail
            if "size" in want and not want["size"][-1:].isalpha():
                want["size"] = want["size"] + "G"
        return all(cur.get(k) == v for k, v in want.items())
    return str(current) == str(wanted)


def config_changes(current, wanted):
    """(changes, conflicts) to reach ``wanted`` (PVE option -> text) from ``current`` (GET config).

    ``conflicts`` lists create-only options that differ; ``rootfs`` size changes are conflicts too
    (a resize is a separate, deliberate operation).
    """
    changes, conflicts = {}, []
    for key, value in sorted(wanted.items()):
        if key == "ostemplate" or key == "storage":
            continue
        if same(key, current.get(key), value):
            continue
        if key in CREATE_ONLY or key == "rootfs":
            conflicts.append("%s: is %r, asked %r (fixed at creation; recreate the CT or change the inventory)"
                             % (key, current.get(key), value))
            continue
        changes[key] = value
    return changes, conflicts


def create_params(vmid, wanted, start=False):
    """POST /nodes/{node}/lxc parameters."""
    if not wanted.get("ostemplate"):
        raise PveLxcError("ostemplate: CT %s does not exist, so a template is needed to create it "
                          "(e.g. local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst)" % vmid)
    params = dict(wanted)
    params["vmid"] = int(vmid)
    if start:
        params["start"] = 1
    return params


OPTION_KEYS = ("ostemplate", "hostname", "rootfs", "cores", "memory", "swap", "unprivileged", "features", "onboot")


def wanted_options(net=None, **options):
    """The options asked for (``OPTION_KEYS`` by name, ``net`` as {index: value}) -> the PVE options (option ->
    text); unset ones are not managed."""
    unknown = sorted(set(options) - set(OPTION_KEYS))
    if unknown:
        raise TypeError("wanted_options: not a CT option: %s" % ", ".join(unknown))
    out = {}
    for key in OPTION_KEYS:
        if options.get(key) is not None:
            out[key] = pve_value(options[key])
    for idx, value in (net or {}).items():
        out["net%d" % int(idx)] = str(value)
    return out


def wait_task(api, node, upid, what, timeout, warnings, sleep=time.sleep, clock=time.time):
    """Wait for a PVE task. Success is exit status OK or "WARNINGS: n" (PVE ends many good tasks so): their log's
    WARN lines are appended to ``warnings`` ({task, upid, exitstatus, lines}). Anything else, or still running after
    ``timeout`` seconds, raises PveLxcError with the task's log tail."""
    end = clock() + timeout
    while clock() < end:
        st = api.nodes(node).tasks(upid).status.get()
        if st.get("status") == "stopped":
            status = str(st.get("exitstatus"))
            if status == "OK":
                return
            log = [str(e.get("t", "")) for e in (api.nodes(node).tasks(upid).log.get(limit=200) or [])]
            if re.match(r"^WARNINGS: \d+$", status):
                lines = [t for t in log if t.startswith("WARN")] or [status]
                warnings.append({"task": what, "upid": upid, "exitstatus": status, "lines": lines})
                return
            raise PveLxcError("%s failed: task %s ended with %s; its log ends: %s"
                              % (what, upid, status, " | ".join(log[-8:])))
        sleep(1)
    raise PveLxcError("%s: task %s still running after %ss (raise timeout)" % (what, upid, timeout))


def reconcile(api, node, vmid, wanted, state, timeout, check_mode=False, result=None):
    """Bring CT ``vmid`` on ``node`` to the wanted options and state through the API (a proxmoxer ProxmoxAPI, or
    anything with its call shape). Returns {changed, created, changes, status, task_warnings, before}; raises
    PveLxcError (nothing asked was done) for a CT on another node, create-only options that differ, a change to a
    CT carrying Proxmox's guest lock (``lock`` in its config), a missing template, a failed task. ``result`` (a
    dict) is filled as it goes, so a failure still says what was done."""
    result = {} if result is None else result
    result.update(changed=False, created=False, changes={}, task_warnings=[], before=None)
    elsewhere = [r for r in api.cluster.resources.get(type="vm") if int(r.get("vmid", 0)) == vmid]
    if elsewhere and elsewhere[0].get("node") != node:
        raise PveLxcError("vmid=%d exists on node %s (a %s), not on %s: fix node or vmid"
                          % (vmid, elsewhere[0].get("node"), elsewhere[0].get("type"), node))
    if not any(int(c.get("vmid", 0)) == vmid for c in api.nodes(node).lxc.get()):
        params = create_params(vmid, wanted, start=state == "started")
        result.update(changed=True, created=True, changes=dict((k, v) for k, v in params.items() if k != "vmid"),
                      before={}, status="running" if state == "started" else "stopped")
        if not check_mode:
            upid = api.nodes(node).lxc.post(**params)
            wait_task(api, node, upid, "create CT %d" % vmid, timeout, result["task_warnings"])
        return result
    ct = api.nodes(node).lxc(vmid)
    current = ct.config.get()
    changes, conflicts = config_changes(current, wanted)
    if conflicts:
        raise PveLxcError("CT %d on %s: %s" % (vmid, node, "; ".join(conflicts)))
    status = ct.status.current.get().get("status")
    # Proxmox changes nothing in a CT carrying its guest lock (a backup, a migration): refused before any call,
    # check mode too, with what the lock means; a CT already as asked is no change, locked or not
    acts = bool(changes) or (state == "started" and status != "running") or (state == "stopped" and status == "running")
    if acts and current.get("lock"):
        raise PveLxcError(locked_problem(vmid, current["lock"], "its config on node %s" % node))
    if changes:
        result.update(changed=True, changes=changes, before=dict((k, current.get(k)) for k in changes))
        if not check_mode:
            ct.config.put(digest=current.get("digest"), **changes)
    if state == "started" and status != "running":
        result["changed"] = True
        if not check_mode:
            wait_task(api, node, ct.status.start.post(), "start CT %d" % vmid, timeout, result["task_warnings"])
        status = "running"
    elif state == "stopped" and status == "running":
        result["changed"] = True
        if not check_mode:
            upid = ct.status.shutdown.post(timeout=min(timeout, 600))
            wait_task(api, node, upid, "shut down CT %d" % vmid, timeout, result["task_warnings"])
        status = "stopped"
    result["status"] = status
    return result
