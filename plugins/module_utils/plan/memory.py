# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Pre-flight memory planner for SGLang 0.5.9 and 0.5.23.

``plan(config, gpus, args, measured=None, weights_bytes=None, release="0.5.9")`` mirrors SGLang 0.5.9's own
arithmetic (server_args._handle_gpu_memory_settings, ModelRunner.profile_max_num_token,
handle_max_mamba_cache, get_cell_size_per_token) to predict, before launch, whether the KV pool can
be built, how many tokens it will hold, and what the smallest change is that makes it fit. With release 0.5.23
the steps where 0.5.23 differs are its own (v0523.py: memory_hook, the pool configurators, resolve_max_num_reqs);
both are proved by tests/oracle against the release's code.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy

from .chart import explain
from .model import (CUDA_CONTEXT_GIB, DRIVER_RESERVED_GIB, GIB, MIB, Model, NCCL_GIB, PlanError, ServerArgs,
                    WORKSPACE_GIB, _dtype_bytes, as_server_args)
from .sizes import (_refusals, _validate, below_sm80, cell_size, compute_capability_problem, kv_dtype_bytes,
                    kv_layers, mamba_per_request, outside_static_gb, pp_layer_range, spec_params, static_rest_gb)
from . import v059, v0523

# each release's answers at the steps where the releases differ; _Sizing asks the launch's, chosen once
RULES = dict((r.release, r) for r in (v059.Rules(), v0523.Rules()))

# SGLang reads the free memory twice, before and after loading the weights, and sizes the pool with both: what the
# second reading misses goes straight off the pool budget. On the CPU engine the two readings were seen 20-55 MiB
# apart with nothing else running (#60 item 4), on a GPU less but not nothing. A plan that a reading this much lower
# turns into a launch that dies is "marginal", not "fits".
NOISE_MIB = 64.0


def plan(config, gpus, args, measured=None, weights_bytes=None, _fixes=True, release="0.5.9", draft_config=None,
         noise_mib=NOISE_MIB, _noise_gb=0.0):
    """Predict SGLang's memory layout for one launch of ``release`` (0.5.9 or 0.5.23, its args in its own
    words; ``draft_config``: the config.json of speculative_draft_model_path, which 0.5.23 sizes inside the target's
    pool); see the module docstring. ``noise_mib``: how far apart SGLang's two free-memory readings may be; a launch
    that works but dies with the second reading that much lower is ``marginal`` (0 turns the check off)."""
    args = dict(args or {})
    try:
        model = Model(config)
    except PlanError as e:
        verdict = measured_verdict(args, measured, e)
        if verdict is None:
            raise
        return verdict
    sizing = _Sizing(model, gpus, args, dict(measured or {}), weights_bytes, release, draft_config, _noise_gb)
    result = sizing.result()
    same = dict(release=release, draft_config=draft_config)
    if _fixes:
        result["fixes"], result["ineffective"] = _fixes_for(config, gpus, args, sizing.measured, weights_bytes, result,
                                                            same)
        result["marginal"] = _marginal(config, gpus, args, sizing.measured, weights_bytes, result, same, noise_mib,
                                       sizing.kv_gb)
    else:
        result["fixes"], result["ineffective"] = [], []
        result["marginal"] = None
    result["explain"] = explain(result, model)
    return result


