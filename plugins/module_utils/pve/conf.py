# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Proxmox VE container config files (/etc/pve/lxc/<vmid>.conf). Standard library only.

File format (pve-docs pct.adoc "File Format", PVE::LXC::Config::parse_pct_config):
- ``key: value`` option lines; raw LXC keys as ``lxc.some.key: value`` (``=`` is accepted too);
- ``#`` lines are the *description* (Proxmox moves them to the top when it rewrites the file, so a
  comment can never mark a block: managed lines are recognised by what they say, not by markers);
- ``[name]`` starts a snapshot section (``[pve:pending]`` holds pending changes); everything before
  the first section is the current config, the only place raw ``lxc.*`` keys take effect.

Edits keep every line the operator wrote, byte for byte, and only touch the main section.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import fcntl
import itertools
import os
import re
import shutil
import time

_SECTION = re.compile(r"^\[([^\]]+)\]\s*$")
_OPTION = re.compile(r"^([a-z][a-z0-9_.\-]*)\s*[:=]\s*(.*?)\s*$")
_INDEXED = re.compile(r"^(dev|net|mp|unused)(\d+)$")


class PveConfError(ValueError):
    """A config line or a device spec that Proxmox would refuse; the message names it."""


_VMID = re.compile(r"^[1-9][0-9]{2,8}$")


def vmid_problem(value, name="vmid"):
    """The one rule for a Proxmox CT id (deploy.yml's inventory check, role lxc_gpu_passthrough's entry points,
    module pve_lxc): 100-999999999 written as a plain number. Returns why ``value`` is not one, naming ``name``
    (the variable the operator set), or '' when it is."""
    text = "" if value is None else str(value).strip()
    if isinstance(value, bool) or not _VMID.match(text):
        return "%s=%s must be a Proxmox CT id, 100-999999999" % (
            name, "(unset)" if value is None or text == "" else text)
    return ""


# Proxmox's guest lock, the `lock:` option of a CT config (values: the PVE API schema's `lock` enum). pve-container
# changes nothing in a locked CT: PVE::AbstractConfig::check_lock dies "CT is locked (<lock>)" in pct set, start,
# stop, shutdown and the API's config update. What each lock means, for the operator:
LOCK_MEANING = {
    "backup": "a backup (vzdump) of it is running",
    "create": "it is being created or restored",
    "destroyed": "it is being destroyed",
    "disk": "a disk of it is being moved or resized",
    "fstrim": "pct fstrim is running on it",
    "migrate": "it is being migrated to another node",
    "mounted": "its volumes are mounted on the node (pct mount)",
    "rollback": "it is being rolled back to a snapshot",
    "snapshot": "a snapshot of it is being taken",
    "snapshot-delete": "a snapshot of it is being deleted",
}
# Proxmox's lock on a CT's config file while it is read and written (PVE::LXC::Config->config_file_lock; taken with
# flock(2) by PVE::Tools::lock_file_full, which waits 10 s by default)
CONFIG_LOCK_DIR = "/run/lock/lxc"


def locked_problem(vmid, lock, path):
    """Why a config with ``lock: <lock>`` is not changed, and what to do: '' when ``lock`` is empty."""
    if not lock:
        return ""
    undo = "pct unmount %s" % vmid if lock == "mounted" else "pct unlock %s" % vmid
    meaning = LOCK_MEANING.get(lock, "a Proxmox operation holds it")
    return ("CT %s is locked (%s) in %s: %s, and Proxmox changes nothing in a locked CT (pct set and start say 'CT "
            "is locked (%s)'). Run again when that has ended; if nothing runs (a job that failed left the lock), "
            "`%s` first. Nothing was changed." % (vmid, lock, path, meaning, lock, undo))


def take_config_lock(vmid, lock_dir=CONFIG_LOCK_DIR, timeout=10.0, clock=time.monotonic, sleep=time.sleep):
    """Proxmox's own lock on CT ``vmid``'s config: flock(2) on <lock_dir>/pve-config-<vmid>.lock, as pct set, the API
    and vzdump take it, so a write here never interleaves with theirs. Waits up to ``timeout`` seconds; returns the
    open descriptor (closing it releases the lock) or raises PveConfError in Proxmox's words."""
    if not os.path.isdir(lock_dir):
        os.makedirs(lock_dir, 0o755)
    path = os.path.join(lock_dir, "pve-config-%s.lock" % int(vmid))
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    deadline = clock() + max(0.0, float(timeout))
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except (IOError, OSError) as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                os.close(fd)
                raise
        if clock() >= deadline:
            os.close(fd)
            raise PveConfError("can't lock file '%s' - got timeout: a Proxmox operation on CT %s (pct set, the "
                               "API, a backup) has held its config for %ss. Run again when it has ended; nothing was "
                               "changed" % (path, vmid, timeout))
        sleep(0.1)


