# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""NVIDIA driver and GPU facts from nvidia-smi, /proc and /sys. Standard library only, pure functions.

Inputs are the texts the caller read (so tests feed recorded outputs):
- ``nvidia-smi --query-gpu=<SMI_FIELDS> --format=csv,noheader,nounits`` (stdout, stderr, rc);
- ``/proc/driver/nvidia/version`` (the loaded kernel module: version, open vs proprietary);
- ``/sys/module/nvidia/version``;
- ``/proc/devices`` (majors: nvidia-frontend 195, the dynamic nvidia-uvm, nvidia-caps, ...).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

SMI_FIELDS = ("index", "name", "uuid", "pci.bus_id", "memory.total", "memory.used", "memory.free",
              "driver_version", "compute_cap")
SMI_ARGV = ["nvidia-smi", "--query-gpu=" + ",".join(SMI_FIELDS), "--format=csv,noheader,nounits"]
DEVICE_NAMES = ("nvidia-frontend", "nvidia", "nvidia-uvm", "nvidia-caps", "nvidia-caps-imex-channels",
                "nvidia-nvlink", "nvidia-nvswitch", "nvidia-modeset")

STATES = {
    "ok": "driver loaded, GPUs visible",
    "no_driver": "no NVIDIA driver is installed or loaded",
    "no_gpu": "the driver is loaded but sees no GPU",
    "version_mismatch": "the NVIDIA userspace library and the loaded kernel module differ",
    "gpu_lost": "a GPU has fallen off the bus or has otherwise become inaccessible",
    "error": "nvidia-smi failed for another reason",
}
HINTS = {
    "no_driver": "Install the driver (role gpuserve.sglang.nvidia_driver) and reboot if it says so; on a host "
                 "with a driver, `modprobe nvidia` and read `dmesg | grep -i nvrm`.",
    "no_gpu": "Check `lspci -nn | grep -i nvidia` (is the GPU bound to vfio-pci for a VM?) and `dmesg | grep -i nvrm`.",
    "version_mismatch": "Reboot to load the installed kernel module, or (inside a container) install the userspace "
                        "driver of exactly the host's kernel-module version %s.",
    "gpu_lost": "The GPU stopped answering on the PCIe bus (look for Xid 79 in `dmesg | grep -i xid`: power, cooling, the "
                "riser or the slot). Only a reboot of the node brings it back; check its power cables and cooling "
                "first. The node's other GPUs still work: containers that do not use the lost one can run.",
    "error": "Run nvidia-smi by hand and read its message.",
}
# NVML's words for a GPU it cannot reach (nvidia-smi exits 15 then, "The GPU has fallen off the bus or has otherwise
# become inaccessible" in its man page): "Unable to determine the device handle for GPU<bus id>: <reason>"
# (Unknown Error, GPU is lost...), the bus id with or without a space before it.
_LOST = re.compile(r"Unable to determine the device handle for GPU\s*([0-9A-Fa-f]+:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])",
                   re.I)
SMI_RC_GPU_LOST = 15


def _num(value):
    value = value.strip()
    if value.startswith("[") or value in ("", "N/A"):
        return None
    try:
        return int(value)
    except ValueError:
        try:
            return float(value)
        except ValueError:
            return None


def _text(value):
    value = value.strip()
    return None if value.startswith("[") or value == "N/A" else value


def parse_smi_csv(text):
    """GPU list from the CSV query; memory in MiB as ints; unknown values (``[N/A]``) are None."""
    gpus = []
    for line in text.splitlines():
        if not line.strip():
            continue
        cols = [c.strip() for c in line.split(",")]
        if len(cols) != len(SMI_FIELDS):
            raise ValueError("nvidia-smi line has %d fields, expected %d (%s): %r"
                             % (len(cols), len(SMI_FIELDS), ",".join(SMI_FIELDS), line))
        gpus.append({
            "index": _num(cols[0]), "name": _text(cols[1]), "uuid": _text(cols[2]), "pci_bus_id": _text(cols[3]),
            "memory_total_mib": _num(cols[4]), "memory_used_mib": _num(cols[5]), "memory_free_mib": _num(cols[6]),
            "driver_version": _text(cols[7]), "compute_cap": _text(cols[8]),
        })
    return gpus


