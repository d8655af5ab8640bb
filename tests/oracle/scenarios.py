"""Generated planner scenarios (seeded, so every run checks the same ones): model configs of every attention kind
SGLang 0.5.9 sizes differently, server args, GPU sizes and the two measured free-memory numbers.

Families: dense GQA (Llama, Qwen3, Mistral), MoE (Qwen3-MoE, Mixtral), MLA (DeepSeek-V3, with MTP), sliding-window
configs (Gemma 2/3: SGLang 0.5.9 gives them a full pool; GPT-OSS and Llama 4: a hybrid SWA pool), hybrid Gated
DeltaNet (Qwen3-Next, Qwen3.5 with a vision tower), VLMs (Qwen2.5-VL, Qwen3-VL, Gemma 3 with and without
--enable-multimodal). Args: explicit and automatic fractions, every speculative algorithm, KV cache dtypes, page
sizes, TP 1-8, GPUs of 16-192 GiB, piecewise CUDA graphs, DP attention.
"""
import random

GPU_MIB = (16 * 1024, 20 * 1024, 24 * 1024, 32 * 1024, 40 * 1024, 48 * 1024 - 12, 49140, 80 * 1024 - 500,
           81559, 94 * 1024, 141 * 1024, 144 * 1024, 180 * 1024, 192 * 1024)


def _dense(rng):
    arch = rng.choice(["LlamaForCausalLM", "Qwen3ForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM"])
    heads = rng.choice([16, 32, 40, 64])
    kv = rng.choice([h for h in (1, 2, 4, 8, 16) if heads % h == 0])
    hd = rng.choice([64, 128])
    types = {"LlamaForCausalLM": "llama", "Qwen3ForCausalLM": "qwen3", "MistralForCausalLM": "mistral",
             "Qwen2ForCausalLM": "qwen2"}
    cfg = {"architectures": [arch], "model_type": types[arch],
           "hidden_size": heads * hd, "num_hidden_layers": rng.choice([16, 24, 28, 32, 40, 48, 64, 80]),
           "num_attention_heads": heads, "num_key_value_heads": kv, "vocab_size": rng.choice([32000, 128256, 151936]),
           "intermediate_size": heads * hd * rng.choice([3, 4]), "max_position_embeddings": rng.choice(
               [4096, 8192, 32768, 40960, 131072]), "torch_dtype": rng.choice(["bfloat16", "bfloat16", "float16"]),
           "tie_word_embeddings": rng.random() < 0.3}
    if arch == "Qwen3ForCausalLM" or rng.random() < 0.3:
        cfg["head_dim"] = hd
    return cfg


def _moe(rng):
    cfg = _dense(rng)
    if rng.random() < 0.5:
        cfg.update(architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe", num_experts=rng.choice([64, 128]),
                   num_experts_per_tok=8, moe_intermediate_size=rng.choice([768, 1536]), head_dim=128)
    else:
        cfg.update(architectures=["MixtralForCausalLM"], model_type="mixtral", num_local_experts=8,
                   num_experts_per_tok=2)
    return cfg


def _mla(rng):
    return {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 7168,
            "num_hidden_layers": rng.choice([27, 61]), "num_attention_heads": 128, "num_key_value_heads": 128,
            "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
            "v_head_dim": 128, "vocab_size": 129280, "intermediate_size": 18432, "moe_intermediate_size": 2048,
            "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 3,
            "max_position_embeddings": 163840, "num_nextn_predict_layers": 1, "torch_dtype": "bfloat16",
            "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096,
                             "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0}}


def _gemma(rng):
    layers = rng.choice([26, 34, 46, 62])
    arch = rng.choice(["Gemma2ForCausalLM", "Gemma3ForCausalLM"])
    return {"architectures": [arch], "model_type": "gemma2" if arch == "Gemma2ForCausalLM" else "gemma3_text",
            "hidden_size": rng.choice([2304, 3584, 5376]), "num_hidden_layers": layers,
            "num_attention_heads": 16, "num_key_value_heads": rng.choice([4, 8, 16]), "head_dim": 128,
            "vocab_size": 262208, "intermediate_size": 21504, "max_position_embeddings": rng.choice([8192, 131072]),
            "sliding_window": rng.choice([1024, 4096]), "torch_dtype": "bfloat16",
            "layer_types": ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(layers)]}


