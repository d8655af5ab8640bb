# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The compatibility chain, checked before a venv is built. First link: the node's NVIDIA driver against the
CUDA that the lock's torch runs on. The CUDA is read from the lock itself - the CUDA runtime package torch's wheel
requires (``nvidia-cuda-runtime-cu12==12.8.90`` in the 0.5.9 lock: CUDA 12.8) - never typed by hand.

What a driver loads is NVIDIA's rule (CUDA Toolkit release notes, "CUDA Toolkit and Corresponding Driver Versions",
Table 3, Linux x86_64): a CUDA major needs its minimum driver at all (minor version compatibility: 12.x runs on
>= 525.60.13, 13.x on >= 580.65.06); below the version a toolkit minor shipped with, it runs but without PTX JIT
(kernels compiled only as PTX for a newer GPU arch fail to load).

Second link: the container's Python, glibc and machine against the wheels the lock pins. Their tags are read from the
index's file names of the lock's own sha256s and kept beside the lock (``<lock>.tags``, tests/ci/lock.sh): 0.5.23
ships one wheel, cp311-cp311-manylinux_2_34_x86_64 - CPython 3.11 only, glibc >= 2.34 (Debian 12 has 2.36, Ubuntu
22.04 2.35, Debian 11 2.31). Here: the lock's pins and markers, the tags record, and a pin's wheels in words; the
check itself (PEP 508 markers and wheel tags, by ``packaging``) runs on the controller, plugins/plugin_utils/wheels.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

# CUDA major -> the minimum driver of minor version compatibility (Table 3, footnote: "CUDA Minor Version
# Compatibility"); CUDA major.minor -> the driver its GA toolkit shipped with (Table 3, "Toolkit Driver Version")
MAJOR_MINIMUM = {"12": "525.60.13", "13": "580.65.06"}
TOOLKIT_DRIVER = {
    "12.0": "525.60.13", "12.1": "530.30.02", "12.2": "535.54.03", "12.3": "545.23.06", "12.4": "550.54.14",
    "12.5": "555.42.02", "12.6": "560.28.03", "12.8": "570.26", "12.9": "575.51.03", "13.0": "580.65.06",
}
_RUNTIME = re.compile(r"^nvidia-cuda-runtime(?:-cu(\d+))?$")


def lock_cuda(pins):
    """The CUDA major.minor of a lock's pins ({name: version}, parse_lock's), from its CUDA runtime pin:
    nvidia-cuda-runtime-cuNN (CUDA 12's torch, 0.5.9) or nvidia-cuda-runtime (CUDA 13's, 0.5.23: 13.0.96); None for a
    lock without one (a CPU-only torch)."""
    for name, version in sorted(pins.items()):
        m = _RUNTIME.match(name)
        if m:
            parts = str(version).split(",", maxsplit=1)[0].split(".")
            if len(parts) >= 2 and parts[0] == (m.group(1) or parts[0]):
                return "%s.%s" % (parts[0], parts[1])
    return None


def _key(version):
    return tuple(int(p) for p in re.findall(r"\d+", str(version)))


