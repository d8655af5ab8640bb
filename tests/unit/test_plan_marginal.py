"""A plan within the free-memory readings' noise is marginal, not "fits" (#60 item 4).

SGLang sizes the pool with two readings of the free memory, before (M0) and after (M1) loading the weights:
budget = mfs * M0 - (M0 - M1). What the second reading misses goes straight off the budget; on the CPU engine the two
were seen 20-55 MiB apart. The numbers below: M0 = 46 GiB, weights 16 GiB (M1 = 30 GiB), Llama-3.1-8B's KV cell
32 layers x 8 KV heads x 128 x 2 (K, V) x 2 bytes = 128 KiB per token, so 1 MiB of budget is 8 tokens."""
import json
import os

import pytest

from unit_helpers import FIXTURES, load_module_util

SM = load_module_util("plan")
A6000 = {"name": "NVIDIA RTX A6000", "memory_total_mib": 49140}
MEASURED = {"avail_mem_before_load_gb": 46.0, "weights_gb": 16.0, "avail_mem_after_load_gb": 30.0}


def llama():
    with open(os.path.join(FIXTURES, "model_configs", "llama-3.1-8b.json")) as fh:
        return json.load(fh)


def args_with_budget(mib):
    """The args whose pool budget is ``mib`` MiB: mfs * 46 - 16 GiB = mib MiB."""
    return {"mem_fraction_static": (16.0 + mib / 1024.0) / 46.0, "context_length": 128}


def test_a_budget_within_the_noise_is_marginal_with_the_fix_worked_by_hand():
    r = SM.plan(llama(), [A6000], args_with_budget(30), measured=MEASURED)
    assert r["outcome"] == "fits" and r["max_total_num_tokens"] == 240          # 30 MiB x 8 tokens
    m = r["marginal"]
    assert m["noise_mib"] == 64.0 and m["kv_mib"] == 30.0
    assert m["outcome_within_noise"] == "kv_pool_oom"                           # 30 - 64 < 0: no pool at all
    # clear of twice the margin: mfs >= (16 + 128/1024) / 46 = 0.35054..., up to the next 0.001 = 0.351; its budget
    # 0.351 x 46 - 16 = 0.146 GiB = 149.5 MiB -> 1196 tokens
    assert m["fix"]["change"] == {"mem_fraction_static": 0.351}
    assert m["fix"]["max_total_num_tokens"] == 1196 and m["fix"]["outcome"] == "fits"
    said = "\n".join(r["explain"])
    assert "Outcome: marginal (as planned: fits: 240 tokens" in said
    assert "Marginal: the KV budget is 30.0 MiB, within the 64 MiB" in said
    assert "fix mem_fraction_static=0.351 -> fits, 1196 KV tokens" in said
    assert "sglang_server_plan_accept_marginal=true" in said


@pytest.mark.parametrize("budget_mib,noise_mib,marginal", [
    (100, 64, False),     # 100 - 64 = 36 MiB still makes a pool
    (100, 128, True),     # a wider margin takes it all
    (63, 64, True),
    (30, 0, False),       # 0 turns the check off
])
def test_marginal_is_the_budget_against_the_margin(budget_mib, noise_mib, marginal):
    r = SM.plan(llama(), [A6000], args_with_budget(budget_mib), measured=MEASURED, noise_mib=noise_mib)
    assert r["outcome"] == "fits"
    assert (r["marginal"] is not None) is marginal


def test_a_comfortable_plan_and_a_failing_one_are_not_marginal():
    assert SM.plan(llama(), [A6000], {"mem_fraction_static": 0.85}, measured=MEASURED)["marginal"] is None
    dead = SM.plan(llama(), [A6000], {"mem_fraction_static": 0.3}, measured=MEASURED)   # 13.8 - 16 GiB < 0
    assert dead["outcome"] == "kv_pool_oom" and dead["marginal"] is None and dead["fixes"]


def test_the_noise_only_lowers_the_second_reading():
    base = SM.plan(llama(), [A6000], args_with_budget(100), measured=MEASURED, _fixes=False)
    low = SM.plan(llama(), [A6000], args_with_budget(100), measured=MEASURED, _fixes=False, _noise_gb=64 / 1024.0)
    assert base["max_total_num_tokens"] == 800 and low["max_total_num_tokens"] == 288          # (100 - 64) x 8
    assert low["per_gpu"][0]["headroom_gb"] == base["per_gpu"][0]["headroom_gb"]               # (1 - mfs) M0 alike


def test_plan_request_refuses_a_marginal_plan_unless_accepted():
    with pytest.raises(SM.PlanRefused) as exc:
        SM.plan_request(model_config=llama(), gpus=[A6000], args=args_with_budget(30), measured=MEASURED)
    assert "the plan is marginal (30.0 MiB of KV budget, within the 64 MiB" in exc.value.msg
    assert "fix mem_fraction_static=0.351" in exc.value.msg
    assert exc.value.result["marginal"]["fix"]["change"] == {"mem_fraction_static": 0.351}
    result = SM.plan_request(model_config=llama(), gpus=[A6000], args=args_with_budget(30), measured=MEASURED,
                             fail_on=["kv_pool_oom"])[0]
    assert result["outcome"] == "fits" and result["marginal"]["kv_mib"] == 30.0
    result = SM.plan_request(model_config=llama(), gpus=[A6000], args=args_with_budget(30), measured=MEASURED,
                             noise_mib=16)[0]
    assert result["marginal"] is None


def test_plan_request_refuses_a_negative_margin_by_name():
    with pytest.raises(SM.PlanRefused) as exc:
        SM.plan_request(model_config=llama(), gpus=[A6000], args={}, noise_mib=-1)
    assert exc.value.msg.startswith("noise_mib=-1")
