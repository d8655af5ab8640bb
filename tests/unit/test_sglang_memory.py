"""plan(): SGLang 0.5.9's memory arithmetic, checked against numbers derived by hand (derivations inline)."""
import json
import os
import re
import struct

import pytest

from unit_helpers import FIXTURES, ROOT, fixture_text, load_module_util

SM = load_module_util("plan")
SL = load_module_util("logs")
GIB = 2 ** 30
A6000 = {"name": "NVIDIA RTX A6000", "memory_total_mib": 49140}
H200 = {"name": "NVIDIA H200", "memory_total_mib": 143771}


def cfg(name):
    with open(os.path.join(FIXTURES, "model_configs", name + ".json")) as fh:
        return json.load(fh)


SEED_ARGS = {"tp_size": 2, "mem_fraction_static": 0.85, "speculative_algorithm": "NEXTN",
             "speculative_num_steps": 3, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4,
             "context_length": 262144}
SEED_MEASURED = {"avail_mem_before_load_gb": 46.62, "weights_gb": 25.91, "avail_mem_after_load_gb": 20.71}


# --- auto mem_fraction_static (server_args.py:911-1075), worked values of the reference table ---
@pytest.mark.parametrize("gpu,args,expected", [
    # R = 512 + 1.5*4096 + 2*32 + 1024*1*1/8 = 6848 MiB; (49140-6848)/49140 = 0.8606 -> 0.861
    (A6000, {"tp_size": 1}, 0.861),
    # + 2048 for NEXTN: R = 8896; (49140-8896)/49140 = 0.819
    (A6000, {"tp_size": 1, "speculative_algorithm": "NEXTN"}, 0.819),
    # TP2: R = 512 + 6144 + 64 + 256 = 6976; 0.858
    (A6000, {"tp_size": 2}, 0.858),
    # > 60 GiB: bucket C=8192, B=256 -> R = 512+12288+512+128 = 13440 (> 10240); (143771-13440)/143771 = 0.907
    (H200, {"tp_size": 1}, 0.907),
    (H200, {"tp_size": 1, "speculative_algorithm": "NEXTN"}, 0.892),
])
def test_auto_mem_fraction_static_matches_sglang_0_5_9(gpu, args, expected):
    r = SM.plan(cfg("llama-3.1-8b"), [gpu] * args["tp_size"], args)
    assert r["mem_fraction_static"] == expected
    assert r["mem_fraction_static_source"] == "auto"


def test_auto_fraction_is_reduced_for_a_multimodal_checkpoint_as_sglang_does():
    # Qwen3.6-27B is Qwen3_5ForConditionalGeneration (on SGLang 0.5.9's multimodal list). Its vision config has
    # `depth: 27` but no num_hidden_layers, so adjust_mem_fraction_for_vlm's getattr(..., "num_hidden_layers", 24)
    # counts 24 layers (checked with transformers 4.57.1); hidden 1152. Not re-rounded after the factor:
    # ratio = 24*1152^2/(24*1024^2) = 1.265625; factor = 1 - 0.1*0.265625 = 0.9734375; 0.858 * 0.95 * 0.9734375
    r = SM.plan(cfg("qwen3.6-27b"), [A6000] * 2, {"tp_size": 2})
    assert abs(r["mem_fraction_static"] - 0.858 * 0.95 * 0.9734375) < 1e-9        # 0.79343...


def vlm(arch, **vision):
    c = cfg("llama-3.1-8b")
    c["architectures"] = [arch]
    c["vision_config"] = vision
    return c


def test_multimodal_follows_sglangs_list_and_its_off_by_default_architectures():
    base = 0.858
    # Gemma3: multimodal off unless --enable-multimodal, then reduced (a ViT-L sized tower: factor 1)
    gemma = vlm("Gemma3ForConditionalGeneration", num_hidden_layers=24, hidden_size=1024)
    assert SM.plan(gemma, [A6000] * 2, {"tp_size": 2})["mem_fraction_static"] == base
    on = SM.plan(gemma, [A6000] * 2, {"tp_size": 2, "enable_multimodal": True})
    assert abs(on["mem_fraction_static"] - base * 0.95) < 1e-9
    # a vision config on an architecture SGLang does not list as multimodal: no reduction (not a guess from the name)
    assert SM.plan(vlm("Gemma3ForCausalLM", num_hidden_layers=32), [A6000] * 2,
                   {"tp_size": 2})["mem_fraction_static"] == base
    # num_hidden_layers is read when present: 48 layers of 1024 -> ratio 2 -> factor 0.9
    deep = SM.plan(vlm("Qwen2_5_VLForConditionalGeneration", num_hidden_layers=48, hidden_size=1024), [A6000] * 2,
                   {"tp_size": 2})
    assert abs(deep["mem_fraction_static"] - base * 0.95 * 0.9) < 1e-9
    # language_only skips it
    assert SM.plan(vlm("Qwen2_5_VLForConditionalGeneration"), [A6000] * 2,
                   {"tp_size": 2, "language_only": True})["mem_fraction_static"] == base


