# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""SGLang 0.5.9's sizing rules, one function each: the automatic fraction and chunk, speculative
parameters, the attention backend, what SGLang refuses, the KV cell, the layers per pipeline rank, the Mamba
state per request, and the weights a checkpoint holds on disk.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import struct
from .model import PlanError, SPEC_ALGOS, ServerArgs, _dtype_bytes, as_server_args


def piecewise_capture_sizes(max_tokens):
    """ServerArgs._generate_piecewise_cuda_graph_tokens of SGLang 0.5.9 (server_args.py:1109)."""
    sizes = (list(range(4, 33, 4)) + list(range(48, 257, 16)) + list(range(288, 513, 32))
             + list(range(576, 1024 + 1, 64)) + list(range(1280, 4096 + 1, 256))
             + list(range(4608, max_tokens + 1, 512)))
    return [x for x in sizes if x <= max_tokens]


def auto_mem_fraction_static(gpu_mem_mib, tp, pp, chunked, graph_bs, spec_algo, max_prefill_tokens=16384,
                             model=None, language_only=False, enable_multimodal=None, piecewise=False,
                             dp_attention=False, dp_size=1):
    """SGLang 0.5.9's mem_fraction_static when the operator leaves it unset (server_args.py:1020-1070 and
    adjust_mem_fraction_for_vlm); returns (mfs, reserved MiB)."""
    if gpu_mem_mib is None:
        return 0.88, None
    if chunked is not None and chunked > 0:
        reserved = 512 + 1.5 * max(chunked, 2048)
    else:
        reserved = 512 + 1.5 * max(max_prefill_tokens, 2048)
    reserved += 2 * graph_bs + 1024 * tp * pp / 8.0
    if dp_attention:
        reserved += graph_bs * dp_size * 3
        if graph_bs > 300:
            reserved += graph_bs * dp_size * 1.5
    if piecewise:
        # piecewise_cuda_graph_max_tokens defaults to chunked_prefill_size, or 2048 for MLA models
        max_tokens = 2048 if (model is not None and model.mla) else chunked
        reserved += len(piecewise_capture_sizes(int(max_tokens))) * 8
    if gpu_mem_mib > 61440:
        reserved = max(reserved, 10240)
    if spec_algo in ("EAGLE", "EAGLE3", "NEXTN"):
        reserved += 2048
    elif spec_algo == "STANDALONE":
        reserved += 6144
    mfs = round((gpu_mem_mib - reserved) / gpu_mem_mib, 3)
    return vlm_adjusted(mfs, model, language_only, enable_multimodal), reserved


def vlm_adjusted(mfs, model, language_only=False, enable_multimodal=None):
    """adjust_mem_fraction_for_vlm (0.5.9 and 0.5.23 alike): a multimodal model keeps less static memory, by the
    size of its vision tower."""
    if model is not None and model.is_multimodal(enable_multimodal) and not language_only and model.vision is not None:
        # getattr(vision_config, "num_hidden_layers", 24) / ("hidden_size", 1024) on the transformers config:
        # a vision config that only has `depth` (Qwen3-VL, Qwen3.5) counts as 24 layers; not re-rounded after
        vh = float(model.vision.get("hidden_size", 1024))
        vl = float(model.vision.get("num_hidden_layers", 24))
        ratio = vl * vh * vh / (24 * 1024.0 * 1024.0)
        factor = min(max(1 - 0.1 * (ratio - 1), 0.8), 1.05)
        mfs = mfs * 0.95 * factor
    return mfs


