"""sglang_memory_plan through Ansible on a model directory: a checkpoint far smaller than its config is flagged."""
import os
import shutil

from ansible_helpers import ROOT, run_module
from local_hub import safetensors_bytes

M = "gpuserve.sglang.sglang_memory_plan"


def model_dir(tmp_path, weights_mib):
    d = tmp_path / "Llama-3.1-8B-Instruct"
    d.mkdir()
    shutil.copy(os.path.join(ROOT, "tests", "fixtures", "model_configs", "llama-3.1-8b.json"), str(d / "config.json"))
    (d / "model.safetensors").write_bytes(safetensors_bytes("w", b"\0" * (weights_mib * 1024 * 1024)))
    return str(d)


def test_a_tiny_checkpoint_under_a_big_config_is_flagged_not_planned_silently(tmp_path):
    """The lab's 'Llama-3.1-8B' is a few MiB: the plan said weights 0.00 GiB without a word."""
    r = run_module(M, {"model_path": model_dir(tmp_path, 4), "gpu_profile": "rtx-a6000", "fail_on": []})
    assert r.get("failed") is not True, r.get("msg")
    assert r["checkpoint_contradicts_config"] is True
    assert any("far smaller than this config's parameters" in w for w in r["warnings"])
    assert any(line.startswith("note: the checkpoint's weights (0.00 GiB") for line in r["explain"])