def driver_check(driver_version, cuda, node="the node", containers=()):
    """{'level': ok|limited|refuse|unknown, 'msg': words, 'cuda': cuda, 'needs': driver} for the node's driver
    ``driver_version`` and the lock's CUDA ``cuda``. ``containers`` (names) are said in the fix: a driver upgrade
    restarts every GPU container of that node."""
    out = {"cuda": cuda, "driver": driver_version or None, "needs": None}
    if not cuda:
        return dict(out, level="ok", msg="the lock's torch pins no CUDA runtime (a CPU build): no driver needed")
    major = cuda.split(".")[0]
    needs = MAJOR_MINIMUM.get(major)
    if not driver_version or needs is None:
        return dict(out, level="unknown", msg="CUDA %s of the lock against the driver of %s: %s" % (
            cuda, node, "no driver version read there" if not driver_version else
            "CUDA %s is newer than this collection's table of NVIDIA's driver minimums" % major))
    full = TOOLKIT_DRIVER.get(cuda)
    if _key(driver_version) < _key(needs):
        restarts = (": upgrading the driver restarts every GPU container of %s (%s)" % (node, ", ".join(containers))
                    if containers else ": upgrading it restarts every GPU container of %s" % node)
        return dict(out, level="refuse", needs=needs, msg=(
            "the lock's torch runs on CUDA %s, which an NVIDIA driver loads from %s on (%s for all of it), and %s "
            "has %s: no CUDA call would work in this venv. Set nvidia_driver_version >= %s for %s (role "
            "nvidia_driver)%s; or use a lock whose torch is built for CUDA %s or older" % (
                cuda, needs, full or needs, node, driver_version, full or needs, node, restarts,
                _cuda_for(driver_version))))
    if full and _key(driver_version) < _key(full):
        return dict(out, level="limited", needs=full, msg=(
            "the lock's torch runs on CUDA %s; the driver %s on %s loads it through CUDA's minor version "
            "compatibility (>= %s) but is older than CUDA %s's own (%s): no PTX JIT - kernels shipped only as PTX "
            "for a newer GPU fail to load. nvidia_driver_version >= %s lifts it" % (
                cuda, driver_version, node, needs, cuda, full, full)))
    return dict(out, level="ok", needs=full or needs, msg="CUDA %s of the lock runs on the driver %s of %s" % (
        cuda, driver_version, node))


def _cuda_for(driver_version):
    """The newest CUDA major.minor whose toolkit driver ``driver_version`` reaches (for the words of a refusal)."""
    fits = [c for c, d in TOOLKIT_DRIVER.items() if _key(driver_version) >= _key(d)]
    return max(fits, key=_key) if fits else "11.x (older than this table)"


# -- the wheels of a lock against the container's interpreter ---------------------------------------------------------
_REQ = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;\\]+)\s*(?:;\s*([^\\]*?))?\s*\\?$")
_LEGACY = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}


def _norm(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def lock_requirements(text):
    """[(name, version, marker or '')] of a ``uv pip compile`` lock, markers kept (a universal lock pins some packages
    only for some Pythons or machines)."""
    out = []
    for line in text.splitlines():
        m = _REQ.match(line.strip())
        if m:
            out.append((_norm(m.group(1)), m.group(2), (m.group(3) or "").strip()))
    return out


def parse_tags(text):
    """(lock sha256, {name==version: [tag, ...]}) of a ``<lock>.tags`` record."""
    sha, tags = None, {}
    for line in text.splitlines():
        if line.startswith("# lock-sha256:"):
            sha = line.split(":", 1)[1].strip()
        elif line.strip() and not line.startswith("#"):
            words = line.split()
            tags[words[0]] = words[1:]
    return sha, tags


def needs(tags):
    """What a pin's wheels ask for, in words (cp311-cp311-manylinux_2_34_x86_64: CPython 3.11, glibc >= 2.34, x86_64)."""
    said = []
    for tag in tags:
        if tag == "sdist":
            continue
        pys, dummy, plats = (part.split(".") for part in tag.split("-"))
        libcs = [(int(m.group(1)), int(m.group(2))) for m in (re.match(r"^manylinux_(\d+)_(\d+)_", p) for p in plats) if m]
        libcs += [_LEGACY[p.partition("_")[0]] for p in plats if p.partition("_")[0] in _LEGACY]
        arch = sorted(set(re.sub(r"^(manylinux\d*(_\d+_\d+)?|linux|musllinux_\d+_\d+)_", "", p) for p in plats))
        py = ", ".join("CPython %s.%s" % (p[2], p[3:]) if p.startswith("cp") and len(p) > 3 else p for p in pys)
        said.append("%s (%s%s%s)" % (tag, py, ", glibc >= %d.%d" % min(libcs) if libcs else "",
                                     ", " + "/".join(arch) if arch != ["any"] else ""))
    return "; ".join(said)
