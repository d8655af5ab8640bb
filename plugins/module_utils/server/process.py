# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Start SGLang and act on its processes: the launch (a detached process whose output is appended to
its log after a marker line, the offset recorded so an older launch's error is never this one's), the
process tree, the port's owner, the launch record and the decisions of the sglang_server module.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import hashlib
import hmac
import json
import os
import signal
import socket
import subprocess
import time
import uuid

from ..host import write_json, write_private
from http.client import HTTPConnection
from http.client import HTTPException


LOG_TAIL_LINES = 40


def secret_digest(secrets, salt):
    """HMAC-SHA256 of the secret values under a per-target salt: tells that a secret changed without being a
    hash of the secret itself (a short key cannot be guessed from a returned or stored digest without the salt)."""
    return hmac.new(salt, json.dumps(sorted((secrets or {}).items())).encode("utf-8"), hashlib.sha256).hexdigest()


def load_salt(path):
    """The target's salt for secret_digest: 32 random bytes in a root-only 0600 file, made once."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as fh:
            salt = fh.read()
        if len(salt) >= 32:
            return salt
    except (IOError, OSError):
        pass
    salt = os.urandom(32)
    write_private(path, salt)
    return salt


def config_hash(argv, env, revision=None, secrets_digest=""):
    """Hash of what defines a launch: argv, the non-secret environment, model revision, and the digest of the
    secrets (never their values)."""
    h = hashlib.sha256()
    h.update(json.dumps({"argv": list(argv), "env": sorted((env or {}).items()), "revision": revision or "",
                         "secrets": secrets_digest or ""}, sort_keys=True).encode("utf-8"))
    return h.hexdigest()


def write_state(path, state):
    """The launch record (0600, atomic, never through a link)."""
    write_json(path, state, mode=0o600)


def pid_alive(pid):
    if not pid:
        return False
    try:
        os.kill(int(pid), 0)
    except OSError as exc:
        return exc.errno == errno.EPERM
    # a zombie is not alive
    try:
        with open("/proc/%d/stat" % int(pid)) as fh:
            return fh.read().split(") ", 1)[1][:1] != "Z"
    except (IOError, OSError, IndexError):
        return True


def _ppid(pid):
    try:
        with open("/proc/%d/stat" % int(pid)) as fh:
            return int(fh.read().rsplit(") ", 1)[1].split()[1])
    except (IOError, OSError, IndexError, ValueError):
        return 0


def owned_by(pid, root_pid):
    """True when ``pid`` is ``root_pid`` or one of its descendants (SGLang's HTTP server may be a child)."""
    if not pid or not root_pid:
        return False
    pid, root_pid = int(pid), int(root_pid)
    for _hop in range(64):
        if pid == root_pid:
            return True
        if pid <= 1:
            return False
        pid = _ppid(pid)
    return False


def pid_cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % int(pid), "rb") as fh:
            return [a.decode("utf-8", "replace") for a in fh.read().split(b"\0") if a]
    except (IOError, OSError):
        return []


def _listening_inodes(port):
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as fh:
                next(fh)
                for line in fh:
                    parts = line.split()
                    if len(parts) > 9 and parts[3] == "0A" and int(parts[1].rsplit(":", 1)[1], 16) == port:
                        inodes.add(parts[9])
        except (IOError, OSError, StopIteration):
            continue
    return inodes


def port_owner(host, port):
    """None if nothing listens on host:port, else {"pid": pid or None, "cmdline": [...]}"""
    inodes = _listening_inodes(int(port))
    if not inodes:
        # not in /proc (other namespace?): fall back to a connect probe
        try:
            s = socket.create_connection((host if host not in ("0.0.0.0", "::") else "127.0.0.1", int(port)), 0.5)
            s.close()
            return {"pid": None, "cmdline": []}
        except (OSError, socket.error):
            return None
    wanted = set("socket:[%s]" % i for i in inodes)
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            for fd in os.listdir("/proc/%s/fd" % d):
                try:
                    if os.readlink("/proc/%s/fd/%s" % (d, fd)) in wanted:
                        return {"pid": int(d), "cmdline": pid_cmdline(d)}
                except OSError:
                    continue
        except OSError:
            continue
    return {"pid": None, "cmdline": []}


def http_get(url, timeout=2.0, api_key=None):
    """GET http://host:port/path; (status, body bytes) or (None, error text). Loopback HTTP only."""
    if not url.startswith("http://"):
        return None, "only http:// URLs are probed: %s" % url
    hostport, _sep, path = url[len("http://"):].partition("/")
    host, _sep, port = hostport.rpartition(":")
    headers = {"Authorization": "Bearer %s" % api_key} if api_key else {}
    conn = HTTPConnection(host, int(port), timeout=timeout)
    try:
        conn.request("GET", "/" + path, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read(1 << 20)
    except (HTTPException, socket.error, socket.timeout, OSError, ValueError) as exc:
        return None, str(exc)
    finally:
        conn.close()


def _open_log_with_marker(log_path, note=""):
    """Open the log for appending, write this launch's marker; return (file, launch_id, offset after it)."""
    launch_id = uuid.uuid4().hex[:12]
    d = os.path.dirname(log_path)
    if d and not os.path.isdir(d):
        os.makedirs(d, 0o750)
    # never through a symlink: a link planted in the log directory must not make root append to another file
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o640)
    logf = os.fdopen(fd, "ab")
    logf.write(("# gpuserve launch %s at %s%s\n" % (launch_id, time.strftime("%Y-%m-%d %H:%M:%S"), note)).encode())
    logf.flush()
    return logf, launch_id, logf.tell()


