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
from .hints import _fmt
from .kinds import KIND_PHASE, SPECIFICITY, classify, hint_for
from .rules import (EVENT_RULES, MESSAGE_MAX, PROGRESS_RULES, TRACEBACK_TAIL, _DRAFT_FRAMES, _PHASE_INDEX, _RE_EXC,
                    _RE_EXC_ANY, _RE_FRAME, _SGL, _SOURCE_WORDS, _Traceback, _UVICORN_LEVEL, _infer_cut, _is_rank0,
                    _strip, _tb_has)


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
                        key=lambda i: (SPECIFICITY[self.failures[i]["kind"]], -self.failures[i]["lineno"]))
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
        """(kind, decisive message) for an exception text + frames, or (None, None): kinds.classify, the facts it
        read from the text (authoritative: the error's own numbers) kept."""
        kind, message, facts = classify(text, frames, phase)
        self.facts.update(facts)
        return kind, message

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
            best = max(candidates, key=lambda f: (SPECIFICITY[f["kind"]], not f.get("provisional"), -f["lineno"]))
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
            implied = KIND_PHASE.get(failure["kind"])
            if implied and _PHASE_INDEX[implied] > _PHASE_INDEX[phase]:
                phase = implied
            if _PHASE_INDEX[failure["phase"]] > _PHASE_INDEX[phase]:
                phase = failure["phase"]
            out_failure = {
                "kind": failure["kind"],
                "message": failure["message"],
                "rank": failure["rank"],
                "phase": failure["phase"] if _PHASE_INDEX[failure["phase"]] >= _PHASE_INDEX.get(
                    KIND_PHASE.get(failure["kind"], "args"), 0) else KIND_PHASE[failure["kind"]],
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
