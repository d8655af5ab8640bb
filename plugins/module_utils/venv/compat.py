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
22.04 2.35, Debian 11 2.31). A pin counts when its marker holds for the container (PEP 508, evaluated here)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
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
_MARKER_TOKEN = re.compile(r"\s*(\(|\)|===|==|!=|<=|>=|~=|<|>|not\s+in\b|in\b|and\b|or\b|'[^']*'|\"[^\"]*\"|[A-Za-z_.]+)")
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


def _ver(text):
    return tuple(int(p) for p in re.findall(r"\d+", text))


def marker_holds(marker, env):
    """Whether a PEP 508 marker holds in ``env`` ({variable: value}); a variable env lacks makes it hold (the pin is
    then checked rather than skipped)."""
    tokens = [t.strip() for t in _MARKER_TOKEN.findall(marker)]
    pos = [0]

    def peek():
        return tokens[pos[0]] if pos[0] < len(tokens) else None

    def take():
        pos[0] += 1
        return tokens[pos[0] - 1]

    def value(tok):
        if tok[0] in "'\"":
            return tok[1:-1], False
        return env.get(tok), True

    def atom():
        if peek() == "(":
            take()
            r = disjunction()
            take()
            return r
        left, op, right = take(), " ".join(take().split()), take()
        (lv, lvar), (rv, rvar) = value(left), value(right)
        if lv is None or rv is None:
            return True
        name = left if lvar else right
        if op in ("in", "not in"):
            return (lv in rv) == (op == "in")
        if name in ("python_version", "python_full_version", "platform_release", "implementation_version"):
            if op == "==" and rv.endswith(".*"):
                return _ver(lv)[:len(_ver(rv[:-2]))] == _ver(rv[:-2])
            if op == "!=" and rv.endswith(".*"):
                return _ver(lv)[:len(_ver(rv[:-2]))] != _ver(rv[:-2])
            lv, rv = _ver(lv), _ver(rv)
        return {"==": lv == rv, "===": lv == rv, "!=": lv != rv, "<": lv < rv, "<=": lv <= rv, ">": lv > rv,
                ">=": lv >= rv, "~=": lv >= rv}.get(op, True)

    def chain(op, operand):
        """operand (op operand)*: "and" binds tighter than "or" (disjunction is a chain of conjunctions); every
        operand is read, whatever the value so far."""
        r = operand()
        while peek() == op:
            take()
            rhs = operand()
            r = (r and rhs) if op == "and" else (r or rhs)
        return r

    def disjunction():
        return chain("or", lambda: chain("and", atom))

    return disjunction() if tokens else True


def marker_env(python, machine):
    """The marker variables of a CPython ``python`` (3.11.2) on Linux ``machine``."""
    return {"python_version": ".".join(python.split(".")[:2]), "python_full_version": python, "sys_platform": "linux",
            "platform_system": "Linux", "os_name": "posix", "platform_machine": machine, "implementation_name":
            "cpython", "platform_python_implementation": "CPython", "implementation_version": python}


def tag_installs(tag, python, glibc, machine):
    """Whether a wheel tag (``cp311-cp311-manylinux_2_34_x86_64``, compressed sets allowed) installs on CPython
    ``python`` with glibc ``glibc`` on ``machine``; ``sdist`` does (built from source)."""
    if tag == "sdist":
        return True
    try:
        pys, abis, plats = [part.split(".") for part in tag.split("-")]
    except ValueError:
        return False
    minor = _ver(python)[:2]
    libc = _ver(glibc)[:2]

    def interp(py, abi):
        m = re.match(r"^(cp|py)(\d)(\d*)$", py)
        if not m or int(m.group(2)) != minor[0]:
            return False
        own = (int(m.group(2)), int(m.group(3))) if m.group(3) else None
        if m.group(1) == "cp":
            return own is not None and (own == minor if abi != "abi3" else own <= minor)
        return abi == "none" and (own is None or own <= minor)

    def platform(plat):
        if plat == "any":
            return True
        m = re.match(r"^manylinux_(\d+)_(\d+)_(.+)$", plat)
        if m:
            return m.group(3) == machine and libc >= (int(m.group(1)), int(m.group(2)))
        legacy, dummy, arch = plat.partition("_")
        if legacy in _LEGACY:
            return arch == machine and libc >= _LEGACY[legacy]
        return plat == "linux_" + machine

    return any(interp(py, abi) and platform(plat) for py in pys for abi in abis for plat in plats)


def _needs(tags):
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


def wheels_check(lock_text, tags_text, python, glibc, machine, packages=None, lock_name="the lock",
                 where="the container"):
    """{'level': ok|refuse|unknown, 'msg': words with the fix, 'problems': [pin, ...]} for installing the pins of a
    lock (only those named in ``packages`` when given: a light build) on CPython ``python``, glibc ``glibc`` and
    ``machine``, from the lock's tags record (``tags_text``, None when the lock has none)."""
    out = {"python": python, "glibc": glibc, "machine": machine, "problems": []}
    if tags_text is None:
        return dict(out, level="unknown", msg="%s has no .tags record beside it (tests/ci/lock.sh write makes one): "
                    "its wheels were not checked against %s" % (lock_name, where))
    sha, tags = parse_tags(tags_text)
    digest = hashlib.sha256(lock_text.encode("utf-8")).hexdigest()
    if sha != digest:
        return dict(out, level="refuse", msg="the .tags record beside %s is for another lock (lock-sha256 %s, the lock "
                    "is %s): write both again with tests/ci/lock.sh write <version>" % (lock_name, sha, digest))
    env = marker_env(python, machine)
    wanted = set(_norm(p) for p in packages) if packages else None
    for name, version, marker in lock_requirements(lock_text):
        if (wanted is not None and name not in wanted) or not marker_holds(marker, env):
            continue
        pin = "%s==%s" % (name, version)
        if not any(tag_installs(t, python, glibc, machine) for t in tags.get(pin, [])):
            out["problems"].append("%s ships only %s" % (pin, _needs(tags.get(pin, [])) or "no file"))
    out["problems"].sort(key=lambda x: (not x.startswith(("sglang==", "torch==")), x))  # the release first
    if not out["problems"]:
        return dict(out, level="ok", msg="every pin of %s installs on %s (CPython %s, glibc %s, %s)" % (
            lock_name, where, python, glibc, machine))
    return dict(out, level="refuse", msg=(
        "%s does not install on %s (CPython %s, glibc %s, %s): %s. Point sglang_venv_python at an interpreter the "
        "wheels are built for (the Python the tags name), or run the container from a template whose glibc is at least "
        "the one named (Debian 12: 2.36, Ubuntu 24.04: 2.39, Ubuntu 22.04: 2.35), or pin a release whose lock installs "
        "there (sglang_venv_sglang_version)" % (lock_name, where, python, glibc, machine,
                                                "; ".join(out["problems"][:5]) + (
                                                    " (and %d more)" % (len(out["problems"]) - 5)
                                                    if len(out["problems"]) > 5 else ""))))