def classify_smi(stdout, stderr, rc):
    """(state, message) of an nvidia-smi run; rc None means the binary is missing."""
    out = "%s\n%s" % (stdout or "", stderr or "")
    first = next((line.strip() for line in out.splitlines() if line.strip()), "")
    if rc is None:
        return "no_driver", "nvidia-smi not found"
    if "Driver/library version mismatch" in out:
        return "version_mismatch", first
    if "couldn't communicate with the NVIDIA driver" in out or "NVIDIA driver is not loaded" in out:
        return "no_driver", first
    if "No devices were found" in out:
        return "no_gpu", first
    lost = [normalize_bus_id(b) for b in _LOST.findall(out)]
    if lost or rc == SMI_RC_GPU_LOST or "GPU is lost" in out or "fallen off the bus" in out:
        said = next((line.strip() for line in out.splitlines() if _LOST.search(line) or "GPU is lost" in line
                     or "fallen off the bus" in line), "nvidia-smi exited %s" % rc)
        return "gpu_lost", ("GPU %s lost: %s" % (", ".join(sorted(set(lost))), said) if lost else said)
    if rc != 0:
        return "error", first or "nvidia-smi exited %d" % rc
    return "ok", ""


def parse_proc_version(text):
    """/proc/driver/nvidia/version -> {"version": "570.153.02", "type": "open"|"proprietary"} or {}."""
    for line in (text or "").splitlines():
        if line.startswith("NVRM version:"):
            m = re.search(r"\s(\d+\.\d+(?:\.\d+)?)\s", line + " ")
            return {"version": m.group(1) if m else None,
                    "type": "open" if "Open Kernel Module" in line else "proprietary"}
    return {}


def parse_proc_devices(text):
    """Character-device majors of the NVIDIA drivers: {"nvidia-frontend": 195, "nvidia-uvm": 508, ...}."""
    majors = {}
    in_char = False
    for line in (text or "").splitlines():
        if line.startswith("Character devices:"):
            in_char = True
            continue
        if line.startswith("Block devices:"):
            break
        parts = line.split()
        if in_char and len(parts) == 2 and parts[0].isdigit() and parts[1] in DEVICE_NAMES:
            majors[parts[1]] = int(parts[0])
    if "nvidia" in majors and "nvidia-frontend" not in majors:
        majors["nvidia-frontend"] = majors["nvidia"]
    majors.pop("nvidia", None)
    return majors


def normalize_bus_id(bus_id):
    """PCI bus id in the kernel's form (``0000:41:00.0``) from nvidia-smi's (``00000000:41:00.0``) or any case."""
    b = str(bus_id or "").strip().lower()
    m = re.match(r"^([0-9a-f]+):([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])$", b)
    if not m:
        return b
    return "%04x:%s:%s.%s" % (int(m.group(1), 16), m.group(2), m.group(3), m.group(4))


def parse_gpu_information(text):
    """``/proc/driver/nvidia/gpus/<bus id>/information``: {"minor": int, "uuid": str, "bus_id": str} (what is there).

    ``Device Minor`` is N of ``/dev/nvidiaN``: the node passthrough grants. It is the driver's probe order, not
    nvidia-smi's ``index`` (PCI order by default) - on many multi-socket servers the two differ."""
    out = {}
    for line in (text or "").splitlines():
        key, _sep, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if key == "Device Minor" and value.isdigit():
            out["minor"] = int(value)
        elif key == "GPU UUID":
            out["uuid"] = value
        elif key == "Bus Location":
            out["bus_id"] = normalize_bus_id(value)
    return out


def _selector(sel):
    """What selector ``sel`` names a GPU by - ``minor`` (N of /dev/nvidiaN), ``uuid`` (``GPU-...``) or ``pci`` (a bus
    id) - and its text as given."""
    text = str(sel).strip()
    if isinstance(sel, int) or text.isdigit():
        return "minor", text
    return ("uuid" if text.upper().startswith("GPU-") else "pci"), text


def _selects(sel, gpu):
    """Whether selector ``sel`` names ``gpu`` ({minor, uuid, pci_bus_id})."""
    kind, text = _selector(sel)
    if kind == "minor":
        return gpu.get("minor") == int(text)
    if kind == "uuid":
        return str(gpu.get("uuid", "")).lower() == text.lower()
    return normalize_bus_id(gpu.get("pci_bus_id")) == normalize_bus_id(text)


def _unknown_to(sel, gpu):
    """Whether ``gpu`` lacks what selector ``sel`` compares (its minor, or its UUID)."""
    kind = _selector(sel)[0]
    return gpu.get("minor") is None if kind == "minor" else (kind == "uuid" and not gpu.get("uuid"))