def _gpt_oss(rng):
    layers = rng.choice([24, 36])
    return {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "hidden_size": 2880,
            "num_hidden_layers": layers, "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64,
            "vocab_size": 201088, "intermediate_size": 2880, "num_local_experts": rng.choice([32, 128]),
            "num_experts_per_tok": 4, "max_position_embeddings": 131072, "sliding_window": 128,
            "torch_dtype": "bfloat16",
            "layer_types": ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(layers)]}


def _llama4(rng):
    return {"architectures": ["Llama4ForConditionalGeneration"], "model_type": "llama4",
            "text_config": {"model_type": "llama4_text", "hidden_size": 5120, "num_hidden_layers": 48,
                            "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128,
                            "vocab_size": 202048, "intermediate_size": 8192, "num_local_experts": 16,
                            "max_position_embeddings": rng.choice([262144, 1048576]), "attention_chunk_size": 8192,
                            "torch_dtype": "bfloat16"},
            "vision_config": {"model_type": "llama4_vision_model", "hidden_size": 1408, "num_hidden_layers": 34,
                              "intermediate_size": 5632}, "torch_dtype": "bfloat16"}


def _qwen3_next(rng):
    return {"architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "hidden_size": 2048,
            "num_hidden_layers": 48, "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256,
            "vocab_size": 151936, "intermediate_size": 5120, "num_experts": 512, "num_experts_per_tok": 10,
            "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512, "full_attention_interval": 4,
            "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_key_head_dim": 128,
            "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "max_position_embeddings": 262144,
            "torch_dtype": "bfloat16", "decoder_sparse_step": 1, "mlp_only_layers": [],
            "norm_topk_prob": True, "partial_rotary_factor": 0.25}


def _qwen3_5(rng):
    layers = rng.choice([32, 48, 64])
    text = {"model_type": "qwen3_5_text", "hidden_size": rng.choice([4096, 5120]), "num_hidden_layers": layers,
            "num_attention_heads": 24, "num_key_value_heads": 4, "head_dim": 256, "vocab_size": 248320,
            "intermediate_size": 17408, "linear_num_key_heads": 16, "linear_num_value_heads": rng.choice([32, 48]),
            "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
            "full_attention_interval": 4, "max_position_embeddings": 262144, "mtp_num_hidden_layers": 1,
            "layer_types": ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(layers)],
            "torch_dtype": "bfloat16", "partial_rotary_factor": 0.25}
    return {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5", "text_config": text,
            "vision_config": {"model_type": "qwen3_5", "depth": 27, "hidden_size": 1152, "intermediate_size": 4304,
                              "num_heads": 16, "out_hidden_size": text["hidden_size"]},
            "torch_dtype": "bfloat16"}


def _vlm(rng):
    kind = rng.choice(["qwen2_5_vl", "qwen3_vl", "gemma3"])
    if kind == "qwen2_5_vl":
        cfg = _dense(rng)
        cfg.update(architectures=["Qwen2_5_VLForConditionalGeneration"], model_type="qwen2_5_vl",
                   vision_config={"depth": 32, "hidden_size": 1280, "intermediate_size": 3420, "num_heads": 16})
        return cfg
    if kind == "qwen3_vl":
        text = _dense(rng)
        text.update(model_type="qwen3_vl_text", head_dim=128)
        del text["architectures"]
        return {"architectures": ["Qwen3VLForConditionalGeneration"], "model_type": "qwen3_vl", "text_config": text,
                "vision_config": {"depth": rng.choice([24, 27]), "hidden_size": rng.choice([1024, 1152]),
                                  "intermediate_size": 4304, "num_heads": 16}, "torch_dtype": "bfloat16"}
    text = _gemma(rng)
    del text["architectures"]
    text["model_type"] = "gemma3_text"
    return {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3", "text_config": text,
            "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 1152, "num_hidden_layers": 27,
                              "intermediate_size": 4304}, "torch_dtype": "bfloat16"}