def test_piecewise_cuda_graphs_and_dp_attention_add_to_the_reserve_before_the_large_gpu_floor():
    # A6000, TP2: R = 6976; piecewise (max tokens = chunked 4096): 8+14+8+8+12 capture sizes = 50 -> + 400 MiB
    sizes = SM.piecewise_capture_sizes(4096)
    assert len(sizes) == 50 and sizes[:3] == [4, 8, 12] and sizes[-1] == 4096
    r = SM.plan(cfg("llama-3.1-8b"), [A6000] * 2, {"tp_size": 2, "enable_piecewise_cuda_graph": True})
    assert r["mem_fraction_static"] == round((49140 - 6976 - 50 * 8) / 49140.0, 3)
    # DP attention: + cuda_graph_max_bs * dp_size * 3 = 32 * 2 * 3
    d = SM.plan(cfg("llama-3.1-8b"), [A6000] * 2, {"tp_size": 2, "enable_dp_attention": True, "dp_size": 2})
    assert d["mem_fraction_static"] == round((49140 - 6976 - 192) / 49140.0, 3)
    # on a > 60 GiB GPU the floor of 10 GiB comes after them: H200 R = 13440 + piecewise (8192 -> 58 sizes)
    h = SM.plan(cfg("llama-3.1-8b"), [H200], {"tp_size": 1, "enable_piecewise_cuda_graph": True})
    assert h["mem_fraction_static"] == round((143771 - 13440 - len(SM.piecewise_capture_sizes(8192)) * 8) / 143771.0, 3)


# --- cell size (get_cell_size_per_token) ---
def test_gqa_cell_size_llama_8b_tp1_and_tp2():
    m = SM.Model(cfg("llama-3.1-8b"))
    # 8 KV heads * (128+128) * 32 layers * 2 B = 131072 B/token; TP2 halves the heads
    assert SM.cell_size(m, {}, 1) == 131072
    assert SM.cell_size(m, {}, 2) == 65536
    assert SM.cell_size(m, {"kv_cache_dtype": "fp8_e4m3"}, 1) == 65536


def test_kv_heads_are_replicated_not_split_when_tp_exceeds_them():
    m = SM.Model(cfg("qwen3-next-80b-a3b"))
    # 2 KV heads, 12 full-attention layers (interval 4 of 48): TP1 2*512*12*2 = 24576; TP2 and TP4 both 12288
    assert m.full_layers == 12 and m.linear_layers == 36
    assert SM.cell_size(m, {}, 1) == 24576
    assert SM.cell_size(m, {}, 2) == 12288
    assert SM.cell_size(m, {}, 4) == 12288


def test_mla_cell_size_is_not_divided_by_tp():
    m = SM.Model(cfg("deepseek-v3"))
    # (512 + 64) * 61 layers * 2 B = 70272 at any TP
    assert SM.cell_size(m, {}, 1) == 70272
    assert SM.cell_size(m, {}, 8) == 70272


def test_hybrid_state_per_request_qwen3_next_and_qwen3_6():
    nxt = SM.Model(cfg("qwen3-next-80b-a3b"))
    # conv_dim = 32*128 + 2*16*128 = 8192; conv 8192*3*2 = 49152; ssm 32*128*128*4 = 2097152; x36 = 77266944
    assert SM.mamba_per_request(nxt, {}, 1) == 77266944
    # TP4: conv 2048*3*2 = 12288; ssm 8*128*128*4 = 524288; x36 = 19316736 (18.4 MiB)
    assert SM.mamba_per_request(nxt, {}, 4) == 19316736
    q36 = SM.Model(cfg("qwen3.6-27b"))
    # conv_dim = 48*128 + 2*16*128 = 10240; conv 10240*3*2 = 61440; ssm 48*128*128*4 = 3145728; x48 = 153944064
    assert SM.mamba_per_request(q36, {}, 1) == 153944064
    # bf16 SSM: 61440 + 1572864 = 1634304 x48 = 78446592
    assert SM.mamba_per_request(q36, {"mamba_ssm_dtype": "bfloat16"}, 1) == 78446592


