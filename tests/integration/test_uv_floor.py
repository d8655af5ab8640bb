"""#47 item 2, the last link of the compatibility chain: the oldest uv that takes every option the build passes
(UV_MIN), measured against the uv releases themselves from the package index. Every argv the build makes (uv venv,
uv python find, each install step with every option on, verbose or not) is run on the real uv with --help appended:
clap parses every argument first and refuses an option it does not know ("unexpected argument"), so nothing is
built. The floor takes them all, the release before it does not, and neither does the pinned uv refuse any (it
refused one once: `uv pip sync` has no --no-build-isolation-package, which a full build with flash-attn from source
passed)."""
import glob
import os
import subprocess
import sys
import zipfile

import pytest
import yaml

from ansible_helpers import ROOT

sys.path.insert(0, os.path.join(ROOT, "tests", "unit"))
from unit_helpers import load_module_util  # noqa: E402  pylint: disable=wrong-import-position

uv = load_module_util("venv.uv")
CACHE = os.path.join(ROOT, "build", "uv-floor")
BEFORE = "0.4.3"     # the release before UV_MIN


def release(version):
    """The uv binary of ``version`` (its manylinux wheel from the index by the hash tests/ci/locks/uv-floor.txt pins,
    once, under build/uv-floor)."""
    dest = os.path.join(CACHE, version)
    binary = glob.glob(os.path.join(dest, "x", "*.data", "scripts", "uv"))
    if binary:
        return binary[0]
    os.makedirs(dest, exist_ok=True)
    with open(os.path.join(ROOT, "tests", "ci", "locks", "uv-floor.txt")) as fh:   # the wheel's pinned sha256
        pin = [line for line in fh if line.startswith("uv==%s " % version)]
    assert pin, "tests/ci/locks/uv-floor.txt pins no uv==%s" % version
    with open(os.path.join(dest, "pin.txt"), "w") as fh:
        fh.write(pin[0])
    subprocess.run([os.path.join(ROOT, ".venv", "bin", "pip"), "download", "-q", "--no-deps", "--require-hashes",
                    "--only-binary", ":all:", "--platform", "manylinux_2_17_x86_64", "-r", os.path.join(dest, "pin.txt"),
                    "-d", dest], check=True, timeout=300)
    with zipfile.ZipFile(glob.glob(os.path.join(dest, "uv-%s-*.whl" % version))[0]) as z:
        z.extractall(os.path.join(dest, "x"))
    binary = glob.glob(os.path.join(dest, "x", "*.data", "scripts", "uv"))[0]
    os.chmod(binary, 0o755)
    return binary


def build_argvs():
    """Every uv argv a build makes, with every option on (as module uv_venv runs them, runuser aside). A find-links
    directory that exists: uv before 0.5.x parses one that does not as a URL and refuses it."""
    full = {"uv": "UV", "lock": "/t/sglang.lock", "index_url": "https://idx/simple", "extra_index_urls": ["https://x"],
            "find_links": [CACHE], "no_index": True, "offline": True, "packages": [], "packages_no_deps": [],
            "extra": ["/t/wheels/flash_attn-2.8.3.whl"], "no_build_isolation": ["flash-attn"],
            "no_binary": ["flash-attn"], "extra_requirements": "/t/locks/flash-attn-2.8.3.txt"}
    light = dict(full, packages=["torch==2.9.1"], packages_no_deps=["sglang==0.5.9"])
    argvs = [uv.venv_argv("UV", "/usr/bin/python3", "/opt/v.builds/abc"), uv.find_argv("UV", "3.11")]
    for p in (full, light):
        for verbose in (False, True):
            argvs += [argv for argv, _what in uv.install_steps(p, "/opt/v.builds/abc", verbose=verbose)]
    assert {tuple(a[1:3]) for a in argvs} == {("venv", "--no-project"), ("python", "find"), ("pip", "sync"),
                                              ("pip", "install")}
    return argvs


def refused(binary):
    """The argvs this uv refuses, each with its first words of refusal."""
    out = []
    for argv in build_argvs():
        p = subprocess.run([binary] + argv[1:] + ["--help"], capture_output=True, text=True, timeout=60, check=False)
        if p.returncode != 0:
            out.append((" ".join(argv[1:3]), (p.stderr or p.stdout).strip().splitlines()[0]))
    return out


@pytest.fixture(scope="module")
def pinned():
    with open(os.path.join(ROOT, "roles", "sglang_venv", "defaults", "main.yml")) as fh:
        return str(yaml.safe_load(fh)["sglang_venv_uv_version"])


def test_the_floor_takes_every_option_the_build_passes():
    assert refused(release(uv.UV_MIN)) == []


def test_the_release_before_the_floor_refuses_one_and_the_reason_is_the_one_said():
    assert refused(release(BEFORE)) == [("venv --no-project", "error: unexpected argument '--no-project' found")]
    assert uv.UV_MIN_WHY == "uv %s's `uv venv` has no --no-project" % BEFORE


def test_the_pinned_uv_takes_them_all(pinned):
    binary = os.path.join(ROOT, ".venv", "bin", "uv")       # the dev venv's uv is the role's pin (requirements-dev)
    version = subprocess.run([binary, "--version"], capture_output=True, text=True, check=True).stdout.split()[1]
    assert version == pinned
    assert refused(binary) == []
    assert uv.uv_version_problem(pinned) is None
