# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""SGLang 0.5.23's rules where they differ from 0.5.9's, one function each (read from the sglang==0.5.23 wheel:
srt/arg_groups/memory_hook.py, cuda_graph_hook.py; proved against that code by tests/oracle, release 0.5.23).
``Rules`` answers each step for memory._Sizing, as v059.Rules does for 0.5.9."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from .model import GIB, PlanError
from .sizes import kv_dtype_bytes, kv_layers, vlm_adjusted

RELEASE = "0.5.23"

# 0.5.9's server args that 0.5.23 took away or renamed: a launch with them dies on the parser, so the plan refuses
# them with the new name (None: gone, its default does what the flag asked)
RENAMED = {"cuda_graph_max_bs": "cuda_graph_max_bs_decode", "cuda_graph_bs": "cuda_graph_bs_decode",
           "mamba_scheduler_strategy": "mamba_radix_cache_strategy", "enable_piecewise_cuda_graph": None}


# configs/model_config.py multimodal_breakable_cuda_graph_supported_model_archs: the multimodal architectures that
# keep the prefill CUDA graph (the others run prefill eagerly: cuda_graph_hook's "multimodal model" rule)
MULTIMODAL_BREAKABLE_GRAPH_ARCHS = (
    "MiniMaxM3SparseForConditionalGeneration", "Cohere2VisionForConditionalGeneration",
    "Glm5NextForConditionalGeneration", "InternS2MobiusForConditionalGeneration", "PaddleOCRVLForConditionalGeneration",
    "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration", "Qwen4ExpForConditionalGeneration",
    "MuseGlimmerForConditionalGeneration", "MuseSparkForConditionalGeneration", "KimiK3ForConditionalGeneration",
    "KimiK25ForConditionalGeneration", "MiniMaxM3SparseForCausalLM", "MiniMaxM3SparseForConditionalGeneration")


def prefill_graph(model, pp, enable_multimodal=None):
    """Whether the prefill CUDA graph (0.5.23's default "breakable" backend) stays on: off with pipeline stages and
    for a multimodal model not on MULTIMODAL_BREAKABLE_GRAPH_ARCHS (cuda_graph_hook)."""
    if pp > 1:
        return False
    return not (model.is_multimodal(enable_multimodal) and model.arch not in MULTIMODAL_BREAKABLE_GRAPH_ARCHS)


def internal_args(args):
    """0.5.23's args in the planner's own (0.5.9) names; PlanError for a 0.5.9 name 0.5.23 does not take."""
    out = {}
    for key, value in args.items():
        if key in RENAMED:
            new = RENAMED[key]
            raise PlanError("args.%s: SGLang %s has no --%s (%s); nothing was planned" % (
                key, RELEASE, key.replace("_", "-"),
                "it is --%s there" % new.replace("_", "-") if new else
                "its prefill CUDA graph is on by default (--cuda-graph-backend-prefill)"))
    back = dict((new, old) for old, new in RENAMED.items() if new)
    for key, value in args.items():
        out[back.get(key, key)] = value
    return out


# kv_cache_configurator.mm_runtime_reservation_gb: a multimodal model's embedding cache (SGLANG_VLM_CACHE_SIZE_MB,
# 100) comes out of the KV budget (the feature-transport pools too, with --mm-feature-transport cuda_ipc/cuda_vmm)
MM_RESERVE_MIB = 100


def bucket_defaults(gpu_mem_mib, tp):
    """(chunked_prefill_size, decode cuda graph max_bs) by GPU memory (memory_hook.handle_gpu_memory_settings)."""
    if gpu_mem_mib is None:
        return 4096, 160
    if gpu_mem_mib < 20 * 1024:
        return 2048, 8
    if gpu_mem_mib < 35 * 1024:
        return 4096, 48 if tp < 4 else 160
    if gpu_mem_mib < 60 * 1024:
        return 4096, 32 if tp < 4 else 160
    if gpu_mem_mib < 160 * 1024:
        return 8192, 256 if tp < 4 else 512
    return 16384, 512


def prefill_capture_sizes(max_bs):
    """cuda_graph_hook.generate_prefill_cuda_graph_batch_sizes: the prefill graph's captured token counts."""
    sizes = (list(range(4, 33, 4)) + list(range(48, 257, 16)) + list(range(288, 513, 32))
             + list(range(576, 1024 + 1, 64)) + list(range(1280, 4096 + 1, 256))
             + list(range(4608, max_bs + 1, 512)))
    return [s for s in sizes if s <= max_bs]


