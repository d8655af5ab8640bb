# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Which SGLang release a plan is for: the one installed beside the launch's interpreter (read from its
``sglang-<version>.dist-info``, no process started), else the one asked for. The planner's arithmetic is proved
per release against that release's own code (tests/oracle); a release it was not proved for is refused by name,
never planned with another release's arithmetic."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import glob
import os
import re

from .model import PlanError

# Releases whose sizing this planner mirrors, each proved by `make oracle` against the release's own wheel.
KNOWN_RELEASES = ("0.5.9", "0.5.23")
DEFAULT_RELEASE = "0.5.9"

_DIST = re.compile(r"^sglang-([0-9][^-/]*)\.dist-info$")


def package_dirs(python):
    """The directories where ``python``'s environment keeps its packages: a venv's ``lib/python3.*/site-packages``
    (its ``bin/python`` is a link to the base interpreter, so the link itself, not its target, names the venv), and
    a system interpreter's ``site-packages`` and Debian's ``dist-packages`` (``/usr`` and ``/usr/local``)."""
    prefix = os.path.dirname(os.path.dirname(os.path.abspath(python)))
    prefixes = [prefix] + ([os.path.join(prefix, "local")] if prefix == "/usr" else [])
    dirs = []
    for pre in prefixes:
        for kind in ("site-packages", "dist-packages"):
            dirs.extend(glob.glob(os.path.join(pre, "lib", "python3*", kind)))   # python3.11/..., Debian's python3/...
    return sorted(set(dirs))


def installed_release(python):
    """(version, dist-info path) of the sglang package installed in ``python``'s environment, or (None, None)."""
    found = []
    for d in package_dirs(python):
        try:
            names = os.listdir(d)
        except OSError:
            continue
        for name in names:
            m = _DIST.match(name)
            if m:
                found.append((m.group(1), os.path.join(d, name)))
    if len(found) > 1:
        raise PlanError("%s's environment holds more than one sglang (%s): remove the stale one (role sglang_venv "
                        "builds a venv with exactly one)" % (python, ", ".join(path for dummy, path in sorted(found))))
    return found[0] if found else (None, None)


def resolve_release(release=None, python=None):
    """(release, where it was read) for a plan; raises PlanError naming a release the planner was not proved for,
    or a ``release`` that contradicts the one installed beside ``python``."""
    version, where = installed_release(python) if python else (None, None)
    if version is not None:
        if release and release != version:
            raise PlanError("release=%s but %s has sglang %s installed (%s): plan the release that runs - drop "
                            "release, or build the venv of %s (sglang_venv_sglang_version)" % (
                                release, python, version, where, release))
        source = "installed (%s)" % where
    elif release:
        version, source = release, "asked for (release)"
    else:
        version = DEFAULT_RELEASE
        source = ("the default (no sglang installed beside %s)" % python) if python else "the default"
    if version not in KNOWN_RELEASES:
        raise PlanError("SGLang %s: this planner's arithmetic is proved for SGLang %s only (make oracle), and it "
                        "does not plan %s with another release's rules; nothing was planned - run %s "
                        "(sglang_venv_sglang_version: %s), or launch without the plan (sglang_server_plan: false) "
                        "knowing nothing predicts its memory" % (
                            version, ", ".join(KNOWN_RELEASES), version, DEFAULT_RELEASE, DEFAULT_RELEASE))
    return version, source