FAMILIES = (("dense", _dense, 6), ("moe", _moe, 3), ("mla", _mla, 2), ("gemma", _gemma, 2), ("gpt_oss", _gpt_oss, 2),
            ("llama4", _llama4, 1), ("qwen3_next", _qwen3_next, 2), ("qwen3_5", _qwen3_5, 3), ("vlm", _vlm, 3))


def _args(rng, family, cfg):
    a = {"tp_size": rng.choice([1, 1, 2, 2, 4, 8])}
    if rng.random() < 0.45:
        a["mem_fraction_static"] = round(rng.uniform(0.5, 0.95), 3)
    r = rng.random()
    mtp = family in ("mla", "qwen3_5") or cfg.get("num_nextn_predict_layers")
    if r < 0.12 and mtp:
        a["speculative_algorithm"] = "NEXTN"
    elif r < 0.18:
        a["speculative_algorithm"] = "NGRAM"
    elif r < 0.22 and mtp:
        a["speculative_algorithm"] = "EAGLE"
    elif r < 0.25 and family in ("dense", "moe"):
        a["speculative_algorithm"] = rng.choice(["EAGLE", "EAGLE3"])
        a["speculative_draft_model_path"] = "/oracle/draft"
    elif r < 0.27 and family in ("dense", "moe", "vlm"):
        a["speculative_algorithm"] = "STANDALONE"
        a["speculative_draft_model_path"] = "/oracle/draft"
    if "speculative_algorithm" in a and rng.random() < 0.3:
        a["speculative_num_steps"] = rng.choice([1, 2, 3, 5])
        a["speculative_eagle_topk"] = rng.choice([1, 1, 2, 4])
        a["speculative_num_draft_tokens"] = rng.choice([a["speculative_num_steps"] + 1, 8])
    if rng.random() < 0.08:
        a["attention_backend"] = rng.choice(["triton", "flashinfer"])
    if rng.random() < 0.05:
        a["cuda_graph_bs"] = sorted(rng.sample([1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128], 4))
    if rng.random() < 0.2:
        a["kv_cache_dtype"] = rng.choice(["fp8_e4m3", "fp8_e5m2", "bf16"])
    if rng.random() < 0.2:
        a["page_size"] = rng.choice([16, 32, 64])
    if rng.random() < 0.2:
        a["chunked_prefill_size"] = rng.choice([2048, 4096, 8192, 16384])
    if rng.random() < 0.15:
        a["cuda_graph_max_bs"] = rng.choice([8, 16, 64, 128, 256])
    if rng.random() < 0.2:
        a["enable_piecewise_cuda_graph"] = True
    if rng.random() < 0.1 and a["tp_size"] > 1:
        a["enable_dp_attention"] = True
        a["dp_size"] = a["tp_size"]
    if rng.random() < 0.15:
        a["max_running_requests"] = rng.choice([8, 32, 64, 256])
    if rng.random() < 0.1:
        a["max_total_tokens"] = rng.choice([4096, 65536, 500000])
    if rng.random() < 0.1:
        a["context_length"] = rng.choice([2048, 4096, 8192])
    if family in ("vlm", "qwen3_5", "llama4") and rng.random() < 0.4:
        a["enable_multimodal"] = rng.random() < 0.7
    if family in ("qwen3_next", "qwen3_5"):
        if rng.random() < 0.2:
            a["disable_radix_cache"] = True
        if rng.random() < 0.15:
            a["max_mamba_cache_size"] = rng.choice([16, 64, 256])
        if rng.random() < 0.15:
            a["mamba_full_memory_ratio"] = rng.choice([0.5, 0.9, 2.0])
        if rng.random() < 0.1:
            a["mamba_scheduler_strategy"] = "extra_buffer"
    if family in ("gpt_oss", "llama4") and rng.random() < 0.3:
        a["swa_full_tokens_ratio"] = rng.choice([0.2, 0.5, 0.8])
    return a


def _gpu_memory(rng):
    """(gpu_mem_mib, m0_gib, m1_gib): a GPU size, the free memory after the distributed init, and after the weights
    of a rank - anything from a sliver to more than the GPU holds (so some pools cannot be allocated)."""
    gpu = rng.choice(GPU_MIB)
    m0 = round(gpu / 1024.0 - rng.uniform(0.45, 1.6), 2)
    return gpu, m0, round(m0 - rng.uniform(0.02, 1.05) * m0, 2)


