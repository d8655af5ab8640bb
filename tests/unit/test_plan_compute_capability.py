"""The GPUs' compute capability reaches the planner (#61 item 4): the default attention backend it models is SGLang's
on Ampere and Ada (flashinfer, triton); on Hopper SGLang picks fa3 and on Blackwell trtllm_mha, so a GPU list that
carries compute_cap (nvidia_gpu_facts', as deploy.yml gives it to the role) outside those is refused by name, with
the fix - never planned as Ampere. An explicit attention_backend is planned on any architecture; a GPU list without
compute_cap (a profile, an operator's list) is planned as before."""
import json
import os

import pytest

from unit_helpers import FIXTURES, fixture_text, load_module_util

SM = load_module_util("plan")
NV = load_module_util("host")


def llama():
    with open(os.path.join(FIXTURES, "model_configs", "llama-3.1-8b.json")) as fh:
        return json.load(fh)


def gpus_from_facts(name):
    """The GPUs as nvidia_gpu_facts reads them from a recorded nvidia-smi (the planner's input on a real node)."""
    return NV.gpu_facts(fixture_text("nvidia", name), "", 0)["gpus"]


def test_hopper_from_nvidia_smi_is_refused_by_name_without_an_attention_backend():
    h200 = gpus_from_facts("h200x1.smi.csv")
    assert h200[0]["compute_cap"] == "9.0"
    with pytest.raises(SM.PlanError) as exc:
        SM.plan(llama(), h200, {})
    said = str(exc.value)
    assert said.startswith("NVIDIA H200 (GPU 0) has compute capability 9.0: SGLang 0.5.9's default attention backend")
    assert "set args.attention_backend" in said and "nothing was planned" in said
    with pytest.raises(SM.PlanError) as exc:
        SM.plan(llama(), h200, {}, release="0.5.23")
    assert "SGLang 0.5.23's default attention backend" in str(exc.value)


@pytest.mark.parametrize("fixture", ["a6000x2.smi.csv", "l40sx4.smi.csv"])
def test_ampere_and_ada_from_nvidia_smi_are_planned_as_before(fixture):
    gpus = gpus_from_facts(fixture)
    assert gpus[0]["compute_cap"] in ("8.6", "8.9")
    bare = [{"name": g["name"], "memory_total_mib": g["memory_total_mib"], "memory_free_mib": g["memory_free_mib"]}
            for g in gpus]
    assert SM.plan(llama(), gpus[:1], {})["max_total_num_tokens"] == SM.plan(llama(), bare[:1], {})["max_total_num_tokens"]


def test_an_explicit_backend_is_planned_on_any_architecture_and_a_profile_as_before():
    h200 = gpus_from_facts("h200x1.smi.csv")
    assert SM.plan(llama(), h200, {"attention_backend": "fa3"})["outcome"] == "fits"
    assert SM.plan(llama(), SM.gpus_from_profile("h200", 1), {})["outcome"] == "fits"
    blackwell = [dict(h200[0], name="NVIDIA B200", compute_cap="10.0")]
    with pytest.raises(SM.PlanError) as exc:
        SM.plan(llama(), blackwell, {})
    assert "NVIDIA B200 (GPU 0) has compute capability 10.0" in str(exc.value)


def test_the_module_refuses_it_with_the_same_words():
    with pytest.raises(SM.PlanRefused) as exc:
        SM.plan_request(model_config=llama(), gpus=gpus_from_facts("h200x1.smi.csv"))
    assert exc.value.msg.startswith("NVIDIA H200 (GPU 0) has compute capability 9.0")


@pytest.mark.parametrize("release", ["0.5.9", "0.5.23"])
def test_below_sm75_is_refused_with_sglangs_own_words_whatever_the_backend(release):
    """Both releases stop at weight loading below sm75 (major < 8 and minor < 5: "SGLang only supports sm75 and
    above.", 0.5.9 model_runner.py load_model, 0.5.23 load_model_utils.py) - an attention backend does not help."""
    v100 = [dict(gpus_from_facts("a6000x2.smi.csv")[0], name="Tesla V100-SXM2-32GB", compute_cap="7.0")]
    for args in ({}, {"attention_backend": "triton"}):
        with pytest.raises(SM.PlanError) as exc:
            SM.plan(llama(), v100, args, release=release)
        said = str(exc.value)
        assert said.startswith("Tesla V100-SXM2-32GB (GPU 0) has compute capability 7.0: SGLang %s stops at weight "
                               'loading with "SGLang only supports sm75 and above."' % release), said
        assert "Nothing was planned" in said


def test_below_sm80_is_planned_in_float16_whatever_dtype_says():
    """Below sm80 SGLang sets dtype to float16 itself ("Compute capability below sm80. Use float16 due to lack of
    bfloat16 support."): a float32 launch on a Turing card (7.5) is planned as a float16 one - weights and KV at two
    bytes - and says so; on Ampere the same args keep float32's four."""
    a6000 = gpus_from_facts("a6000x2.smi.csv")[:1]
    turing = [dict(a6000[0], name="Quadro RTX 8000", compute_cap="7.5")]
    args = {"attention_backend": "triton", "dtype": "float32"}
    on_turing = SM.plan(llama(), turing, args)
    as_fp16 = SM.plan(llama(), a6000, dict(args, dtype="float16"))
    as_fp32 = SM.plan(llama(), a6000, args)
    assert on_turing["max_total_num_tokens"] == as_fp16["max_total_num_tokens"] > as_fp32["max_total_num_tokens"]
    assert any("below sm80" in n and "float16" in n for n in on_turing["notes"])
    assert not any("below sm80" in n for n in as_fp16["notes"] + as_fp32["notes"])