def spec_params(model, args, rules):
    """(algorithm or None, steps, topk, draft_tokens) as ServerArgs._handle_speculative_decoding of 0.5.9 leaves them:
    NEXTN is EAGLE; EAGLE, EAGLE3 and STANDALONE without speculative_num_steps take auto_choose_speculative_params
    (STANDALONE 3/1/4, LlamaForCausalLM and Grok 5/4/8, every other model 3/1/4) and topk 1 forces steps + 1 draft
    tokens; NGRAM's topk is speculative_ngram_max_bfs_breadth (10) and its draft tokens default to
    speculative_ngram_max_match_window_size (12), its steps are what the release's rules.ngram_steps makes of them."""
    a = as_server_args(args)
    algo = a.speculative_algorithm
    if algo is None:
        return None, 0, 0, 0
    algo = str(algo).upper()
    if algo not in SPEC_ALGOS:
        raise PlanError("args.speculative_algorithm: %r is not a 0.5.9 choice (%s; there is no MTP value, "
                        "use NEXTN)" % (a.speculative_algorithm, ", ".join(SPEC_ALGOS)))
    if algo == "NEXTN":
        algo = "EAGLE"
    steps = a.speculative_num_steps
    topk = a.speculative_eagle_topk
    draft = a.speculative_num_draft_tokens
    if algo == "NGRAM":
        topk = int(a.speculative_ngram_max_bfs_breadth)
        draft = int(draft if draft is not None else a.speculative_ngram_max_match_window_size)
        steps = rules.ngram_steps(steps, draft, topk)
        return algo, (int(steps) if steps is not None else None), topk, draft
    if steps is None:
        if topk is not None or draft is not None:
            raise PlanError("args.speculative_eagle_topk / speculative_num_draft_tokens are set without "
                            "speculative_num_steps: SGLang 0.5.9 fails an assertion; set all three, or none for its "
                            "defaults")
        if algo == "STANDALONE":
            steps, topk, draft = 3, 1, 4
        elif model.arch in ("LlamaForCausalLM", "Grok1ForCausalLM", "Grok1VForCausalLM"):
            steps, topk, draft = 5, 4, 8
        else:
            steps, topk, draft = 3, 1, 4
    if topk is None:
        raise PlanError("args.speculative_num_steps is set without speculative_eagle_topk: SGLang 0.5.9 fails "
                        "comparing it; set speculative_eagle_topk (1 for MTP/NEXTN)")
    steps, topk = int(steps), int(topk)
    draft = steps + 1 if topk == 1 or draft is None else int(draft)
    return algo, steps, topk, draft


# the compute capabilities whose default attention backend attention_backend() models: Ampere (8.0, 8.6, 8.7) and
# Ada (8.9). SGLang picks fa3 on Hopper (9.0) and trtllm_mha on Blackwell (10.0, 12.0) when none is given
MODELLED_COMPUTE_CAPS = ("8.0", "8.6", "8.7", "8.9")


def _cap(gpu):
    """(major, minor) of a GPU's compute_cap ("8.6"), or None when the list does not carry it (a profile)."""
    try:
        major, minor = str(gpu["compute_cap"]).split(".", 1)
        return int(major), int(minor)
    except (KeyError, TypeError, ValueError):
        return None


def below_sm80(gpus):
    """True when a GPU's compute capability is below 8.0. Both releases then load the model in float16 whatever
    args.dtype says - "Compute capability below sm80. Use float16 due to lack of bfloat16 support." (0.5.9
    model_runner.py load_model, 0.5.23 load_model_utils.maybe_downgrade_dtype_for_legacy_gpu) - so the weights and an
    auto KV cache are float16's two bytes (a float32 model's: half)."""
    return any(c is not None and c[0] < 8 for c in (_cap(g) for g in gpus))


def compute_capability_problem(gpus, args, release):
    """None, or why the GPUs' compute capability (nvidia_gpu_facts' compute_cap, when the GPU list carries it) cannot
    be planned: below sm75 SGLang refuses to load the model (both releases: below 8.0 with a minor under 5, "SGLang
    only supports sm75 and above." - whatever the backend); an architecture whose default attention backend this
    planner does not model is refused by name, not planned as Ampere (#61 item 4). With args.attention_backend given,
    any capability SGLang runs on is planned (SGLang uses that backend)."""
    for i, g in enumerate(gpus):
        cap = _cap(g)
        if cap is not None and cap[0] < 8 and cap[1] < 5:
            return ("%s (GPU %s) has compute capability %s: SGLang %s stops at weight loading with \"SGLang only "
                    "supports sm75 and above.\" (Volta and older); use a GPU of compute capability 7.5 or newer. "
                    "Nothing was planned" % (g.get("name", "a GPU"), g.get("index", i), g["compute_cap"], release))
    if as_server_args(args).attention_backend:
        return None
    for i, g in enumerate(gpus):
        cap = g.get("compute_cap")
        if cap is None or str(cap) in MODELLED_COMPUTE_CAPS:
            continue
        name = "%s (GPU %s)" % (g.get("name", "a GPU"), g.get("index", i))
        modelled = ", ".join(MODELLED_COMPUTE_CAPS)
        return ("%s has compute capability %s: SGLang %s's default attention backend there is not the one this planner "
                "models (Ampere and Ada: %s); set args.attention_backend (flashinfer or triton, or the backend "
                "SGLang should use) and plan again; nothing was planned" % (name, cap, release, modelled))
    return None


