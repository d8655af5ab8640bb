# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the sglang_memory_plan module does: ``plan_request(**options)`` returns (result, warnings) - the plan, or
the args chosen for a goal and their plan - or raises ``PlanRefused`` with the message and the plan's facts (a
launch the plan says would fail, a model that cannot be read, args the planner refuses)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

from ..host import Failed
from .chart import free_when_sized_gb, replay_mismatch
from .memory import NOISE_MIB, plan
from .model import PlanError, gpus_from_profile
from .picture import chart_svg
from .release import DEFAULT_RELEASE, resolve_release
from .sizes import checkpoint_bytes
from .tune import TuneError, choose

PLAN_ARGUMENT_SPEC = dict(
    model_path=dict(type="path"),
    model_config=dict(type="dict"),
    require=dict(type="dict", default={}),
    gpus=dict(type="list", elements="dict"),
    gpu_profile=dict(type="str"),
    gpu_count=dict(type="int", default=1),
    args=dict(type="dict", default={}),
    measured=dict(type="dict"),
    weights_bytes=dict(type="int"),
    fail_on=dict(type="list", elements="str", default=["kv_pool_oom", "marginal"],
                 choices=["kv_pool_oom", "headroom_oom", "context_truncated", "marginal"]),
    noise_mib=dict(type="float", default=NOISE_MIB),
    goal=dict(type="str", choices=["fit", "context", "concurrency", "tokens"]),
    allow=dict(type="list", elements="str", default=[], choices=["no_speculation", "fp8_kv_cache", "bf16_mamba_state"]),
    margin=dict(type="float", default=0.05),
    min_context=dict(type="int"),
    min_requests=dict(type="int", default=1),
    keep=dict(type="list", elements="str"),
    launch_failure=dict(type="str"),
    release=dict(type="str"),
    python=dict(type="path"),
    chart=dict(type="bool", default=False),
)


class PlanRefused(Failed):
    """The plan says the launch would fail, or the model or the args cannot be planned: ``msg`` and the plan's facts."""


def table(rows):
    """The ranked candidates as a fixed-width table a person reads at a glance."""
    out = ["%-4s %-62s %9s %6s %8s %7s %s" % ("rank", "changes", "tokens", "reqs", "context", "spare", "outcome")]
    for i, r in enumerate(rows, 1):
        delta = ", ".join("%s=%s" % (k, v) for k, v in sorted(r["changes"].items())) or "as given"
        out.append("%-4d %-62s %9d %6d %8d %6.2fG %s" % (
            i, delta[:62], r["max_total_num_tokens"], r["max_running_requests"], r["context_length"],
            r["headroom_left_gb"], r["outcome"]))
    return out


def model_of(model_path, model_config, weights_bytes):
    """(config.json's content, the checkpoint's weight bytes or None) of the model to plan."""
    if not model_path:
        return model_config, weights_bytes
    cfg_path = os.path.join(model_path, "config.json")
    try:
        with open(cfg_path) as fh:
            config = json.load(fh)
    except (IOError, OSError) as exc:
        raise PlanRefused("model_path: cannot read %s: %s" % (cfg_path, exc))
    except ValueError as exc:
        raise PlanRefused("model_path: %s is not valid JSON: %s" % (cfg_path, exc))
    if weights_bytes is None:
        cb = checkpoint_bytes(model_path)
        weights_bytes = cb if cb["files"] else None
    return config, weights_bytes


def draft_of(args, release):
    """The config.json of args.speculative_draft_model_path when the release sizes the draft inside the target's pool
    (0.5.23) and the directory is here; None otherwise (plan() then says what it needs)."""
    path = args.get("speculative_draft_model_path")
    if release == "0.5.9" or not path or not os.path.isfile(os.path.join(str(path), "config.json")):
        return None
    try:
        with open(os.path.join(str(path), "config.json")) as fh:
            return json.load(fh)
    except (IOError, OSError, ValueError) as exc:
        raise PlanRefused("args.speculative_draft_model_path: cannot read %s/config.json: %s" % (path, exc))


def checkpoint_note(result, config, gpus, args, measured, **same):
    """A warning when the checkpoint's weights are far smaller than the config's parameters (not that model)."""
    if result.get("sources", {}).get("weights_gb") != "checkpoint":
        return None
    by_config = plan(config, gpus, args, measured=measured, **same)
    have, want = result["per_gpu"][0]["weights_gb"], by_config["per_gpu"][0]["weights_gb"]
    if not (want > 0 and have < 0.5 * want):
        return None
    note = ("the checkpoint's weights (%.2f GiB per GPU) are far smaller than this config's parameters (%.2f GiB per "
            "GPU): this is not the model config.json describes (a stand-in, a partial download, or a quantization the "
            "config does not declare); the plan uses the checkpoint" % (have, want))
    result["notes"] = list(result.get("notes") or []) + [note]
    result["explain"] = list(result.get("explain") or []) + ["note: " + note]
    result["checkpoint_contradicts_config"] = True
    return note


