# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Start SGLang, watch this launch only, and report structured facts (standard library only).

The launch is a detached process (own session, stdin from /dev/null, stdout+stderr appended to the
log file).  Before launching, a marker line with a launch id is appended to the log and its byte
offset recorded: everything the watcher reads comes after that offset, so an older launch's error
is never reported as this one's.  The watcher polls the log, the process and the health endpoint
every ``poll`` seconds and returns as soon as any of them decides the outcome.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import hashlib
import hmac
import json
import os
import re
import signal
import socket
import subprocess
import time
import uuid

from http.client import HTTPConnection, HTTPException

from .files import write_json, write_private
from .sglang_log import LogParser, redact

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


class _Tail(object):
    """Incrementally read a log from an offset into a LogParser, keeping a bounded tail."""

    def __init__(self, path, offset):
        self.path = path
        self.offset = offset
        self.parser = LogParser()
        self.partial = b""
        self.tail = []

    def poll(self):
        try:
            with open(self.path, "rb") as fh:
                fh.seek(0, 2)
                size = fh.tell()
                if size < self.offset:      # replaced or truncated under us: start over
                    self.offset = 0
                fh.seek(self.offset)
                data = fh.read(8 << 20)
                self.offset += len(data)
        except (IOError, OSError):
            return False
        if not data:
            return False
        data = self.partial + data
        lines = data.split(b"\n")
        self.partial = lines.pop()
        for raw in lines:
            line = raw.decode("utf-8", "replace")
            self.parser.feed(line)
            self.tail.append(redact(line.rstrip("\r"))[-400:])
        if len(self.tail) > LOG_TAIL_LINES:
            del self.tail[:-LOG_TAIL_LINES]
        return True

    def flush(self):
        if self.partial:
            line = self.partial.decode("utf-8", "replace")
            self.parser.feed(line)
            self.tail.append(redact(line)[-400:])
            self.partial = b""
        return self.parser.result()


_PROGRESS_FACTS = (("weights_gb", "weights %.2f GiB"), ("avail_mem_after_load_gb", "%.2f GiB free after load"),
                   ("max_total_num_tokens", "%d KV tokens"), ("cuda_graph_mem_gb", "CUDA graphs %.2f GiB"))


def progress_message(phase, facts, elapsed):
    """One line for an operator waiting on a start-up: the phase reached and the numbers logged so far."""
    said = [fmt % facts[key] for key, fmt in _PROGRESS_FACTS if isinstance(facts.get(key), (int, float))]
    return "phase %s after %d s%s" % (phase, int(elapsed), (": " + ", ".join(said)) if said else "")


def write_progress(path, message, state="starting"):
    """The progress file job_progress prints (root's state directory; written beside and renamed)."""
    if path:
        write_json(path, {"state": state, "message": message, "updated": time.time()})


def watch(proc_or_pid, log_path, offset, base_url, health="/health_generate", timeout=600.0, poll=0.1,
          api_key=None, grace=3.0, progress_file=None, log_ready=True):
    """Follow one launch until ready, failed or timeout; returns a result dict (see the module's RETURN). With
    ``progress_file``, the phase reached and the numbers logged so far are written there as they change (and at
    least every 30 s), for a poller to print. ``log_ready=False`` is for a rank other than 0 of a multi-node
    server: SGLang 0.5.9 logs no readiness there (its health server runs at log level warning), so health is asked
    from the start."""
    t0 = time.time()
    said = (None, None)
    said_at = 0.0
    tail = _Tail(log_path, offset)
    proc = proc_or_pid if hasattr(proc_or_pid, "poll") else None
    pid = proc.pid if proc is not None else int(proc_or_pid)
    exited_at = None
    fatal_at = None
    rc = None
    last_probe = 0.0
    health_ok = False
    while True:
        tail.poll()
        now = time.time()
        res = tail.parser  # live view
        if proc is not None:
            rc = proc.poll()
            alive = rc is None
        else:
            alive = pid_alive(pid)
        if not alive and exited_at is None:
            exited_at = now
        if res.failures and not res.ready and fatal_at is None and (res.died or _decisive(res)):
            fatal_at = now
        if exited_at is not None:
            tail.poll()
            break
        if fatal_at is not None and now - fatal_at > grace:
            break                       # logged a fatal error and did not exit in time: report anyway
        if (res.ready or not log_ready) and now - last_probe >= 0.5:
            last_probe = now
            code, _body = http_get(base_url + health, timeout=5.0, api_key=api_key)
            if code == 200:
                health_ok = True
                break
        if now - t0 > timeout:
            break
        if progress_file:
            key = (res.phase, tuple(sorted((k, v) for k, v in res.facts.items() if not isinstance(v, (list, dict)))))
            if key != said or now - said_at >= 30:
                write_progress(progress_file, progress_message(res.phase, res.facts, now - t0))
                said, said_at = key, now
        time.sleep(poll)
    parsed = tail.flush()
    elapsed = time.time() - t0
    if progress_file:
        write_progress(progress_file, progress_message(parsed["phase"], parsed["facts"], elapsed),
                       "ready" if health_ok else "ended")
    out = {
        "phase": parsed["phase"],
        "failure": parsed["failure"],
        "facts": parsed["facts"],
        "facts_by_rank": parsed["facts_by_rank"],
        "elapsed_s": round(elapsed, 3),
        "log_tail": list(tail.tail),
        "pid": pid,
        "returncode": rc,
    }
    if health_ok:
        out["status"] = "ready"
    elif exited_at is not None or parsed["outcome"] == "failed":
        out["status"] = "failed"
        out["detected_after_exit_s"] = round(time.time() - exited_at, 3) if exited_at else None
        if parsed["failure"] is None:
            out["failure"] = {
                "kind": "other", "rank": None, "phase": parsed["phase"], "traceback": "",
                "message": "the process exited with code %s before logging anything decisive" % rc,
                "hint": "Read log_tail; if it is empty the interpreter or the sglang package is missing.",
            }
        if rc is not None:
            out["failure"]["exit_code"] = rc
    else:
        out["status"] = "timeout"
    out["stale"] = tail.parser.lines == 0
    return out