def attention_backend(model, args):
    """The attention backend SGLang 0.5.9 picks when args.attention_backend is unset, on the GPUs this planner
    models (CUDA before Hopper: sm80/86/89): triton for MLA models and GPT-OSS, flashinfer for the others
    (_handle_attention_backend_compatibility, _handle_model_specific_adjustments). Hopper's fa3 and Blackwell's
    trtllm defaults are not modelled: give attention_backend for those."""
    a = as_server_args(args)
    if a.attention_backend:
        return str(a.attention_backend)
    if model.mla or model.arch in ("GptOssForCausalLM", "Llama4ForConditionalGeneration"):
        return "triton"
    return "flashinfer"


# _handle_model_specific_adjustments (0.5.9): the attention backends these models accept (an assertion otherwise)
_BACKENDS_ALLOWED = {"GptOssForCausalLM": ("triton", "trtllm_mha", "fa3", "fa4", "ascend"),
                     "Llama4ForConditionalGeneration": ("fa3", "aiter", "triton", "trtllm_mha", "intel_xpu")}


def _refusals(model, args, algo, topk, page, dp_attention, rules):
    """The argument combinations ServerArgs of 0.5.9 (or 0.5.23: rules) refuses with a ValueError, named with the fix."""
    allowed = _BACKENDS_ALLOWED.get(model.arch)
    if allowed and attention_backend(model, args) not in allowed:
        raise PlanError("args.attention_backend=%s: SGLang 0.5.9 requires one of %s for %s; pick one of those"
                        % (attention_backend(model, args), ", ".join(allowed), model.arch))
    tree = rules.eagle_tree_backends
    if algo in ("EAGLE", "EAGLE3", "STANDALONE") and topk > 1 and page > 1 and \
            attention_backend(model, args) not in tree:
        raise PlanError("args.speculative_eagle_topk=%d > 1 with page_size=%d: SGLang %s refuses it with the %s "
                        "attention backend (only %s); use page_size 1 or speculative_eagle_topk 1"
                        % (topk, page, rules.release, attention_backend(model, args), "/".join(tree)))
    if algo == "NGRAM":
        if topk > 1 and page > 1 and attention_backend(model, args) != "flashinfer":
            raise PlanError("args.speculative_algorithm=NGRAM (eagle_topk %d) with page_size=%d: SGLang 0.5.9 refuses "
                            "it with the %s attention backend; use page_size 1"
                            % (topk, page, attention_backend(model, args)))
        if dp_attention:
            raise PlanError("args.speculative_algorithm=NGRAM with enable_dp_attention: SGLang 0.5.9 does not "
                            "support it; turn one of them off")
    if algo == "STANDALONE" and dp_attention:
        raise PlanError("args.speculative_algorithm=STANDALONE with enable_dp_attention: SGLang 0.5.9 does not "
                        "support it; turn one of them off")
    nnodes = int(args.nnodes)
    if nnodes < 1 or (int(args.tp_size) * int(args.pp_size)) % nnodes:
        raise PlanError("args.nnodes=%d: tp_size x pp_size = %d must be a multiple of the node count (SGLang 0.5.9: "
                        "\"tp_size must be divisible by number of nodes\"); every node runs the same number of ranks"
                        % (nnodes, int(args.tp_size) * int(args.pp_size)))
    if nnodes > 1 and int(args.dp_size) > 1 and not args.enable_dp_attention:
        raise PlanError("args.nnodes=%d with dp_size=%d: SGLang 0.5.9 refuses multi-node data parallelism without "
                        "enable_dp_attention; run one server per node behind the router instead" % (nnodes, int(args.dp_size)))
    if not 0 <= int(args.node_rank) < nnodes:
        raise PlanError("args.node_rank=%s: 0 .. nnodes - 1 (%d)" % (args.node_rank, nnodes - 1))
    if int(args.pp_size) > 1:
        if algo is not None or args.enable_mixed_chunk:
            raise PlanError("args.pp_size=%d with %s: SGLang 0.5.9 refuses it (\"Pipeline parallelism is not "
                            "compatible with overlap schedule, speculative decoding, mixed chunked prefill\"); use "
                            "pp_size 1 or turn that off" % (int(args.pp_size), "speculative_algorithm=%s" % algo
                                                            if algo is not None else "enable_mixed_chunk"))
        if model.swa_layers:
            raise PlanError("args.pp_size=%d: the hybrid sliding-window pools of %s under pipeline parallelism are not "
                            "modelled by this planner; plan with pp_size 1" % (int(args.pp_size), model.arch))
        if int(args.pp_size) > model.layers:
            raise PlanError("args.pp_size=%d is more than the model's %d layers" % (int(args.pp_size), model.layers))
    ratio = args.swa_full_tokens_ratio
    if not 0 < float(ratio) <= 1.0:
        raise PlanError("args.swa_full_tokens_ratio=%s must lie in (0, 1]" % ratio)
    ctx = args.context_length
    if ctx is not None and int(ctx) > model.context_len:
        raise PlanError("args.context_length=%d is longer than the model's %d (from config.json): SGLang 0.5.9 "
                        "refuses it unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 is set; lower it"
                        % (int(ctx), model.context_len))