def split_sections(text):
    """Return (main_lines, [(section_name, [lines incl. header]), ...]); lines keep their newline."""
    lines = text.splitlines(True)
    main, sections, cur = [], [], None
    for line in lines:
        m = _SECTION.match(line.rstrip("\r\n"))
        if m:
            cur = (m.group(1), [line])
            sections.append(cur)
        elif cur is None:
            main.append(line)
        else:
            cur[1].append(line)
    return main, sections


def parse(text):
    """Main-section options as a dict; raw keys go to ``lxc`` as [(key, value), ...] in file order.

    Also returns ``description`` (the ``#`` lines, joined) and ``snapshots`` (section names).
    """
    main, sections = split_sections(text)
    opts, raw, descr = {}, [], []
    for lineno, line in enumerate(main, 1):
        s = line.rstrip("\r\n")
        if not s.strip():
            continue
        if s.startswith("#"):
            descr.append(s[1:])
            continue
        m = _OPTION.match(s)
        if not m:
            raise PveConfError("line %d: %r is not 'key: value' (fix or remove it; Proxmox refuses it too)" % (lineno, s))
        key, value = m.group(1), m.group(2)
        if key.startswith("lxc."):
            raw.append((key, value))
        else:
            opts[key] = value
    opts["lxc"] = raw
    opts["description"] = "\n".join(descr)
    opts["snapshots"] = [name for name, _lines in sections]
    return opts


def parse_property_string(value, default_key=None, flags=False):
    """The one parser of Proxmox property strings (CT config files, the API's values):
    ``/dev/nvidia0,gid=44,mode=0666`` -> {"path": "/dev/nvidia0", "gid": "44", "mode": "0666"}.

    A part without ``=`` is the ``default_key``'s value (the first one only). Any other bare part is an error, or,
    with ``flags=True`` (comparing what the API returns), a flag set to "1"."""
    out = {}
    for part in [p for p in str(value).split(",") if p != ""]:
        if "=" in part:
            k, v = part.split("=", 1)
            out[k.strip()] = v.strip()
        elif default_key and default_key not in out:
            out[default_key] = part.strip()
        elif flags:
            out[part.strip()] = "1"
        else:
            raise PveConfError("%r: %r has no key (write key=value)" % (value, part))
    return out


def devices(opts):
    """The ``devN`` entries of parsed options, sorted by N: [(N, {"path", "gid", "uid", "mode", "deny-write"})]."""
    out = []
    for key, value in opts.items():
        m = _INDEXED.match(key)
        if m and m.group(1) == "dev":
            spec = parse_property_string(value, default_key="path")
            if "path" not in spec:
                raise PveConfError("%s: %r has no path (write %s: /dev/<node>[,gid=..,mode=0NNN])" % (key, value, key))
            if "mode" in spec and not re.match(r"^0?[0-7]{3}$", spec["mode"]):
                raise PveConfError("%s: mode=%s is not an octal mode like 0666" % (key, spec["mode"]))
            out.append((int(m.group(2)), spec))
    return sorted(out)


def _raw_line(key, value):
    return "%s: %s\n" % (key, value)


def set_options(text, changes, deletes=()):
    """Set/replace main-section options (non-raw) and delete others, keeping every other line.

    New options are appended after the last non-raw option of the main section, as Proxmox writes them.
    """
    main, sections = split_sections(text)
    changes = dict(changes)
    deletes = set(deletes)
    out = []
    for line in main:
        m = _OPTION.match(line.rstrip("\r\n"))
        if m and not m.group(1).startswith("lxc."):
            key = m.group(1)
            if key in deletes:
                continue
            if key in changes:
                out.append(_raw_line(key, changes.pop(key)))
                continue
        out.append(line)
    if changes:
        idx = len(out)
        for i, line in enumerate(out):
            m = _OPTION.match(line.rstrip("\r\n"))
            if m and m.group(1).startswith("lxc."):
                idx = i
                break
        else:
            while idx > 0 and not out[idx - 1].strip():
                idx -= 1
        if idx > 0 and not out[idx - 1].endswith("\n"):
            out[idx - 1] += "\n"
        out[idx:idx] = [_raw_line(k, v) for k, v in sorted(changes.items())]
    return "".join(out) + "".join("".join(lines) for _name, lines in sections)