def graph_reserve_mib(graph_bs, prefill_max_bs, mla, dp_attention, dp_size, decode_graph=True, prefill_graph=True):
    """memory_hook.reserve_for_graph_mb: the decode graph (2 MiB per batch slot, more with DP attention) and the
    prefill graph (8 MiB per captured size; 1.5 GiB with an MLA backend)."""
    reserved = 0.0
    if decode_graph:
        reserved += graph_bs * 2
    if dp_attention:
        reserved += graph_bs * dp_size * 3
        if graph_bs > 300:
            reserved += graph_bs * dp_size * 1.5
    if prefill_graph:
        reserved += 1.5 * 1024 if mla else len(prefill_capture_sizes(prefill_max_bs)) * 8
    return reserved


def auto_mem_fraction_static(gpu_mem_mib, tp, pp, chunked, graph_bs, max_prefill_tokens, prefill_max_bs, mla,
                             dp_attention=False, dp_size=1, with_prefill_graph=True):
    """memory_hook.handle_gpu_memory_settings' mem_fraction_static when unset (no post-capture sizing, no
    disaggregation): (GPU - reserve) / GPU, rounded to 3 places; returns (mfs, reserved MiB). The multimodal
    reduction after it is 0.5.9's (adjust_mem_fraction_for_vlm, unchanged)."""
    if gpu_mem_mib is None:
        return 0.95, None
    tokens = max(chunked, 2048) if chunked is not None and chunked > 0 else max(max_prefill_tokens, 2048)
    reserved = 512 + tokens * 1.5 + tp * pp / 8.0 * 1024
    reserved += graph_reserve_mib(graph_bs, prefill_max_bs, mla, dp_attention, dp_size, prefill_graph=with_prefill_graph)
    if gpu_mem_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return round((gpu_mem_mib - reserved) / gpu_mem_mib, 3), reserved


def mamba_extra_buffer(model, a):
    """Whether a hybrid model's mamba radix cache keeps the extra buffer (overrides._mamba_radix_cache_resolution):
    --mamba-radix-cache-strategy auto takes it with the overlap schedule or pages, on the triton linear-attention
    backend (the default) - every hybrid architecture the planner knows supports it."""
    if not model.hybrid_gdn or a.disable_radix_cache:
        return False
    strategy = str(a.mamba_scheduler_strategy or "auto")
    if strategy == "auto":
        overlap = not a.given.get("disable_overlap_schedule")
        return (overlap or int(a.page_size) > 1) and str(a.given.get("linear_attn_backend") or "triton") == "triton"
    return strategy in ("extra_buffer", "extra_buffer_lazy")


def mamba_refusals(model, a):
    """mamba_hook.validate_mamba_no_buffer: with the radix cache on, an explicit no_buffer strategy needs page_size 1
    and the overlap schedule off (0.5.23 asserts both)."""
    if not model.hybrid_gdn or a.disable_radix_cache or str(a.mamba_scheduler_strategy or "") != "no_buffer":
        return
    if int(a.page_size) != 1:
        raise PlanError("args.mamba_radix_cache_strategy=no_buffer with page_size=%s: SGLang %s supports it with "
                        "page_size 1 only; use page_size 1 or the extra_buffer strategy" % (a.page_size, RELEASE))
    if not a.given.get("disable_overlap_schedule"):
        raise PlanError("args.mamba_radix_cache_strategy=no_buffer: SGLang %s does not run it with the overlap "
                        "schedule; set disable_overlap_schedule: true, or use the extra_buffer strategy" % RELEASE)


def mamba_ratio(a, radix_off, extra_buffer):
    """KVCacheConfigurator._calculate_mamba_ratio: mamba state slots per running request - 3, and with the extra
    buffer its tracking slots (allocation_sizing.get_mamba_tracking_slots: 1 lazy or without the overlap schedule,
    else 2); 1 without the radix cache."""
    if radix_off:
        return 1
    if not extra_buffer:
        return 3
    lazy = str(a.mamba_scheduler_strategy or "") == "extra_buffer_lazy"
    return 3 + (1 if lazy or a.given.get("disable_overlap_schedule") else 2)