def test_reference_worked_example_rest_20_gib_tp4_without_speculation():
    # rest = M1 - M0(1-mfs) = 40 - 40*0.5 = 20 GiB; mamba = 20*0.9/1.9 = 9.4737 GiB -> floor(/19316736 B) = 526 slots
    r = SM.plan(cfg("qwen3-next-80b-a3b"), [H200] * 4, {"tp_size": 4, "mem_fraction_static": 0.5},
                measured={"avail_mem_before_load_gb": 40.0, "avail_mem_after_load_gb": 40.0, "weights_gb": 0.0})
    assert r["max_mamba_cache_size"] == 526
    # KV = 20 - 526*19316736/2^30 = 10.5373 GiB -> floor(10.5373*2^30)//12288 = 920 773 tokens ("about 920 k")
    kv_bytes = int(20 * GIB) - 526 * 19316736
    assert r["max_total_num_tokens"] == kv_bytes // 12288
    assert r["per_gpu"][0]["kv_gb"] == pytest.approx(10.54, abs=0.01)
    # max_num_reqs <= slots // 3 (radix cache on, no_buffer) = 175
    assert r["max_running_requests"] == 175


def test_reference_worked_example_rest_20_gib_tp4_with_nextn():
    r = SM.plan(cfg("qwen3-next-80b-a3b"), [H200] * 4,
                {"tp_size": 4, "mem_fraction_static": 0.5, "speculative_algorithm": "NEXTN"},
                measured={"avail_mem_before_load_gb": 40.0, "avail_mem_after_load_gb": 40.0, "weights_gb": 0.0})
    # 48 requests x 4 draft tokens x 19316736 B = 3.454 GiB verify state; 48 slots = 0.864 GiB; KV 15.68 GiB
    assert r["per_gpu"][0]["spec_reserve_gb"] == pytest.approx(3.45, abs=0.01)
    assert r["per_gpu"][0]["mamba_gb"] == pytest.approx(0.86, abs=0.01)
    assert r["per_gpu"][0]["kv_gb"] == pytest.approx(15.68, abs=0.01)
    assert r["max_mamba_cache_size"] == 48
    # SGLang 0.5.9 runs NEXTN as EAGLE (server_args.py _handle_speculative_decoding); the plan says both
    assert r["speculative"] == {"algorithm": "EAGLE", "given": "NEXTN", "num_steps": 3, "eagle_topk": 1,
                                "num_draft_tokens": 4}


# --- the motivating case ---
def test_seed_qwen3_6_27b_tp2_nextn_mfs_085_is_the_memory_pool_error():
    r = SM.plan(cfg("qwen3.6-27b"), [A6000] * 2, SEED_ARGS, measured=SEED_MEASURED)
    assert r["outcome"] == "kv_pool_oom"
    assert r["max_total_num_tokens"] <= 0
    b = r["per_gpu"][0]
    # rest = 20.71 - 46.62*0.15 = 13.717 GiB
    assert b["rest_gb"] == pytest.approx(13.72, abs=0.01)
    # per request at TP2: 48*(5120*3*2 + 24*128*128*4) = 76972032 B; x 48 req x 4 draft = 13.764 GiB
    assert b["spec_reserve_gb"] == pytest.approx(76972032 * 192 / GIB, abs=0.01)
    # 48 mamba slots (radix off, 48 running requests) = 3.441 GiB; 13.717 - 13.764 - 3.441 = -3.49
    assert b["mamba_gb"] == pytest.approx(3.44, abs=0.01)
    assert b["kv_gb"] == pytest.approx(-3.49, abs=0.01)
    assert len(r["per_gpu"]) == 2
    text = "\n".join(r["explain"])
    assert "Not enough memory" in text and "GPU 1" in text and "over budget by 3.49 GiB" in text


