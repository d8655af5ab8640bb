# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Watch one launch: poll its log from the launch's offset, the process and the health endpoint, and
return as soon as any of them decides the outcome; ``server_info`` reads what the running server resolved.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import time

from ..host import write_json
from ..logs import DECISIVE, ROTATED, LogParser, launch_segments, open_copy, redact
from .process import LOG_TAIL_LINES, http_get, pid_alive


class _Tail(object):
    """Incrementally read a log from an offset into a LogParser, keeping a bounded tail. It follows logrotate's
    copytruncate: a launch whose start was copied away before the tail began is read from that copy first; a rotation
    while it reads is seen by the log's end before the tail's position, or by the bytes just before it no longer
    being the ones it read (a truncated log that grew again), and the rest of the copy is read before the log."""

    GUARD = 64      # bytes before the position remembered, to see a truncated log that grew past it again

    def __init__(self, path, offset):
        self.path = path
        self.offset = offset
        self.parser = LogParser()
        self.partial = b""
        self.tail = []
        self.seen = b""
        self.copies = []            # [(copy, offset)] to read first, oldest first
        try:
            segments, how = launch_segments(path, offset)
        except (IOError, OSError):
            return
        if how == "rotated":
            self.copies = [(name, start) for name, start, _end in segments if name != path]
            self.offset = 0

    def _read_copies(self):
        """The next bytes of the copies the launch began in; a copy is left once the launch is ready (the rest of it
        is what the server logged while it served), or at its end."""
        while self.copies:
            name, pos = self.copies[0]
            if self.parser.ready:
                self.copies.pop(0)
                self.partial = b""          # a piece of a serving line of the copy left
                continue
            with open_copy(name) as old:
                old.seek(pos)
                data = old.read(1 << 20)
            if data:
                self.copies[0] = (name, pos + len(data))
                return data
            self.copies.pop(0)
        return b""

    def _read(self):
        data = self._read_copies()
        if data:
            return data, True
        with open(self.path, "rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            data = b""
            if size < self.offset or (self.seen and self._moved(fh)):
                data = self._copied_away()      # rotated (copied away, then truncated), replaced or truncated
                self.offset = 0
                self.seen = b""
            fh.seek(self.offset)
            more = fh.read(8 << 20)
        self.offset += len(more)
        self.seen = (self.seen + more)[-self.GUARD:]
        return data + more, False

    def _moved(self, fh):
        fh.seek(self.offset - len(self.seen))
        return fh.read(len(self.seen)) != self.seen

    def poll(self):
        """Read what is new (the copies the launch began in first, all of them in this call); False when nothing
        was."""
        read = False
        while True:
            try:
                data, from_copy = self._read()
            except (IOError, OSError, EOFError):
                return read
            if not data:
                return read
            read = True
            self._feed(data, from_copy)
            if not from_copy:
                return True

    def _feed(self, data, from_copy=False):
        data = self.partial + data
        lines = data.split(b"\n")
        self.partial = lines.pop()
        for raw in lines:
            line = raw.decode("utf-8", "replace")
            self.parser.feed(line)
            self.tail.append(redact(line.rstrip("\r"))[-400:])
            if from_copy and self.parser.ready:     # the rest of this copy is what the server logged serving
                self.partial = b""
                self.copies.pop(0)
                break
        if len(self.tail) > LOG_TAIL_LINES:
            del self.tail[:-LOG_TAIL_LINES]

    def _copied_away(self):
        """What logrotate's copytruncate copied to <log>.1 after the part already read (the copy holds the log as it
        was, so the same offset); b"" when there is no such copy (the log was replaced or truncated)."""
        try:
            with open(self.path + ROTATED, "rb") as old:
                old.seek(0, 2)
                if old.tell() < self.offset:
                    return b""
                if self.seen:
                    old.seek(self.offset - len(self.seen))
                    if old.read(len(self.seen)) != self.seen:
                        return b""          # not the copy of what was read
                old.seek(self.offset)
                return old.read(8 << 20)
        except (IOError, OSError):
            return b""

    def flush(self):
        if self.partial:
            line = self.partial.decode("utf-8", "replace")
            self.parser.feed(line)
            self.tail.append(redact(line)[-400:])
            self.partial = b""
        return self.parser.result()


_PROGRESS_FACTS = (("weights_gb", "weights %.2f GiB"), ("avail_mem_after_load_gb", "%.2f GiB free after load"),
                   ("max_total_num_tokens", "%d KV tokens"), ("cuda_graph_mem_gb", "CUDA graphs %.2f GiB"))


def progress_message(phase, facts, elapsed, launch=None):
    """One line for an operator waiting on a start-up: which launch (``launch``: "new launch <id>", "restored launch
    <id> (...)"), the phase reached and the numbers logged so far."""
    # abs() of what rounds to zero: SGLang logs the tiny model's weights as "mem usage=-0.00 GB"
    said = [fmt % (facts[key] if round(facts[key], 2) else abs(facts[key])) for key, fmt in _PROGRESS_FACTS
            if isinstance(facts.get(key), (int, float))]
    return "%sphase %s after %d s%s" % (launch + ": " if launch else "", phase, int(elapsed),
                                        (": " + ", ".join(said)) if said else "")


def write_progress(path, message, state="starting"):
    """The progress file job_progress prints (root's state directory; written beside and renamed)."""
    if path:
        write_json(path, {"state": state, "message": message, "updated": time.time()})


def watch(proc_or_pid, log_path, offset, base_url, health="/health_generate", timeout=600.0, poll=0.1,
          api_key=None, grace=3.0, progress_file=None, log_ready=True, launch=None):
    """Follow one launch until ready, failed or timeout; returns a result dict (see the module's RETURN). With
    ``progress_file``, the phase reached and the numbers logged so far are written there as they change (and at
    least every 30 s), for a poller to print. ``log_ready=False`` is for a rank other than 0 of a multi-node
    server: SGLang 0.5.9 logs no "fired up" there (its engine starts a health server once the schedulers are up, and
    logs only that it started), so health is asked from the start. ``launch`` names the launch in each progress
    line (the first is written at once: what the file held before is another launch's)."""
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
    if progress_file:
        write_progress(progress_file, progress_message("starting", {}, 0, launch))
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
                write_progress(progress_file, progress_message(res.phase, res.facts, now - t0, launch))
                said, said_at = key, now
        time.sleep(poll)
    parsed = tail.flush()
    elapsed = time.time() - t0
    if progress_file:
        write_progress(progress_file, progress_message(parsed["phase"], parsed["facts"], elapsed, launch),
                       "ready" if health_ok else "ended")
    return _outcome(parsed, tail, elapsed, pid, rc, health_ok, exited_at)


def _outcome(parsed, tail, elapsed, pid, rc, health_ok, exited_at):
    """watch()'s result: ready, failed (with a failure even when the log said nothing decisive) or timeout."""
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
        if f["kind"] in DECISIVE and not f["after_ready"]:
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


def launch_facts(state):
    """The numbers a launch logged (parsed from its log, from the launch's offset on: the first 8 MiB, where
    start-up is), for a server found running; {} when the state names no readable log."""
    if not state.get("log_path"):
        return {}
    tail = _Tail(state["log_path"], int(state.get("log_offset") or 0))
    return tail.flush()["facts"] if tail.poll() else {}
