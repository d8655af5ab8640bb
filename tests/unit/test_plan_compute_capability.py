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
