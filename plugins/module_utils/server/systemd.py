# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The systemd manager: the unit (installed by the sglang_server role) runs SGLang; these quote its
ExecStart, write its environment, start it, and read systemd's own words when it could not run SGLang.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
import subprocess
import time
from .process import _open_log_with_marker


# --- systemd manager: the unit (installed by the sglang_server role) runs SGLang; we start and watch it ---

_SYSTEMD_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "%": "%%", "$": "$$"}


def systemd_exec_line(argv):
    """argv -> an ExecStart= value that systemd splits back into exactly argv (systemd.syntax(7) quoting).

    Each word is double-quoted with C escapes; ``%`` (specifiers) and ``$`` (variable expansion) are doubled.
    """
    words = []
    for arg in argv:
        out = []
        for ch in arg:
            if ch in _SYSTEMD_ESCAPES:
                out.append(_SYSTEMD_ESCAPES[ch])
            elif ord(ch) < 32 or ord(ch) == 127:
                out.append("\\x%02x" % ord(ch))
            else:
                out.append(ch)
        words.append('"%s"' % "".join(out))
    return " ".join(words)


def environment_file(env):
    """A systemd EnvironmentFile body for env (values double-quoted, escaped), sorted for stable hashing."""
    lines = []
    for key in sorted(env):
        if not key or not (key[0].isalpha() or key[0] == "_") or not all(c.isalnum() or c == "_" for c in key):
            raise ValueError("env: %r is not a valid environment variable name (letters, digits, _)" % key)
        value = str(env[key])
        if "\n" in value or "\r" in value:
            raise ValueError("env: the value of %s contains a line break, which an EnvironmentFile cannot hold" % key)
        value = value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$").replace("`", "\\`")
        lines.append('%s="%s"\n' % (key, value))
    return "".join(lines)


SYSTEMCTL_TIMEOUT = 120.0


def systemctl(*args):
    """systemctl, bounded (a hung D-Bus or a stop that never ends must not hang the play): rc 124 on timeout."""
    try:
        p = subprocess.run(["systemctl"] + list(args), capture_output=True, text=True, check=False,
                           timeout=SYSTEMCTL_TIMEOUT)
    except subprocess.TimeoutExpired:
        return 124, "", "systemctl %s did not return within %d s" % (" ".join(args), SYSTEMCTL_TIMEOUT)
    return p.returncode, p.stdout, p.stderr


def unit_show(unit):
    """Selected properties of a unit as a dict (strings)."""
    props = ("MainPID", "ExecMainPID", "ActiveState", "SubState", "Result", "ExecMainCode", "ExecMainStatus",
             "LoadState", "NRestarts")
    rc, out, err = systemctl("show", unit, *["--property=%s" % p for p in props])
    info = {}
    for line in out.splitlines():
        key, _sep, value = line.partition("=")
        info[key] = value
    info["_rc"] = rc
    info["_err"] = err.strip()
    return info


