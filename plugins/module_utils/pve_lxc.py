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

from .pve_conf import parse_property_string

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


def same(key, current, wanted):
    """Does the current value already satisfy the wanted one?"""
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
