"""The lab inventory pins the stand-in installer's sha256 as an operator pins NVIDIA's: keep them in step."""
import hashlib
import os

import yaml

from unit_helpers import CONTROLLER, ROOT


def test_lab_pins_the_sha256_of_the_stand_in_runfile():
    with open(os.path.join(ROOT, "inventory", "lab", "group_vars", "pve_nodes.yml")) as fh:
        lab = yaml.safe_load(fh)
    run = os.path.join(ROOT, "tests", "lab", "fake-nvidia", "NVIDIA-Linux-x86_64-%s.run" % lab["nvidia_driver_version"])
    with open(run, "rb") as fh:
        assert hashlib.sha256(fh.read()).hexdigest() == lab["nvidia_driver_runfile_sha256"]


def test_lab_pins_the_commit_the_local_hub_serves(tmp_path):
    """tests/lab/local_hub.py commits the lab model with fixed dates: the same files give this commit everywhere."""
    import sys
    sys.path.insert(0, os.path.join(ROOT, "tests", "lab"))
    from local_hub import LocalHub, lab_model_files  # pylint: disable=import-outside-toplevel
    with open(os.path.join(ROOT, "inventory", "lab", "group_vars", "sglang_containers.yml")) as fh:
        lab = yaml.safe_load(fh)
    sha = LocalHub(str(tmp_path), "olah-cli").add_repo(lab["hf_model_repo_id"], lab_model_files(ROOT))
    assert sha == lab["hf_model_revision"]


def test_the_huggingface_hub_of_the_tests_is_the_one_the_sglang_lock_installs():
    """downloader=huggingface_hub is tested with .venv-hflib (tests/ci/locks/hflib.in): the versions a
    deployed SGLang 0.5.9 venv has, so a lock update that moves them must move the tests too."""
    lock = {}
    with open(os.path.join(ROOT, "roles", "sglang_venv", "files", "locks", "sglang-0.5.9.lock")) as fh:
        for line in fh:
            if "==" in line and not line.startswith((" ", "#")):
                name, rest = line.split("==", 1)
                lock.setdefault(name.strip(), set()).add(rest.split()[0].rstrip(";\\"))
    with open(os.path.join(ROOT, "tests", "ci", "locks", "hflib.in")) as fh:
        pins = dict(line.strip().split("==") for line in fh if "==" in line and not line.startswith("#"))
    assert {"huggingface-hub", "hf-xet", "hf-transfer"} <= set(pins)
    for name, version in pins.items():
        assert version in lock.get(name, set()), "%s==%s is not in the lock (%s)" % (name, version, lock.get(name))


def test_lab_pins_the_commit_of_the_real_tiny_model(tmp_path):
    """The CPU-engine profile's model (tests/lab/tiny_llama.py): the same bytes, hence the same commit, everywhere."""
    import sys
    sys.path.insert(0, os.path.join(ROOT, "tests", "lab"))
    from local_hub import REAL_REPO, LocalHub  # pylint: disable=import-outside-toplevel
    import tiny_llama  # pylint: disable=import-outside-toplevel
    with open(os.path.join(ROOT, "inventory", "lab", "group_vars", "sglang_lab_cpu_engine.yml")) as fh:
        lab = yaml.safe_load(fh)
    assert lab["hf_model_repo_id"] == REAL_REPO
    sha = LocalHub(str(tmp_path), "olah-cli").add_repo(lab["hf_model_repo_id"], tiny_llama.files())
    assert sha == lab["hf_model_revision"]


def test_the_tiny_model_is_what_its_config_says():
    """Every tensor the config implies, BF16, in a safetensors file whose header and offsets are consistent; the
    vocabulary is the tokenizer's length (outputs decode)."""
    import json
    import struct
    import sys
    sys.path.insert(0, os.path.join(ROOT, "tests", "lab"))
    import tiny_llama  # pylint: disable=import-outside-toplevel
    files = tiny_llama.files()
    config = json.loads(files["config.json"])
    tok = json.loads(files["tokenizer.json"])
    assert config["vocab_size"] == len(tok["model"]["vocab"]) + len(tok["added_tokens"]) == 260
    blob = files["model.safetensors"]
    (size,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + size])
    header.pop("__metadata__")
    end = 0
    for name, t in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        count = 1
        for dim in t["shape"]:
            count *= dim
        assert t["dtype"] == "BF16" and t["data_offsets"] == [end, end + 2 * count], name
        end += 2 * count
    assert len(blob) == 8 + size + end
    assert set(header) == set(tiny_llama.tensor_shapes(config["vocab_size"]))
    assert header["model.layers.1.self_attn.k_proj.weight"]["shape"] == [64, 64]
    assert tiny_llama.files() == files                      # deterministic


@CONTROLLER
def test_the_cpu_engine_profile_wins_over_the_stand_ins_for_its_hosts(tmp_path):
    """CT 100 in both sglang_containers and sglang_lab_cpu_engine (lab.py's inventory, the real scenario): the
    profile's values are the ones it gets (the group sorts after sglang_containers)."""
    import json
    import subprocess
    inv = tmp_path / "inv.yml"
    inv.write_text("all:\n  children:\n    sglang_containers:\n      hosts:\n        ct100:\n        ct101:\n"
                   "    sglang_lab_cpu_engine:\n      hosts:\n        ct100:\n")
    out = subprocess.run([os.path.join(ROOT, ".venv", "bin", "ansible-inventory"), "-i",
                          os.path.join(ROOT, "inventory", "lab"), "-i", str(inv), "--list"],
                         capture_output=True, text=True, check=True, cwd=ROOT)
    hostvars = json.loads(out.stdout)["_meta"]["hostvars"]
    real, standin = hostvars["ct100"], hostvars["ct101"]
    assert real["sglang_venv_profile"] == "full" and standin["sglang_venv_profile"] == "light"
    assert real["sglang_server_args"] == "{{ gpuserve_lab_cpu_args }}" and real["gpuserve_lab_cpu_args"]["device"] == "cpu"
    assert real["sglang_server_public_env"] == "{{ gpuserve_lab_cpu_env }}"
    assert "PYTHONPATH" not in real["gpuserve_lab_cpu_env"]
    assert real["hf_model_repo_id"] == "gpuserve-lab/tiny-llama"
    assert real["sglang_server_api_key"] == standin["sglang_server_api_key"]     # the rest of the lab's values stay
