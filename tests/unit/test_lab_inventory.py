"""The lab inventory pins the stand-in installer's sha256 as an operator pins NVIDIA's: keep them in step."""
import hashlib
import os

import yaml

from unit_helpers import ROOT


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
    """downloader=huggingface_hub is tested with .venv-hflib (tests/lab/requirements-hflib.txt): the versions a
    deployed SGLang 0.5.9 venv has, so a lock update that moves them must move the tests too."""
    lock = {}
    with open(os.path.join(ROOT, "roles", "sglang_venv", "files", "locks", "sglang-0.5.9.lock")) as fh:
        for line in fh:
            if "==" in line and not line.startswith((" ", "#")):
                name, rest = line.split("==", 1)
                lock.setdefault(name.strip(), set()).add(rest.split()[0].rstrip(";\\"))
    with open(os.path.join(ROOT, "tests", "lab", "requirements-hflib.txt")) as fh:
        pins = dict(line.strip().split("==") for line in fh if "==" in line and not line.startswith("#"))
    assert {"huggingface-hub", "hf-xet", "hf-transfer"} <= set(pins)
    for name, version in pins.items():
        assert version in lock.get(name, set()), "%s==%s is not in the lock (%s)" % (name, version, lock.get(name))
