# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The handlers the rule tables (``rules.PROGRESS_RULES``, ``rules.EVENT_RULES``) name: one method per
kind of line, mixed into ``LogParser``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from .kinds import PREFIXED
from .rules import (MESSAGE_MAX, _HUB_ACCESS, _PHASE_INDEX, _RE_ARGPARSE, _RE_BIND, _RE_DEAD, _RE_DEVICE,
                    _RE_DIST_ADDR, _RE_EXC, _RE_EXITCODE, _RE_GRAPH_BS, _RE_GRAPH_END, _RE_KV, _RE_KV_OOM,
                    _RE_KV_SIZES, _RE_KV_TOKENS, _RE_LOAD_BEGIN, _RE_LOAD_END, _RE_MAMBA, _RE_MFS, _RE_PORT,
                    _RE_PROFILED, _RE_SCHED, _RE_TP, _RE_VERSION, _SPEC_WORDS, _Traceback)


class Handlers(object):
    """The rule tables' handlers (a mix-in of LogParser: they read and write its state)."""

    # ---- start-up progress and numbers (PROGRESS_RULES) ----
    def _on_load_weight(self, msg, rank, prefixed):
        if msg.startswith("Load weight begin"):
            key = rank or "main"
            n = self._load_begins.get(key, 0) + 1
            self._load_begins[key] = n
            if n >= 2:
                self._advance("draft")
            else:
                self._advance("load_weights")
                mm = _RE_LOAD_BEGIN.search(msg)
                if mm:
                    self._fact(rank, "avail_mem_before_load_gb", float(mm.group(1)))
        elif msg.startswith("Load weight end"):
            self._advance("memory_pool")
            mm = _RE_LOAD_END.search(msg)
            if mm and self._load_begins.get(rank or "main", 0) <= 1:
                after = float(mm.group(1))
                self._fact(rank, "avail_mem_after_load_gb", after)
                if mm.group(2) is not None:
                    self._fact(rank, "weights_gb", float(mm.group(2)))
                else:                   # 0.4.0-0.4.3: the weights are what the load took from the free memory
                    before = (self.facts_by_rank.get(rank or "main") or {}).get("avail_mem_before_load_gb")
                    if before is not None:
                        self._fact(rank, "weights_gb", round(before - after, 2))

    def _on_dist_init(self, msg, rank, prefixed):
        self._advance("dist_init")

    def _on_kv_cache(self, msg, rank, prefixed):
        self._advance("memory_pool")
        # the fields are read one by one: a release that adds one (a dtype before the count) changes nothing
        tm = _RE_KV_TOKENS.search(msg)
        sm = _RE_KV_SIZES.search(msg)
        if (tm or sm) and self._load_begins.get(rank or "main", 0) <= 1:
            if tm:
                self._fact(rank, "kv_tokens", int(tm.group(1)))
            if sm and sm.group(1) is not None:
                self._fact(rank, "k_size_gb", float(sm.group(1)))
                self._fact(rank, "v_size_gb", float(sm.group(2)))
            elif sm:
                self._fact(rank, "k_size_gb", float(sm.group(3)))
                self._fact(rank, "kv_size_gb", float(sm.group(3)))

    def _on_mamba_cache(self, msg, rank, prefixed):
        self._advance("memory_pool")
        mm = _RE_MAMBA.search(msg)
        if mm and self._load_begins.get(rank or "main", 0) <= 1:
            total = sum(float(g) for g in mm.group(2, 3, 4, 5) if g is not None)
            self._fact(rank, "mamba_cache_gb", round(total, 3))
            if mm.group(1) is not None:
                self._fact(rank, "max_mamba_cache_size", int(mm.group(1)))

    def _on_memory_pool_end(self, msg, rank, prefixed):
        self._advance("memory_pool")

    def _on_capture(self, msg, rank, prefixed):
        self._advance("draft" if "draft" in msg else "cuda_graph")
        if " end." in msg:
            mm = _RE_GRAPH_END.search(msg)
            if mm and "draft" not in msg and self._load_begins.get(rank or "main", 0) <= 1:
                self._fact(rank, "cuda_graph_mem_gb", float(mm.group(1)))
        if msg.startswith("Capture cuda graph failed"):
            # "Capture cuda graph failed: <inner>" logged as a line (the traceback follows separately)
            kind, message = self._classify(msg, (), "cuda_graph")
            self._add_failure(kind or "other", message or msg, rank, phase="cuda_graph")

    def _on_scheduler_limits(self, msg, rank, prefixed):
        self._advance("http")
        mm = _RE_SCHED.search(msg)
        if mm:
            self._fact(rank, "max_total_num_tokens", int(mm.group(1)))
            self._fact(rank, "max_running_requests", int(mm.group(4)))
            self._fact(rank, "context_len", int(mm.group(5)))

    def _on_server_args(self, msg, rank, prefixed):
        mm = _RE_MFS.search(msg)
        if mm:
            self._fact(None, "mem_fraction_static", float(mm.group(1)))
        mm = _RE_TP.search(msg)
        if mm:
            self._fact(None, "tp_size", int(mm.group(1)))
        mm = _RE_PORT.search(msg)
        if mm:
            self.port = int(mm.group(1))
        mm = _RE_DIST_ADDR.search(msg)
        if mm:
            self.dist_init_addr = mm.group(1)
        mm = _RE_GRAPH_BS.search(msg)
        if mm:
            self.cuda_graph_max_bs = int(mm.group(1))
        if any(w in msg for w in _SPEC_WORDS):
            self.spec = True
        mm = _RE_VERSION.search(msg)
        if mm:
            self._fact(None, "sglang_version", mm.group(1))
        mm = _RE_DEVICE.search(msg)
        if mm:
            self._fact(None, "device", mm.group(1))

    def _on_ready(self, msg, rank, prefixed):
        self._advance("ready")
        self.ready = True
        self.ready_lineno = self.lines

    def _on_http(self, msg, rank, prefixed):
        self._advance("http")

    def _on_uvicorn(self, msg, rank, prefixed):
        self._advance("warmup")

    def _on_traffic(self, msg, rank, prefixed):
        if not self.ready:
            self._advance("warmup")

    def _on_nothing(self, msg, rank, prefixed):
        return None

    # ---- failures (EVENT_RULES) ----
    def _on_traceback(self, msg, rank, prefixed):
        self._close_tb()
        self._tb = _Traceback(rank or self._last_rank, self.phase, self.lines)
        head = msg.split("Traceback (most recent call last)")[0]
        self._tb.text.append(msg[:300])
        if "warmup error" in head:
            if _PHASE_INDEX[self.phase] < _PHASE_INDEX["warmup"]:
                self._tb.phase = "warmup"
            if "Initialization failed" in head:
                self._on_init_failed(head, rank, prefixed)

    def _on_sigterm(self, msg, rank, prefixed):
        self.stop_requested = True

    def _on_graceful_exit(self, msg, rank, prefixed):
        # SGLang 0.5.9 then ends its own process tree with SIGKILL: exit status 137, which systemd records as
        # Result=signal, status 9 - the same end as a failed start; this line says it was asked to stop
        self.stopped = True

    def _on_sigquit(self, msg, rank, prefixed):
        self.died = True
        if self.ready:
            self.fatal_after_ready = True

    def _on_scheduler_dead(self, msg, rank, prefixed):
        self.died = True
        if self.ready:
            self.fatal_after_ready = True
        mm = _RE_DEAD.search(msg)
        code = mm.group(2) if mm else None
        if code is not None:
            self.exit_code = int(code)
        self._add_failure("other", msg, rank)

    def _on_exit_code(self, msg, rank, prefixed):
        mm = _RE_EXITCODE.match(msg)
        if mm:
            self.exit_code = int(mm.group(1))

    def _on_init_failed(self, msg, rank, prefixed):
        self.died = True
        if "warmup" in msg:
            # http_server.py's "Initialization failed. warmup error: <traceback>": the server loaded and listened,
            # its own warm-up request failed; the traceback's exception that follows is the message
            self._advance("warmup")
            self._add_failure("warmup_failed", msg, rank, phase="warmup", provisional=True)
            return
        self._add_failure("other", msg, rank)

    def _on_import_warning(self, msg, rank, prefixed):
        self.import_evidence = msg

    def _on_profiled(self, msg, rank, prefixed):
        pm = _RE_PROFILED.search(msg)
        if not pm:
            return False
        self._fact(rank, "max_total_tokens_requested", int(pm.group(1)))
        profiled = int(pm.group(2))
        if self.phase != "draft":       # a draft model's own profile says nothing about the target's pool
            self._fact(rank, "profiled_max_total_num_tokens", profiled)
            if profiled <= 0:
                # the pool's error follows (0.5.9's "Not enough memory ... Current value"): that line is the message
                # when it comes; this one stands for it in a log cut here
                self._add_failure("kv_pool_oom", msg, rank or self._last_rank, phase="memory_pool", provisional=True)
                self.died = True
        return None

    def _on_shards(self, msg, rank, prefixed):
        self._advance("load_weights")          # the shard progress bar: the weights are loading

    def _on_hub_access(self, msg, rank, prefixed):
        for mk in _HUB_ACCESS:
            if mk in msg and (mk != "Access to model" or "is restricted" in msg):
                self._add_failure("model_not_found", msg, rank or self._last_rank)
                return None
        return False

    def _continuation(self, msg, rank, prefixed):
        """A stray-wrapped continuation of a key line (a terminal or a paste broke it): read joined to the line
        before it."""
        if not prefixed and self._prev and ("Not enough memory" in self._prev or "KV Cache is allocated" in self._prev
                                            or "Load weight end" in self._prev or "max_total_num_tokens" in self._prev):
            joined = self._prev + " " + msg.strip()
            joined2 = self._prev + msg.strip()
            for j in (joined2, joined):
                if _RE_KV_OOM.search(j) and _RE_KV_OOM.search(j).group(1):
                    self._kv_oom_line(j, rank)
                    return
            for j in (joined, joined2):
                if _RE_LOAD_END.search(j) or _RE_KV.search(j) or _RE_SCHED.search(j):
                    self._line(j, rank, True)
                    return

    def _kv_oom_line(self, msg, rank):
        mm = _RE_KV_OOM.search(msg)
        if mm and mm.group(1):
            self._fact(rank, "mem_fraction_static", float(mm.group(1)))
            # a value read from the error line is authoritative
            self.facts["mem_fraction_static"] = float(mm.group(1))
        self.died = True
        last = self.failures[-1] if self.failures else None
        if last is not None and last["kind"] == "kv_pool_oom" and "Current value" not in last["message"]:
            # the same error, completed by a wrapped continuation line
            last["message"] = (mm.group(0) if mm else msg)[:MESSAGE_MAX]
            return
        self._add_failure("kv_pool_oom", mm.group(0) if mm else msg, rank or self._last_rank,
                          phase="memory_pool" if _PHASE_INDEX[self.phase] < _PHASE_INDEX["memory_pool"] else self.phase)

    def _maybe_error_line(self, msg, rank, prefixed):
        if "Not enough memory" in msg:
            if _RE_KV_OOM.search(msg):
                self._kv_oom_line(msg, rank)
                return
        em = _RE_EXC.match(msg)
        if "address already in use" in msg or "Errno 98" in msg:
            bm = _RE_BIND.search(msg)
            if bm:
                self.port = int(bm.group(2))
            self._add_failure("port_in_use", msg, rank, phase="http")
            return
        am = _RE_ARGPARSE.search(msg)
        if am:
            self._add_failure("bad_argument", msg, rank, phase="args")
            self.died = True
            return
        if em and not prefixed:
            # a bare exception line (pasted alone, or after a lost "Traceback" header)
            kind, message = self._classify(msg, (), self.phase)
            if kind:
                self._add_failure(kind, message, rank or self._last_rank)
                self.died = True
            elif em.group(1).endswith(("Error", "Exception")):
                self._add_failure("other", msg, rank or self._last_rank)
            return
        if prefixed:
            kind, message = self._classify(msg, (), self.phase)
            if kind in PREFIXED:
                self._add_failure(kind, message, rank)
            elif "The memory capacity is unbalanced" in msg:
                self._add_failure("other", msg, rank, phase="dist_init")
            elif ("Prefill out of memory" in msg or "Decode out of memory" in msg
                  or "alloc_req_slots runs out of memory" in msg):
                self._add_failure("other", msg, rank)
        elif "Killed" in msg and len(msg) < 80:
            self.died = True
            self.exit_code = self.exit_code if self.exit_code is not None else -9

    # -- the answer ----------------------------------------------------------------------------
