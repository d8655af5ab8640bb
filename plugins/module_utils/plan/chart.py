# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The plan in words and bars (``explain``), and why a replayed launch differs from the one that ran
(``replay_mismatch``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from .model import GIB
from .sizes import outside_static_gb


def _bar(value, scale, width=40):
    if value <= 0 or scale <= 0:
        return ""
    return "#" * max(1, int(round(value / scale * width)))


def explain(result, model=None):
    """Lines a person reads: the budget per GPU, the outcome, and the fixes."""
    b = result["per_gpu"][0]
    m0 = b["avail_mem_before_load_gb"]
    mfs = result["mem_fraction_static"]
    lines = []
    lines.append("%s, tp_size=%d, mem_fraction_static=%s (%s)" % (result["architecture"], result["tp_size"], mfs,
                                                                  result["mem_fraction_static_source"]))
    lines.append("Per GPU: %.2f GiB free after CUDA/NCCL init (%s); static budget %.2f x %.2f = %.2f GiB; "
                 "headroom %.2f GiB" % (m0, result["sources"]["avail_mem_before_load_gb"], mfs, m0, mfs * m0,
                                        b["headroom_gb"]))
    rows = [("weights", b["weights_gb"]), ("spec verify", b["spec_reserve_gb"]), ("mamba state", b["mamba_gb"]),
            ("KV cache", b["kv_gb"]), ("headroom", b["headroom_gb"])]
    for g in result["per_gpu"]:
        lines.append("GPU %s %s" % (g["index"], g["name"]))
        for label, val in rows:
            if label in ("spec verify", "mamba state") and not val:
                continue
            val = round(val, 2) + 0.0          # a few bytes under zero is no "-0.00 GiB" (+ 0.0: no negative zero)
            mark = _bar(val, m0)
            if val < 0:
                mark = "<0: over budget by %.2f GiB" % -val
            lines.append("  %-12s %7.2f GiB |%s" % (label, val, mark))
    tokens = result["max_total_num_tokens"]
    if result["outcome"] == "kv_pool_oom":
        lines.append("Outcome: kv_pool_oom: SGLang will stop with 'Not enough memory. Please try to increase "
                     "--mem-fraction-static': %s." % _short_by(tokens, result["cell_size_bytes"]))
    elif result["outcome"] == "headroom_oom":
        lines.append("Outcome: headroom_oom: the pool holds %d tokens but the headroom (%.2f GiB) is smaller than "
                     "what graphs, activations and the draft need (%.2f GiB): expect a CUDA OOM after the pool."
                     % (tokens, b["headroom_gb"], b["headroom_need_gb"]))
    elif result["outcome"] == "context_truncated":
        lines.append("Outcome: context_truncated: %d tokens in the pool, fewer than context_length %d."
                     % (tokens, result["context_length"]))
    else:
        lines.append("Outcome: fits: %d tokens in the KV pool, %d running requests." % (
            tokens, result["max_running_requests"]))
    if result.get("marginal"):
        lines[-1] = lines[-1].replace("Outcome: ", "Outcome: marginal (as planned: ", 1)[:-1] + ")."
    lines.extend(_marginal_said(result.get("marginal")))
    for f in result.get("fixes") or []:
        lines.append("  fix %s -> %s, %s (%s)"
                     % (_fmt_change(f["change"]), f["outcome"], _tokens_said(f, result), f["why"]))
    for f in result.get("ineffective") or []:
        lines.append("  does not help: %s -> %s, %s (%s)"
                     % (_fmt_change(f["change"]), f["outcome"], _tokens_said(f, result), f["why"]))
    for n in result.get("notes") or []:
        lines.append("  note: " + n)
    return lines


def _marginal_said(marginal):
    """The lines of a marginal plan (memory._marginal): what is within the readings' noise, and the fix."""
    if not marginal:
        return []
    lines = ["Marginal: the KV budget is %.1f MiB, within the %g MiB by which SGLang's two free-memory readings "
             "(before and after loading) can differ: a second reading that much lower gives %s."
             % (marginal["kv_mib"], marginal["noise_mib"], marginal["outcome_within_noise"])]
    fix = marginal.get("fix")
    if fix:
        lines.append("  fix %s -> %s, %d KV tokens (%s)"
                     % (_fmt_change(fix["change"]), fix["outcome"], fix["max_total_num_tokens"], fix["why"]))
    else:
        lines.append("  no mem_fraction_static up to 0.99 clears it: free memory on the GPUs or spread the model "
                     "over more of them")
    lines.append("  to launch it anyway: sglang_server_plan_accept_marginal=true (module: fail_on without "
                 "'marginal'); to judge with another margin: noise_mib")
    return lines


def _short_by(tokens, cell_bytes):
    """A pool that cannot be allocated, in words: never a negative count printed as if it were a size."""
    if tokens > 0:
        return "%d tokens" % tokens
    return "no KV pool at all, short by %d tokens (%.2f GiB) before even one token fits" % (
        -tokens + 1, (-tokens + 1) * float(cell_bytes) / GIB)


def _tokens_said(fix, result):
    if fix["max_total_num_tokens"] > 0:
        return "%d tokens" % fix["max_total_num_tokens"]
    return _short_by(fix["max_total_num_tokens"], result["cell_size_bytes"])


def _fmt_change(change):
    if "speculative_algorithm" in change and change["speculative_algorithm"] is None:
        return "no speculative decoding (drop speculative_* args)"
    return ", ".join("%s=%s" % (k, v) for k, v in sorted(change.items()))


def free_when_sized_gb(result, measured):
    """The free memory SGLang 0.5.9 sized the pool with (profile_max_num_token's own reading, taken after the logged
    "Load weight end"), as the log implies it, and how it is known: (GiB, words). From its profiled token count when
    logged; else just below the floor under which no pool fits (it found no room). None when the log has no readings."""
    measured = measured or {}
    m0, m1 = measured.get("avail_mem_before_load_gb"), measured.get("avail_mem_after_load_gb")
    if m0 is None or m1 is None:
        return None
    mfs = float(result["mem_fraction_static"])
    floor = outside_static_gb(float(m0), mfs)
    profiled = measured.get("profiled_max_total_num_tokens")
    if profiled is not None and result.get("cell_size_bytes"):
        seen = profiled * float(result["cell_size_bytes"]) / GIB + floor
        words = ("SGLang's own profile came to %d tokens, so it saw %.3f GiB free when it sized the pool, %.3f GiB "
                 "less than the %.2f GiB it logged after loading" % (profiled, seen, float(m1) - seen, float(m1)))
        return seen, words
    return floor - 1.0 / 1024, ("SGLang found no room, so it saw at most %.3f GiB free when it sized the pool (%.2f x "
                                "(1 - %s)), at least %.3f GiB less than the %.2f GiB it logged after loading" % (
                                    floor, float(m0), mfs, float(m1) - floor, float(m1)))


def replay_mismatch(result, launch_failure, measured):
    """A replay of a launch's logged numbers that fits, for a launch that died of the pool error: the words that say
    its inputs differ from that launch's, and which. ``result`` is plan() with those numbers, ``measured`` what the log
    had (avail_mem_before_load_gb, avail_mem_after_load_gb, profiled_max_total_num_tokens). None when they agree.

    The args are the launch's own (diagnose reads them from its launch record); what differs is the free memory: SGLang
    0.5.9 sizes the pool with a reading of its own (profile_max_num_token), taken after the logged "Load weight end"."""
    if launch_failure != "kv_pool_oom" or result.get("outcome") == "kv_pool_oom":
        return None
    tokens = result.get("max_total_num_tokens")
    head = ("The replay of this launch's logged numbers gives %s, but the launch died of the pool error: the replay's "
            "inputs differ from that launch's. The args are the launch's own; the free memory is not" % (
                "%d KV tokens" % tokens if tokens and tokens > 0 else result.get("outcome")))
    sized = free_when_sized_gb(result, measured)
    if sized is None:
        return head + ": the log has no free-memory readings to replay."
    return ("%s: %s. Memory was taken between the two readings - on a GPU by another process (nvidia-smi lists it); "
            "with --device cpu the free memory is the machine's, which SGLang's own tokenizer and detokenizer take "
            "while it starts. Leave that much more room: a larger --mem-fraction-static or a smaller pool."
            % (head, sized[1]))
