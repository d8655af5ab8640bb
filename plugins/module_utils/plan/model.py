# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the planner reads: a model's config.json (``Model``), the server args resolved with SGLang 0.5.9's
defaults (``ServerArgs``), GPU profiles, and the errors it raises (``PlanError``).

All sizes in GiB (2**30 bytes), as SGLang logs them ("GB" in SGLang's log lines means GiB).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


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
        self.window_keys, self.attention_chunk = _windows(tc)
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
        self.nextn_layers = int(tc.get("num_nextn_predict_layers") or 0)   # 0.5.23 sizes an MTP draft's KV by it
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


def _windows(tc):
    """What 0.5.23's ModelConfig reads as the sliding window (_get_sliding_window_size), and Llama 4's chunk."""
    window = next((tc[k] for k in ("sliding_window_size", "sliding_window", "window_size") if tc.get(k) is not None),
                  None)
    return window, tc.get("attention_chunk_size")


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