def test_seed_fixes_each_with_its_token_count_and_context_halving_shown_not_to_help():
    r = SM.plan(cfg("qwen3.6-27b"), [A6000] * 2, SEED_ARGS, measured=SEED_MEASURED)
    changes = {tuple(sorted(f["change"])): f for f in r["fixes"]}
    # no speculation: rest 13.717 split by ratio 0.9 -> mamba 6.498 GiB = 90 slots (6.452 GiB) -> KV 7.265 GiB
    nospec = changes[("speculative_algorithm", "speculative_eagle_topk", "speculative_num_draft_tokens",
                      "speculative_num_steps")]
    slots = int(13.717 * 0.9 / 1.9 * GIB // 76972032)
    assert nospec["max_total_num_tokens"] == pytest.approx((13.717 * GIB - slots * 76972032) / 32768, rel=1e-3)
    # bf16 SSM: per request 48*(30720+786432) = 39223296 B; (192+48) x -> 8.767 GiB; KV 4.95 GiB
    bf16 = changes[("mamba_ssm_dtype",)]
    assert bf16["max_total_num_tokens"] == pytest.approx((13.717 * GIB - 240 * 39223296) / 32768, rel=1e-3)
    assert ("max_running_requests",) in changes
    assert ("speculative_eagle_topk", "speculative_num_draft_tokens", "speculative_num_steps") in changes
    for f in r["fixes"]:
        assert f["outcome"] != "kv_pool_oom" and f["why"]
    # working fixes come before partial ones
    outs = [f["outcome"] in ("fits", "context_truncated") for f in r["fixes"]]
    assert outs == sorted(outs, reverse=True)
    bad = {tuple(sorted(f["change"])): f for f in r["ineffective"]}
    half = bad[("context_length",)]
    assert half["change"] == {"context_length": 131072}
    assert half["outcome"] == "kv_pool_oom" and half["max_total_num_tokens"] == r["max_total_num_tokens"]
    assert bad[("disable_cuda_graph",)]["max_total_num_tokens"] == r["max_total_num_tokens"]
    assert bad[("mem_fraction_static",)]["max_total_num_tokens"] < r["max_total_num_tokens"]


def test_seed_is_predicted_without_measurements_too():
    r = SM.plan(cfg("qwen3.6-27b"), [A6000] * 2, SEED_ARGS)
    assert r["outcome"] == "kv_pool_oom"
    assert r["sources"] == {"avail_mem_before_load_gb": "estimated", "weights_gb": "estimated from config"}
    # 27.7 B params estimated from config (the card says 27.8 B)
    est = SM.Model(cfg("qwen3.6-27b")).param_estimate()
    assert 27.0e9 < sum(est.values()) < 28.5e9


def test_replaying_a_real_launch_agrees_with_the_tokens_sglang_logged():
    facts = SL.parse_log(fixture_text("sglang_logs", "ready_tp1_dense.log"))["facts"]
    measured = {k: facts[k] for k in ("avail_mem_before_load_gb", "weights_gb", "avail_mem_after_load_gb")}
    r = SM.plan(cfg("llama-3.1-8b"), [A6000], {"tp_size": 1, "mem_fraction_static": facts["mem_fraction_static"]},
                measured=measured)
    assert r["max_total_num_tokens"] == facts["kv_tokens"]
    assert r["outcome"] == "fits"


def test_context_truncated_when_the_pool_is_smaller_than_one_request():
    r = SM.plan(cfg("qwen3-32b"), [A6000], {"tp_size": 1, "mem_fraction_static": 0.9},
                weights_bytes=int(61.03 * GIB / 1.5))
    assert r["outcome"] in ("context_truncated", "fits")
    r = SM.plan(cfg("llama-3.1-8b"), [A6000], {"tp_size": 1, "mem_fraction_static": 0.5})
    assert r["outcome"] == "context_truncated" and 0 < r["max_total_num_tokens"] < 131072
    assert any(f["change"] == {"kv_cache_dtype": "fp8_e4m3"} for f in r["fixes"])


def test_headroom_oom_when_the_fraction_leaves_no_room_for_the_draft():
    args = dict(SEED_ARGS, mem_fraction_static=0.97, max_running_requests=8, mamba_ssm_dtype="bfloat16")
    r = SM.plan(cfg("qwen3.6-27b"), [A6000] * 2, args, measured=SEED_MEASURED)
    assert r["max_total_num_tokens"] > 0
    assert r["outcome"] == "headroom_oom"
    assert r["per_gpu"][0]["headroom_need_gb"] > r["per_gpu"][0]["headroom_gb"]


def test_page_size_aligns_tokens_and_max_total_tokens_caps_them():
    base = {"tp_size": 1, "mem_fraction_static": 0.861}
    m = {"avail_mem_before_load_gb": 46.9, "weights_gb": 15.07, "avail_mem_after_load_gb": 31.83}
    r = SM.plan(cfg("llama-3.1-8b"), [A6000], dict(base, page_size=64), measured=m)
    assert r["max_total_num_tokens"] == 207346 // 64 * 64
    r = SM.plan(cfg("llama-3.1-8b"), [A6000], dict(base, max_total_tokens=100000), measured=m)
    assert r["max_total_num_tokens"] == 100000


def test_checkpoint_bytes_from_safetensors_headers(tmp_path):
    def write(path, tensors):
        table, off = {}, 0
        for name, nbytes in tensors:
            table[name] = {"dtype": "BF16", "shape": [nbytes // 2], "data_offsets": [off, off + nbytes]}
            off += nbytes
        table["__metadata__"] = {"format": "pt"}
        head = json.dumps(table).encode()
        with open(path, "wb") as fh:
            fh.write(struct.pack("<Q", len(head)) + head + b"\0" * off)
    write(tmp_path / "model-00001-of-00002.safetensors",
          [("model.layers.0.mlp.up_proj.weight", 4000), ("model.norm.weight", 20)])
    write(tmp_path / "model-00002-of-00002.safetensors",
          [("mtp.fc.weight", 300), ("model.visual.blocks.0.attn.qkv.weight", 100)])
    b = SM.checkpoint_bytes(str(tmp_path))
    assert b == {"total": 4420, "sharded": 4000, "replicated": 20, "vision": 100, "draft": 300, "files": 2}
    # per rank at TP2: (4420 - 300 - 20)/2 + 20 = 2070 bytes
    r = SM.plan(cfg("llama-3.1-8b"), [A6000] * 2, {"tp_size": 2}, weights_bytes=b)
    assert r["per_gpu"][0]["weights_gb"] == round(2070 / GIB, 2)


def test_a_broken_safetensors_file_is_named(tmp_path):
    (tmp_path / "x.safetensors").write_bytes(b"\x01")
    with pytest.raises(SM.PlanError, match="x.safetensors"):
        SM.checkpoint_bytes(str(tmp_path))


@pytest.mark.parametrize("mutate,match", [
    (lambda c, g, a: c.update(architectures=["NotAModel"]), "config.architectures: 'NotAModel'"),
    (lambda c, g, a: a.update(tp_size=5), "args.tp_size=5 does not divide config num_attention_heads=32"),
    (lambda c, g, a: a.update(mem_fraction_static=1.2), "args.mem_fraction_static=1.2 must lie strictly"),
    (lambda c, g, a: a.update(mem_fraction_static=0), "args.mem_fraction_static=0 must lie strictly"),
    (lambda c, g, a: a.update(tp_size=4), "gpus: 2 GPU.s. given but tp_size x pp_size = 4"),
    (lambda c, g, a: c.pop("num_hidden_layers"), "config.num_hidden_layers is missing"),
    (lambda c, g, a: g.__setitem__(0, {"name": "x"}), r"gpus\[0\].memory_total_mib is missing"),
    (lambda c, g, a: a.update(speculative_algorithm="MTP"), "no MTP value, use NEXTN"),
    (lambda c, g, a: a.update(context_length="long"), "args.context_length='long' must be a positive integer"),
    (lambda c, g, a: a.update(kv_cache_dtype="int3"), "args.kv_cache_dtype: unknown dtype 'int3'"),
])
def test_bad_input_is_a_clear_error_naming_the_field(mutate, match):
    c, g, a = cfg("llama-3.1-8b"), [dict(A6000), dict(A6000)], {"tp_size": 1}
    mutate(c, g, a)
    with pytest.raises(SM.PlanError, match=match):
        SM.plan(c, g, a)


def test_plan_is_plain_data():
    r = SM.plan(cfg("deepseek-v3"), [H200] * 8, {"tp_size": 8, "speculative_algorithm": "NEXTN"})
    json.dumps(r)
    assert r["cell_size_bytes"] == 70272


# --- what the oracle (tests/oracle, SGLang 0.5.9's own code) taught the planner; worked by hand here too ---
def _dense(arch="LlamaForCausalLM", **kw):
    c = {"architectures": [arch], "model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
         "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256, "intermediate_size": 14336,
         "max_position_embeddings": 8192, "torch_dtype": "bfloat16"}
    c.update(kw)
    return c


MEAS = {"avail_mem_before_load_gb": 46.0, "avail_mem_after_load_gb": 30.0}


def test_gemma_sliding_window_layers_still_get_one_full_pool():
    # 0.5.9 gives a hybrid SWA pool only to GPT-OSS and Llama 4 (is_hybrid_swa_model); Gemma 3 with layer_types:
    # cell = 8 heads x 256 x 34 layers x 2 B = 139264; rest = 30 - 46 x 0.15 = 23.1 GiB -> 178101 tokens
    g = _dense("Gemma3ForCausalLM", model_type="gemma3_text", num_hidden_layers=34, head_dim=128,
               sliding_window=1024, layer_types=["full_attention" if (i + 1) % 6 == 0 else "sliding_attention"
                                                 for i in range(34)])
    r = SM.plan(g, [A6000], {"mem_fraction_static": 0.85}, measured=MEAS, _fixes=False)
    assert r["cell_size_bytes"] == 8 * 256 * 34 * 2 and r["swa_max_total_num_tokens"] is None
    assert r["max_total_num_tokens"] == int((30 - 46 * (1 - 0.85)) * GIB) // (8 * 256 * 34 * 2)


def test_gpt_oss_pool_is_capped_and_paged_before_the_sliding_window_split():
    # 24 layers, every other sliding; per token per layer 8 x 128 x 2 B = 2048 B. Capped at 65536 first, then
    # full = 65536 x (12 + 12) / (12 + 0.5 x 12) = 87381 -> paged to 87376 (page 16); swa = int(87381 x 0.5) = 43690 -> 43680
    g = _dense("GptOssForCausalLM", model_type="gpt_oss", num_hidden_layers=24, num_attention_heads=64,
               head_dim=64, hidden_size=2880, sliding_window=128, num_local_experts=32,
               layer_types=["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(24)])
    r = SM.plan(g, [A6000], {"mem_fraction_static": 0.85, "max_total_tokens": 65536, "page_size": 16,
                             "swa_full_tokens_ratio": 0.5}, measured=MEAS, _fixes=False)
    assert r["max_total_num_tokens"] == 87376 and r["swa_max_total_num_tokens"] == 43680


def test_speculative_defaults_follow_the_exact_architecture_and_ngram_its_own_knobs():
    llama4 = {"architectures": ["Llama4ForConditionalGeneration"], "model_type": "llama4",
              "text_config": _dense(), "vision_config": {"hidden_size": 1408, "num_hidden_layers": 34}}
    del llama4["text_config"]["architectures"]
    # auto_choose_speculative_params: (5, 4, 8) only for LlamaForCausalLM itself (and Grok); Llama 4 gets (3, 1, 4)
    r4 = SM.plan(llama4, [A6000], {"speculative_algorithm": "EAGLE3", "mem_fraction_static": 0.85}, measured=MEAS,
                 _fixes=False)
    assert r4["speculative"] == {"algorithm": "EAGLE3", "num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4}
    r3 = SM.plan(_dense(), [A6000], {"speculative_algorithm": "EAGLE3", "mem_fraction_static": 0.85},
                 measured=MEAS, _fixes=False)
    assert r3["speculative"] == {"algorithm": "EAGLE3", "num_steps": 5, "eagle_topk": 4, "num_draft_tokens": 8}
    # NGRAM: topk = speculative_ngram_max_bfs_breadth 10, draft = match window 12, no 2 GiB reserve: 0.861 as without
    rn = SM.plan(_dense(), [A6000], {"speculative_algorithm": "NGRAM"}, measured=MEAS, _fixes=False)
    assert rn["speculative"] == {"algorithm": "NGRAM", "num_steps": None, "eagle_topk": 10, "num_draft_tokens": 12}
    assert rn["mem_fraction_static"] == 0.861 and rn["max_running_requests"] == 48


@pytest.mark.parametrize("args,says", [
    ({"speculative_algorithm": "NGRAM", "enable_dp_attention": True, "dp_size": 2, "tp_size": 2},
     "NGRAM with enable_dp_attention"),
    ({"speculative_algorithm": "NGRAM", "page_size": 16, "attention_backend": "triton"}, "use page_size 1"),
    ({"speculative_algorithm": "EAGLE", "speculative_eagle_topk": 4}, "without speculative_num_steps"),
    ({"context_length": 16384}, "longer than the model's 8192"),
    ({"swa_full_tokens_ratio": 1.5}, "must lie in (0, 1]"),
])
def test_what_sglang_refuses_is_refused_with_the_fix(args, says):
    with pytest.raises(SM.PlanError, match=re.escape(says)):
        SM.plan(_dense(), [A6000, A6000], args, measured=MEAS)


def test_rope_scaling_lengthens_the_context_unless_it_names_its_original_length():
    assert SM.Model(_dense(rope_scaling={"type": "yarn", "factor": 4.0})).context_len == 32768
    assert SM.Model(_dense(rope_scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048})
                    ).context_len == 8192
    assert SM.Model(_dense(rope_scaling={"rope_type": "llama3", "factor": 8.0})).context_len == 8192


def test_dp_attention_halves_the_chunk_after_the_fraction_and_shards_kv_by_attention_tp():
    # fraction from the chunk before DP: R = 512 + 6144 + 64 + 256 + 32 x 2 x 3 (DP) = 7168 -> 0.854;
    # then chunked 4096 // 2; KV heads per rank: 8 // (2 // 2) = 8 -> cell 8 x 256 x 32 x 2 = 131072
    r = SM.plan(_dense(), [A6000, A6000], {"tp_size": 2, "enable_dp_attention": True, "dp_size": 2},
                measured=MEAS, _fixes=False)
    assert r["mem_fraction_static"] == round((49140 - 7168) / 49140.0, 3) and r["chunked_prefill_size"] == 2048
    assert r["cell_size_bytes"] == 131072


def test_running_requests_are_half_the_tokens_when_the_pool_is_small():
    # rest = 30 - 46 x 0.15 = 23.1 GiB, cell 131072 -> 189235 tokens; pool min(max(189235/8192 x 512, 2048), 4096)
    # = 4096 slots; ModelRunner: max_running = min(tokens // 2, 4096) = 4096; with a 4096-token cap: min(2048, 4096)
    r = SM.plan(_dense(), [A6000], {"mem_fraction_static": 0.85, "max_total_tokens": 4096}, measured=MEAS,
                _fixes=False)
    assert r["req_to_token_pool_size"] == 4096 and r["max_running_requests"] == 2048
    assert r["max_total_num_tokens"] == 4096


def test_hybrid_request_pool_is_capped_by_mamba_slots_even_with_max_running_requests():
    # radix cache on (no speculation): slots // 3 caps the pool, also when max_running_requests is given
    r = SM.plan(cfg("qwen3-next-80b-a3b"), [H200] * 4, {"tp_size": 4, "mem_fraction_static": 0.5,
                                                        "max_running_requests": 4096, "max_mamba_cache_size": 60},
                measured={"avail_mem_before_load_gb": 40.0, "avail_mem_after_load_gb": 40.0}, _fixes=False)
    assert r["max_mamba_cache_size"] == 60 and r["req_to_token_pool_size"] == 20


def test_an_unknown_model_with_logged_numbers_gets_the_budget_verdict():
    odd = {"architectures": ["MysteryForCausalLM"], "hidden_size": 1}
    oom = SM.plan(odd, [A6000], {"mem_fraction_static": 0.85},
                  measured={"avail_mem_before_load_gb": 46.62, "avail_mem_after_load_gb": 5.0})
    # rest = 5.0 - 46.62 x 0.15 = -1.99 GiB: no pool of any model fits
    assert oom["outcome"] == "kv_pool_oom" and oom["rest_gb"] == -1.99 and "MysteryForCausalLM" in oom["model_error"]
    assert any("short by 1.99 GiB" in line for line in oom["explain"])
    left = SM.plan(odd, [A6000], {}, measured={"avail_mem_before_load_gb": 46.62, "weights_gb": 20.0,
                                               "mem_fraction_static": 0.85})
    assert left["outcome"] == "unknown" and left["rest_gb"] == round(26.62 - 46.62 * 0.15, 2)
    with pytest.raises(SM.PlanError, match="MysteryForCausalLM"):
        SM.plan(odd, [A6000], {"mem_fraction_static": 0.85})             # no numbers: the config error stands


def test_a_pool_that_cannot_be_built_is_said_as_a_shortfall_and_failing_options_are_not_fixes():
    r = SM.plan(cfg("qwen3.6-27b"), [A6000, A6000], SEED_ARGS, measured=SEED_MEASURED)
    text = "\n".join(r["explain"])
    assert r["outcome"] == "kv_pool_oom" and r["max_total_num_tokens"] < 0
    assert "short by %d tokens" % (1 - r["max_total_num_tokens"]) in text
    assert "(%d tokens)" % r["max_total_num_tokens"] not in text and ", %d tokens" % r["max_total_num_tokens"] not in text
    assert all(f["outcome"] in ("fits", "context_truncated") for f in r["fixes"])
    assert any("still headroom_oom" in f["why"] for f in r["ineffective"])   # 0.92: better, but still failing


# --- pipeline parallelism (pp_size): each stage holds the KV of its own layers; the pool is the smallest stage's ---
def test_pipeline_stages_split_the_layers_as_sglang_does_and_the_pool_is_the_fullest_stages():
    # get_pp_indices(32, r, 3) of 0.5.9: 32 // 3 = 10, the last 32 % 3 = 2 stages one more: [0,10) [10,21) [21,32)
    assert [SM.pp_layer_range(32, r, 3) for r in range(3)] == [(0, 10), (10, 21), (21, 32)]
    assert [SM.pp_layer_range(61, r, 4) for r in range(4)] == [(0, 15), (15, 30), (30, 45), (45, 61)]
    llama = cfg("llama-3.1-8b")
    gpus = [{"index": i, "memory_total_mib": 49140} for i in range(3)]
    measured = {"avail_mem_before_load_gb": 46.6, "avail_mem_after_load_gb": 41.0}
    p = SM.plan(llama, gpus, {"pp_size": 3, "mem_fraction_static": 0.85}, measured=measured, _fixes=False)
    rest = 41.0 - 46.6 * (1 - 0.85)
    cell = 8 * (128 + 128) * 2            # one layer: 8 KV heads x (K + V) x 128 x bf16
    want = [int(rest * (1 << 30)) // (cell * n) for n in (10, 11, 11)]
    assert [s["max_total_num_tokens"] for s in p["pp_stages"]] == want
    assert p["max_total_num_tokens"] == min(want) == want[1]    # the all_reduce(MIN) over the stages
    assert p["cell_size_bytes"] == cell * 10                     # stage 0's own cell (what rank 0 profiles)
    # the request pool comes from stage 0's own count, before the MIN (init_memory_pool's order)
    assert p["req_to_token_pool_size"] == min(max(int(want[0] / 131072 * 512), 2048), 4096)


def test_pipeline_stages_refuse_what_sglang_refuses():
    qwen = cfg("qwen3.6-27b")
    gpus = [{"index": i, "memory_total_mib": 49140} for i in range(32)]
    with pytest.raises(SM.PlanError, match=r"args.pp_size=2 with speculative_algorithm=EAGLE: SGLang 0.5.9 refuses it"):
        SM.plan(qwen, gpus, {"pp_size": 2, "speculative_algorithm": "NEXTN"}, _fixes=False)
    with pytest.raises(SM.PlanError, match=r"args.pp_size=2 with enable_mixed_chunk"):
        SM.plan(cfg("llama-3.1-8b"), gpus, {"pp_size": 2, "enable_mixed_chunk": True}, _fixes=False)
    # 64 layers, every 4th full attention: stages of 2 layers, half of them without any KV layer
    with pytest.raises(SM.PlanError, match=r"pipeline stage 0 holds no attention layer"):
        SM.plan(qwen, gpus, {"pp_size": 32}, _fixes=False)


def test_one_model_across_nodes_is_planned_per_rank_and_bad_layouts_are_refused():
    """nnodes (#23's planner part): the memory of a rank does not change with the node count (0.5.9 uses nnodes only
    in check_server_args and an sm90 all-reduce switch), so the plan per rank is the single-node one; the layouts
    0.5.9 refuses are refused with its reason (the oracle runs check_server_args on 76 multi-node scenarios)."""
    llama = cfg("llama-3.1-8b")
    gpus = [{"index": i, "memory_total_mib": 49140} for i in range(4)]
    one = SM.plan(llama, gpus, {"tp_size": 2, "pp_size": 2}, _fixes=False)
    two = SM.plan(llama, gpus, {"tp_size": 2, "pp_size": 2, "nnodes": 2, "node_rank": 1}, _fixes=False)
    assert two["max_total_num_tokens"] == one["max_total_num_tokens"] and two["ranks_per_node"] == 2
    with pytest.raises(SM.PlanError, match=r"args.nnodes=3: tp_size x pp_size = 4 must be a multiple"):
        SM.plan(llama, gpus, {"tp_size": 2, "pp_size": 2, "nnodes": 3}, _fixes=False)
    with pytest.raises(SM.PlanError, match=r"multi-node data parallelism without enable_dp_attention"):
        SM.plan(llama, gpus, {"tp_size": 4, "dp_size": 2, "nnodes": 2}, _fixes=False)
    with pytest.raises(SM.PlanError, match=r"args.node_rank=2: 0 .. nnodes - 1"):
        SM.plan(llama, gpus, {"tp_size": 2, "nnodes": 2, "node_rank": 2}, _fixes=False)


def test_a_replay_that_fits_for_a_launch_that_died_says_its_inputs_differ():
    """The real capped launch that died (fraction 0.0001): its logged numbers replay to a pool of thousands of tokens;
    SGLang's own profile (-50666 tokens) says what it saw when it sized the pool."""
    import sys  # pylint: disable=import-outside-toplevel
    sys.path.insert(0, os.path.join(ROOT, "tests", "lab"))
    import tiny_llama  # pylint: disable=import-outside-toplevel
    facts = load_module_util("logs").parse_log(fixture_text("sglang_logs", "real_cpu_kv_pool_oom_capped.log"))["facts"]
    measured = {k: facts[k] for k in ("avail_mem_before_load_gb", "avail_mem_after_load_gb",
                                      "profiled_max_total_num_tokens")}
    config = json.loads(tiny_llama.files()["config.json"])
    r = SM.plan(config, [{"name": "cpu", "memory_total_mib": 24576}],
                {"mem_fraction_static": 0.0001, "max_total_tokens": 8192}, measured=measured)
    assert r["outcome"] == "fits" and r["max_total_num_tokens"] > 0
    text = SM.replay_mismatch(r, "kv_pool_oom", measured)
    assert text.startswith("The replay of this launch's logged numbers gives %d KV tokens, but the launch died of the "
                           "pool error: the replay's inputs differ from that launch's." % r["max_total_num_tokens"])
    # -50666 tokens x 512 bytes below the floor 21.22 x 0.9999: it saw 21.194 GiB, 0.026 GiB less than logged
    assert "SGLang's own profile came to -50666 tokens, so it saw 21.194 GiB free" in text
    assert "0.026 GiB less than the 21.22 GiB it logged after loading" in text
    without = dict(measured)
    del without["profiled_max_total_num_tokens"]
    assert "so it saw at most 21.218 GiB free" in SM.replay_mismatch(r, "kv_pool_oom", without)
    # a replay that agrees with the launch, or another failure: nothing to say
    assert SM.replay_mismatch(dict(r, outcome="kv_pool_oom"), "kv_pool_oom", measured) is None
    assert SM.replay_mismatch(r, "cuda_graph_oom", measured) is None
