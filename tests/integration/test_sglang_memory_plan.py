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