class _Sizing(object):
    """One launch sized the way SGLang sizes it, step by step in its order: the resolved args and fraction, the free
    memory before the weights (M0), the weights (W, M1), the pools, the request slots, the headroom. Where the
    releases differ, the release's rules answer (RULES: v059.Rules, v0523.Rules)."""

    def __init__(self, model, gpus, args, measured, weights_bytes, release="0.5.9", draft_config=None, noise_gb=0.0):
        self.model, self.gpus, self.measured, self.draft_config = model, gpus, measured, draft_config
        self.noise_gb = float(noise_gb)      # the second free-memory reading this much lower (plan's marginal check)
        if release not in RULES:
            raise PlanError("release=%s: the planner knows SGLang %s only (each proved against its own code); "
                            "nothing was planned" % (release, ", ".join(sorted(RULES))))
        self.rules = RULES[release]
        self.notes = []
        self.no_requests = False
        self.resolve(args)
        self.m0, self.m0_source = self.free_before_load()
        self.weights(weights_bytes)
        self.pools()
        self.requests()
        self.headroom()

    def resolve(self, args):
        model, rules = self.model, self.rules
        a, tp, pp = _validate(model, self.gpus, rules.args(args))
        self.a, self.tp, self.pp = a, tp, pp
        self.used = self.gpus[:tp * pp]
        problem = compute_capability_problem(self.used, a, rules.release)
        if problem:
            raise PlanError(problem)
        if below_sm80(self.used) and str(a.dtype).lower() != "float16":
            a = self.a = copy.copy(a)
            a.dtype = "float16"                  # SGLang's own override below sm80 (sizes.below_sm80)
            self.notes.append("Compute capability below sm80: SGLang loads the model in float16 (no bfloat16), "
                              "whatever dtype says; planned so.")
        gpu_mem = min(float(g["memory_total_mib"]) for g in self.gpus)
        self.algo, self.steps, self.topk, self.draft_tokens = spec_params(model, a, rules)
        chunk_d, bs_d = rules.buckets(gpu_mem, tp)
        chunked = chunk_d if a.chunked_prefill_size is None else a.chunked_prefill_size
        graph_bs = rules.decode_graph(bs_d if a.cuda_graph_max_bs is None else a.cuda_graph_max_bs, a)
        if a.cuda_graph_bs:
            graph_bs = max(int(b) for b in a.cuda_graph_bs)       # an explicit capture list sets the max
        self.dp_size = int(a.dp_size)
        self.dp_attention = bool(a.enable_dp_attention) and self.dp_size > 1    # dp_size 1 turns it off
        self.page = int(a.page_size)
        _refusals(model, a, self.algo, self.topk, self.page, self.dp_attention, rules)
        rules.refusals(model, a)
        if a.mem_fraction_static is None:
            self.mfs, self.reserved = rules.auto_fraction(self, gpu_mem, chunked, graph_bs)
            self.mfs_source = "auto"
        else:
            self.mfs, self.reserved = float(a.mem_fraction_static), None
            self.mfs_source = "args"
        if self.dp_attention:
            chunked = chunked // self.dp_size            # _handle_data_parallelism, after the fraction was set
        self.chunked, self.graph_bs = chunked, graph_bs

    def free_before_load(self):
        """M0: free GiB after torch.distributed init, minimum over ranks."""
        if self.measured.get("avail_mem_before_load_gb") is not None:
            return float(self.measured["avail_mem_before_load_gb"]), "measured"
        frees = []
        for g in self.used:
            free = g.get("memory_free_mib")
            free = float(free) if free is not None else float(g["memory_total_mib"]) - DRIVER_RESERVED_GIB * 1024
            frees.append(free / 1024.0 - CUDA_CONTEXT_GIB - (NCCL_GIB if self.tp * self.pp > 1 else 0.0))
        return min(frees), "estimated"

    def weights(self, weights_bytes):
        """W: weight GiB per rank of the target model (measured, from the checkpoint, or from the config), and M1."""
        model, a, measured, tp, pp = self.model, self.a, self.measured, self.tp, self.pp
        self.draft_weight_bytes = 0.0
        if measured.get("weights_gb") is not None:
            w, self.w_source = float(measured["weights_gb"]), "measured"
        elif measured.get("avail_mem_after_load_gb") is not None:
            w, self.w_source = self.m0 - float(measured["avail_mem_after_load_gb"]), "measured"
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
                self.w_source = "checkpoint"
            else:
                est = model.param_estimate()
                wb = _weight_param_bytes(model, a)
                total = (est["text"] + est["vision"] + est["mtp"]) * wb
                draft_b = est["mtp"] * wb
                repl = 0.0
                self.w_source = "estimated from config"
            w = ((total - draft_b - repl) / (tp * pp) + repl) / GIB
            self.draft_weight_bytes = draft_b / tp
        self.w = w
        m1 = measured.get("avail_mem_after_load_gb")
        self.m1 = (float(m1) if m1 is not None else self.m0 - w) - self.noise_gb

    def pools(self):
        """ModelRunnerKVCacheMixin.profile_max_num_token / handle_max_mamba_cache / init_memory_pool of 0.5.9 (the
        KV cache configurators of 0.5.23)."""
        model, a, tp, pp, rules = self.model, self.a, self.tp, self.pp, self.rules
        self.static = static_rest_gb(self.m0, self.m1, self.mfs)
        rest = rules.kv_budget(self, self.static)
        attn_tp = self.attn_tp = tp // self.dp_size if self.dp_attention else tp   # KV heads and states per rank
        # pipeline stages: each profiles with its own KV layers; the pool is the smallest stage's (all_reduce MIN),
        # the request pool is sized from stage 0's own count (what rank 0 logs)
        self.stage_layers = [kv_layers(model, r, pp) for r in range(pp)]
        if 0 in self.stage_layers:
            raise PlanError("args.pp_size=%d: pipeline stage %d holds no attention layer (its KV cell is 0 bytes and "
                            "SGLang 0.5.9 divides by it); use a pp_size whose stages each hold a full attention layer"
                            % (pp, self.stage_layers.index(0)))
        stage_cells = [cell_size(model, a, attn_tp, layers=n) for n in self.stage_layers] if pp > 1 \
            else [cell_size(model, a, attn_tp)]
        stage_cells = rules.cells(self, stage_cells)
        self.cell = stage_cells[0]
        self.per_req = mamba_per_request(model, a, attn_tp)
        self.context_len = int(model.context_len if a.context_length is None else a.context_length)
        self.radix_off = bool(a.disable_radix_cache)
        self.extra_buffer = rules.extra_buffer(model, a)
        self.max_running = a.max_running_requests
        if self.algo is not None:
            if self.max_running is None:
                self.max_running = 48                    # _handle_speculative_decoding, every algorithm
            self.radix_off = self.radix_off or rules.radix_off_with_spec(model, self.extra_buffer)
        self.dp_div = self.dp_size if self.dp_attention else 1
        self.spec_reserve = self.mamba_gb = 0.0
        self.slots = None
        if model.hybrid_gdn:
            rest = rules.mamba(self, rest)
        self.kv_gb = rest
        self.stage_tokens = [int(rest * GIB) // int(c) for c in stage_cells]
        self.tokens = self.stage_tokens[0]

    def requests(self):
        """The request slots, the caps and pages, the hybrid SWA split, and the running requests (the release's)."""
        self.rules.requests(self)

    def capped_tokens(self):
        """Each stage's tokens under max_total_tokens and whole pages; the smallest stage's (no SWA split yet)."""
        a = self.a
        if a.max_total_tokens:
            self.stage_tokens = [min(t, int(a.max_total_tokens)) for t in self.stage_tokens]
        self.stage_tokens = [t // self.page * self.page for t in self.stage_tokens]
        self.swa_tokens = None
        return min(self.stage_tokens)

    def headroom(self):
        """(1 - mfs) M0 must hold req_to_token, graphs, activations, workspaces and the draft; the outcome."""
        model, a, tp = self.model, self.a, self.tp
        self.headroom_gb = outside_static_gb(self.m0, self.mfs)
        self.req_to_token = max(self.pool_reqs, 0) * (self.context_len + 4 + self.draft_tokens) * 4 / GIB
        self.graphs = 0.0 if a.disable_cuda_graph else 2 * self.graph_bs * MIB / GIB
        # activations of one prefill chunk: hidden states and the MLP intermediate of the chunk (bf16), an
        # estimate; SGLang's own auto-fraction heuristic reserves far more (1.5 MiB per chunk token).
        chunk_tokens = self.chunked if self.chunked and self.chunked > 0 else int(a.max_prefill_tokens)
        width = max(model.hidden * 8, 3 * max(model.intermediate, model.moe_intermediate * 8) // tp)
        self.activations = chunk_tokens * width * 2 / GIB
        self.draft_gb, self.draft_detail = self.draft()
        self.need = self.req_to_token + self.graphs + self.activations + WORKSPACE_GIB + self.draft_gb
        if self.tokens <= 0 or self.no_requests:
            self.outcome = "kv_pool_oom"
        elif self.need > self.headroom_gb:
            self.outcome = "headroom_oom"
        elif self.tokens < self.context_len:
            self.outcome = "context_truncated"
        else:
            self.outcome = "fits"

    def draft(self):
        """The draft model's GiB outside the static pools, and its parts."""
        model, a, tp, algo = self.model, self.a, self.tp, self.algo
        if algo == "STANDALONE":
            self.notes.append("STANDALONE draft model size is not modelled: only SGLang's 6 GiB reserve is counted.")
        if algo not in ("EAGLE", "EAGLE3", "NEXTN"):
            return 0.0, {}
        if model.mtp_layers or model.hybrid_gdn or model.mla:
            dw = self.draft_weight_bytes
            if not dw:
                est = model.param_estimate()
                dw = est["mtp"] * _weight_param_bytes(model, a) / tp
            # the MTP module allocates its own embed_tokens/lm_head before taking the target's (peak)
            dw += 2 * model.vocab * model.hidden * _weight_param_bytes(model, a) / tp
        else:
            dw = 0.0
        # 0.5.23 keeps the draft's KV in the target's pool (counted in the cell), 0.5.9 in a pool of its own
        dkv = self.rules.draft_kv_gb(self)
        dgraph = 0.0 if a.disable_cuda_graph else 2 * self.graphs
        detail = {"weights_gb": round(dw / GIB, 3), "kv_gb": round(dkv, 3), "graphs_gb": round(dgraph, 3)}
        return dw / GIB + dkv + dgraph, detail

    def per_gpu(self):
        budget = {
            "avail_mem_before_load_gb": round(self.m0, 2),
            "weights_gb": round(self.w, 2),
            "rest_gb": round(self.static, 2),
            "mamba_gb": round(self.mamba_gb, 2),
            "spec_reserve_gb": round(self.spec_reserve, 2),
            "kv_gb": round(self.kv_gb, 2),
            "headroom_gb": round(self.headroom_gb, 2),
            "draft_gb": round(self.draft_gb, 2),
            "headroom_need_gb": round(self.need, 2),
        }
        return [dict(budget, index=g.get("index", i), name=g.get("name", "GPU%d" % i)) for i, g in enumerate(self.used)]

    def speculative(self):
        if not self.algo:
            return None
        a = self.a
        out = {"algorithm": self.algo, "num_steps": self.steps, "eagle_topk": self.topk,
               "num_draft_tokens": self.draft_tokens}
        if str(a.speculative_algorithm).upper() != self.algo:
            out["given"] = str(a.speculative_algorithm).upper()
        return out

    def result(self):
        tp, pp, model = self.tp, self.pp, self.model
        return {
            "outcome": self.outcome,
            "mem_fraction_static": self.mfs,
            "mem_fraction_static_source": self.mfs_source,
            "reserved_mib": self.reserved,
            "max_total_num_tokens": self.tokens,
            "max_running_requests": self.max_reqs,
            "req_to_token_pool_size": self.pool_reqs,
            "swa_max_total_num_tokens": self.swa_tokens,
            "context_length": self.context_len,
            "cell_size_bytes": int(self.cell),
            "mamba_bytes_per_request": int(self.per_req),
            "max_mamba_cache_size": self.slots,
            "speculative": self.speculative(),
            "draft": self.draft_detail or None,
            "chunked_prefill_size": self.chunked,
            "cuda_graph_max_bs": self.graph_bs,
            "sources": {"avail_mem_before_load_gb": self.m0_source, "weights_gb": self.w_source},
            "per_gpu": self.per_gpu(),
            "headroom_items": {"req_to_token_gb": round(self.req_to_token, 3), "cuda_graphs_gb": round(self.graphs, 3),
                               "activations_gb": round(self.activations, 3), "workspace_gb": WORKSPACE_GIB,
                               "draft_gb": round(self.draft_gb, 3)},
            "notes": self.notes,
            "architecture": model.arch,
            "tp_size": tp,
            "pp_size": pp,
            "nnodes": int(self.a.nnodes),
            "ranks_per_node": tp * pp // int(self.a.nnodes),
            "pp_stages": [{"stage": r, "layers": list(pp_layer_range(model.layers, r, pp)),
                           "kv_layers": self.stage_layers[r], "max_total_num_tokens": self.stage_tokens[r]}
                          for r in range(pp)] if pp > 1 else None,
        }


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
    rest = static_rest_gb(m0, m1, mfs)
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
_STARTS = _RANK[:2]        # the outcomes in which SGLang starts (a fix, and a plan the marginal check looks at)


def _better(a, b):
    """Is outcome a at least as good as b (and tokens matter within the same outcome)?"""
    return _RANK.index(a) < _RANK.index(b)


def _fixes_for(config, gpus, args, measured, weights_bytes, base, same=None):
    """(fixes, not fixes): each candidate change replayed through plan(); the least disruptive variant of each kind
    of change that makes SGLang start, then the changes that help but do not suffice and those operators try that do
    not touch this budget."""
    fixes = []
    for disruption, change, why in _candidates(config, gpus, args, base):
        trial = dict(args)
        trial.update(change)
        for k, v in list(trial.items()):
            if v is None:
                trial.pop(k)
        try:
            res = plan(config, gpus, trial, _measured_for(measured, change, base), weights_bytes, _fixes=False,
                       **(same or {}))
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
    works = _STARTS
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
    return out, still_failing + _ineffective(config, gpus, args, measured, weights_bytes, base, same)


def _candidates(config, gpus, args, base):
    """(disruption, change, why) of every change that may make the pools fit, least disruptive first."""
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
    return cands


def _ineffective(config, gpus, args, measured, weights_bytes, base, same=None):
    """What operators try that does not touch this budget, each replayed: the context halved, graphs off, no
    torch.compile, a lower fraction."""
    mfs = base["mem_fraction_static"]
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
            res = plan(config, gpus, trial, measured, weights_bytes, _fixes=False, **(same or {}))
        except PlanError:
            continue
        if not _better(res["outcome"], base["outcome"]):
            ineffective.append({"change": change, "max_total_num_tokens": res["max_total_num_tokens"],
                                "outcome": res["outcome"], "why": why})
    return ineffective


def _marginal(config, gpus, args, measured, weights_bytes, base, same, noise_mib, kv_gb):
    """None, or why the plan is marginal: it works, but a second free-memory reading ``noise_mib`` lower (SGLang's
    readings before and after loading differ by that much) makes the launch die; with the smallest
    mem_fraction_static that stays working with twice that margin (``fix``; None when none up to 0.99 does)."""
    works = _STARTS
    if not noise_mib or noise_mib <= 0 or base["outcome"] not in works:
        return None

    def trial(change, noise):
        return plan(config, gpus, dict(args, **change), measured, weights_bytes, _fixes=False,
                    _noise_gb=noise / 1024.0, **same)

    within = trial({}, noise_mib)
    if within["outcome"] in works:
        return None
    out = {"noise_mib": float(noise_mib), "kv_mib": round(kv_gb * 1024, 1),
           "outcome_within_noise": within["outcome"], "fix": None}
    low = float(base["mem_fraction_static"])
    ups = [f for f in (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 0.99) if f > low]
    # the first that works (a larger one may starve the headroom), then down to the smallest between
    high = next((f for f in ups if trial({"mem_fraction_static": f}, 2 * noise_mib)["outcome"] in works), None)
    if high is None:
        return out
    while high - low > 0.0005:            # the pool budget grows with the fraction: bisect to 0.001
        mid = (low + high) / 2.0
        if trial({"mem_fraction_static": mid}, 2 * noise_mib)["outcome"] in works:
            high = mid
        else:
            low = mid
    mfs = min(0.99, -(-round(high * 10000) // 10) / 1000.0)      # up to the next 0.001
    res = trial({"mem_fraction_static": mfs}, 0.0)
    out["fix"] = {"change": {"mem_fraction_static": mfs}, "max_total_num_tokens": res["max_total_num_tokens"],
                  "outcome": res["outcome"],
                  "why": "the smallest fraction whose pool budget stays clear of twice the readings' margin"}
    return out


def _measured_for(measured, change, base):
    """Measured numbers stay valid for a trial unless it changes what they measured."""
    if not measured:
        return measured
    m = dict(measured)
    if "tp_size" in change:
        m.pop("weights_gb", None)
        m.pop("avail_mem_after_load_gb", None)
    return m