def _decisive(parser):
    """A failure SGLang always dies of (so we need not wait for the exit)."""
    for f in parser.failures:
        if f["kind"] in ("kv_pool_oom", "bad_argument", "tp_mismatch") and not f["after_ready"]:
            return True
    return False


def server_info(base_url, api_key=None, facts=None):
    """What /server_info says of the running server, with the values SGLang resolved where it repeats the args: 0.5.9
    answers ``context_length`` and ``max_running_requests`` as given (null unless set); the resolved ones are the
    scheduler's ``effective_max_running_requests_per_dp`` (x dp_size) and the launch log's ``context_len`` (``facts``:
    the parsed log of this launch)."""
    code, body = http_get(base_url + "/server_info", timeout=5.0, api_key=api_key)
    if code != 200:
        return None
    try:
        info = json.loads(body.decode("utf-8"))
    except ValueError:
        return None
    keep = {}
    for key in ("max_total_num_tokens", "max_req_input_len", "mem_fraction_static", "tp_size", "context_length",
                "max_running_requests", "max_total_tokens", "chunked_prefill_size", "device", "version"):
        if key in info:
            keep[key] = info[key]
    states = info.get("internal_states") or []
    state = states[0] if states and isinstance(states[0], dict) else {}
    if state:
        keep["memory_usage"] = state.get("memory_usage")
        if "max_mamba_cache_size" in state:
            keep["max_mamba_cache_size"] = state["max_mamba_cache_size"]
    facts = facts or {}
    if keep.get("max_running_requests") is None:
        per_dp = state.get("effective_max_running_requests_per_dp")
        if isinstance(per_dp, int) and not isinstance(per_dp, bool):
            keep["max_running_requests"] = per_dp * int(info.get("dp_size") or 1)
        elif facts.get("max_running_requests") is not None:
            keep["max_running_requests"] = facts["max_running_requests"]
    if keep.get("context_length") is None and facts.get("context_len") is not None:
        keep["context_length"] = facts["context_len"]
    return keep


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
    """Append a launch marker to the unit's log, (re)start the unit; return (pid, launch_id, offset, error)."""
    logf, launch_id, offset = _open_log_with_marker(log_path, " (systemd %s)" % unit)
    logf.close()
    systemctl("daemon-reload")
    systemctl("reset-failed", unit)
    rc, _out, err = systemctl("restart" if restart else "start", unit)
    if rc != 0:
        info = unit_show(unit)
        if info.get("LoadState") == "not-found":
            return None, launch_id, offset, "unit %s is not installed (role sglang_server installs it)" % unit
        pid = int(info.get("ExecMainPID") or 0)
        if pid:
            return pid, launch_id, offset, None   # it ran and exited: the log says why
        return None, launch_id, offset, "systemctl restart %s failed: %s (Result=%s, ExecMainStatus=%s)" % (
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


def launch_facts(state):
    """The numbers a launch logged (parsed from its log, from the launch's offset on: the first 8 MiB, where
    start-up is), for a server found running; {} when the state names no readable log."""
    if not state.get("log_path"):
        return {}
    tail = _Tail(state["log_path"], int(state.get("log_offset") or 0))
    return tail.flush()["facts"] if tail.poll() else {}


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