def set_raw_lines(text, wanted, owns):
    """Make the raw ``lxc.*`` lines that ``owns(key, value)`` claims exactly ``wanted``.

    ``wanted``: [(key, value), ...] in order. Lines we do not own are kept where they are; ours are
    removed and ``wanted`` appended at the end of the main section, before any ``[snapshot]``.
    Returns the new text (identical to ``text`` when nothing needs to change).
    """
    main, sections = split_sections(text)
    current = []
    for line in main:
        m = _OPTION.match(line.rstrip("\r\n"))
        if m and m.group(1).startswith("lxc.") and owns(m.group(1), m.group(2)):
            current.append((m.group(1), m.group(2)))
    if current == [tuple(w) for w in wanted]:
        return text
    kept = []
    for line in main:
        m = _OPTION.match(line.rstrip("\r\n"))
        if m and m.group(1).startswith("lxc.") and owns(m.group(1), m.group(2)):
            continue
        kept.append(line)
    trailing = []
    while kept and not kept[-1].strip():
        trailing.insert(0, kept.pop())
    if kept and not kept[-1].endswith("\n"):
        kept[-1] += "\n"
    kept.extend(_raw_line(k, v) for k, v in wanted)
    if sections and not trailing:
        trailing = ["\n"]
    return "".join(kept) + "".join(trailing) + "".join("".join(lines) for _name, lines in sections)


# ---- the devN and raw-line planning of module pve_lxc_conf (pure, unit-tested in test_pve_conf)

def dev_value(spec):
    parts = [spec["path"]]
    if spec.get("deny_write"):
        parts.append("deny-write=1")
    for key in ("gid", "mode", "uid"):
        if spec.get(key) is not None:
            parts.append("%s=%s" % (key, spec[key]))
    return ",".join(parts)


def plan_devices(opts, devices, owned):
    """(changes, deletes, final) for devN: same path keeps its index, new paths take the lowest free one."""
    current = {}
    for key, value in opts.items():
        m = re.match(r"^dev(\d+)$", key)
        if m:
            current[int(m.group(1))] = value
    path_of = dict((n, parse_property_string(v, default_key="path").get("path", "")) for n, v in current.items())
    ours = dict((n, p) for n, p in path_of.items() if re.search(owned, p))
    wanted = [(d["path"], dev_value(d)) for d in devices]
    by_path = dict((p, n) for n, p in ours.items())
    foreign = set(n for n in current if n not in ours)
    reserved = set(by_path[path] for path, _v in wanted if path in by_path)
    changes, final, assigned = {}, [], set()
    for path, value in wanted:
        n = by_path.get(path)
        if n is None:
            n = next(i for i in itertools.count() if i not in foreign and i not in reserved and i not in assigned)
        assigned.add(n)
        final.append((n, value))
        if current.get(n) != value:
            changes["dev%d" % n] = value
    keep = set(n for n, _v in final)
    deletes = ["dev%d" % n for n in ours if n not in keep]
    return changes, deletes, [{"index": n, "value": v} for n, v in sorted(final)]


PENDING = "pve:pending"


def pending_changes(text):
    """The ``[pve:pending]`` section of a CT config - changes Proxmox applies at the CT's next start (PVE 8's
    ``pct set`` of a devN on a running CT lands there; PVE 9 hot-plugs it) - as ({key: value}, [deleted keys]).
    Deletions are its ``delete:`` line, a comma list whose ``!`` prefix (a forced delete) is dropped."""
    _main, sections = split_sections(text)
    opts = {}
    for name, lines in sections:
        if name != PENDING:
            continue
        for line in lines[1:]:
            m = _OPTION.match(line.rstrip("\r\n"))
            if m:
                opts[m.group(1)] = m.group(2)
    deletes = [k.strip().lstrip("!") for k in opts.pop("delete", "").split(",") if k.strip().lstrip("!")]
    return opts, deletes


def pending_over_devices(text, final, owned):
    """What of the pending section would overwrite the devN this module writes when Proxmox applies it at the next
    start: a pending set or delete of a devN key that ``final`` (plan_devices' [{index, value}]) uses, that holds a
    path matching ``owned`` now, or whose pending value is such a path. Returns ["dev0: <value>", "delete dev1"]."""
    opts = parse(text)
    pending, deletes = pending_changes(text)
    used = set("dev%d" % d["index"] for d in final)

    def touched(key, value=None):
        if not re.match(r"^dev\d+$", key):
            return False
        paths = [parse_property_string(v, default_key="path").get("path", "") for v in (opts.get(key), value) if v]
        return key in used or any(re.search(owned, p) for p in paths)
    return (["%s: %s" % (k, v) for k, v in sorted(pending.items()) if touched(k, v)]
            + ["delete %s" % k for k in deletes if touched(k)])