def systemd_start(unit, log_path, restart=True, wait=15.0):
    """(Re)start the unit with a launch marker in its log; return (pid, launch_id, offset, error). A running unit is
    stopped first and the marker written after it has gone: a process logs while it stops (its shutdown, or a rank's
    error when the group's other ranks go at the same time), and those words are the old launch's, never the new one's
    (with the marker before ``systemctl restart`` they came after it, and a relaunch read the old process's Gloo error
    as its own failure)."""
    systemctl("daemon-reload")
    if restart:
        rc, _out, err = systemctl("stop", unit)
        if rc != 0:
            return None, None, None, "systemctl stop %s failed: %s" % (unit, err.strip())
    logf, launch_id, offset = _open_log_with_marker(log_path, " (systemd %s)" % unit)
    logf.close()
    systemctl("reset-failed", unit)
    rc, _out, err = systemctl("start", unit)
    if rc != 0:
        info = unit_show(unit)
        if info.get("LoadState") == "not-found":
            return None, launch_id, offset, "unit %s is not installed (role sglang_server installs it)" % unit
        pid = int(info.get("ExecMainPID") or 0)
        if pid:
            return pid, launch_id, offset, None   # it ran and exited: the log says why
        return None, launch_id, offset, "systemctl start %s failed: %s (Result=%s, ExecMainStatus=%s)" % (
            unit, err.strip(), info.get("Result"), info.get("ExecMainStatus"))
    end = time.time() + wait
    while True:
        info = unit_show(unit)
        pid = int(info.get("MainPID") or 0) or int(info.get("ExecMainPID") or 0)
        if pid:
            return pid, launch_id, offset, None
        if info.get("ActiveState") == "failed" or time.time() > end:
            status = info.get("ExecMainStatus")
            why = " (203 = the interpreter could not be executed)" if status == "203" else ""
            return None, launch_id, offset, "unit %s did not start: Result=%s ExecMainStatus=%s%s" % (
                unit, info.get("Result"), status, why)
        time.sleep(0.1)


# systemd's exit status 226/NAMESPACE: it could not set up the unit's mount namespace, before SGLang ran at all.
# Its journal line (systemd 252, Debian 12): "<unit>: Failed to set up mount namespacing: <path>: <error>".
_NAMESPACING = re.compile(r"Failed to set up \w+ namespacing")
NAMESPACE_HINT = (
    "The unit's hardening (NoNewPrivileges, ProtectSystem, ProtectHome, PrivateTmp) needs a mount namespace. A Proxmox "
    "container without the nesting feature refuses one (its AppArmor profile denies the mounts; systemd says "
    "'Permission denied'): on the node, `pct set <vmid> --features nesting=1` and restart the container (role "
    "pve_container: nesting=1 in pve_container_options.features), or set sglang_server_unit_hardening: false. "
    "Another path in systemd's words is the unit's own (a drop-in naming a path that does not exist).")


NAMESPACING = _NAMESPACING   # what unit_journal waits for after status 226


def exec_failure(out, exec_main_status, executable, journal=""):
    """systemd's exit status of a failed start added to the failure; when the launch wrote no output, status
    203/EXEC (the interpreter could not be executed) and 226/NAMESPACE (the unit's sandbox could not be set up: systemd's
    own line from ``journal``, the unit's journal, is quoted) are named as such. Returns ``out``, changed in place."""
    status = exec_main_status or ""
    if status.isdigit() and out.get("failure") is not None:
        out["failure"]["exit_code"] = int(status)
        if status == "203" and out.get("stale"):
            out["failure"].update(
                message="systemd could not execute %s (status 203/EXEC): not an executable" % executable,
                hint="Check python= (the SGLang venv's interpreter, role sglang_venv) exists and is executable.")
        elif status == "226" and out.get("stale"):
            said = [line.strip() for line in (journal or "").splitlines() if _NAMESPACING.search(line)]
            out["failure"].update(
                message="systemd could not set up the unit's sandbox (status 226/NAMESPACE), so SGLang never ran%s"
                        % ((": " + said[-1]) if said else ""),
                hint=NAMESPACE_HINT)
    return out


def unit_journal(unit, lines=20, want=None, wait=5.0, sleep=time.sleep, clock=time.time):
    """The unit's last journal lines (systemd's own words on a failed start), bounded; '' when journalctl fails.
    ``want`` (a compiled pattern): journald stores a line a moment after systemd wrote it (later on a loaded host), so
    the journal is read again for up to ``wait`` seconds until a line matches."""
    end = clock() + wait
    while True:
        try:
            p = subprocess.run(["journalctl", "-u", unit, "-n", str(lines), "--no-pager", "-o", "cat"],
                               capture_output=True, text=True, check=False, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return ""
        text = p.stdout if p.returncode == 0 else ""
        if want is None or want.search(text) or clock() >= end:
            return text
        sleep(0.25)