def draft_kv_cell(cell, layers, model, a, algo, draft_config=None):
    """DefaultPoolConfigurator of 0.5.23: an EAGLE/NEXTN/STANDALONE draft's KV shares the target's pool, its
    layers' share of the target's cell added to each token (spec_aux_hidden_state: the draft's
    num_nextn_predict_layers, else its layers). Without a draft model path the draft is the target's own MTP head,
    num_nextn_predict_layers of its config (none: no draft KV in the pool)."""
    if algo not in ("EAGLE", "EAGLE3", "STANDALONE") or not layers:
        return 0
    if a.given.get("speculative_draft_model_path"):
        if draft_config is None:
            raise PlanError("args.speculative_draft_model_path: SGLang %s sizes the draft model's KV inside the "
                            "target's pool, by the draft's own layers: give its config.json (draft_config); nothing "
                            "was planned" % RELEASE)
        tc = draft_config.get("text_config") if isinstance(draft_config.get("text_config"), dict) else draft_config
        draft_layers = int(tc.get("num_nextn_predict_layers") or tc.get("num_hidden_layers") or 0)
    else:
        draft_layers = model.nextn_layers
    return int(cell * draft_layers / float(layers)) if draft_layers else 0


# the model classes whose get_attention_sliding_window_size() answers config.sliding_window - 1 (models/gpt_oss.py,
# gemma2.py, gemma3_causal.py; Gemma 3's multimodal class asks its language model)
WINDOW_MINUS_ONE_ARCHS = ("GptOssForCausalLM", "Gemma2ForCausalLM", "Gemma3ForCausalLM",
                          "Gemma3ForConditionalGeneration")


def sliding_window(model):
    """load_model_utils.resolve_sliding_window_size of 0.5.23: the model's own method, else ModelConfig's window of
    a hybrid SWA model, else the attention chunk (Llama 4)."""
    if model.arch in WINDOW_MINUS_ONE_ARCHS and model.swa_window is not None:
        return int(model.swa_window) - 1
    if model.window_keys is not None:
        return int(model.window_keys)
    return int(model.attention_chunk) if model.attention_chunk is not None else None