def _selector_name(sel):
    kind, text = _selector(sel)
    return {"minor": "/dev/nvidia%s", "uuid": "UUID %s", "pci": "PCI %s"}[kind] % text


def gpus_problem(facts, selectors, node):
    """Why a container using GPUs ``selectors`` of ``node`` (as select_gpus takes them; empty: every GPU) cannot run
    on them now, from the node's nvidia_gpu_facts, or ''. A lost GPU stops only the containers that use it (the
    others still work); any other state than ok stops every one, with its message and hint."""
    state = (facts or {}).get("state")
    if state in (None, "ok"):
        return ""
    if state == "gpu_lost":
        lost = facts.get("lost_gpus") or []
        mine = [g for g in lost if not selectors or any(_selects(sel, g) for sel in selectors)]
        # a lost GPU the driver gives no minor (or UUID) for cannot be told apart from this container's
        unsure = [g for g in lost if g not in mine and any(_unknown_to(sel, g) for sel in selectors)]
        if lost and not mine and not unsure:
            return ""
        which = ", ".join("%s (%s)" % (g.get("device") or "a GPU", g["pci_bus_id"]) for g in mine or unsure)
        if mine or not lost:
            said = "%s of %s, which this container uses, is lost" % (which or "a GPU", node)
        else:
            said = ("%s of %s is lost, and the driver does not say which /dev/nvidiaN it was, so this container may "
                    "use it" % (which, node))
        return "%s - %s. %s Nothing was launched." % (said, facts.get("message"), facts.get("hint"))
    return ("the GPUs of %s cannot be used: %s - %s. %s Nothing was launched."
            % (node, state, facts.get("message"), facts.get("hint")))


def select_gpus(selectors, gpus):
    """The GPUs named by ``selectors`` - device minors (N of /dev/nvidiaN, ints), UUIDs (``GPU-...``) or PCI bus ids -
    among ``gpus`` (nvidia_gpu_facts' list, each with its ``minor``). Returns (selected in the order given, problems).
    An empty selector list selects every GPU."""
    if not selectors:
        return list(gpus), []
    selected, problems = [], []
    for sel in selectors:
        what = _selector_name(sel)
        found = [g for g in gpus if _selects(sel, g)]
        if not found:
            problems.append("%s is not a GPU of this node (it has %s)" % (what, ", ".join(
                "/dev/nvidia%s = %s %s" % (g.get("minor"), g.get("uuid"), normalize_bus_id(g.get("pci_bus_id")))
                for g in gpus) or "none the driver reports"))
        elif found[0] not in selected:
            selected.append(found[0])
    return selected, problems


def gpu_facts(smi_stdout, smi_stderr, smi_rc, proc_version="", sys_module_version="", proc_devices="",
              device_nodes=None, smi_timeout=None, gpu_information=None):
    """All facts in one dict; never raises on a broken driver, it names the state instead. ``smi_timeout``: the
    seconds nvidia-smi was given when it did not answer in time (a wedged GPU or driver). ``gpu_information``: the
    texts of /proc/driver/nvidia/gpus/*/information, which give each GPU its device minor."""
    if smi_timeout is not None:
        state, message = "error", "nvidia-smi did not answer within %s s (killed)" % smi_timeout
    else:
        state, message = classify_smi(smi_stdout, smi_stderr, smi_rc)
    kmod = parse_proc_version(proc_version)
    gpus = []
    if state == "ok":
        try:
            gpus = parse_smi_csv(smi_stdout)
        except ValueError as exc:
            state, message = "error", str(exc)
        if state == "ok" and not gpus:
            state, message = "no_gpu", "nvidia-smi listed no GPU"
    elif state == "gpu_lost":     # the GPUs NVML still reaches are listed as rows beside the lost one's error line
        gpus = parse_smi_csv("\n".join(line for line in (smi_stdout or "").splitlines()
                                       if line.count(",") == len(SMI_FIELDS) - 1 and not _LOST.search(line)))
    infos = [parse_gpu_information(t) for t in (gpu_information or [])]
    by_bus = dict((i["bus_id"], i) for i in infos if "bus_id" in i)
    lost = []
    for bus in sorted(set(normalize_bus_id(b) for b in _LOST.findall("%s\n%s" % (smi_stdout, smi_stderr)))):
        minor = by_bus.get(bus, {}).get("minor")
        lost.append({"pci_bus_id": bus, "minor": minor, "uuid": by_bus.get(bus, {}).get("uuid"),
                     "device": "/dev/nvidia%d" % minor if minor is not None else None})
    for g in gpus:
        info = by_bus.get(normalize_bus_id(g.get("pci_bus_id")), {})
        g["minor"] = info.get("minor")
        g["device"] = "/dev/nvidia%d" % info["minor"] if "minor" in info else None
    userspace = gpus[0]["driver_version"] if gpus else None
    if state == "version_mismatch":
        m = re.search(r"NVML library version:\s*([\d.]+)", "%s\n%s" % (smi_stdout, smi_stderr))
        userspace = m.group(1) if m else None
    kernel_version = kmod.get("version") or (sys_module_version or "").strip() or None
    facts = {
        "state": state,
        "message": message or STATES[state],
        "hint": None,
        "driver_version": userspace,
        "kernel_module_version": kernel_version,
        "kernel_module_type": kmod.get("type"),
        "gpu_count": len(gpus),
        "gpus": gpus,
        "memory_total_mib": sum(g["memory_total_mib"] or 0 for g in gpus),
        "device_majors": parse_proc_devices(proc_devices),
        "device_nodes": sorted(device_nodes or [], key=lambda d: d["path"]),
        "lost_gpus": lost,
    }
    if smi_timeout is not None:
        facts["hint"] = ("A GPU or the driver is wedged: look for Xid errors (`dmesg | grep -i xid`), then reset the GPU "
                         "(`nvidia-smi -r -i <index>` with nothing using it) or reboot the node.")
    elif state != "ok":
        hint = HINTS[state]
        facts["hint"] = hint % (kernel_version or "(read /proc/driver/nvidia/version)") if "%s" in hint else hint
    return facts


