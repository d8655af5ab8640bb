# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Whether a lock's pins install on a container's CPython, glibc and machine (the filter lock_wheels_check, on the
controller): PEP 508 markers and wheel tags as pip and uv read them - by ``packaging``, which ansible-core itself
requires (#62 item 8: no hand-written evaluator). The lock's pins, its tags record and a pin's wheels in words are
module_utils/venv/compat.py's."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib

try:    # a requirement of ansible-core itself; guarded as ansible-test's import check asks of a controller plugin
    from packaging.markers import Marker
    from packaging.tags import compatible_tags, cpython_tags, parse_tag
    PACKAGING_ERROR = None
except ImportError as e:
    PACKAGING_ERROR = e

from ansible_collections.gpuserve.sglang.plugins.module_utils.venv.compat import (_norm, lock_requirements, needs,
                                                                                  parse_tags)

# the manylinux tags older than PEP 600 and the glibc each stands for (PEP 513, 571, 599)
_LEGACY = (("manylinux2014", 17), ("manylinux2010", 12), ("manylinux1", 5))


def marker_env(python, machine):
    """The PEP 508 environment of a CPython ``python`` (3.11.2) on Linux ``machine`` - every variable packaging
    evaluates, so none of the controller's own leaks in."""
    return {"python_version": ".".join(python.split(".")[:2]), "python_full_version": python, "sys_platform": "linux",
            "platform_system": "Linux", "os_name": "posix", "platform_machine": machine, "implementation_name":
            "cpython", "platform_python_implementation": "CPython", "implementation_version": python,
            "platform_release": "", "platform_version": ""}


def marker_holds(marker, env):
    """Whether a PEP 508 marker holds in ``env`` (marker_env's); an empty marker holds."""
    return True if not marker.strip() else bool(Marker(marker).evaluate(env))


def _platforms(glibc, machine):
    """The platform tags a glibc ``glibc`` (2.36) on ``machine`` installs, newest first (PEP 600 and the legacy
    aliases), then linux_<machine>."""
    major, minor = (int(p) for p in glibc.split(".")[:2])
    out = []
    for m in range(minor, -1, -1) if major == 2 else ():
        out.append("manylinux_2_%d_%s" % (m, machine))
        out += ["%s_%s" % (legacy, machine) for legacy, floor in _LEGACY if floor == m]
    return out + ["linux_%s" % machine]


def tag_installs(tag, python, glibc, machine):
    """Whether a wheel tag (``cp311-cp311-manylinux_2_34_x86_64``, compressed sets allowed) installs on CPython
    ``python`` with glibc ``glibc`` on ``machine``; ``sdist`` does (built from source)."""
    if tag == "sdist":
        return True
    try:
        wanted = parse_tag(tag)
    except ValueError:
        return False
    version = tuple(int(p) for p in python.split(".")[:2])
    interpreter = "cp%d%d" % version
    platforms = _platforms(glibc, machine)
    supported = set(cpython_tags(version, [interpreter], platforms)) | set(compatible_tags(version, interpreter, platforms))
    return bool(wanted & supported)


def wheels_check(lock_text, tags_text, python, glibc, machine, packages=None, lock_name="the lock",
                 where="the container"):
    """{'level': ok|refuse|unknown, 'msg': words with the fix, 'problems': [pin, ...]} for installing the pins of a
    lock (only those named in ``packages`` when given: a light build) on CPython ``python``, glibc ``glibc`` and
    ``machine``, from the lock's tags record (``tags_text``, None when the lock has none)."""
    out = {"python": python, "glibc": glibc, "machine": machine, "problems": []}
    if PACKAGING_ERROR is not None:
        return dict(out, level="unknown", msg="the controller's Python has no packaging (%s), which ansible-core "
                    "requires: its wheels were not checked against %s" % (PACKAGING_ERROR, where))
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
            out["problems"].append("%s ships only %s" % (pin, needs(tags.get(pin, [])) or "no file"))
    out["problems"].sort(key=lambda x: (not x.startswith(("sglang==", "torch==")), x))  # the release first
    if not out["problems"]:
        return dict(out, level="ok", msg="every pin of %s installs on %s (CPython %s, glibc %s, %s)" % (
            lock_name, where, python, glibc, machine))
    shown = "; ".join(out["problems"][:5]) + (
        " (and %d more)" % (len(out["problems"]) - 5) if len(out["problems"]) > 5 else "")
    return dict(out, level="refuse", msg=(
        "%s does not install on %s (CPython %s, glibc %s, %s): %s. Point sglang_venv_python at an interpreter the "
        "wheels are built for (the Python the tags name), or run the container from a template whose glibc is at least "
        "the one named (Debian 12: 2.36, Ubuntu 24.04: 2.39, Ubuntu 22.04: 2.35), or pin a release whose lock installs "
        "there (sglang_venv_sglang_version)" % (lock_name, where, python, glibc, machine, shown)))
