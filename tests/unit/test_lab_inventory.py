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