def policy_versions(text, version=None):
    """Names of the packages in ``apt-cache policy`` output that apt can install: with ``version``, those whose
    version table lists it (``570.153.02`` matches ``570.153.02-1``); without, those with a candidate."""
    known, name, table = [], None, False
    for line in text.splitlines():
        if line and not line[0].isspace() and line.endswith(":"):
            name, table = line[:-1], False
            continue
        if name is None:
            continue
        words = line.split()
        if not words:
            continue
        if version is None:
            if words[0] == "Candidate:" and len(words) > 1 and words[1] != "(none)" and name not in known:
                known.append(name)
        elif words[0] == "Version" and words[1:2] == ["table:"]:
            table = True
        elif table:
            v = words[1] if words[0] == "***" and len(words) > 1 else words[0]
            if (v == version or v.startswith(version + "-") or v.startswith(version + "+")) and name not in known:
                known.append(name)
    return known


# The node's side of the driver (role nvidia_driver): everything its preflight and verify need, read in one
# module call instead of a dozen (issue #17: each round trip costs 0.2-0.4 s). Reads files only; the caller runs
# dkms (a process, bounded) and passes its output to dkms_has_module.
LIB_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib/aarch64-linux-gnu")
# The kernel a Proxmox node boots next when one is pinned (proxmox-kernel-helper's proxmox-boot-tool: `kernel pin
# <version> --next-boot` writes the first, `kernel pin <version>` the second; each holds the version as in
# /lib/modules). As known from proxmox-kernel-helper, not checked on a real node here.
BOOT_PINS = ("/etc/kernel/next-boot-pin", "/etc/kernel/proxmox-boot-pin")
_LIB_RE = re.compile(r"^libnvidia-ml\.so\.(\d+\.\d+(?:\.\d+)?)$")


def parse_os_release(text):
    """``/etc/os-release`` as a dict of lower-case keys, plus ``family`` the way Ansible names it (``Debian`` for
    Debian and its derivatives, else the ID capitalised; ``None`` when the file says nothing)."""
    fields = {}
    for line in (text or "").splitlines():
        if "=" not in line or line.lstrip().startswith("#"):
            continue
        key, value = line.split("=", 1)
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        fields[key.strip().lower()] = value
    ids = [fields.get("id", "")] + fields.get("id_like", "").split()
    family = "Debian" if "debian" in ids else (fields["id"].capitalize() if fields.get("id") else None)
    return dict(fields, family=family)


def secure_boot_enabled(data):
    """The SecureBoot EFI variable's bytes (4 attribute bytes, then the value): True when enabled, False when
    not, None without the variable (no EFI, or legacy boot)."""
    if not data:
        return None
    return bytearray(data)[-1:] == bytearray(b"\x01")


