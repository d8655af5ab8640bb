# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The planner chooses the server args: ``choose(config, gpus, goal, args, allow, measured, weights_bytes, margin)``.

Every candidate is a set of SGLang 0.5.9 server args judged by ``sglang_memory.plan()`` (whose arithmetic agrees
with SGLang's own code, tests/oracle); the search walks a declared grid (GRID below) and keeps the best for the goal:

- ``fit``: the fewest changes to ``args`` that make SGLang start, the smallest of them first;
- ``context``: the longest served context (<= the model's) with ``min_requests`` requests of it resident at once;
- ``concurrency``: the most requests resident at once, each able to hold ``min_context`` tokens;
- ``tokens``: the largest KV pool.

A candidate counts only when SGLang starts (outcome fits, or context_truncated for fit/tokens) and the estimated
headroom covers its need with ``margin`` to spare. Explicit keys of ``args`` are kept unless the goal is ``fit``
(which exists to change them). Standard library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from . import memory as _memory
from .model import Model, PlanError
GOALS = ("fit", "context", "concurrency", "tokens")
ALLOW = ("no_speculation", "fp8_kv_cache", "bf16_mamba_state")
# The declared search grid (the optimality test brute-forces the same grid). Not in it: piecewise CUDA graphs (in
# 0.5.9's arithmetic they only enlarge the automatic fraction's reserve; every chosen configuration has an explicit
# fraction, so they cost nothing to keep - test_sglang_tune pins this). pp_size is in it: the oracle checks pipeline
# stages against SGLang's own code (each stage's KV layers, the all_reduce MIN of the pools).
GRID = {
    "tp_size": (1, 2, 4, 8),
    "pp_size": (1, 2, 4),
    "mem_fraction_static": tuple(round(0.50 + 0.01 * i, 2) for i in range(46)),      # 0.50 .. 0.95
    "max_running_requests": (None, 1, 2, 4, 8, 16, 32, 48, 64, 128, 256),
    "chunked_prefill_size": (None, 2048),
    "cuda_graph_max_bs": (None, 8),
    "speculative_steps": ((3, 1, 4), (2, 1, 3), (1, 1, 2)),
}
_SPEC_KEYS = ("speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")


class TuneError(ValueError):
    """Bad input to choose(), or no configuration that starts; the message names the input or the smallest fix."""


def _measured(measured, ranks, base_ranks):
    """Measured numbers stay valid unless the TP / PP sizes change what they measured (weights per rank)."""
    if not measured or ranks == base_ranks:
        return measured
    m = dict(measured)
    m.pop("weights_gb", None)
    m.pop("avail_mem_after_load_gb", None)
    return m


def _valid_tp(model, n):
    return model.heads % n == 0 and (model.mla or model.kv_heads % n == 0 or n % model.kv_heads == 0)


def _variants(model, args, allow, goal, keep=None):
    """Every non-fraction combination of the grid, as args dicts (explicit keys fixed unless goal is fit, or the
    keys of ``keep`` when given)."""
    fixed = set(keep) if keep is not None else (set(args) if goal != "fit" else set())
    spec = args.get("speculative_algorithm")
    specs = [None]
    if spec:
        specs = []
        if "speculative_num_steps" in fixed:
            specs.append(tuple(args.get(k) for k in _SPEC_KEYS[1:]))
        else:
            specs.extend(GRID["speculative_steps"])
        if "no_speculation" in allow:
            specs.append("off")
    kvs = [args.get("kv_cache_dtype")]
    if "fp8_kv_cache" in allow and "kv_cache_dtype" not in fixed and kvs[0] in (None, "auto"):
        kvs.append("fp8_e4m3")
    mambas = [args.get("mamba_ssm_dtype")]
    if "bf16_mamba_state" in allow and model.hybrid_gdn and "mamba_ssm_dtype" not in fixed:
        mambas.append("bfloat16")

    def dim(key):
        """The operator's own value first (also when the grid lacks it: fit must be able to keep it), then the
        grid's other values."""
        if key in fixed:
            return [args.get(key)]
        own = args.get(key)
        # an unset TP / PP size is 1: the grid's 1 is the same configuration (kept unset), not a change
        same = (own, 1) if key in ("tp_size", "pp_size") and own is None else (own,)
        return [own] + [v for v in GRID.get(key, ()) if v not in same]
    out = []
    for tp, pp in [(t, q) for q in dim("pp_size") for t in dim("tp_size")]:
        for mrr in dim("max_running_requests"):
            for chunk in dim("chunked_prefill_size"):
                for gbs in dim("cuda_graph_max_bs"):
                    for sp in specs:
                        for kv in kvs:
                            for mamba in mambas:
                                a = dict(args)
                                for key, value in (("tp_size", tp), ("pp_size", pp), ("max_running_requests", mrr),
                                                   ("chunked_prefill_size", chunk), ("cuda_graph_max_bs", gbs),
                                                   ("kv_cache_dtype", kv), ("mamba_ssm_dtype", mamba)):
                                    if value is None:
                                        a.pop(key, None)
                                    else:
                                        a[key] = value
                                if sp == "off":
                                    for k in _SPEC_KEYS:
                                        a.pop(k, None)
                                elif sp is not None:
                                    a.update(zip(_SPEC_KEYS[1:], sp))
                                out.append(a)
    return out


def _served_context(model, args):
    return int(args.get("context_length") or model.context_len)


class _Search(object):
    def __init__(self, config, gpus, goal, args, allow, measured, weights_bytes, margin, min_context, min_requests,
                 keep=None):
        self.config, self.gpus, self.goal = config, gpus, goal
        self.args, self.allow, self.measured, self.weights_bytes = args, allow, measured, weights_bytes
        self.margin, self.min_context, self.min_requests = margin, min_context, min_requests
        self.model = Model(config)
        self.base_ranks = (int(args.get("tp_size") or 1), int(args.get("pp_size") or 1))
        self.seen = {}
        self.keep = keep

    def judge(self, a):
        """(plan or None, acceptable) for one args dict (memoised)."""
        key = tuple(sorted((k, str(v)) for k, v in a.items()))
        if key not in self.seen:
            ranks = (int(a.get("tp_size") or 1), int(a.get("pp_size") or 1))
            try:
                p = _memory.plan(self.config, self.gpus, a, measured=_measured(self.measured, ranks, self.base_ranks),
                                 weights_bytes=self.weights_bytes, _fixes=False)
            except PlanError:
                p = None
            ok = p is not None and self.acceptable(p)
            self.seen[key] = (p, ok)
        return self.seen[key]

    def acceptable(self, p):
        outcomes = ("fits", "context_truncated") if self.goal in ("fit", "tokens") else ("fits",)
        if p["outcome"] not in outcomes:
            return False
        g = p["per_gpu"][0]
        return g["headroom_gb"] >= g["headroom_need_gb"] * (1.0 + self.margin)

    def shaped(self, a):
        """The args a goal serves: the context it needs set, before the fraction is searched."""
        a = dict(a)
        if self.goal == "concurrency":
            a["context_length"] = self.min_context
        return a

    def fraction_fixed(self, a):
        return "mem_fraction_static" in a and (self.goal != "fit" or "mem_fraction_static" in (self.keep or ()))

    def best_fraction(self, a):
        """The largest fraction of the grid SGLang starts with (more pool, less headroom: one search per variant);
        SGLang's own automatic fraction is a candidate too, and an explicit fraction is kept as given."""
        found = []
        if self.fraction_fixed(a):
            p, ok = self.judge(a)
            return [(a, p)] if ok else []
        if self.goal == "fit" and "mem_fraction_static" in self.args:
            own = dict(a, mem_fraction_static=self.args["mem_fraction_static"])
            p, ok = self.judge(own)
            if ok:                          # the operator's own fraction works: no move at all (it may be off-grid)
                return [(own, p)]
        auto = dict(a)
        auto.pop("mem_fraction_static", None)
        p, ok = self.judge(auto)
        if ok:
            found.append((auto, p))
        grid = GRID["mem_fraction_static"]

        def room(i):
            p = self.judge(dict(a, mem_fraction_static=grid[i]))[0]
            return p is not None and p["per_gpu"][0]["headroom_gb"] >= p["per_gpu"][0]["headroom_need_gb"] * (
                1.0 + self.margin)

        def starts(i):
            p = self.judge(dict(a, mem_fraction_static=grid[i]))[0]
            return p is not None and p["max_total_num_tokens"] > 0

        # the headroom shrinks and the pool grows as the fraction grows: the fractions that work are one interval
        hi = _last_true(room, len(grid))           # the largest whose headroom holds
        lo = _first_true(starts, len(grid))        # the smallest that builds a pool
        if hi is None or lo is None or lo > hi:
            return found
        pick = hi
        if self.goal == "fit":                     # the smallest move from the fraction given
            want = float(self.args.get("mem_fraction_static") or grid[hi])
            pick = min(range(lo, hi + 1), key=lambda i: (abs(grid[i] - want), -i))
        trial = dict(a, mem_fraction_static=grid[pick])
        p, ok = self.judge(trial)
        if ok:
            found.append((trial, p))
        elif self.goal == "fit":                   # e.g. context_truncated is fine for fit: walk up to the first ok
            for i in range(pick, hi + 1):
                trial = dict(a, mem_fraction_static=grid[i])
                p, ok = self.judge(trial)
                if ok:
                    found.append((trial, p))
                    break
        return found

    def context_for(self, a, p):
        """goal context: the longest context <= the model's that min_requests requests of can hold at once."""
        c = min(self.model.context_len, p["max_total_num_tokens"] // self.min_requests)
        if c < 1:
            return None, None
        trial = dict(a, context_length=c)
        if c == self.model.context_len and "context_length" not in self.args:
            trial.pop("context_length")            # the model's own context: nothing to set
        p2, ok = self.judge(trial)
        while p2 is not None and not ok and c > 256:         # a longer context needs more req_to_token headroom
            c = c * 15 // 16
            trial = dict(a, context_length=c)
            p2, ok = self.judge(trial)
        if ok and p2["max_total_num_tokens"] >= c * self.min_requests and \
                p2["max_running_requests"] >= self.min_requests:   # that many may run at once, too
            return trial, p2
        return None, None

    def score(self, a, p):
        if self.goal == "tokens":
            return p["max_total_num_tokens"]
        if self.goal == "concurrency":
            return min(p["max_running_requests"], p["max_total_num_tokens"] // self.min_context)
        if self.goal == "context":
            return _served_context(self.model, a)
        return -len(changes_of(self.args, a))


def _last_true(pred, n):
    """The last index i < n with pred(i) for a predicate that is true then false (None when never true)."""
    lo, hi, best = 0, n - 1, None
    while lo <= hi:
        mid = (lo + hi) // 2
        if pred(mid):
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    return best


def _first_true(pred, n):
    """The first index i < n with pred(i) for a predicate that is false then true (None when never true)."""
    lo, hi, best = 0, n - 1, None
    while lo <= hi:
        mid = (lo + hi) // 2
        if pred(mid):
            best, hi = mid, mid - 1
        else:
            lo = mid + 1
    return best


def changes_of(before, after):
    keys = sorted(set(before) | set(after))
    return [(k, before.get(k), after.get(k)) for k in keys if before.get(k) != after.get(k)]


def _why(key, old, new, goal=None):
    if key == "context_length" and goal == "concurrency":
        return "every request holds this many tokens (min_context); a shorter context needs less request state"
    reasons = {
        "mem_fraction_static": "the largest static fraction whose headroom still covers graphs, activations and "
                               "the draft (with the margin)",
        "max_running_requests": "request slots: each holds its req_to_token row, mamba state and verify state",
        "tp_size": "the weights are split over more GPUs",
        "pp_size": "the layers are split into pipeline stages: each GPU holds the weights and KV of its own layers "
                   "(no speculative decoding with stages; on one node TP is usually faster per request)",
        "context_length": "the longest context the pool serves for the requests asked for",
        "chunked_prefill_size": "a smaller prefill chunk needs less activation headroom",
        "cuda_graph_max_bs": "fewer CUDA graphs need less headroom",
        "kv_cache_dtype": "fp8 halves the bytes per KV token (allowed: fp8_kv_cache)",
        "mamba_ssm_dtype": "bf16 halves the SSM state of every request slot (allowed: bf16_mamba_state)",
    }
    if key.startswith("speculative_"):
        return "no speculation (allowed: no_speculation)" if new is None else "fewer draft tokens shrink the " \
            "verify-state reservation"
    return reasons.get(key, "chosen by the search")


def choose(config, gpus, goal, args=None, allow=(), measured=None, weights_bytes=None, margin=0.05,
           min_context=None, min_requests=1, keep=None, _nearest=True):
    """The best SGLang 0.5.9 server args for ``goal`` on ``gpus``; see the module docstring. ``keep``: keys of
    ``args`` the search never changes (default: all of them, except for goal fit)."""
    args = dict(args or {})
    if goal not in GOALS:
        raise TuneError("goal=%r: choose one of %s" % (goal, ", ".join(GOALS)))
    unknown = [w for w in allow if w not in ALLOW]
    if unknown:
        raise TuneError("allow=%s: unknown word(s) %s; the choices are %s" % (list(allow), unknown, ", ".join(ALLOW)))
    if not isinstance(gpus, list) or not gpus:
        raise TuneError("gpus: give at least one GPU as {name, memory_total_mib}")
    sizes = sorted(set(int(g.get("memory_total_mib") or 0) for g in gpus))
    if len(sizes) > 1:
        raise TuneError("gpus: GPUs of mixed sizes (%s MiB): SGLang sizes every rank by the smallest; choose over "
                        "GPUs of one size (pass only those)" % ", ".join(str(x) for x in sizes))
    if not (0 <= float(margin) < 1):
        raise TuneError("margin=%s: a fraction of the headroom need kept spare, 0 <= margin < 1 (e.g. 0.05)" % margin)
    model = Model(config)
    # the context each request must hold: min_context when given, else the operator's own context_length, else the
    # model's whole context (said in the explanation)
    given = args.get("context_length")
    if min_context:
        context_source = "min_context"
    elif given:
        context_source = "the operator's context_length"
    else:
        context_source = "the model's context"
    min_context = int(min_context or given or model.context_len)
    if min_context > model.context_len:
        raise TuneError("min_context=%d is longer than the model's context %d (config.json); lower it"
                        % (min_context, model.context_len))
    if int(min_requests) < 1:
        raise TuneError("min_requests=%s: at least 1" % min_requests)
    if goal == "concurrency" and keep is not None and "context_length" in keep and given and int(given) != min_context:
        raise TuneError("goal=concurrency sets context_length to min_context (%d), but context_length=%s is kept: "
                        "give one of them" % (min_context, given))
    s = _Search(config, gpus, goal, args, tuple(allow), measured, weights_bytes, float(margin), min_context,
                int(min_requests), keep)
    s.context_source = context_source
    rows = []
    for variant in _variants(model, args, allow, goal, keep):
        tp, pp = int(variant.get("tp_size") or 1), int(variant.get("pp_size") or 1)
        if tp * pp > len(gpus) or not _valid_tp(model, tp) or pp > model.layers:
            continue
        for a, p in s.best_fraction(s.shaped(variant)):
            if goal == "context":
                a, p = s.context_for(a, p)
                if a is None:
                    continue
            rows.append((a, p))
    if goal == "fit":
        base, ok = s.judge(args) if args else (None, False)
        if ok:
            rows.append((dict(args), base))
    if not rows:
        # _nearest: the nearest configuration that fits is searched for the message (not by the searches it makes)
        raise TuneError(_nothing_fits(config, gpus, args, s) if _nearest else "nothing fits")
    ranked = sorted(rows, key=lambda r: _rank(s, r), reverse=True)
    best_args, best_plan = ranked[0]
    changes = [{"key": k, "from": old, "to": new, "why": _why(k, old, new, goal)} for k, old, new in
               changes_of(args, best_args)]
    table = []
    seen = set()
    for a, p in ranked:
        delta = dict((k, new) for k, _old, new in changes_of(args, a))
        sig = tuple(sorted((k, str(v)) for k, v in delta.items()))
        if sig in seen:
            continue
        seen.add(sig)
        g = p["per_gpu"][0]
        table.append({"changes": delta, "max_total_num_tokens": p["max_total_num_tokens"],
                      "max_running_requests": p["max_running_requests"], "context_length": p["context_length"],
                      "headroom_left_gb": round(g["headroom_gb"] - g["headroom_need_gb"], 2),
                      "outcome": p["outcome"], "score": s.score(a, p)})
        if len(table) >= 10:
            break
    return {"goal": goal, "args": best_args, "plan": best_plan, "changes": changes, "candidates": table,
            "evaluated": len(s.seen), "explain": _explain(goal, s, table, changes)}


# what a key is when the args leave it unset, to measure how far a change moves it (goal fit)
_EFFECTIVE = frozenset(("max_running_requests", "chunked_prefill_size", "cuda_graph_max_bs", "mem_fraction_static",
                        "tp_size", "pp_size", "context_length"))       # keys plan() reports under the same name


def _distance(s, a, p):
    """How far args a moved from the operator's: per changed key, the relative move of a number (from what the
    operator's own launch would use), 1 for anything else."""
    base = s.judge(s.args)[0] if s.args else None
    total = 0.0
    for k, old, new in changes_of(s.args, a):
        if old is None and base is not None and k in _EFFECTIVE:
            old = base.get(k)
        if new is None and k in _EFFECTIVE:
            new = p.get(k)
        try:
            old_f, new_f = float(old), float(new)
            total += abs(new_f - old_f) / max(abs(old_f), 1e-9)
        except (TypeError, ValueError):
            total += 1.0
    return round(total, 4)


def _rank(s, row):
    a, p = row
    g = p["per_gpu"][0]
    n_changes = len(changes_of(s.args, a))
    if s.goal == "fit":
        return (-n_changes, -_distance(s, a, p), p["max_total_num_tokens"])
    return (s.score(a, p), -n_changes, -int(a.get("pp_size") or 1), p["max_total_num_tokens"],
            round(g["headroom_gb"] - g["headroom_need_gb"], 3))


def _nothing_fits(config, gpus, args, s):
    """No configuration on these GPUs: for goal concurrency the nearest context that holds one request (its constraint),
    else the smallest count of GPUs of this size (as tp_size) on which the same search finds one."""
    if s.goal == "concurrency":
        # the constraint is one request of min_context: the nearest context that holds one, and how many of it
        ctx = s.min_context // 2
        while ctx >= 1024:
            try:
                found = choose(config, gpus, s.goal, dict(args, context_length=ctx), s.allow, s.measured,
                               s.weights_bytes, s.margin, ctx, s.min_requests, s.keep, _nearest=False)
            except TuneError:
                ctx //= 2
                continue
            return ("no configuration on these %d GPU(s) of %d MiB holds one request of %d tokens (%s); "
                    "at %d tokens: %d request(s) - give that context (min_context or context_length)"
                    % (len(gpus), int(gpus[0]["memory_total_mib"]), s.min_context, s.context_source, ctx,
                       found["candidates"][0]["score"]))
    for n in (2, 4, 8, 16):
        if n <= len(gpus) or not _valid_tp(s.model, n) or "tp_size" in args and s.goal != "fit" and n != args["tp_size"]:
            continue
        more = [dict(gpus[0], index=i) for i in range(n)]
        try:
            found = choose(config, more, s.goal, dict(args, tp_size=n), s.allow, _measured(s.measured, (n, s.base_ranks[1]), s.base_ranks),
                           s.weights_bytes, s.margin, s.min_context, s.min_requests, _nearest=False)
        except TuneError:
            continue
        return ("no configuration of the grid starts SGLang on these %d GPU(s) of %d MiB for goal %s: the weights "
                "leave too little; tp_size=%d (%d GPUs of this size) would (%d KV tokens)"
                % (len(gpus), int(gpus[0]["memory_total_mib"]), s.goal, n, n, found["plan"]["max_total_num_tokens"]))
    return ("no configuration of the grid starts SGLang on these %d GPU(s) of %d MiB for goal %s, nor on up to 16 "
            "of them: use larger GPUs or a quantized checkpoint" % (len(gpus), int(gpus[0]["memory_total_mib"]), s.goal))


def _fmt(delta):
    return ", ".join("%s=%s" % (k, "(unset)" if v is None else v) for k, v in sorted(delta.items())) or "as given"


def _explain(goal, s, table, changes):
    what = {"fit": "the fewest changes that make SGLang start",
            "context": "the longest context with %d request(s) of it resident" % s.min_requests,
            "concurrency": "the most requests resident, each holding %d tokens (%s)" % (s.min_context, s.context_source),
            "tokens": "the largest KV pool"}[goal]
    best = table[0]
    lines = ["goal %s: %s; %d configurations judged by the planner (SGLang 0.5.9's arithmetic)."
             % (goal, what, len(s.seen)),
             "chosen: %s -> %s, %d KV tokens, %d running requests, context %d, %.2f GiB headroom to spare."
             % (_fmt(best["changes"]), best["outcome"], best["max_total_num_tokens"], best["max_running_requests"],
                best["context_length"], best["headroom_left_gb"])]
    for c in changes:
        lines.append("  %s: %s -> %s (%s)" % (c["key"], c["from"], c["to"], c["why"]))
    if len(table) > 1:
        r = table[1]
        lines.append("runner-up: %s -> %d KV tokens, %d running requests, context %d (score %s vs %s)."
                     % (_fmt(r["changes"]), r["max_total_num_tokens"], r["max_running_requests"], r["context_length"],
                        r["score"], best["score"]))
    return lines