def kv_dtype_bytes(model, args):
    a = as_server_args(args)
    kvd = str(a.kv_cache_dtype).lower()
    if kvd == "auto":
        if str(model.quant.get("kv_cache_quant_algo", "")).upper() == "FP8":
            return 1
        dt = str(a.dtype).lower()
        if dt in ("auto",):
            dt = model.torch_dtype.lower().replace("torch.", "")
            if dt in ("float32", "float"):
                dt = "bfloat16"
        return _dtype_bytes(dt, "args.dtype")
    return _dtype_bytes(kvd, "args.kv_cache_dtype")


def cell_size(model, args, tp, draft=False, layers=None):
    """Bytes per token of KV (get_cell_size_per_token); ``layers``: the KV layers of one pipeline stage (kv_layers),
    default all of them."""
    kv = kv_dtype_bytes(model, args)
    if model.mla:
        layers = max(model.mtp_layers, 1) if draft else (model.full_layers if layers is None else layers)
        return (int(model.kv_lora_rank) + int(model.qk_rope_head_dim)) * layers * kv
    kvh = max(1, model.kv_heads // tp)
    if draft:
        layers = 1 if model.hybrid_gdn else max(model.mtp_layers, 1)
        return kvh * (model.head_dim + model.v_head_dim) * layers * kv
    if model.swa_layers:
        return kvh * (model.head_dim + model.v_head_dim) * (model.full_layers + model.swa_layers) * kv
    return kvh * (model.head_dim + model.v_head_dim) * (model.full_layers if layers is None else layers) * kv


def pp_layer_range(layers, pp_rank, pp_size):
    """[start, end) of the layers pipeline stage ``pp_rank`` holds: distributed/utils.get_pp_indices of 0.5.9 without
    SGLANG_PP_LAYER_PARTITION (even split, the last ``layers % pp_size`` stages one layer more)."""
    base, remainder = layers // pp_size, layers % pp_size
    if pp_rank >= pp_size - remainder:
        start = pp_rank * (base + 1) - (pp_size - remainder)
        return start, start + base + 1
    return pp_rank * base, pp_rank * base + base


def kv_layers(model, pp_rank=0, pp_size=1):
    """The layers whose KV cache a pipeline stage holds (profile_max_num_token): the full attention layers inside its
    range for a hybrid linear-attention model, else every layer of the range (num_effective_layers)."""
    start, end = pp_layer_range(model.layers, pp_rank, pp_size)
    if model.hybrid_gdn:
        return sum(1 for i in model.full_ids if start <= i < end)
    return end - start


def mamba_per_request(model, args, tp):
    """Bytes of conv + SSM state of one request (mamba_utils.Mamba2StateShape)."""
    if not model.hybrid_gdn:
        return 0
    k_heads = model.lin_k_heads
    if k_heads % tp:
        k_heads = max(k_heads, tp)
    conv_dim = model.lin_v_heads * model.lin_v_dim + 2 * k_heads * model.lin_k_dim
    conv = (conv_dim // tp) * (model.conv_kernel - 1) * 2
    ssm_name = as_server_args(args).mamba_ssm_dtype or model.config_ssm_dtype or "float32"
    ssm_bytes = _dtype_bytes(ssm_name, "args.mamba_ssm_dtype")
    ssm = (model.lin_v_heads // tp) * model.lin_v_dim * model.lin_k_dim * ssm_bytes
    return (conv + ssm) * model.linear_layers


# ----------------------------------------------------------------------------------------------
# checkpoint bytes from safetensors headers
# ----------------------------------------------------------------------------------------------

def classify_tensor(name):
    if name.startswith(("mtp.", "model.mtp.")) or ".mtp." in name:
        return "draft"
    if "visual." in name or "vision_tower" in name or "vision_model" in name or name.startswith("model.visual"):
        return "vision"
    if name.endswith(("norm.weight", "_norm.weight", "norm.bias", "A_log", "dt_bias")) and "." in name:
        return "replicated"
    return "sharded"


def read_safetensors_header(path):
    """Return the tensor table of one .safetensors file (reads the header only)."""
    with open(path, "rb") as fh:
        head = fh.read(8)
        if len(head) != 8:
            raise PlanError("%s: not a safetensors file (shorter than 8 bytes)" % path)
        (n,) = struct.unpack("<Q", head)
        if n <= 0 or n > 100 * 1024 * 1024:
            raise PlanError("%s: safetensors header length %d is not plausible" % (path, n))
        try:
            table = json.loads(fh.read(n).decode("utf-8"))
        except ValueError as exc:
            raise PlanError("%s: safetensors header is not JSON (%s)" % (path, exc))
    table.pop("__metadata__", None)
    return table


def checkpoint_bytes(model_dir):
    """Exact tensor bytes of a checkpoint directory, split by what SGLang does with them."""
    out = {"total": 0, "sharded": 0, "replicated": 0, "vision": 0, "draft": 0, "files": 0}
    names = sorted(f for f in os.listdir(model_dir) if f.endswith(".safetensors"))
    for fname in names:
        table = read_safetensors_header(os.path.join(model_dir, fname))
        out["files"] += 1
        for tname, meta in table.items():
            start, end = meta.get("data_offsets", (0, 0))
            size = int(end) - int(start)
            out["total"] += size
            out[classify_tensor(tname)] += size
    return out


# ----------------------------------------------------------------------------------------------
# the plan
# ----------------------------------------------------------------------------------------------

def _validate(model, gpus, args):
    if not isinstance(args, dict):
        raise PlanError("args: expected a mapping of SGLang server args (snake_case), got %s" % type(args).__name__)
    a = ServerArgs(args)
    tp = int(a.tp_size)
    pp = int(a.pp_size)
    if tp < 1 or pp < 1:
        raise PlanError("args.tp_size/pp_size must be >= 1 (got tp_size=%s, pp_size=%s)" % (tp, pp))
    if not isinstance(gpus, list) or not gpus:
        raise PlanError("gpus: give at least one GPU as {name, memory_total_mib[, memory_free_mib]}")
    for i, g in enumerate(gpus):
        if not isinstance(g, dict) or not g.get("memory_total_mib"):
            raise PlanError("gpus[%d].memory_total_mib is missing (nvidia-smi --query-gpu=memory.total)" % i)
        if float(g["memory_total_mib"]) <= 0:
            raise PlanError("gpus[%d].memory_total_mib must be positive" % i)
    if model.heads % tp:
        raise PlanError("args.tp_size=%d does not divide config num_attention_heads=%d; choose a tp_size that "
                        "divides it (SGLang fails with 'AssertionError: %d is not divisible by %d')"
                        % (tp, model.heads, model.heads, tp))
    if not model.mla and model.kv_heads % tp and tp % model.kv_heads:
        raise PlanError("args.tp_size=%d and config num_key_value_heads=%d: one must divide the other"
                        % (tp, model.kv_heads))
    if len(gpus) < tp * pp:
        raise PlanError("gpus: %d GPU(s) given but tp_size x pp_size = %d needs that many; lower args.tp_size or "
                        "pass more GPUs" % (len(gpus), tp * pp))
    mfs = a.mem_fraction_static
    if mfs is not None and not (0 < float(mfs) < 1):
        raise PlanError("args.mem_fraction_static=%s must lie strictly between 0 and 1 (e.g. 0.85), or be "
                        "omitted for SGLang's auto value" % mfs)
    for key in ("context_length", "max_running_requests", "max_total_tokens", "page_size", "cuda_graph_max_bs",
                "max_mamba_cache_size"):
        v = a.given.get(key)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v <= 0):
            raise PlanError("args.%s=%r must be a positive integer" % (key, v))
    return a, tp, pp


def static_rest_gb(m0, m1, mfs):
    """SGLang 0.5.9's budget for every pool (profile_max_num_token): the memory free after the weights loaded (M1)
    less what the fraction leaves outside the static part, M0 x (1 - mem_fraction_static). At or below 0 no pool
    can be built, whatever the model."""
    return m1 - m0 * (1.0 - mfs)


def outside_static_gb(m0, mfs):
    """What the fraction keeps out of the static pools: M0 x (1 - mem_fraction_static), the headroom."""
    return (1.0 - mfs) * m0