def _as_the_launch_saw_it(result, launch_failure, measured, replan):
    """A launch that died of the pool error whose logged numbers replay to a plan that fits (#60 item 3): the plan
    again with the free memory SGLang sized the pool with (free_when_sized_gb), so that the outcome is what happened
    and the fixes are ones that work from what it saw. The replay of the logged numbers is kept as ``replay`` and said
    as a replay; ``launch_failure`` names what the launch died of. Any other result is returned as it is."""
    mismatch = replay_mismatch(result, launch_failure, measured)
    if not mismatch:
        return result
    sized = free_when_sized_gb(result, measured)
    again = replan(dict(measured, avail_mem_after_load_gb=round(sized[0], 6))) if sized else None
    if again is None or again["outcome"] != "kv_pool_oom":
        result.update(replay_mismatch=mismatch, launch_failure=launch_failure)
        result["explain"] = [mismatch] + list(result.get("explain") or [])
        return result
    tokens = result.get("max_total_num_tokens")
    replay = {"outcome": result["outcome"], "max_total_num_tokens": tokens,
              "avail_mem_after_load_gb": measured.get("avail_mem_after_load_gb")}
    lead = ["Launch: died of kv_pool_oom (SGLang's pool error) with %.2f GiB free before loading and %.2f GiB after "
            "(logged); %s." % (float(measured["avail_mem_before_load_gb"]), float(measured["avail_mem_after_load_gb"]),
                               sized[1]),
            "Replay: the logged numbers alone give %s - not what happened; below, the plan with the %.3f GiB SGLang "
            "saw." % ("%d KV tokens" % tokens if tokens and tokens > 0 else result["outcome"], sized[0])]
    again.update(replay=replay, replay_mismatch=mismatch, launch_failure=launch_failure)
    again["explain"] = lead + list(again.get("explain") or [])
    return again


def plan_request(model_path=None, model_config=None, require=None, gpus=None, gpu_profile=None, gpu_count=1,
                 args=None, measured=None, weights_bytes=None, fail_on=("kv_pool_oom", "marginal"), goal=None,
                 allow=(), margin=0.05, min_context=None, min_requests=1, keep=None, launch_failure=None, release=None,
                 python=None, chart=False, noise_mib=NOISE_MIB):
    if noise_mib is None or noise_mib < 0:
        raise PlanRefused("noise_mib=%s: give the MiB by which the two free-memory readings may differ (0 or more; "
                          "default %g); nothing was planned" % (noise_mib, NOISE_MIB))
    require, args = require or {}, args or {}
    missing = sorted(path for path in require if not os.path.exists(path))
    if missing:
        raise PlanRefused("missing: %s; nothing was planned" % "; ".join(
            "%s (%s)" % (path, require[path]) for path in missing), {"missing": missing})
    try:
        release, release_source = resolve_release(release, python)
    except PlanError as exc:
        raise PlanRefused(str(exc), {"release": release})
    try:
        result, warnings = _planned(model_path, model_config, gpus, gpu_profile, gpu_count, args, measured,
                                    weights_bytes, fail_on, goal, allow, margin, min_context, min_requests, keep,
                                    launch_failure, release, noise_mib)
    except PlanRefused as exc:
        exc.result.update(release=release, release_source=release_source)
        if chart and exc.result.get("per_gpu"):   # a launch that would not start: the picture says why
            exc.result["chart_svg"] = chart_svg(exc.result)
        raise
    result.update(release=release, release_source=release_source)
    if chart:
        result["chart_svg"] = chart_svg(result)
    return result, warnings


def _planned(model_path, model_config, gpus, gpu_profile, gpu_count, args, measured, weights_bytes, fail_on, goal,
             allow, margin, min_context, min_requests, keep, launch_failure, release=DEFAULT_RELEASE,
             noise_mib=NOISE_MIB):
    warnings = []
    try:
        config, weights = model_of(model_path, model_config, weights_bytes)
        gpus = gpus if gpus else gpus_from_profile(gpu_profile, gpu_count)
        if goal and release != DEFAULT_RELEASE:
            raise PlanRefused("goal=%s: choosing the args is proved for SGLang %s only; plan the args of SGLang %s "
                              "without a goal, or choose for %s" % (goal, DEFAULT_RELEASE, release, DEFAULT_RELEASE))
        if goal:
            try:
                chosen = choose(config, gpus, goal, args, allow, measured, weights, margin, min_context, min_requests,
                                keep)
            except TuneError as exc:
                raise PlanRefused(str(exc))
            result = plan(config, gpus, chosen["args"], measured=measured, weights_bytes=weights, noise_mib=noise_mib)
            result.update(chosen_args=chosen["args"], changes=chosen["changes"], candidates=chosen["candidates"],
                          goal=goal, explain=chosen["explain"] + table(chosen["candidates"]) + result["explain"])
            return result, warnings
        same = dict(release=release, draft_config=draft_of(args, release))
        result = plan(config, gpus, args, measured=measured, weights_bytes=weights, noise_mib=noise_mib, **same)
        note = checkpoint_note(result, config, gpus, args, measured, **same)
        if note:
            warnings.append(note)
        result = _as_the_launch_saw_it(result, launch_failure, measured,
                                       lambda saw: plan(config, gpus, args, measured=saw, weights_bytes=weights,
                                                        noise_mib=noise_mib, **same))
    except PlanError as exc:
        raise PlanRefused(str(exc))
    if result["outcome"] in fail_on:
        tokens = result.get("max_total_num_tokens")
        lines = ["SGLang would not start as configured (%s)%s." % (
            result["outcome"], "; predicted %d KV tokens" % tokens if tokens and tokens > 0 else "")]
        raise PlanRefused("\n".join(lines + result["explain"]), result)
    if "marginal" in fail_on and result.get("marginal"):
        m = result["marginal"]
        raise PlanRefused("\n".join(["SGLang may not start as configured: the plan is marginal (%.1f MiB of KV budget, "
                                     "within the %g MiB the free-memory readings can differ by: %s)." % (
                                         m["kv_mib"], m["noise_mib"], m["outcome_within_noise"])] + result["explain"]),
                          result)
    return result, warnings