def launch(argv, env, log_path, cwd=None):
    """Append a launch marker to the log, start argv detached; return (proc, launch_id, offset, error)."""
    logf, launch_id, offset = _open_log_with_marker(log_path)
    try:
        full_env = dict(os.environ)
        full_env.update(env or {})
        try:
            proc = subprocess.Popen(argv, stdin=open(os.devnull, "rb"), stdout=logf, stderr=subprocess.STDOUT,
                                    env=full_env, cwd=cwd or "/", close_fds=True, start_new_session=True)
        except (OSError, ValueError) as exc:
            return None, launch_id, offset, "could not execute %s: %s" % (argv[0], exc)
    finally:
        logf.close()
    return proc, launch_id, offset, None


def stop(pid, timeout=30.0):
    """SIGTERM the launch's process group, then SIGKILL; True if something was stopped."""
    if not pid_alive(pid):
        return False
    pid = int(pid)
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(os.getpgid(pid), sig)
        except OSError:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        end = time.time() + wait
        while time.time() < end:
            try:
                os.waitpid(pid, os.WNOHANG)
            except OSError:
                pass
            if not pid_alive(pid):
                return True
            time.sleep(0.05)
    return not pid_alive(pid)


# ---- the decisions of the sglang_server module, as pure functions (the module does the side effects)

def prev_port(prev):
    """The --port of the previous launch's argv (as a one-element list), for a port owner we cannot name."""
    argv = (prev or {}).get("argv") or []
    return [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--port"][:1]


def keep_running(state, running, prev_hash, wanted_hash):
    """Whether a start may end at a health check: state started, a running server launched with this very
    configuration (its hash). Anything else launches (or in check mode: would)."""
    return state == "started" and running and bool(prev_hash) and prev_hash == wanted_hash


def port_conflict(owner, running, cur_pid, prev, port, owned):
    """The process holding host:port that a launch would collide with, or None. Our own running server may hold
    it: ``owned(owner_pid, cur_pid)`` says whether owner_pid is it (or its child); an owner we cannot name counts as
    ours when the previous launch used this port. Checked before anything is stopped."""
    if owner is None:
        return None
    if running and (owned(owner["pid"], cur_pid) or (owner["pid"] is None and str(port) in prev_port(prev))):
        return None
    return owner


def port_in_use_failure(host, port, owner, running):
    """The failure record of a port held by another process (nothing was launched)."""
    who = "pid %s (%s)" % (owner["pid"], " ".join(owner.get("cmdline") or [])[:200]) if owner.get("pid") \
        else "another process"
    return {"kind": "port_in_use", "rank": None, "phase": "args", "traceback": "",
            "message": "port %d on %s is already in use by %s" % (port, host, who),
            "hint": "Stop %s or set another port; nothing was launched%s." % (
                who, " and the running server was left serving" if running else "")}


def plan_vs_actual(planned, info, tolerance):
    """The planned KV tokens next to what /server_info reports: the record, and a warning text when they differ
    by more than ``tolerance`` (relative), naming the likely causes. (None, None) without a plan or an answer."""
    if planned is None or not info:
        return None, None
    actual = info.get("max_total_num_tokens")
    ratio = round(float(actual) / planned, 4) if actual and planned > 0 else None
    within = ratio is not None and abs(ratio - 1.0) <= tolerance
    record = {"predicted_max_total_num_tokens": planned, "actual_max_total_num_tokens": actual, "ratio": ratio,
              "tolerance": tolerance, "within_tolerance": within}
    if within:
        return record, None
    cap = info.get("max_total_tokens")
    if cap:
        # --max-total-tokens sized the pool on purpose: the pool is the cap (or less, when memory holds less)
        cause = ("--max-total-tokens=%s caps the pool on purpose%s: plan with the same cap (the server's args), or "
                 "drop the cap for a pool sized from memory" % (
                     cap, "" if actual == cap else " and memory held only %s" % actual))
    else:
        cause = ("most often the free memory after CUDA/NCCL init (measure it: playbooks/diagnose.yml replays the "
                 "launch's logged numbers) or a checkpoint that is not the model its config.json describes")
    return record, ("planned %s KV tokens, SGLang reports %s (ratio %s, beyond the %.0f %% tolerance): the plan's "
                    "inputs differ from this launch - %s" % (planned, actual, ratio, 100 * tolerance, cause))


def failure_message(out, launch_id, ready_timeout):
    """The one-line error of a launch that did not become ready (timed out, or failed with its facts)."""
    if out["status"] == "timeout":
        return "SGLang did not become ready within %ss (last phase: %s); stopped it" % (ready_timeout, out.get("phase"))
    f = out.get("failure") or {}
    msg = "SGLang failed to start: %s in phase %s: %s\nHint: %s" % (
        f.get("kind"), f.get("phase"), f.get("message"), f.get("hint"))
    if out.get("stale"):
        msg = "no output from this launch (launch %s): %s" % (launch_id, msg)
    return msg


def write_secret_config(path, text, gid):
    """SGLang's --config file with the key (0640 root:<gid>, or 0600), or no file when there is no key."""
    if text is None:
        if os.path.lexists(path):
            os.unlink(path)
        return
    d = os.path.dirname(path)
    if d and not os.path.isdir(d):
        os.makedirs(d, 0o750)
    write_private(path, text, 0o640 if gid is not None else 0o600, gid)