def version_key(version):
    """Sort key of a dotted version or a kernel release (``6.8.12-4-pve`` < ``6.8.12-10-pve``)."""
    return [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"[.\-+~]", version or "")]


def userspace_versions(names):
    """Versions of the userspace driver from library file names (``libnvidia-ml.so.570.153.02``), newest last."""
    found = set()
    for name in names:
        m = _LIB_RE.match(os.path.basename(name))
        if m:
            found.add(m.group(1))
    return sorted(found, key=version_key)


def dkms_has_module(stdout, kernel):
    """Whether ``dkms status -m nvidia -v V`` says the module is installed for ``kernel``."""
    for line in (stdout or "").splitlines():
        fields = [f.strip() for f in re.split(r"[,:]", line)]
        if kernel in fields and "installed" in line.split(":")[-1]:
            return True
    return False


def headers_packages(pve, kernel, boot_kernel=None):
    """The kernel headers DKMS needs on a node, as apt names them: the running kernel's (the .run builds the module
    for it) and the kernel's the node boots next (DKMS builds for it), each once - ``proxmox-headers-<version>`` on
    Proxmox VE (8 and 9; with ``proxmox-default-headers``, so DKMS also builds for the default series' updates as
    they are installed), ``linux-headers-<version>`` on Debian."""
    prefix = "proxmox-headers-" if pve else "linux-headers-"
    out = ["proxmox-default-headers"] if pve else []
    for k in (kernel, boot_kernel):
        if k and prefix + k not in out:
            out.append(prefix + k)
    return out


def _listdir(path):
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def _read_bytes(path, limit=1 << 16):
    try:
        with open(path, "rb") as fh:
            return fh.read(limit)
    except (IOError, OSError):
        return None


def read_node(root="/", lib_dirs=LIB_DIRS, free_path="/", uname=None):
    """What nvidia_driver needs to know of the node, read from files under ``root`` (tests pass a tree).
    ``uname``: (release, machine); the running kernel's by default."""
    def at(path):
        return os.path.join(root, path.lstrip("/"))

    release, machine = uname or (os.uname()[2], os.uname()[4])
    osr = parse_os_release((_read_bytes(at("/etc/os-release")) or b"").decode("utf-8", "replace"))
    efivars = at("/sys/firmware/efi/efivars")
    sb_files = [n for n in _listdir(efivars) if n.startswith("SecureBoot-")]
    pci = at("/sys/bus/pci/devices")
    nvidia_pci = [d for d in _listdir(pci)
                  if (_read_bytes(os.path.join(pci, d, "vendor")) or b"").strip().lower() == b"0x10de"]
    libs = []
    for d in lib_dirs:
        libs.extend(os.path.join(d, n) for n in _listdir(at(d)) if n.startswith("libnvidia-ml.so."))
    try:
        st = os.statvfs(at(free_path))
        free_mib = st.f_bavail * st.f_frsize // (1 << 20)
    except OSError:
        free_mib = None
    kernels = sorted((n for n in _listdir(at("/lib/modules")) if os.path.isdir(os.path.join(at("/lib/modules"), n))),
                     key=version_key)
    versions = userspace_versions(libs)
    newest = kernels[-1] if kernels else None
    pve = os.path.exists(at("/usr/bin/pveversion"))
    boot_kernel, boot_pin = newest, None
    for pin in BOOT_PINS:   # a pin naming a kernel that is not installed is not booted: the next one counts
        named = (_read_bytes(at(pin), 256) or b"").decode("utf-8", "replace").strip()
        if named and named in kernels:
            boot_kernel, boot_pin = named, pin
            break
    return {
        "os_family": osr["family"],
        "distribution": osr.get("name") or osr.get("id"),
        "distribution_version": osr.get("version_id"),
        "kernel": release,
        "architecture": machine,
        "pve": pve,
        "initramfs": os.path.exists(at("/usr/sbin/update-initramfs")),
        "secure_boot": secure_boot_enabled(_read_bytes(os.path.join(efivars, sb_files[0]))) if sb_files else None,
        "free_mib": free_mib,
        "free_path": free_path,
        "nvidia_pci": nvidia_pci,
        "userspace_versions": versions,
        "userspace_version": versions[-1] if versions else None,
        "kernels": kernels,
        "newest_kernel": newest,
        "boot_kernel": boot_kernel,
        "boot_kernel_pin": boot_pin,
        "headers_packages": headers_packages(pve, release, boot_kernel),
    }
