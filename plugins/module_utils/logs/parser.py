# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The streaming parser of an SGLang start-up log: ``feed()`` lines (or chunks), then ``result()``;
its memory does not grow with the length of the log. The handlers of the rule tables are in ``handlers``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import io
from .handlers import Handlers
from .hints import _fmt, _line_with, hint_for
from .rules import (EVENT_RULES, MESSAGE_MAX, PROGRESS_RULES, TRACEBACK_TAIL, _DRAFT_FRAMES, _GRAPH_FRAMES,
                    _HUB_ACCESS, _IMPORT_MARKERS, _KIND_PHASE, _LOAD_FRAMES, _MODEL_MARKERS, _NCCL_MARKERS,
                    _OOM_MARKERS, _PHASE_INDEX, _RE_ARCH, _RE_EXC, _RE_EXC_ANY, _RE_FRAME, _RE_KV_OOM,
                    _RE_KV_OOM_LATER, _SGL, _SOURCE_WORDS, _SPECIFICITY, _Traceback, _UVICORN_LEVEL, _infer_cut,
                    _is_rank0, _strip, _tb_has, _tb_path_has)


class LogParser(Handlers):
    """Streaming SGLang log parser: ``feed()`` lines, then ``result()``."""

    def __init__(self):
        self.phase = "args"
        self.ready = False
        self.ready_lineno = None
        self.lines = 0
        self.facts = {}
        self._fact_rank0 = {}
        self.facts_by_rank = {}
        self._load_begins = {}
        self.failures = []       # bounded list of candidate dicts (best kept)
        self._tb = None
        self._last_tb = None
        self._last_rank = None
        self._prev = ""          # previous message (for stray-wrapped lines)
        self.fatal_after_ready = False
        self.died = False
        self.stop_requested = False     # 0.5.9's "SIGTERM received ... Draining requests and shutting down..."
        self.stopped = False            # then "Gracefully exiting...": a stop, however systemd records its end
        self.exit_code = None
        self.spec = False
        self.import_evidence = None
        self.port = None
        self.dist_init_addr = None
        self.cuda_graph_max_bs = None
        self._progress = {}
        for words, name in PROGRESS_RULES:
            self._progress.setdefault(words[:1], []).append((words, getattr(self, name)))
        self._events = tuple((how, words, getattr(self, name)) for how, words, name in EVENT_RULES)

    # -- helpers -------------------------------------------------------------------------------
    def _advance(self, phase):
        if _PHASE_INDEX[phase] > _PHASE_INDEX[self.phase]:
            self.phase = phase

    def _fact(self, rank, key, value):
        per = self.facts_by_rank.setdefault(rank or "main", {})
        if key not in per:
            per[key] = value
        # several ranks print the same fact: `facts` holds rank 0's (the main process's, TP0, DP0 TP0, ...) even when
        # another rank printed first; the others stay in facts_by_rank
        first = key not in self.facts
        if first or (_is_rank0(rank) and not self._fact_rank0.get(key)):
            self.facts[key] = value
            self._fact_rank0[key] = _is_rank0(rank)

    def _add_failure(self, kind, message, rank, frames=(), tb_lines=None, phase=None, inferred=False,
                     provisional=False):
        cand = {
            "kind": kind,
            "message": (message or "")[:MESSAGE_MAX],
            "rank": rank,
            "phase": phase or self.phase,
            "traceback": list(tb_lines) if tb_lines else [],
            "frames": [f for _p, f in frames][-12:] if frames else [],
            "lineno": self.lines,
            "after_ready": self.ready,
        }
        if kind == "other" and cand["phase"] == "warmup" and any(f["kind"] == "warmup_failed" for f in self.failures):
            cand["kind"] = "warmup_failed"          # the warm-up's own exception, after its "Initialization failed"
        if inferred:
            cand["inferred"] = True
        if provisional:
            cand["provisional"] = True
        self.failures.append(cand)
        if len(self.failures) > 16:
            # keep the best and the earliest few: drop the least specific latest one
            worst = min(range(len(self.failures)),
                        key=lambda i: (_SPECIFICITY[self.failures[i]["kind"]], -self.failures[i]["lineno"]))
            del self.failures[worst]

    # -- traceback handling --------------------------------------------------------------------
    def _close_tb(self):
        tb = self._tb
        if tb is None or tb.closed:
            return
        tb.closed = True
        self._tb = None
        self._last_tb = tb
        text = "\n".join(tb.exc)
        kind, message = self._classify(text, tb.frames, tb.phase)
        inferred = False
        evidence = None
        if kind is None:
            if not tb.exc:
                # truncated mid-traceback: infer from the deepest frame that says something, else from the phase
                inferred = True
                kind, message, evidence = _infer_cut(tb, self)
            else:
                kind, message = "other", tb.exc[-1]
        phase = tb.phase
        if kind in ("kv_pool_oom",):
            phase = "memory_pool" if _PHASE_INDEX[phase] < _PHASE_INDEX["memory_pool"] else phase
        if _tb_has(tb.frames, _DRAFT_FRAMES) and _PHASE_INDEX[phase] < _PHASE_INDEX["draft"]:
            phase = "draft"
        self._add_failure(kind, message, tb.rank, tb.frames, tb.text, phase, inferred)
        if evidence is not None:
            self.failures[-1]["evidence"] = evidence

    def _classify(self, text, frames, phase):
        """Return (kind, decisive message) for an exception text + frames, or (None, None)."""
        if not text:
            return None, None
        m = _RE_KV_OOM.search(text)
        if m:
            if m.group(1):
                self.facts["mem_fraction_static"] = float(m.group(1).rstrip("."))   # from the error: authoritative
            return "kv_pool_oom", m.group(0)
        m = _RE_KV_OOM_LATER.search(text)
        if m:
            self.facts["mem_fraction_static"] = float(m.group(1))     # read from the error: authoritative
            return "kv_pool_oom", _line_with(text, "Loaded weights leave")
        if "Not enough GPU memory for hybrid" in text or "Memory pool size is too small" in text:
            return "kv_pool_oom", _line_with(text, "memory")
        if "state cache is too small to serve any requests" in text:
            # 0.5.2x: the hybrid (mamba/linear-attention) state pool leaves no request slot
            return "kv_pool_oom", _line_with(text, "too small to serve")
        if "KV" in text and ("leaves no room for the full KV pool" in text or "no memory for the KV cache" in text
                             or "no memory left for the KV cache" in text):
            # later releases' wordings of the same budget failure (0.5.2x pool_configurator: the SWA pool cap)
            return "kv_pool_oom", _line_with(text, "KV")
        for mk in _OOM_MARKERS:
            if mk in text:
                msg = _line_with(text, mk)
                if phase == "draft" or _tb_has(frames, _DRAFT_FRAMES):
                    return "cuda_oom", msg
                if "Capture cuda graph failed" in text or _tb_has(frames, _GRAPH_FRAMES) or phase == "cuda_graph":
                    return "cuda_graph_oom", msg
                if _tb_has(frames, _LOAD_FRAMES) or phase == "load_weights":
                    return "weight_load_oom", msg
                return "cuda_oom", msg
        if "address already in use" in text or "Errno 98" in text:
            return "port_in_use", _line_with(text, "address already in use")
        for mk in ("gloo/transport/tcp", "ProcessGroupGloo", "Gloo connectFullMesh failed"):
            if mk in text:     # the ranks lost each other; a graph-capture failure around it is only the wrapper
                return "nccl_error", _line_with(text, mk)
        for mk in _IMPORT_MARKERS:
            if mk in text:
                return "import_error", _line_with(text, mk)
        for mk in _MODEL_MARKERS:
            if mk in text:
                return "model_not_found", _line_with(text, mk)
        for mk in _HUB_ACCESS:
            if mk in text and ("Access to model" != mk or "is restricted" in text):
                return "model_not_found", _line_with(text, mk)
        if _RE_ARCH.search(text):
            return "unsupported_model", _line_with(text, "not supported") or _line_with(text, "SGlang")
        if "is not divisible by" in text or "must be divisible by" in text and "moe" in text.lower():
            return "tp_mismatch", _line_with(text, "divisible")
        if text.startswith("AssertionError") and text.strip() == "AssertionError" and (
                _tb_has(frames, ("__init__",)) and _tb_path_has(frames, ("/models/",))):
            return "tp_mismatch", "AssertionError in model init (a head count is not divisible by tp_size)"
        if "must be divisible by" in text or "cannot contain a colon" in text or "invalid choice" in text:
            return "bad_argument", text.splitlines()[-1]
        for mk in _NCCL_MARKERS:
            if mk in text:
                return "nccl_error", _line_with(text, mk)
        if "Capture cuda graph failed" in text:
            return "other", _line_with(text, "Capture cuda graph failed")
        return None, None

    # -- main entry ----------------------------------------------------------------------------
    def feed_text(self, text):
        for line in io.StringIO(text, newline=None):
            self.feed(line)
        return self

    def feed(self, raw):
        self.lines += 1
        line = _strip(raw)
        if not line or line.isspace():
            # a blank line: nothing is ever joined across it; it ends a traceback cut before its exception line
            # (a non-contiguous paste), and after an exception line only a chained traceback may follow it
            self._prev = ""
            tb = self._tb
            if tb is not None:
                if tb.exc:
                    tb.after_blank = True
                else:
                    self._close_tb()
            return
        rank = None
        m = _SGL.match(line) if line[:1] == "[" else None
        if m:
            rank = m.group(2).strip() or None
            msg = m.group(3)
            self._last_rank = rank
            prefixed = True
        else:
            msg = line
            prefixed = False
        tb = self._tb
        if tb is not None:
            if prefixed:
                self._close_tb()
                tb = None
            elif self._tb_line(tb, msg):
                self._prev = msg
                return
            else:                          # another program's output: the traceback ended before it
                self._close_tb()
                tb = None
        elif not prefixed and msg.lstrip().startswith("File \"") and _RE_FRAME.match(msg):
            # a headless fragment (pasted from mid-traceback, no "Traceback" header): a traceback all the same
            self._tb = _Traceback(self._last_rank, self.phase, self.lines)
            self._tb_line(self._tb, msg)
            self._prev = msg
            return
        # uvicorn "[ts] ERROR:    ..." lines
        if prefixed and msg[:1] in "IEWDC":
            um = _UVICORN_LEVEL.match(msg)
            if um:
                msg = um.group(2)
        self._line(msg, rank, prefixed)
        self._prev = msg

    def _tb_line(self, tb, msg):
        """Take one line of an open traceback; False when the line is not part of it (the caller closes it)."""
        if msg.startswith("Traceback (most recent call last)") or msg.endswith("Traceback (most recent call last):"):
            tb.text.append(msg[:300])
            tb.after_blank = tb.after_frame = False
            return True
        if msg.startswith("During handling of the above exception") or msg.startswith("The above exception was"):
            tb.text.append(msg[:300])
            tb.after_blank = False
            return True
        if tb.after_blank:
            return False                   # after the exception and a blank line: only a chained traceback belongs
        fm = _RE_FRAME.match(msg)
        if fm:
            tb.text.append(msg[:300])
            tb.frames.append((fm.group(1), fm.group(2)))
            tb.after_frame = True
            return True
        if msg[:1] in (" ", "\t", "^", "~") or (tb.after_frame and (
                not _RE_EXC_ANY.match(msg) or msg in _SOURCE_WORDS)):
            tb.text.append(msg[:300])      # a frame's source line (flush left in some pastes) or its ^^^ markers
            tb.after_frame = False
            return True
        tb.after_frame = False
        em = _RE_EXC.match(msg)
        if not tb.exc and not em and not _RE_EXC_ANY.match(msg):
            return False                   # a cut traceback, then another program's output
        tb.text.append(msg[:300])
        if em or not tb.exc:
            if len(tb.exc) < 12:
                tb.exc.append(msg[:MESSAGE_MAX])
        elif len(tb.exc) < 12:
            # continuation of a multi-line exception message
            tb.exc.append(msg[:MESSAGE_MAX])
        return True

    def _line(self, msg, rank, prefixed):
        """Read one message through the rule tables (PROGRESS_RULES, then EVENT_RULES): the first rule whose
        words match handles it, unless its handler returns False (then the next rule is tried)."""
        for words, handler in self._progress.get(msg[:1], ()):
            if msg.startswith(words):
                handler(msg, rank, prefixed)
                return
        for how, words, handler in self._events:
            if (msg.startswith(words) if how == "starts" else any(w in msg for w in words)) \
                    and handler(msg, rank, prefixed) is not False:
                return
        self._continuation(msg, rank, prefixed)

    def result(self):
        self._close_tb()
        failure = None
        pre_ready = [f for f in self.failures if not f["after_ready"]]
        post_ready = [f for f in self.failures if f["after_ready"]]
        candidates = pre_ready if pre_ready else (post_ready if self.fatal_after_ready else [])
        if candidates:
            best = max(candidates, key=lambda f: (_SPECIFICITY[f["kind"]], not f.get("provisional"), -f["lineno"]))
            loaded = self.facts.get("weights_gb") is not None
            if self.import_evidence and not loaded and (
                    best["kind"] == "unsupported_model" or (best.get("inferred") and best["kind"] == "other")):
                # a model module failed to import, then the lookup failed or the traceback was cut: the import is the
                # cause (a benign import warning never overrides a failure after the weights loaded)
                best = dict(best, kind="import_error", message=self.import_evidence[:MESSAGE_MAX])
                if best.get("inferred"):
                    best["evidence"] = "the log's model-module import failure"
            failure = best
        if failure is not None:
            outcome = "failed"
        elif self.ready:
            outcome = "ready"
        elif self.died and self.phase == "memory_pool" and self.facts.get("avail_mem_after_load_gb") is not None \
                and self.facts.get("kv_tokens") is None:
            # it died right after the weights loaded, before the KV cache was allocated: SGLang sizes its memory pool
            # there, and that is where 0.5.9 raises the pool error - inferred, with the numbers it rests on
            outcome = "failed"
            failure = {"kind": "kv_pool_oom", "inferred": True, "why": "the process died without a logged cause",
                       "rank": None, "phase": "memory_pool",
                       "traceback": [], "frames": [], "lineno": self.lines, "after_ready": False,
                       "message": "the server process died (sigquit/kill) while sizing its memory pool, without a "
                                  "logged cause",
                       "evidence": "the log ends after 'Load weight end' (%s GiB free before loading, %s GiB after) "
                                   "and before the KV cache was allocated" % (
                                       _fmt(self.facts.get("avail_mem_before_load_gb") or 0),
                                       _fmt(self.facts["avail_mem_after_load_gb"]))}
        elif self.died:
            outcome = "failed"
            failure = {"kind": "other", "message": "the server process died (sigquit/kill) without a logged cause",
                       "rank": None, "phase": self.phase, "traceback": [], "frames": [], "lineno": self.lines,
                       "after_ready": False}
        else:
            outcome = "starting"
        phase = self.phase
        out_failure = None
        if failure is not None:
            implied = _KIND_PHASE.get(failure["kind"])
            if implied and _PHASE_INDEX[implied] > _PHASE_INDEX[phase]:
                phase = implied
            if _PHASE_INDEX[failure["phase"]] > _PHASE_INDEX[phase]:
                phase = failure["phase"]
            out_failure = {
                "kind": failure["kind"],
                "message": failure["message"],
                "rank": failure["rank"],
                "phase": failure["phase"] if _PHASE_INDEX[failure["phase"]] >= _PHASE_INDEX.get(
                    _KIND_PHASE.get(failure["kind"], "args"), 0) else _KIND_PHASE[failure["kind"]],
                "traceback": "\n".join(failure["traceback"][-TRACEBACK_TAIL:]),
                "hint": hint_for(failure, self.facts, self),
            }
            if failure.get("inferred"):
                out_failure["inferred"] = True
                out_failure["evidence"] = failure.get("evidence") or "the traceback was cut before its exception line"
                out_failure["hint"] = "Inferred (%s; evidence: %s). %s" % (
                    failure.get("why") or "the traceback was cut before its exception line", out_failure["evidence"],
                    out_failure["hint"])
            if self.exit_code is not None:
                out_failure["exit_code"] = self.exit_code
        return {
            "outcome": outcome,
            "failure": out_failure,
            "phase": phase,
            "facts": dict(self.facts),
            "facts_by_rank": dict((k, dict(v)) for k, v in self.facts_by_rank.items()),
            "lines": self.lines,
            "stopped": self.stopped,
        }
