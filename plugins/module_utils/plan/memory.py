# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Pre-flight memory planner for SGLang 0.5.9.

``plan(config, gpus, args, measured=None, weights_bytes=None)`` mirrors SGLang 0.5.9's own
arithmetic (server_args._handle_gpu_memory_settings, ModelRunner.profile_max_num_token,
handle_max_mamba_cache, get_cell_size_per_token) to predict, before launch, whether the KV pool can
be built, how many tokens it will hold, and what the smallest change is that makes it fit.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from .chart import explain
from .model import (CUDA_CONTEXT_GIB, DRIVER_RESERVED_GIB, GIB, MAMBA_RADIX_ARCHS, MIB, Model, NCCL_GIB, PlanError,
                    ServerArgs, WORKSPACE_GIB, _dtype_bytes, as_server_args, bucket_defaults)
from .sizes import (_refusals, _validate, auto_mem_fraction_static, cell_size, kv_dtype_bytes, kv_layers,
                    mamba_per_request, pp_layer_range, spec_params)


def plan(config, gpus, args, measured=None, weights_bytes=None, _fixes=True):
    """Predict SGLang 0.5.9's memory layout for one launch; see the module docstring."""
    args = dict(args or {})
    try:
        model = Model(config)
    except PlanError as e:
        verdict = measured_verdict(args, measured, e)
        if verdict is None:
            raise
        return verdict
    a, tp, pp = _validate(model, gpus, args)
    measured = dict(measured or {})
    used = gpus[:tp * pp]
    gpu_mem = min(float(g["memory_total_mib"]) for g in gpus)
    algo, steps, topk, draft_tokens = spec_params(model, a)
    chunk_d, bs_d = bucket_defaults(gpu_mem, tp)
    chunked = chunk_d if a.chunked_prefill_size is None else a.chunked_prefill_size
    graph_bs = bs_d if a.cuda_graph_max_bs is None else a.cuda_graph_max_bs
    if a.cuda_graph_bs:
        graph_bs = max(int(b) for b in a.cuda_graph_bs)       # an explicit capture list sets the max
    dp_size = int(a.dp_size)
    dp_attention = bool(a.enable_dp_attention) and dp_size > 1    # dp_size 1 turns it off
    page = int(a.page_size)
    _refusals(model, a, algo, topk, page, dp_attention)
    notes = []
    if a.mem_fraction_static is None:
        mfs, reserved = auto_mem_fraction_static(gpu_mem, tp, pp, chunked, graph_bs, algo,
                                                 a.max_prefill_tokens, model,
                                                 bool(a.language_only), a.enable_multimodal,
                                                 bool(a.enable_piecewise_cuda_graph),
                                                 bool(a.enable_dp_attention), int(a.dp_size))
        mfs_source = "auto"
    else:
        mfs, reserved = float(a.mem_fraction_static), None
        mfs_source = "args"
    if dp_attention:
        chunked = chunked // dp_size            # _handle_data_parallelism, after the fraction was set

    # M0: free GiB after torch.distributed init, minimum over ranks
    if measured.get("avail_mem_before_load_gb") is not None:
        m0 = float(measured["avail_mem_before_load_gb"])
        m0_source = "measured"
    else:
        frees = []
        for g in used:
            free = g.get("memory_free_mib")
            free = float(free) if free is not None else float(g["memory_total_mib"]) - DRIVER_RESERVED_GIB * 1024
            frees.append(free / 1024.0 - CUDA_CONTEXT_GIB - (NCCL_GIB if tp * pp > 1 else 0.0))
        m0 = min(frees)
        m0_source = "estimated"

    # W: weight bytes per rank of the target model
    draft_weight_bytes = 0.0
    if measured.get("weights_gb") is not None:
        w = float(measured["weights_gb"])
        w_source = "measured"
    elif measured.get("avail_mem_after_load_gb") is not None:
        w = m0 - float(measured["avail_mem_after_load_gb"])
        w_source = "measured"
    else:
        if weights_bytes is not None:
            if isinstance(weights_bytes, dict):
                total = float(weights_bytes.get("total") or 0)
                draft_b = float(weights_bytes.get("draft") or 0)
                repl = float(weights_bytes.get("replicated") or 0)
            else:
                total, draft_b, repl = float(weights_bytes), 0.0, 0.0
                if model.mtp_layers:
                    est = model.param_estimate()
                    draft_b = total * est["mtp"] / float(est["text"] + est["vision"] + est["mtp"])
            if total <= 0:
                raise PlanError("weights_bytes must be a positive byte count (or {total: N, ...})")
            w_source = "checkpoint"
        else:
            est = model.param_estimate()
            wb = _weight_param_bytes(model, a)
            total = (est["text"] + est["vision"] + est["mtp"]) * wb
            draft_b = est["mtp"] * wb
            repl = 0.0
            w_source = "estimated from config"
        w = ((total - draft_b - repl) / (tp * pp) + repl) / GIB
        draft_weight_bytes = draft_b / tp
    if measured.get("avail_mem_after_load_gb") is not None:
        m1 = float(measured["avail_mem_after_load_gb"])
    else:
        m1 = m0 - w

    # ModelRunnerKVCacheMixin.profile_max_num_token / handle_max_mamba_cache / init_memory_pool of 0.5.9, in order
    rest = m1 - m0 * (1.0 - mfs)
    static = rest
    attn_tp = tp // dp_size if dp_attention else tp        # get_attention_tp_size(): KV heads and states per rank
    # pipeline stages: each profiles with its own KV layers; the pool is the smallest stage's (all_reduce MIN), the
    # request pool is sized from stage 0's own count (what rank 0 logs)
    stage_layers = [kv_layers(model, r, pp) for r in range(pp)]
    if 0 in stage_layers:
        raise PlanError("args.pp_size=%d: pipeline stage %d holds no attention layer (its KV cell is 0 bytes and SGLang "
                        "0.5.9 divides by it); use a pp_size whose stages each hold a full attention layer"
                        % (pp, stage_layers.index(0)))
    stage_cells = [cell_size(model, a, attn_tp, layers=n) for n in stage_layers] if pp > 1 \
        else [cell_size(model, a, attn_tp)]
    cell = stage_cells[0]
    per_req = mamba_per_request(model, a, attn_tp)
    context_len = int(model.context_len if a.context_length is None else a.context_length)
    radix_off = bool(a.disable_radix_cache)
    extra_buffer = str(a.mamba_scheduler_strategy or "") == "extra_buffer"
    max_running = a.max_running_requests
    if algo is not None:
        if max_running is None:
            max_running = 48                    # _handle_speculative_decoding, every algorithm
        if model.arch in MAMBA_RADIX_ARCHS and not extra_buffer:
            radix_off = True                    # _handle_mamba_radix_cache: no radix cache with speculative decoding
    dp_div = dp_size if dp_attention else 1
    spec_reserve = 0.0
    mamba_gb = 0.0
    slots = None
    if model.hybrid_gdn:
        if algo is not None:
            spec_reserve = per_req * (int(max_running) // dp_div) * draft_tokens / GIB
            rest -= spec_reserve
        if a.max_mamba_cache_size is not None:
            slots = int(a.max_mamba_cache_size) // dp_div
            slots_source = "args.max_mamba_cache_size"
        elif radix_off and max_running is not None:
            slots = int(max_running) // dp_div
            slots_source = "max_running_requests (radix cache off)"
        else:
            r = float(a.mamba_full_memory_ratio)
            slots = int((rest * r / (1 + r) * GIB) // per_req)
            slots_source = "mamba_full_memory_ratio=%s" % r
        mamba_gb = slots * per_req / GIB
        rest -= mamba_gb
    kv_gb = rest
    stage_tokens = [int(rest * GIB) // int(c) for c in stage_cells]
    tokens = stage_tokens[0]

    # request slots (the req_to_token pool), from the profiled count before any cap
    if a.is_set("max_running_requests") or algo is not None:
        pool_reqs = int(max_running)
    else:
        pool_reqs = min(max(int(tokens / float(context_len) * 512), 2048), 4096)
    if model.hybrid_gdn:
        ratio = 1 if radix_off else 3 + ((1 if algo is not None else 2) if extra_buffer else 0)
        pool_reqs = min(pool_reqs, slots // ratio)
        if algo is not None and dp_attention:
            pool_reqs = min(pool_reqs, int(max_running) // dp_size)
    if a.max_total_tokens:
        stage_tokens = [min(t, int(a.max_total_tokens)) for t in stage_tokens]
    stage_tokens = [t // page * page for t in stage_tokens]
    tokens = min(stage_tokens)
    swa_tokens = None
    if model.swa_layers:
        # set_num_tokens_hybrid_swa: the pool is split so that SWA layers hold swa_full_tokens_ratio x the full ones
        kvh = max(1, model.kv_heads // attn_tp)
        per_token = kvh * (model.head_dim + model.v_head_dim) * kv_dtype_bytes(model, a)
        fl, sl = model.full_layers, model.swa_layers
        if fl == 0:
            swa_tokens = tokens
        else:
            ratio_swa = float(a.swa_full_tokens_ratio)
            total = tokens * (per_token * fl + per_token * sl)
            full = int(total / (per_token * fl + ratio_swa * per_token * sl))
            swa_tokens = int(full * ratio_swa) // page * page
            tokens = full // page * page
    if tokens > 0:
        max_reqs = min(tokens // 2 if not a.is_set("max_running_requests") and algo is None
                       else int(max_running) // dp_div, pool_reqs)
    else:
        max_reqs = pool_reqs

    # headroom: (1 - mfs) M0 must hold req_to_token, graphs, activations, workspaces and the draft
    headroom = (1.0 - mfs) * m0
    req_to_token = max(pool_reqs, 0) * (context_len + 4 + draft_tokens) * 4 / GIB
    graphs = 0.0 if a.disable_cuda_graph else 2 * graph_bs * MIB / GIB
    # activations of one prefill chunk: hidden states and the MLP intermediate of the chunk (bf16), an
    # estimate; SGLang's own auto-fraction heuristic reserves far more (1.5 MiB per chunk token).
    chunk_tokens = chunked if chunked and chunked > 0 else int(a.max_prefill_tokens)
    width = max(model.hidden * 8, 3 * max(model.intermediate, model.moe_intermediate * 8) // tp)
    activations = chunk_tokens * width * 2 / GIB
    draft_gb = 0.0
    draft_detail = {}
    if algo in ("EAGLE", "EAGLE3", "NEXTN"):
        if model.mtp_layers or model.hybrid_gdn or model.mla:
            dw = draft_weight_bytes
            if not dw:
                est = model.param_estimate()
                dw = est["mtp"] * _weight_param_bytes(model, a) / tp
            # the MTP module allocates its own embed_tokens/lm_head before taking the target's (peak)
            dw += 2 * model.vocab * model.hidden * _weight_param_bytes(model, a) / tp
        else:
            dw = 0.0
        dkv = max(tokens, 0) * cell_size(model, a, tp, draft=True)
        dgraph = 0.0 if a.disable_cuda_graph else 2 * graphs
        draft_detail = {"weights_gb": round(dw / GIB, 3), "kv_gb": round(dkv / GIB, 3),
                        "graphs_gb": round(dgraph, 3)}
        draft_gb = dw / GIB + dkv / GIB + dgraph
    elif algo == "STANDALONE":
        notes.append("STANDALONE draft model size is not modelled: only SGLang's 6 GiB reserve is counted.")
    need = req_to_token + graphs + activations + WORKSPACE_GIB + draft_gb
    if tokens <= 0:
        outcome = "kv_pool_oom"
    elif need > headroom:
        outcome = "headroom_oom"
    elif tokens < context_len:
        outcome = "context_truncated"
    else:
        outcome = "fits"

    budget = {
        "avail_mem_before_load_gb": round(m0, 2),
        "weights_gb": round(w, 2),
        "rest_gb": round(static, 2),
        "mamba_gb": round(mamba_gb, 2),
        "spec_reserve_gb": round(spec_reserve, 2),
        "kv_gb": round(kv_gb, 2),
        "headroom_gb": round(headroom, 2),
        "draft_gb": round(draft_gb, 2),
        "headroom_need_gb": round(need, 2),
    }
    result_headroom = {"req_to_token_gb": round(req_to_token, 3), "cuda_graphs_gb": round(graphs, 3),
                       "activations_gb": round(activations, 3), "workspace_gb": WORKSPACE_GIB,
                       "draft_gb": round(draft_gb, 3)}
    per_gpu = []
    for i, g in enumerate(used):
        entry = dict(budget)
        entry["index"] = g.get("index", i)
        entry["name"] = g.get("name", "GPU%d" % i)
        per_gpu.append(entry)
    result = {
        "outcome": outcome,
        "mem_fraction_static": mfs,
        "mem_fraction_static_source": mfs_source,
        "reserved_mib": reserved,
        "max_total_num_tokens": tokens,
        "max_running_requests": max_reqs,
        "req_to_token_pool_size": pool_reqs,
        "swa_max_total_num_tokens": swa_tokens,
        "context_length": context_len,
        "cell_size_bytes": int(cell),
        "mamba_bytes_per_request": int(per_req),
        "max_mamba_cache_size": slots,
        "speculative": dict({"algorithm": algo, "num_steps": steps, "eagle_topk": topk,
                             "num_draft_tokens": draft_tokens},
                            **({"given": str(a.speculative_algorithm).upper()}
                               if str(a.speculative_algorithm).upper() != algo else {})) if algo else None,
        "draft": draft_detail or None,
        "chunked_prefill_size": chunked,
        "cuda_graph_max_bs": graph_bs,
        "sources": {"avail_mem_before_load_gb": m0_source, "weights_gb": w_source},
        "per_gpu": per_gpu,
        "headroom_items": result_headroom,
        "notes": notes,
        "architecture": model.arch,
        "tp_size": tp,
        "pp_size": pp,
        "nnodes": int(a.nnodes),
        "ranks_per_node": tp * pp // int(a.nnodes),
        "pp_stages": [{"stage": r, "layers": list(pp_layer_range(model.layers, r, pp)), "kv_layers": stage_layers[r],
                       "max_total_num_tokens": stage_tokens[r]} for r in range(pp)] if pp > 1 else None,
    }
    if _fixes:
        result["fixes"], result["ineffective"] = _fixes_for(config, gpus, args, measured, weights_bytes, result)
    else:
        result["fixes"], result["ineffective"] = [], []
    result["explain"] = explain(result, model)
    return result


def measured_verdict(args, measured, why):
    """The budget verdict when the model cannot be modelled (an architecture the planner does not know, a config
    missing a field) but a log gave the numbers: rest = M1 - M0 (1 - mem_fraction_static) is SGLang's own budget
    for every pool, so rest <= 0 is kv_pool_oom whatever the model; rest > 0 is 'unknown' (the bytes per token
    are what is missing). None when the numbers are not there (the caller raises the config error)."""
    measured = dict(measured or {})
    m0 = measured.get("avail_mem_before_load_gb")
    m1 = measured.get("avail_mem_after_load_gb")
    if m1 is None and m0 is not None and measured.get("weights_gb") is not None:
        m1 = float(m0) - float(measured["weights_gb"])
    given = as_server_args(args).mem_fraction_static
    mfs = given if given is not None else measured.get("mem_fraction_static")
    if m0 is None or m1 is None or mfs is None:
        return None
    m0, m1, mfs = float(m0), float(m1), float(mfs)
    rest = m1 - m0 * (1.0 - mfs)
    outcome = "kv_pool_oom" if rest <= 0 else "unknown"
    lines = ["The model is not modelled (%s); the logged numbers still decide the budget:" % why,
             "rest = %.2f GiB free after load - %.2f GiB x (1 - %s) = %.2f GiB for the KV cache and state pools"
             % (m1, m0, mfs, rest)]
    if outcome == "kv_pool_oom":
        lines.append("Outcome: kv_pool_oom: nothing is left for any pool (short by %.2f GiB): raise "
                     "mem_fraction_static, use more GPUs (tp_size) or a smaller/quantized checkpoint." % -rest)
    else:
        lines.append("Outcome: unknown: %.2f GiB are left for the pools; how many tokens that is depends on the "
                     "model's bytes per token, which the planner cannot read from this config." % rest)
    source = "args" if given is not None else "measured"
    return {"outcome": outcome, "mem_fraction_static": mfs, "mem_fraction_static_source": source,
            "rest_gb": round(rest, 2), "avail_mem_before_load_gb": m0, "avail_mem_after_load_gb": m1,
            "max_total_num_tokens": None, "model_error": str(why),
            "sources": {"avail_mem_before_load_gb": "measured", "weights_gb": "measured"},
            "per_gpu": [], "fixes": [], "ineffective": [], "notes": [str(why)], "explain": lines}


def _weight_param_bytes(model, args):
    a = as_server_args(args)
    q = str(a.quantization or model.quant.get("quant_method") or "").lower()
    if q in ("fp8", "modelopt_fp8", "w8a8_fp8", "w8a8_int8", "mxfp8", "compressed-tensors"):
        return 1.0
    if q in ("awq", "gptq", "awq_marlin", "gptq_marlin", "marlin", "moe_wna16", "w4afp8", "auto-round"):
        return 0.5 + 0.03
    if q in ("mxfp4", "modelopt_fp4", "petit_nvfp4"):
        return 0.5 + 0.03
    dt = str(a.dtype).lower()
    if dt == "auto":
        dt = model.torch_dtype.lower().replace("torch.", "")
        if dt in ("float32", "float"):
            dt = "bfloat16"
    return _dtype_bytes(dt, "args.dtype")


_RANK = ("fits", "context_truncated", "headroom_oom", "kv_pool_oom")


def _better(a, b):
    """Is outcome a at least as good as b (and tokens matter within the same outcome)?"""
    return _RANK.index(a) < _RANK.index(b)


def _fixes_for(config, gpus, args, measured, weights_bytes, base):
    model = Model(config)
    a = ServerArgs(args)
    tp = base["tp_size"]
    cands = []   # (disruption, change, why)
    mfs = base["mem_fraction_static"]
    for target in (0.86, 0.88, 0.9, 0.92, 0.94, 0.95):
        if target > mfs + 1e-9:
            cands.append((1, {"mem_fraction_static": target},
                          "a larger static fraction gives the pools more of the free memory (and the headroom less)"))
    spec = base["speculative"]
    if spec and model.hybrid_gdn:
        mr = base["max_running_requests"]
        for n in (32, 16, 8):
            if n < mr:
                cands.append((2, {"max_running_requests": n},
                              "the verify-state reservation and the mamba slots scale with running requests"))
        if spec["num_draft_tokens"] > 2:
            cands.append((3, {"speculative_num_steps": 1, "speculative_eagle_topk": 1,
                              "speculative_num_draft_tokens": 2},
                          "the verify-state reservation scales with draft tokens (set all three together)"))
    if model.hybrid_gdn:
        ssm = a.mamba_ssm_dtype or model.config_ssm_dtype or "float32"
        if str(ssm).lower() in ("float32", "fp32"):
            cands.append((4, {"mamba_ssm_dtype": "bfloat16"}, "halves the SSM state of every request slot"))
    if str(a.kv_cache_dtype) == "auto" and kv_dtype_bytes(model, a) > 1:
        cands.append((5, {"kv_cache_dtype": "fp8_e4m3"}, "halves the bytes per KV token (small accuracy cost)"))
    if spec:
        cands.append((6, {"speculative_algorithm": None, "speculative_num_steps": None, "speculative_eagle_topk": None,
                          "speculative_num_draft_tokens": None},
                      "without speculation there is no verify-state reservation and no draft model"))
    for n in (2, 4, 8):
        if n > tp and n <= len(gpus) and model.heads % n == 0 and (model.kv_heads % n == 0 or n % model.kv_heads == 0):
            cands.append((7, {"tp_size": n}, "the weights are split over more GPUs"))
            break
    fixes = []
    for disruption, change, why in cands:
        trial = dict(args)
        trial.update(change)
        for k, v in list(trial.items()):
            if v is None:
                trial.pop(k)
        try:
            res = plan(config, gpus, trial, _measured_for(measured, change, base), weights_bytes, _fixes=False)
        except PlanError:
            continue
        if _better(res["outcome"], base["outcome"]) or (
                res["outcome"] == base["outcome"] and base["outcome"] == "context_truncated"
                and res["max_total_num_tokens"] > base["max_total_num_tokens"]):
            fixes.append((disruption, {"change": change, "max_total_num_tokens": res["max_total_num_tokens"],
                                       "outcome": res["outcome"], "why": why}))
    # keep, per kind of change, the least disruptive variant that works (e.g. the smallest mfs raise)
    seen = set()
    out = []
    works = ("fits", "context_truncated")
    still_failing = []
    for disruption, fix in sorted(fixes, key=lambda x: (x[1]["outcome"] not in works, x[0])):
        key = tuple(sorted(fix["change"]))
        if key in seen:
            continue
        seen.add(key)
        if fix["outcome"] in works:
            out.append(fix)
        else:   # better than before, but SGLang still does not start: not a fix
            still_failing.append(dict(fix, why=fix["why"] + "; still %s" % fix["outcome"]))
    # what operators try that does not touch this budget
    ineffective = []
    ctx = base["context_length"]
    guesses = [({"context_length": max(ctx // 2, 1)}, "the context length does not enter the KV/state pool budget; "
                "it only caps one request"),
               ({"disable_cuda_graph": True}, "CUDA graphs live in the headroom, not in the pool budget"),
               ({"enable_torch_compile": False}, "torch.compile does not change the pool budget")]
    if base["mem_fraction_static_source"] == "args" and mfs > 0.6:
        guesses.append(({"mem_fraction_static": round(mfs - 0.1, 2)}, "a lower fraction shrinks the pool budget"))
    for change, why in guesses:
        trial = dict(args)
        trial.update(change)
        try:
            res = plan(config, gpus, trial, measured, weights_bytes, _fixes=False)
        except PlanError:
            continue
        if not _better(res["outcome"], base["outcome"]):
            ineffective.append({"change": change, "max_total_num_tokens": res["max_total_num_tokens"],
                                "outcome": res["outcome"], "why": why})
    return out, still_failing + ineffective


def _measured_for(measured, change, base):
    """Measured numbers stay valid for a trial unless it changes what they measured."""
    if not measured:
        return measured
    m = dict(measured)
    if "tp_size" in change:
        m.pop("weights_gb", None)
        m.pop("avail_mem_after_load_gb", None)
    return m
