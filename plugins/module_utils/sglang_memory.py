# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Pre-flight memory planner for SGLang 0.5.9 (standard library only).

``plan(config, gpus, args, measured=None, weights_bytes=None)`` mirrors SGLang 0.5.9's own
arithmetic (server_args._handle_gpu_memory_settings, ModelRunner.profile_max_num_token,
handle_max_mamba_cache, get_cell_size_per_token) to predict, before launch, whether the KV pool can
be built, how many tokens it will hold, and what the smallest change is that makes it fit.

All sizes in GiB (2**30 bytes), as SGLang logs them ("GB" in SGLang's log lines means GiB).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import struct

GIB = float(1 << 30)
MIB = float(1 << 20)

# Estimated memory gone before SGLang measures M0 (free after torch.distributed init), when no
# `measured` numbers are given: driver/ECC reservation visible as "used" on an idle card, the CUDA
# context, and NCCL buffers for TP > 1.  Replaying a real launch (`measured`) replaces all of them.
DRIVER_RESERVED_GIB = 0.5
CUDA_CONTEXT_GIB = 0.45
NCCL_GIB = 0.35
# Headroom items SGLang does not pre-compute (workspaces, sampler, custom all-reduce buffers).
WORKSPACE_GIB = 0.5

SPEC_ALGOS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")

KNOWN_ARCHITECTURES = frozenset((
    "LlamaForCausalLM", "MistralForCausalLM", "MixtralForCausalLM", "Qwen2ForCausalLM", "Qwen2MoeForCausalLM",
    "Qwen3ForCausalLM", "Qwen3MoeForCausalLM", "Qwen3NextForCausalLM", "Qwen3_5ForCausalLM",
    "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration", "Qwen3_5MoeForCausalLM",
    "Qwen2_5_VLForConditionalGeneration", "Qwen3VLForConditionalGeneration", "DeepseekV2ForCausalLM",
    "DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "Gemma2ForCausalLM", "Gemma3ForCausalLM",
    "Gemma3ForConditionalGeneration", "GptOssForCausalLM", "Phi3ForCausalLM", "GraniteForCausalLM",
    "Glm4ForCausalLM", "Glm4MoeForCausalLM", "KimiK2ForCausalLM", "MiniCPMForCausalLM",
    "Llama4ForConditionalGeneration",
))
# configs/model_config.py is_hybrid_swa_model (0.5.9): only these get a hybrid sliding-window KV pool; every other
# model with sliding-window layers (Gemma 2/3, ...) gets one full pool over all its layers
HYBRID_SWA_ARCHS = ("Llama4ForConditionalGeneration", "GptOssForCausalLM")
# server_args.py _handle_model_specific_adjustments: the hybrid linear-attention models whose radix cache is turned
# off when speculative decoding is on (_handle_mamba_radix_cache, mamba_scheduler_strategy no_buffer)
MAMBA_RADIX_ARCHS = ("Qwen3NextForCausalLM", "Qwen3_5MoeForConditionalGeneration", "Qwen3_5ForConditionalGeneration")
# utils/hf_transformers_utils.py CONTEXT_LENGTH_KEYS, in SGLang's order
CONTEXT_LENGTH_KEYS = ("max_sequence_length", "seq_length", "max_seq_len", "model_max_length", "max_position_embeddings")

_HYBRID_GDN_TYPES = ("qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text")
_DTYPE_BYTES = {
    "float32": 4, "float": 4, "fp32": 4, "bfloat16": 2, "bf16": 2, "float16": 2, "half": 2, "fp16": 2,
    "fp8_e4m3": 1, "fp8_e5m2": 1, "fp8": 1, "fp4_e2m1": 0.5,
}
# memory.total in MiB as nvidia-smi reports it, for planning without the hardware at hand
GPU_PROFILES = {
    "rtx-a6000": ("NVIDIA RTX A6000", 49140),
    "rtx-3090": ("NVIDIA GeForce RTX 3090", 24576),
    "rtx-4090": ("NVIDIA GeForce RTX 4090", 24564),
    "l40s": ("NVIDIA L40S", 46068),
    "a100-40gb": ("NVIDIA A100-SXM4-40GB", 40960),
    "a100-80gb": ("NVIDIA A100-SXM4-80GB", 81920),
    "h100-80gb": ("NVIDIA H100 80GB HBM3", 81559),
    "h200": ("NVIDIA H200", 143771),
}


def gpus_from_profile(profile, count):
    """A list of identical GPU dicts from a GPU_PROFILES name."""
    if profile not in GPU_PROFILES:
        raise PlanError("gpu_profile=%r is unknown (known: %s); or pass gpus as a list of "
                        "{name, memory_total_mib}" % (profile, ", ".join(sorted(GPU_PROFILES))))
    if not isinstance(count, int) or count < 1:
        raise PlanError("gpu_count=%r must be a positive integer" % (count,))
    name, mib = GPU_PROFILES[profile]
    return [{"index": i, "name": name, "memory_total_mib": mib} for i in range(count)]


class PlanError(ValueError):
    """Bad input: the message names the field and the fix."""


# ----------------------------------------------------------------------------------------------
# inputs
# ----------------------------------------------------------------------------------------------

def _text_config(config):
    if not isinstance(config, dict):
        raise PlanError("config: expected the model's config.json as a mapping, got %s" % type(config).__name__)
    tc = config.get("text_config")
    if isinstance(tc, dict):
        merged = dict(config)
        merged.update(tc)
        return merged
    return config


def _req(tc, key, alt=None):
    if key in tc and tc[key] is not None:
        return tc[key]
    if alt is not None:
        return alt
    raise PlanError("config.%s is missing: the planner needs it (check config.json / text_config)" % key)


def _arch(config):
    archs = config.get("architectures")
    if not archs or not isinstance(archs, list):
        raise PlanError("config.architectures is missing: config.json must name the model class")
    arch = archs[0]
    if arch not in KNOWN_ARCHITECTURES:
        raise PlanError("config.architectures: %r is not an architecture this planner knows for SGLang 0.5.9 "
                        "(known: %s)" % (arch, ", ".join(sorted(KNOWN_ARCHITECTURES))))
    return arch


def _dtype_bytes(name, field):
    key = str(name).lower().replace("torch.", "")
    if key not in _DTYPE_BYTES:
        raise PlanError("%s: unknown dtype %r (use one of %s)" % (field, name, ", ".join(sorted(_DTYPE_BYTES))))
    return _DTYPE_BYTES[key]


class Model(object):
    """The shape facts the arithmetic needs, read once from config.json."""

    def __init__(self, config):
        self.raw = config
        self.arch = _arch(config)
        tc = _text_config(config)
        self.model_type = str(tc.get("model_type") or config.get("model_type") or "")
        self.hidden = int(_req(tc, "hidden_size"))
        self.layers = int(_req(tc, "num_hidden_layers"))
        self.heads = int(_req(tc, "num_attention_heads"))
        self.kv_heads = int(tc.get("num_key_value_heads") or self.heads)
        self.head_dim = int(tc.get("head_dim") or self.hidden // self.heads)
        self.v_head_dim = int(tc.get("v_head_dim") or self.head_dim)
        self.vocab = int(_req(tc, "vocab_size"))
        self.intermediate = int(tc.get("intermediate_size") or 4 * self.hidden)
        self.tied = bool(tc.get("tie_word_embeddings", config.get("tie_word_embeddings", False)))
        self.torch_dtype = str(tc.get("torch_dtype") or tc.get("dtype") or config.get("torch_dtype") or "bfloat16")
        # get_context_length: the first of CONTEXT_LENGTH_KEYS, times a rope scaling factor unless the scaling
        # names its original length or is llama3's; 2048 when none is set
        rope = tc.get("rope_scaling") if isinstance(tc.get("rope_scaling"), dict) else None
        factor = 1
        if rope:
            factor = rope.get("factor", 1)
            if "original_max_position_embeddings" in rope or rope.get("rope_type") == "llama3":
                factor = 1
        self.max_pos = None
        for key in CONTEXT_LENGTH_KEYS:
            if tc.get(key) is not None:
                self.max_pos = int(factor * tc[key])
                break
        self.context_len = self.max_pos if self.max_pos is not None else 2048
        self.quant = config.get("quantization_config") or tc.get("quantization_config") or {}
        # MLA
        self.kv_lora_rank = tc.get("kv_lora_rank")
        self.qk_rope_head_dim = tc.get("qk_rope_head_dim")
        self.mla = bool(self.kv_lora_rank)
        # MoE
        self.experts = int(tc.get("num_experts") or tc.get("n_routed_experts") or tc.get("num_local_experts") or 0)
        self.moe_intermediate = int(tc.get("moe_intermediate_size") or 0)
        self.shared_intermediate = int(tc.get("shared_expert_intermediate_size") or 0)
        if tc.get("n_shared_experts"):
            self.shared_intermediate = int(tc["n_shared_experts"]) * self.moe_intermediate
        # layer layout
        layer_types = tc.get("layer_types")
        self.hybrid_gdn = bool(tc.get("linear_num_value_heads")) and (
            self.model_type in _HYBRID_GDN_TYPES or bool(tc.get("full_attention_interval")) or bool(layer_types))
        self.swa_window = tc.get("sliding_window")
        self.full_layers = self.layers
        self.full_ids = None         # hybrid GDN: the full attention layers' ids (the KV layers)
        self.linear_layers = 0
        self.swa_layers = 0
        if self.hybrid_gdn:
            if isinstance(layer_types, list) and layer_types:
                self.full_ids = [i for i, t in enumerate(layer_types) if t == "full_attention"]
            else:
                interval = int(_req(tc, "full_attention_interval"))
                self.full_ids = [i for i in range(self.layers) if (i + 1) % interval == 0]
            self.full_layers = len(self.full_ids)
            self.linear_layers = self.layers - self.full_layers
            self.lin_k_heads = int(_req(tc, "linear_num_key_heads"))
            self.lin_v_heads = int(_req(tc, "linear_num_value_heads"))
            self.lin_k_dim = int(_req(tc, "linear_key_head_dim"))
            self.lin_v_dim = int(_req(tc, "linear_value_head_dim"))
            self.conv_kernel = int(_req(tc, "linear_conv_kernel_dim"))
            self.config_ssm_dtype = tc.get("mamba_ssm_dtype")
        elif self.arch == "Llama4ForConditionalGeneration":
            # get_hybrid_layer_ids: every 4th layer full attention, the others chunked (sliding) attention
            self.full_layers = sum(1 for i in range(self.layers) if (i + 1) % 4 == 0)
            self.swa_layers = self.layers - self.full_layers
        elif self.arch in HYBRID_SWA_ARCHS and isinstance(layer_types, list):
            self.swa_layers = sum(1 for t in layer_types if t == "sliding_attention")
            self.full_layers = sum(1 for t in layer_types if t == "full_attention")
        self.mtp_layers = int(tc.get("mtp_num_hidden_layers") or tc.get("num_nextn_predict_layers") or 0)
        vc = config.get("vision_config") if isinstance(config.get("vision_config"), dict) else None
        self.vision = vc
        archs = config.get("architectures") if isinstance(config.get("architectures"), list) else [self.arch]
        self.multimodal_arch = any(a in MULTIMODAL_ARCHS for a in archs)
        self.multimodal_off_by_default = bool(archs) and archs[0] in MULTIMODAL_OFF_BY_DEFAULT
        self.multimodal = self.is_multimodal(None)

    def is_multimodal(self, enable_multimodal=None):
        """ModelConfig.is_multimodal of SGLang 0.5.9: an architecture on its list, with multimodal on - by default
        except Gemma3, Llama4 and Step3-VL, which need --enable-multimodal."""
        enabled = (not self.multimodal_off_by_default) if enable_multimodal is None else bool(enable_multimodal)
        return enabled and self.multimodal_arch

    # parameter estimate, used only when no checkpoint byte count is known
    def param_estimate(self):
        h = self.hidden
        emb = self.vocab * h * (1 if self.tied else 2)
        q_out = self.heads * self.head_dim * (2 if self.hybrid_gdn else 1)  # Qwen3-Next/3.5 gate the output
        attn = h * q_out + 2 * h * self.kv_heads * self.head_dim + self.heads * self.v_head_dim * h
        if self.mla:
            attn = h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank * self.heads * (
                self.head_dim + self.v_head_dim) + self.heads * self.v_head_dim * h + h * self.heads * self.head_dim
        if self.experts:
            mlp = self.experts * 3 * h * self.moe_intermediate + 3 * h * self.shared_intermediate + h * self.experts
        else:
            mlp = 3 * h * self.intermediate
        lin = 0
        if self.hybrid_gdn:
            kd = self.lin_k_heads * self.lin_k_dim
            vd = self.lin_v_heads * self.lin_v_dim
            lin = h * (2 * kd + 2 * vd) + h * 2 * self.lin_v_heads + (2 * kd + vd) * self.conv_kernel + vd * h
        total = emb + self.full_layers * attn + self.swa_layers * attn + self.linear_layers * lin + self.layers * mlp
        vision = 0
        if self.vision:
            vh = int(self.vision.get("hidden_size") or 0)
            depth = int(self.vision.get("depth") or self.vision.get("num_hidden_layers") or 0)
            vi = int(self.vision.get("intermediate_size") or 4 * vh)
            vision = depth * (4 * vh * vh + 2 * vh * vi)
        mtp = self.mtp_layers * (attn + mlp + 2 * h * h)
        return {"text": total, "vision": vision, "mtp": mtp}


# The server args the planner reads, each with what SGLang 0.5.9's ServerArgs leaves when the operator does not set
# it (None: decided later, from the GPU or the model). ServerArgs reads them once into one record; the planner reads
# that record, never the dict.
ARG_DEFAULTS = {
    "tp_size": 1, "pp_size": 1, "dp_size": 1, "page_size": 1, "mem_fraction_static": None,
    "chunked_prefill_size": None, "cuda_graph_max_bs": None, "cuda_graph_bs": None, "max_prefill_tokens": 16384,
    "context_length": None, "max_running_requests": None, "max_total_tokens": None, "max_mamba_cache_size": None,
    "mamba_full_memory_ratio": 0.9, "mamba_ssm_dtype": None, "mamba_scheduler_strategy": None,
    "swa_full_tokens_ratio": 0.8, "kv_cache_dtype": "auto", "dtype": "auto", "quantization": None,
    "attention_backend": None, "speculative_algorithm": None, "speculative_num_steps": None,
    "speculative_eagle_topk": None, "speculative_num_draft_tokens": None, "speculative_ngram_max_bfs_breadth": 10,
    "speculative_ngram_max_match_window_size": 12, "enable_dp_attention": False, "disable_radix_cache": False,
    "disable_cuda_graph": False, "enable_piecewise_cuda_graph": False, "language_only": False,
    "enable_multimodal": None, "enable_mixed_chunk": False, "nnodes": 1, "node_rank": 0,
}


class ServerArgs(object):
    """The args of one launch, resolved once: every key of ARG_DEFAULTS is an attribute (the operator's value, or
    0.5.9's default when unset or None); ``given`` keeps the mapping as passed (``is_set`` asks it: an explicit value
    and a default are not the same thing for the fraction or the request count)."""

    def __init__(self, args):
        self.given = dict(args or {})
        for key, default in ARG_DEFAULTS.items():
            value = self.given.get(key)
            setattr(self, key, default if value is None else value)

    def is_set(self, key):
        return self.given.get(key) is not None


def as_server_args(args):
    """A ServerArgs from a mapping (or the record itself)."""
    return args if isinstance(args, ServerArgs) else ServerArgs(args)


# ----------------------------------------------------------------------------------------------
# SGLang 0.5.9 defaults
# ----------------------------------------------------------------------------------------------

def bucket_defaults(gpu_mem_mib, tp):
    """(chunked_prefill_size, cuda_graph_max_bs) by GPU memory bucket (server_args.py:911-1075)."""
    if gpu_mem_mib is None:
        return 4096, 160
    if gpu_mem_mib < 20480:
        return 2048, 8
    if gpu_mem_mib < 35840:
        return 2048, 24 if tp < 4 else 80
    if gpu_mem_mib < 61440:
        return 4096, 32 if tp < 4 else 160
    if gpu_mem_mib < 163840:
        return 8192, 256 if tp < 4 else 512
    return 16384, 512


# SGLang 0.5.9's own list (srt/configs/model_config.py multimodal_model_archs, read from the sglang==0.5.9 wheel),
# and the architectures whose multimodal part is off unless --enable-multimodal (ModelConfig.__init__).
MULTIMODAL_ARCHS = (
    "CLIPModel", "DeepseekVL2ForCausalLM", "Ernie4_5_VLMoeForConditionalGeneration", "Gemma3ForConditionalGeneration",
    "Gemma3nForConditionalGeneration", "Glm4vForConditionalGeneration", "Glm4vMoeForConditionalGeneration",
    "GlmOcrForConditionalGeneration", "GlmAsrForConditionalGeneration", "Grok1VForCausalLM", "Grok1AForCausalLM",
    "LlavaLlamaForCausalLM", "Llama4ForConditionalGeneration", "LlavaMistralForCausalLM", "LlavaQwenForCausalLM",
    "LlavaForConditionalGeneration", "LlavaVidForCausalLM", "LightOnOCRForConditionalGeneration", "MiniCPMO",
    "MiniCPMV", "Mistral3ForConditionalGeneration", "MultiModalityCausalLM", "MllamaForConditionalGeneration",
    "NemotronH_Nano_VL_V2", "PixtralForConditionalGeneration", "Qwen2AudioForConditionalGeneration",
    "Qwen2VLForConditionalGeneration", "Qwen2_5_VLForConditionalGeneration", "Qwen3VLForConditionalGeneration",
    "Qwen3VLMoeForConditionalGeneration", "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration",
    "Qwen3OmniMoeForConditionalGeneration", "KimiVLForConditionalGeneration", "InternVLChatModel",
    "InternS1ForConditionalGeneration", "InternS1ProForConditionalGeneration", "Phi4MMForCausalLM",
    "Step3VLForConditionalGeneration", "POINTSV15ChatModel", "DotsVLMForCausalLM", "DotsOCRForCausalLM",
    "Sarashina2VisionForCausalLM", "NVILAForConditionalGeneration", "NVILALiteForConditionalGeneration",
    "DeepseekOCRForCausalLM", "JetVLMForConditionalGeneration", "PaddleOCRVLForConditionalGeneration",
    "MiDashengLMModel", "StepVLForConditionalGeneration", "KimiK25ForConditionalGeneration",
)
MULTIMODAL_OFF_BY_DEFAULT = ("Gemma3ForConditionalGeneration", "Llama4ForConditionalGeneration",
                             "Step3VLForConditionalGeneration")


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
    if model is not None and model.is_multimodal(enable_multimodal) and not language_only and model.vision is not None:
        # getattr(vision_config, "num_hidden_layers", 24) / ("hidden_size", 1024) on the transformers config:
        # a vision config that only has `depth` (Qwen3-VL, Qwen3.5) counts as 24 layers; not re-rounded after
        vh = float(model.vision.get("hidden_size", 1024))
        vl = float(model.vision.get("num_hidden_layers", 24))
        ratio = vl * vh * vh / (24 * 1024.0 * 1024.0)
        factor = min(max(1 - 0.1 * (ratio - 1), 0.8), 1.05)
        mfs = mfs * 0.95 * factor
    return mfs, reserved


def spec_params(model, args):
    """(algorithm or None, steps, topk, draft_tokens) as ServerArgs._handle_speculative_decoding of 0.5.9 leaves them:
    NEXTN is EAGLE; EAGLE, EAGLE3 and STANDALONE without speculative_num_steps take auto_choose_speculative_params
    (STANDALONE 3/1/4, LlamaForCausalLM and Grok 5/4/8, every other model 3/1/4) and topk 1 forces steps + 1 draft
    tokens; NGRAM's topk is speculative_ngram_max_bfs_breadth (10) and its draft tokens default to
    speculative_ngram_max_match_window_size (12), its steps stay as given."""
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


def _refusals(model, args, algo, topk, page, dp_attention):
    """The argument combinations ServerArgs of 0.5.9 refuses with a ValueError, named with the fix."""
    allowed = _BACKENDS_ALLOWED.get(model.arch)
    if allowed and attention_backend(model, args) not in allowed:
        raise PlanError("args.attention_backend=%s: SGLang 0.5.9 requires one of %s for %s; pick one of those"
                        % (attention_backend(model, args), ", ".join(allowed), model.arch))
    if algo in ("EAGLE", "EAGLE3", "STANDALONE") and topk > 1 and page > 1 and \
            attention_backend(model, args) not in ("flashinfer", "fa3"):
        raise PlanError("args.speculative_eagle_topk=%d > 1 with page_size=%d: SGLang 0.5.9 refuses it with the %s "
                        "attention backend (only flashinfer/fa3); use page_size 1 or speculative_eagle_topk 1"
                        % (topk, page, attention_backend(model, args)))
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
    for f in result.get("fixes") or []:
        lines.append("  fix %s -> %s, %s (%s)"
                     % (_fmt_change(f["change"]), f["outcome"], _tokens_said(f, result), f["why"]))
    for f in result.get("ineffective") or []:
        lines.append("  does not help: %s -> %s, %s (%s)"
                     % (_fmt_change(f["change"]), f["outcome"], _tokens_said(f, result), f["why"]))
    for n in result.get("notes") or []:
        lines.append("  note: " + n)
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


def replay_mismatch(result, launch_failure, measured):
    """A replay of a launch's logged numbers that fits, for a launch that died of the pool error: the words that say
    its inputs differ from that launch's, and which. ``result`` is plan() with those numbers, ``measured`` what the log
    had (avail_mem_before_load_gb, avail_mem_after_load_gb, profiled_max_total_num_tokens). None when they agree.

    The args are the launch's own (diagnose reads them from its launch record); what differs is the free memory: SGLang
    0.5.9 sizes the pool with a reading of its own (profile_max_num_token), taken after the logged "Load weight end"."""
    if launch_failure != "kv_pool_oom" or result.get("outcome") == "kv_pool_oom":
        return None
    measured = measured or {}
    m0, m1 = measured.get("avail_mem_before_load_gb"), measured.get("avail_mem_after_load_gb")
    tokens = result.get("max_total_num_tokens")
    head = ("The replay of this launch's logged numbers gives %s, but the launch died of the pool error: the replay's "
            "inputs differ from that launch's. The args are the launch's own; the free memory is not" % (
                "%d KV tokens" % tokens if tokens and tokens > 0 else result.get("outcome")))
    if m0 is None or m1 is None:
        return head + ": the log has no free-memory readings to replay."
    mfs = float(result["mem_fraction_static"])
    floor = float(m0) * (1.0 - mfs)
    profiled = measured.get("profiled_max_total_num_tokens")
    if profiled is not None and result.get("cell_size_bytes"):
        seen = profiled * float(result["cell_size_bytes"]) / GIB + floor
        which = ("SGLang's own profile came to %d tokens, so it saw %.3f GiB free when it sized the pool, %.3f GiB "
                 "less than the %.2f GiB it logged after loading" % (profiled, seen, float(m1) - seen, float(m1)))
    else:
        which = ("SGLang found no room, so it saw at most %.3f GiB free when it sized the pool (%.2f x (1 - %s)), at "
                 "least %.3f GiB less than the %.2f GiB it logged after loading" % (
                     floor, float(m0), mfs, float(m1) - floor, float(m1)))
    return ("%s: %s. Memory was taken between the two readings - on a GPU by another process (nvidia-smi lists it); "
            "with --device cpu the free memory is the machine's, which SGLang's own tokenizer and detokenizer take "
            "while it starts. Leave that much more room: a larger --mem-fraction-static or a smaller pool."
            % (head, which))