def test_the_module_chooses_args_for_a_goal_and_shows_the_table(tmp_path):
    import json
    with open(os.path.join(ROOT, "playbooks", "vars", "qwen3.6-27b.config.json")) as fh:
        config = json.load(fh)
    seed = {"tp_size": 2, "mem_fraction_static": 0.85, "speculative_algorithm": "NEXTN", "speculative_num_steps": 3,
            "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4, "context_length": 262144}
    measured = {"avail_mem_before_load_gb": 46.62, "weights_gb": 25.91, "avail_mem_after_load_gb": 20.71}
    r = run_module(M, {"model_config": config, "gpu_profile": "rtx-a6000", "gpu_count": 2, "args": seed,
                       "measured": measured, "goal": "fit"})
    assert r.get("failed") is not True, r.get("msg")
    assert r["chosen_args"]["max_running_requests"] == 32 and r["outcome"] in ("fits", "context_truncated")
    assert [c["key"] for c in r["changes"]] == ["max_running_requests"]
    assert any(line.startswith("rank changes") for line in r["explain"])
    none = run_module(M, {"model_config": config, "gpus": [{"name": "T4", "memory_total_mib": 15360}],
                          "args": {}, "goal": "tokens"})
    assert none["failed"] is True and "GPUs of this size) would" in none["msg"]


def test_a_required_path_that_is_missing_is_named_with_its_words_before_planning(tmp_path):
    """The role's interpreter and config.json look rides in the plan's call: a missing one is named, nothing planned."""
    model = model_dir(tmp_path, 4)
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    os.symlink(str(tmp_path / "gone"), str(python))   # a dangling link counts as missing, as stat -L says
    require = {str(python): "sglang_server_python, from role sglang_venv",
               os.path.join(model, "config.json"): "the model, from role hf_model"}
    r = run_module(M, {"model_path": model, "gpu_profile": "rtx-a6000", "fail_on": [], "require": require})
    assert r["failed"] is True
    assert r["msg"] == "missing: %s (sglang_server_python, from role sglang_venv); nothing was planned" % python
    assert r["missing"] == [str(python)] and "per_gpu" not in r
    python.unlink()
    python.write_text("#!/bin/sh\n")
    ok = run_module(M, {"model_path": model, "gpu_profile": "rtx-a6000", "fail_on": [], "require": require})
    assert ok.get("failed") is not True, ok.get("msg")
    assert ok["per_gpu"] and "missing" not in ok


def test_a_release_the_planner_was_not_proved_for_is_refused_by_name_through_ansible(tmp_path):
    """release=0.5.22, or a venv whose sglang is 0.5.22: failed, named, nothing planned - never 0.5.9's arithmetic.
    A venv whose sglang is 0.5.23 is planned with 0.5.23's (#47 item 1)."""
    model = model_dir(tmp_path, 4)
    r = run_module(M, {"model_path": model, "gpu_profile": "rtx-a6000", "fail_on": [], "release": "0.5.22"})
    assert r["failed"] is True
    assert r["msg"].startswith("SGLang 0.5.22: this planner's arithmetic is proved for SGLang 0.5.9, 0.5.23 only")
    assert r["release"] == "0.5.22" and "per_gpu" not in r
    # the launch's interpreter: its environment's sglang-<version>.dist-info names the release
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    (site / "sglang-0.5.22.dist-info").mkdir(parents=True)
    (tmp_path / "venv" / "bin").mkdir()
    python = tmp_path / "venv" / "bin" / "python"
    os.symlink("/usr/bin/python3", str(python))
    r = run_module(M, {"model_path": model, "gpu_profile": "rtx-a6000", "fail_on": [], "python": str(python)})
    assert r["failed"] is True and r["msg"].startswith("SGLang 0.5.22: ") and "per_gpu" not in r
    (site / "sglang-0.5.22.dist-info").rename(site / "sglang-0.5.23.dist-info")
    new = run_module(M, {"model_path": model, "gpu_profile": "rtx-a6000", "fail_on": [], "python": str(python)})
    assert new.get("failed") is not True, new.get("msg")
    assert new["release"] == "0.5.23" and new["per_gpu"]
    (site / "sglang-0.5.23.dist-info").rename(site / "sglang-0.5.9.dist-info")
    ok = run_module(M, {"model_path": model, "gpu_profile": "rtx-a6000", "fail_on": [], "python": str(python)})
    assert ok.get("failed") is not True, ok.get("msg")
    assert ok["release"] == "0.5.9" and ok["release_source"] == "installed (%s)" % (site / "sglang-0.5.9.dist-info")
    assert ok["per_gpu"]
    # the same launch, 0.5.23 against 0.5.9: a larger reserve (its prefill CUDA graph), so a lower fraction
    assert new["reserved_mib"] > ok["reserved_mib"] and new["mem_fraction_static"] < ok["mem_fraction_static"]


def test_a_marginal_plan_fails_the_module_with_its_fix_unless_fail_on_leaves_it_out(tmp_path):
    """#60 item 4 through Ansible: a pool budget of 30 MiB (M0 46 GiB, weights 16 GiB, mfs (16 + 30/1024)/46) is
    within the 64 MiB the two free-memory readings may differ by: refused by default with the fraction that clears
    twice the margin (tests/unit/test_plan_marginal.py works it by hand: 0.351), planned when fail_on leaves it out,
    and not marginal with a margin of 16 MiB (noise_mib given as text, as -e gives it)."""
    import json
    with open(os.path.join(ROOT, "tests", "fixtures", "model_configs", "llama-3.1-8b.json")) as fh:
        config = json.load(fh)
    measured = {"avail_mem_before_load_gb": 46.0, "weights_gb": 16.0, "avail_mem_after_load_gb": 30.0}
    opts = {"model_config": config, "gpu_profile": "rtx-a6000", "measured": measured,
            "args": {"mem_fraction_static": (16.0 + 30 / 1024.0) / 46.0, "context_length": 128}}
    r = run_module(M, opts)
    assert r["failed"] is True and r["msg"].startswith("SGLang may not start as configured: the plan is marginal")
    assert r["marginal"]["fix"]["change"] == {"mem_fraction_static": 0.351}
    ok = run_module(M, dict(opts, fail_on=["kv_pool_oom"]))
    assert ok.get("failed") is not True and ok["outcome"] == "fits" and ok["marginal"]["kv_mib"] == 30.0
    assert any(line.startswith("Marginal: the KV budget is 30.0 MiB") for line in ok["explain"])
    quiet = run_module(M, dict(opts, noise_mib="16"))
    assert quiet.get("failed") is not True and quiet["marginal"] is None