def pending_problem(vmid, path, over):
    """Why the passthrough is not written while ``over`` (pending_over_devices) stands, and the two ways out."""
    keys = ",".join(sorted(set(x.split(":")[0].replace("delete ", "") for x in over)))
    said = "; ".join(over)
    return ("CT %s has pending changes to its device passthrough (%s in the [%s] section of %s) that Proxmox applies "
            "at the CT's next start, over what this writes - a `pct set` of a devN while the CT ran (PVE 8 cannot "
            "hot-plug devN). Apply them (restart the CT) and run again, or drop them with `pct set %s --revert %s`; "
            "`pct pending %s` lists them. Nothing was changed." % (vmid, said, PENDING, path, vmid, keys, vmid))


def backup_config(path, backup_dir, vmid, keep):
    """Copy the config to a backup name unique even within one second (microseconds + a counter), then keep only
    the newest ``keep`` backups of this CT. Returns the backup's path."""
    stamp = time.strftime("%Y%m%dT%H%M%S") + ".%06d" % (int(time.time() * 1e6) % 1000000)
    n = 0
    while True:
        backup = os.path.join(backup_dir, "%d.conf.%s%s" % (vmid, stamp, "" if n == 0 else "-%d" % n))
        try:
            fd = os.open(backup, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            break
        except OSError as exc:
            if exc.errno != errno.EEXIST:
                raise
            n += 1
    with open(path, "rb") as src, os.fdopen(fd, "wb") as dst:
        shutil.copyfileobj(src, dst)
    prefix = "%d.conf." % vmid
    mine = sorted(n for n in os.listdir(backup_dir) if n.startswith(prefix))
    for old in mine[:max(0, len(mine) - max(1, keep))]:
        os.remove(os.path.join(backup_dir, old))
    return backup


def raw_device_lines(specs):
    """The raw LXC lines passing device nodes through by cgroup rule and bind mount: each spec has ``path``,
    ``rdev`` = (kind c|b, major, minor) and ``deny_write``. Rules first, then mounts (as LXC reads them)."""
    rules, mounts = [], []
    for spec in specs:
        kind, major, minor = spec["rdev"]
        rules.append(("lxc.cgroup2.devices.allow", "%s %d:%d %s" % (kind, major, minor,
                                                                    "rm" if spec.get("deny_write") else "rwm")))
        mounts.append(("lxc.mount.entry", "%s %s none bind,optional,create=file%s"
                       % (spec["path"], spec["path"].lstrip("/"), ",ro" if spec.get("deny_write") else "")))
    return rules + mounts


def line_owner(majors, owned_mounts):
    """owns(key, value): whether a raw line is this module's - a cgroup rule for one of ``majors`` (v1 or v2 key),
    or a mount entry matching the regular expression ``owned_mounts`` (re.error when it is not one)."""
    mounts = re.compile(owned_mounts)
    majors = set(int(m) for m in majors)

    def owns(key, value):
        if key in ("lxc.cgroup2.devices.allow", "lxc.cgroup.devices.allow"):
            m = re.match(r"^[cb] (\d+):", value.strip())
            return bool(m) and int(m.group(1)) in majors
        if key == "lxc.mount.entry":
            return bool(mounts.search(value.strip()))
        return False
    return owns


_GPU_NODE = re.compile(r"^/dev/nvidia[0-9]+$")


def open_nodes_argv(vmid, nodes, pct="pct"):
    """The one command that opens every passed node inside CT ``vmid``: ``head -q -c 0`` opens each file read-only
    (as dd if= does) and reads nothing; a node it cannot open is named on stderr ("head: cannot open
    '/dev/nvidia0' for reading: Operation not permitted"), the others are still tried, and rc is 1. Its rc and
    stderr are what passthrough_access reads."""
    return [pct, "exec", str(vmid), "--", "head", "-q", "-c", "0", "--"] + list(nodes)


def passthrough_check(nv, gpus, uvm, mode, host, proc_devices, gpus_name="lxc_gpu_passthrough_gpus", vmid=None):
    """What role lxc_gpu_passthrough passes into a CT, and the first reason it cannot, from the node's NVIDIA read
    (nvidia_gpu_facts: ``device_nodes`` [{path, major, ...}], ``device_majors`` {name: major}, ``state``,
    ``message``). ``gpus``: the GPU numbers asked for (empty: every one found); ``uvm``: pass nvidia-uvm too;
    ``mode``: passthrough mode (``raw`` needs the majors); ``host``/``proc_devices``: named in the reasons;
    ``vmid``: the CT, for open_argv.

    Returns found (GPU numbers with a node), paths (every node read), nodes (the nodes to pass, GPUs in order, then
    the control and UVM nodes), open_argv (open_nodes_argv of those nodes in CT ``vmid``; [] without a vmid) and
    problem: '' or the reason, checked in this order - a requested GPU without a node,
    the control or UVM node missing, no majors for raw lines, stale nodes whose major is not the loaded driver's."""
    read = list(nv.get("device_nodes") or [])
    majors = nv.get("device_majors") or {}
    paths = [n["path"] for n in read]
    found = sorted(int(p[len("/dev/nvidia"):]) for p in paths if _GPU_NODE.match(p))
    gpus = list(gpus or [])
    nodes = (["/dev/nvidia%s" % g for g in sorted(gpus or found)] + ["/dev/nvidiactl"]
             + (["/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"] if uvm else []))
    problem = ""
    if not found or [g for g in gpus if g not in found]:
        problem = ("%s=%s: this node has GPU nodes %s (%s: %s). Pick from those, or install the driver first (role "
                   "gpuserve.sglang.nvidia_driver)." % (gpus_name, gpus, found, nv.get("state"), nv.get("message")))
    elif "/dev/nvidiactl" not in paths or (uvm and "/dev/nvidia-uvm" not in paths):
        problem = ("/dev/nvidiactl or /dev/nvidia-uvm is missing on %s: nvidia-uvm appears only after the first CUDA "
                   "use unless created at boot (`nvidia-modprobe -u -c=0`, which role nvidia_driver installs as a unit "
                   "ordered before pve-guests). A CT started without it cannot use CUDA." % host)
    elif mode == "raw" and ("nvidia-frontend" not in majors or (uvm and "nvidia-uvm" not in majors)):
        problem = ("%s lists no nvidia-frontend/nvidia-uvm major (%s): the driver is not loaded, so raw cgroup lines "
                   "cannot be written." % (proc_devices, majors))
    else:
        stale = [n["path"] for n in read if "nvidia-uvm" in majors and re.match(r"^/dev/nvidia-uvm", n["path"])
                 and n.get("major") != majors["nvidia-uvm"]]
        stale += [n["path"] for n in read if "nvidia-frontend" in majors
                  and re.match(r"^/dev/nvidia([0-9]+|ctl)$", n["path"]) and n.get("major") != majors["nvidia-frontend"]]
        if stale:
            problem = ("stale device node(s) %s: their major differs from %s (%s), as after a driver or kernel update "
                       "changed the dynamic nvidia-uvm major. Remove them and recreate with `nvidia-modprobe -u -c=0` "
                       "(or reboot)." % (stale, proc_devices, majors))
    return dict(found=found, paths=paths, nodes=nodes, problem=problem,
                open_argv=open_nodes_argv(vmid, nodes) if vmid is not None else [])


def passthrough_access(opened, nodes):
    """What opening each passed node inside the CT said, from one ``head -q -c 0 -- <nodes>`` (``opened``: rc,
    stderr, stderr_lines; no rc = nothing was run, and nothing is classified): for each node its path, access and
    the words naming it. access: open; reachable_no_driver (ENXIO: allowed by the cgroup, no GPU behind it - the
    lab, or a node without the device); denied (EPERM: the device cgroup refuses it); missing (ENOENT: not in the
    CT); error (anything else, with rc and stderr when no line names a node)."""
    if not isinstance(opened, dict) or opened.get("rc") is None:
        return []
    lines = list(opened.get("stderr_lines") or [])
    out = []
    for path in nodes:
        said = "; ".join(line for line in lines if "'%s'" % path in line)
        if not said and opened["rc"] != 0 and not any("cannot open" in line for line in lines):
            said = "rc %s: %s" % (opened["rc"], opened.get("stderr", ""))
        access = ("open" if not said else "reachable_no_driver" if "No such device or address" in said
                  else "denied" if "Operation not permitted" in said else "missing" if "No such file" in said
                  else "error")
        out.append(dict(path=path, access=access, message=said))
    return out