def mamba_pool(sizing, rest):
    """KVCacheConfigurator._handle_max_mamba_cache of 0.5.23: the state slots (each pool has one padding slot
    more), and with speculative decoding the intermediate states of the running requests' draft tokens; what
    is left of ``rest`` for the KV pool."""
    a, per, spec = sizing.a, sizing.per_req, sizing.algo is not None
    ratio = mamba_ratio(sizing.a, sizing.radix_off, sizing.extra_buffer)
    running = max(1, int(sizing.max_running) // sizing.dp_div) if sizing.max_running is not None else None
    if a.max_mamba_cache_size is not None:
        sizing.slots = int(a.max_mamba_cache_size) // sizing.dp_div
        if spec:
            sizing.spec_reserve = per * (min(running, sizing.slots // ratio) + 1) * sizing.draft_tokens / GIB
    elif sizing.radix_off and running is not None:
        sizing.slots = running
        if spec:
            sizing.spec_reserve = per * (sizing.slots + 1) * sizing.draft_tokens / GIB
    else:
        r = float(a.mamba_full_memory_ratio)
        budget = rest * r / (1 + r) * GIB
        if spec:
            d = sizing.draft_tokens
            sizing.slots = int((budget - per * (1 + d)) // (per * (1 + d / float(ratio))))
            sizing.spec_reserve = per * (min(running, sizing.slots // ratio) + 1) * d / GIB
        else:
            sizing.slots = int((budget - per) // per)
    rest -= sizing.spec_reserve
    if sizing.slots <= 0:
        sizing.mamba_gb = 0.0
        return -1.0            # "Not enough GPU memory for hybrid (mamba/linear-attention) state cache"
    sizing.mamba_gb = (sizing.slots + 1) * per / GIB
    return rest - sizing.mamba_gb


def requests(sizing):
    """KVCacheConfigurator.config_from_budget and resolve_max_num_reqs of 0.5.23: the cap and the pages first,
    then one count for the running requests and the request pool alike, from the tokens that remain."""
    model = sizing.model
    tokens = sizing.capped_tokens()
    if model.swa_layers:
        tokens = swa_pools(sizing)
    estimated = max(min(int(tokens / float(sizing.context_len) * 512), 4096), 2048)
    if sizing.max_running is not None:
        reqs = min(max(1, int(sizing.max_running) // sizing.dp_div), tokens // 2)
    else:
        reqs = min(estimated, tokens // 2)
    if model.hybrid_gdn:
        ratio = mamba_ratio(sizing.a, sizing.radix_off, sizing.extra_buffer)
        reqs = min(reqs, sizing.slots // ratio)
        if reqs <= 0 < sizing.slots:
            # resolve_max_num_reqs: "Hybrid (mamba/linear-attention) state cache is too small to serve any
            # requests" - the launch stops before the pools are built
            sizing.no_requests = True
            sizing.notes.append("%d mamba state slots at %d per running request leave no request: SGLang %s "
                                "stops (the state cache is too small); raise mamba_full_memory_ratio or "
                                "max_mamba_cache_size" % (sizing.slots, ratio, RELEASE))
    sizing.tokens, sizing.pool_reqs, sizing.max_reqs = tokens, reqs, reqs


def swa_pools(sizing):
    """HybridSWAPoolConfigurator of 0.5.23: the full layers' tokens straight from the budget, at a cell of the
    full layers plus swa_full_tokens_ratio x the SWA layers; the cap on the full tokens, then the SWA tokens
    from them; the full layers' tokens (and sizing.swa_tokens)."""
    model, page, a = sizing.model, sizing.page, sizing.a
    kvh = max(1, model.kv_heads // sizing.attn_tp)
    per_token = kvh * (model.head_dim + model.v_head_dim) * kv_dtype_bytes(model, a)
    fl, sl = model.full_layers, model.swa_layers
    ratio = float(a.swa_full_tokens_ratio) if fl else 1.0
    budget = int(sizing.kv_gb * GIB)
    tokens = int(budget // (per_token * fl + ratio * per_token * sl)) // page * page
    if a.max_total_tokens:
        tokens = min(tokens, int(a.max_total_tokens)) // page * page
    sizing.swa_tokens = int(tokens * ratio) // page * page if fl else tokens
    window = sliding_window(model)
    if fl and window is not None and window + page >= sizing.swa_tokens:
        # validate_swa_pool_size: the SWA pool cannot admit one request - the launch stops building the pools
        sizing.notes.append("the SWA pool (%d tokens) cannot hold even one request: SGLang %s stops at its "
                            "admission floor, the sliding window (%d) + page_size (%d); raise swa_full_tokens_ratio "
                            "or the KV budget" % (sizing.swa_tokens, RELEASE, window, page))
        return 0
    return tokens


class Rules(object):
    """0.5.23's answer at each step where it differs from 0.5.9 (v059.Rules: the same methods)."""

    release = RELEASE
    # _handle_eagle_family: the two-pass cascade draft-decode of flashinfer, fa3 and triton
    eagle_tree_backends = ("flashinfer", "fa3", "triton")

    def ngram_steps(self, steps, draft, topk):
        """_handle_ngram sets speculative_num_steps to draft // topk when unset (0.5.9 leaves it unset)."""
        return draft // topk if steps is None else steps

    def args(self, args):
        """The launch's args in the planner's names (0.5.9's renamed ones refused); pipeline stages refused."""
        args = internal_args(args)
        if int(args.get("pp_size") or 1) > 1:
            raise PlanError("args.pp_size=%s: pipeline stages on SGLang %s are not planned yet (the oracle does not "
                            "run them for that release); nothing was planned" % (args.get("pp_size"), RELEASE))
        return args

    def buckets(self, gpu_mem, tp):
        return bucket_defaults(gpu_mem, tp)

    def decode_graph(self, graph_bs, a):
        """A default decode graph larger than max_running_requests is cut down to it."""
        if a.cuda_graph_max_bs is None and a.is_set("max_running_requests"):
            return min(graph_bs, int(a.max_running_requests))
        return graph_bs

    def refusals(self, model, a):
        mamba_refusals(model, a)

    def auto_fraction(self, s, gpu_mem, chunked, graph_bs):
        a, model = s.a, s.model
        prefill_bs = min(8192, chunked) if model.mla else chunked
        if a.max_total_tokens is not None:
            prefill_bs = min(prefill_bs, int(a.max_total_tokens))
        mfs, reserved = auto_mem_fraction_static(
            gpu_mem, s.tp, s.pp, chunked, graph_bs, a.max_prefill_tokens, prefill_bs, model.mla, s.dp_attention,
            s.dp_size, prefill_graph(model, s.pp, a.enable_multimodal))
        return vlm_adjusted(mfs, model, bool(a.language_only), a.enable_multimodal), reserved

    def kv_budget(self, s, rest):
        """A multimodal model's embedding cache comes out of the KV budget first."""
        return rest - MM_RESERVE_MIB / 1024.0 if s.model.is_multimodal(s.a.enable_multimodal) else rest

    def cells(self, s, stage_cells):
        """The draft's KV rides in the target's pool: its share added to the cell (one stage: pp > 1 is refused)."""
        (cell,) = stage_cells
        return [cell + draft_kv_cell(cell, kv_layers(s.model), s.model, s.a, s.algo, s.draft_config)]

    def extra_buffer(self, model, a):
        return mamba_extra_buffer(model, a)

    def radix_off_with_spec(self, model, extra_buffer):
        return False

    def mamba(self, s, rest):
        return mamba_pool(s, rest)

    def requests(self, s):
        requests(s)

    def draft_kv_gb(self, s):
        return 0.0
