"""host/gpu_textfile.py: the node's GPUs for Prometheus as the nvidia_driver role's timer writes them
(nvidia_driver_metrics) - the package copied alone, as the role copies it, and run as the unit runs it
(python3 -m gpuserve_host.gpu_textfile) with a recorded nvidia-smi: the same families as nvidia_gpu_facts'
metrics_file, a node without a driver written as such, a file that cannot be written named."""
import os
import shutil
import subprocess
import sys

from unit_helpers import ROOT, load_module_util

H = load_module_util("host")
NV = os.path.join(ROOT, "tests", "fixtures", "nvidia")


def copied(tmp_path):
    """plugins/module_utils/host/*.py in <tmp>/lib/gpuserve_host, nothing else (the role's layout of it)."""
    pkg = tmp_path / "lib" / "gpuserve_host"
    pkg.mkdir(parents=True)
    src = os.path.join(ROOT, "plugins", "module_utils", "host")
    for name in sorted(os.listdir(src)):
        if name.endswith(".py"):
            shutil.copy(os.path.join(src, name), str(pkg / name))
    return str(tmp_path / "lib")


def smi(tmp_path, fixture, rc=0):
    path = tmp_path / "nvidia-smi"
    path.write_text("#!/bin/sh\ntail -n +2 '%s'\nexit %d\n" % (os.path.join(NV, fixture), rc))
    path.chmod(0o755)
    return str(path)


def run(lib, *argv):
    env = {"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"}   # no PYTHONPATH: the copy alone, from its directory
    return subprocess.run([sys.executable, "-m", "gpuserve_host.gpu_textfile"] + list(argv), cwd=lib, env=env,
                          capture_output=True, text=True, timeout=60, check=False)


def test_the_copy_runs_alone_and_writes_what_nvidia_gpu_facts_writes(tmp_path):
    lib, out = copied(tmp_path), tmp_path / "gpuserve_nvidia.prom"
    p = run(lib, "--node", "pve1", "--out", str(out), "--nvidia-smi", smi(tmp_path, "a6000x2.smi.csv"))
    assert p.returncode == 0, p.stderr
    assert p.stdout == "%s: state ok, 2 GPU(s)\n" % out
    text = out.read_text()
    facts = H.read_gpus(smi(tmp_path, "a6000x2.smi.csv"), 10)
    assert text == H.gpu_metrics("pve1", facts)
    assert 'gpuserve_nvidia_gpus{node="pve1"} 2\n' in text and text.count("gpuserve_nvidia_gpu_memory_used_bytes{") == 2
    assert oct(out.stat().st_mode & 0o777) == "0o644"


def test_a_node_without_a_driver_is_written_as_such(tmp_path):
    lib, out = copied(tmp_path), tmp_path / "gpuserve_nvidia.prom"
    p = run(lib, "--node", "pve1", "--out", str(out), "--nvidia-smi", str(tmp_path / "absent" / "nvidia-smi"))
    assert p.returncode == 0, p.stderr
    text = out.read_text()
    assert 'gpuserve_nvidia_gpus{node="pve1"} 0\n' in text
    assert any(line.endswith("} 1") and "state=" in line for line in text.splitlines())


def test_a_file_that_cannot_be_written_is_named(tmp_path):
    lib = copied(tmp_path)
    out = tmp_path / "missing-dir" / "gpuserve_nvidia.prom"
    p = run(lib, "--node", "pve1", "--out", str(out), "--nvidia-smi", smi(tmp_path, "a6000x2.smi.csv"))
    assert p.returncode == 1 and p.stderr.startswith("gpu_textfile: ") and "missing-dir" in p.stderr