def scenarios(n=2400, seed=59):
    """n scenarios: (name, config, args, gpu_mem_mib, m0_gib, m1_gib)."""
    rng = random.Random(seed)
    weights = [w for _n, _f, w in FAMILIES]
    out = []
    for i in range(n):
        name, make, _w = rng.choices(FAMILIES, weights=weights)[0]
        cfg = make(rng)
        args = _args(rng, name, cfg)
        out.append(("%s-%04d" % (name, i), cfg, args) + _gpu_memory(rng))
    return out


PP_FAMILIES = (("dense", _dense, 4), ("moe", _moe, 2), ("mla", _mla, 1), ("gemma", _gemma, 1), ("qwen3_next", _qwen3_next, 1),
               ("qwen3_5", _qwen3_5, 2), ("vlm", _vlm, 1))


def pp_scenarios(n=300, seed=61):
    """n pipeline-parallel scenarios (pp_size 2-4 over 1-2 TP ranks), a stream of their own so the ones above stay
    the same: stages with uneven layer counts, paged pools, caps, and the combinations 0.5.9 refuses (speculative
    decoding, mixed chunked prefill)."""
    rng = random.Random(seed)
    weights = [w for _n, _f, w in PP_FAMILIES]
    out = []
    for i in range(n):
        name, make, _w = rng.choices(PP_FAMILIES, weights=weights)[0]
        cfg = make(rng)
        args = _args(rng, name, cfg)
        args.pop("enable_dp_attention", None)
        args.pop("dp_size", None)
        args["tp_size"] = rng.choice([1, 1, 2])
        args["pp_size"] = rng.choice([2, 2, 3, 4])
        if "speculative_algorithm" in args and rng.random() < 0.7:
            for k in [k for k in args if k.startswith("speculative_")]:
                del args[k]
        if rng.random() < 0.05:
            args["enable_mixed_chunk"] = True
        if rng.random() < 0.25:           # one model across nodes: the ranks split over 2 or 3 nodes
            args["nnodes"] = rng.choice([2, 2, 3])
        out.append(("pp-%s-%04d" % (name, i), cfg, args) + _gpu_memory(rng))
    return out


def mamba_0523_scenarios(n=300, seed=523):
    """n hybrid Gated DeltaNet scenarios in 0.5.23's own words (a stream of their own): the mamba radix cache
    strategies 0.5.9 did not have and the overlap schedule off, which change 0.5.23's state slots per request."""
    rng = random.Random(seed)
    fams = (("qwen3_next", _qwen3_next), ("qwen3_5", _qwen3_5))
    variants = ({"mamba_radix_cache_strategy": "extra_buffer_lazy"}, {"disable_overlap_schedule": True},
                {"disable_overlap_schedule": True, "page_size": 64}, {"mamba_radix_cache_strategy": "no_buffer"},
                {"mamba_radix_cache_strategy": "extra_buffer", "disable_overlap_schedule": True},
                {"disable_radix_cache": True})
    out = []
    for i in range(n):
        name, make = rng.choice(fams)
        cfg = make(rng)
        args = dict((k, v) for k, v in _args(rng, name, cfg).items() if k != "mamba_scheduler_strategy")
        args.update(rng.choice(variants))
        out.append(("m523-%s-%04d" % (name, i), cfg, args) + _gpu_memory(rng))
    return out


def draft_config(cfg, seed=0):
    """The config of a scenario's separate draft model (speculative_draft_model_path): the target's shapes with a
    few layers of its own (an EAGLE head has 1; a STANDALONE draft a small model), no MTP head. Deterministic per
    config, so SGLang and the planner read the same draft."""
    layers = (1, 1, 2, 4)[(int(cfg.get("num_hidden_layers") or (cfg.get("text_config") or {}).get(
        "num_hidden_layers") or 0) + seed) % 4]
    out = dict((k, v) for k, v in cfg.items() if k != "num_nextn_predict_layers")
    if isinstance(out.get("text_config"), dict):
        out["text_config"] = dict((k, v) for k, v in out["text_config"].items() if k != "num_nextn_predict_layers")
        out["text_config"]["num_hidden_layers"] = layers
    out["num_hidden_layers"] = layers
    return out
