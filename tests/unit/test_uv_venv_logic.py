"""module_utils/venv/uv.py: lock parsing, build identity, what to do, pruning, flash-attn wheel checks, MAX_JOBS."""
import hashlib
import os
import pwd
import shutil
import subprocess
import stat

import pytest
import yaml

from unit_helpers import ROOT, load_module_util

uv = load_module_util("venv.uv")
S = load_module_util("venv.seal")
LOCK = os.path.join(ROOT, "roles", "sglang_venv", "files", "locks", "sglang-0.5.9.lock")


def test_the_shipped_lock_carries_the_0_5_9_release_pins():
    with open(LOCK) as fh:
        pins = uv.parse_lock(fh.read())
    # sglang-0.5.9.md section 6: the release's own pins
    assert pins["sglang"] == "0.5.9"
    assert pins["torch"] == "2.9.1"
    assert pins["sgl-kernel"] == "0.3.21"
    assert pins["flashinfer-python"] == "0.6.3" and pins["flashinfer-cubin"] == "0.6.3"
    assert pins["transformers"] == "4.57.1" and pins["xgrammar"] == "0.1.27"
    assert pins["torch-memory-saver"] == "0.0.9" and pins["torchao"] == "0.9.0"
    # a package pinned per Python version keeps each version
    assert len(pins["numpy"].split(",")) >= 2
    assert "flash-attn" not in pins  # not a dependency of 0.5.9


def test_parse_lock_ignores_comments_hashes_and_markers_and_normalizes_names():
    text = ("# header\nFlash_Attn==2.8.3 ; python_full_version >= '3.10' \\\n    --hash=sha256:ab\n"
            "    # via -r x.in\nrequests[socks]==2.32.5\n")
    assert uv.parse_lock(text) == {"flash-attn": "2.8.3", "requests": "2.32.5"}


def test_build_id_is_stable_and_changes_with_what_decides_the_content():
    a = uv.build_id("l1", "3.11.2", ["numpy", "requests"], ["sglang==0.5.9"])
    assert a == uv.build_id("l1", "3.11.2", ["requests", "numpy"], ["sglang==0.5.9"])  # order of a set of names
    assert len(a) == 16
    others = {uv.build_id("l2", "3.11.2", ["numpy", "requests"], ["sglang==0.5.9"]),
              uv.build_id("l1", "3.11.9", ["numpy", "requests"], ["sglang==0.5.9"]),
              uv.build_id("l1", "3.11.2", ["numpy"], ["sglang==0.5.9"]),
              uv.build_id("l1", "3.11.2", ["numpy", "requests"], ["sglang==0.5.9"], ["/w/flash_attn.whl"]),
              uv.build_id("l1", "3.11.2", ["numpy", "requests"], ["sglang==0.5.9"], sources={"index_url": "m"})}
    assert a not in others and len(others) == 5


@pytest.mark.parametrize("active,complete,exists,want", [
    ("b1", True, True, "none"),
    ("b0", True, True, "switch"),
    ("", True, True, "switch"),
    ("b0", False, True, "repair"),
    ("b1", False, True, "repair"),   # the link points at a build whose marker is gone: redo it
    ("b0", False, False, "build"),
    ("", False, False, "build"),
])
def test_decide(active, complete, exists, want):
    assert uv.decide(active, "b1", complete, exists) == want


def test_prune_keeps_the_active_and_the_newest_others():
    builds = [("a", 1.0), ("b", 3.0), ("c", 2.0), ("d", 4.0)]
    assert sorted(uv.prune(builds, "a", 1)) == ["b", "c"]
    assert uv.prune(builds, "a", 3) == []
    assert sorted(uv.prune(builds, "d", 0)) == ["a", "b", "c"]
    assert uv.prune([], "x", 1) == []


GOOD = "flash_attn-2.8.3+cu12torch2.9cxx11abiTRUE-cp311-cp311-linux_x86_64.whl"


def test_a_matching_flash_attn_wheel_passes():
    assert uv.parse_flash_attn_wheel("/srv/wheels/" + GOOD) == {
        "version": "2.8.3", "cuda_major": "12", "torch": "2.9", "cxx11abi": True, "python": "cp311",
        "platform": "linux_x86_64"}
    assert uv.flash_attn_mismatches(GOOD, "2.9.1", "12.8", "3.11.2") == []


def test_each_mismatch_is_named_with_both_sides():
    bad = "flash_attn-2.8.3+cu11torch2.8cxx11abiFALSE-cp310-cp310-linux_aarch64.whl"
    problems = uv.flash_attn_mismatches(bad, "2.9.1", "12.8", "3.11.2")
    text = "\n".join(problems)
    assert len(problems) == 5
    assert "Python: the wheel is cp310, the venv's interpreter is 3.11.2 (cp311)" in text
    assert "platform: the wheel is linux_aarch64, the host is x86_64" in text
    assert "torch: the wheel is built for torch 2.8, the venv has torch 2.9.1" in text
    assert "CUDA: the wheel is built for CUDA 11, torch 2.9.1 is a CUDA 12.8 build" in text
    assert "C++ ABI: the wheel has cxx11abi=False, torch 2.9.1 has cxx11abi=True" in text


def test_a_name_that_is_no_flash_attn_wheel_is_refused_with_the_expected_shape():
    problems = uv.flash_attn_mismatches("flash-attn-2.8.3.tar.gz", "2.9.1", "12.8", "3.11.2")
    assert len(problems) == 1 and "is not a flash-attn wheel file name" in problems[0]
    # a wheel without the local version tag (a plain build) is only checked for Python and platform
    assert uv.flash_attn_mismatches("flash_attn-2.8.3-cp311-cp311-linux_x86_64.whl", "2.9.1", "12.8", "3.11.2") == []


@pytest.mark.parametrize("cpus,mem_mib,want", [
    (2, 24 * 1024, 2),      # this CI machine: CPU-bound
    (64, 32 * 1024, 5),     # big CPU, little memory: memory-bound
    (128, 512 * 1024, 85),
    (8, 4 * 1024, 1),       # never below one job
])
def test_max_build_jobs(cpus, mem_mib, want):
    assert uv.max_build_jobs(cpus, mem_mib) == want


def test_build_progress_reads_ninja_steps_from_uv_verbose_output_and_names_the_package():
    p = uv.BuildProgress(3)
    p.start("uv pip sync")
    assert p.message(0) == "step 1 of 3 (uv pip sync) after 0 s"
    p.start("uv pip install flash-attn==2.8.3")
    assert p.feed("DEBUG Building: flash-attn==2.8.3\n") is True
    assert p.message(12) == "step 2 of 3 (uv pip install flash-attn==2.8.3) after 12 s: building flash-attn==2.8.3 from source"
    assert p.feed("DEBUG [1/73] Building CUDA object csrc/flash_attn/src/flash_fwd_hdim32_bf16_sm80.cu.o\n") is True
    assert p.feed("DEBUG [1/73] Building CUDA object csrc/flash_attn/src/flash_fwd_hdim32_bf16_sm80.cu.o\n") is False
    assert p.feed("[41/73] Building CUDA object csrc/flash_attn/src/flash_bwd_hdim128_fp16_sm80.cu.o\r\n") is True
    assert p.message(1843) == ("step 2 of 3 (uv pip install flash-attn==2.8.3) after 1843 s: compiling 41 of 73 (56 %) "
                               "in the build of flash-attn==2.8.3")
    doc = p.doc(1843.26)
    assert (doc["step"], doc["steps"], doc["compiled"], doc["compile_total"], doc["elapsed_s"]) == (2, 3, 41, 73, 1843.3)
    p.start("uv pip install x")                      # a new step starts from nothing
    assert p.compiled is None and p.package is None


def test_build_progress_ignores_lines_that_only_look_like_steps():
    p = uv.BuildProgress(1)
    p.start("s")
    for line in ("DEBUG Resolved [0/0] nothing", "DEBUG [9/3] odd", "Building wheel for x", "   Building x==1",
                 "DEBUG Searching for a compatible version of x (<1.0 | >1.0)"):
        p.feed(line)
    assert p.compiled is None and p.package is None


def test_run_streaming_hands_over_each_line_as_it_comes_and_returns_the_exit_code():
    import sys
    seen = []
    rc = uv.run_streaming([sys.executable, "-c", "import sys; print('a'); print('b', file=sys.stderr); sys.exit(3)"],
                          None, seen.append)
    assert rc == 3 and [s.strip() for s in seen] == ["a", "b"]


# ---- the build's steps and its marker (module uv_venv's logic, unit-tested here)

def test_install_steps_sync_the_lock_or_install_selected_packages_then_extras_without_deps():
    p = {"uv": "/t/uv", "lock": "/t/sglang.lock", "index_url": "https://idx/simple", "extra_index_urls": ["https://x"],
         "find_links": [], "no_index": False, "offline": False, "packages": [], "packages_no_deps": [],
         "extra": ["/t/wheels/flash_attn-2.8.3.whl"], "no_build_isolation": [], "no_binary": []}
    steps = uv.install_steps(p, "/opt/v.builds/abc")
    py = ["--python", "/opt/v.builds/abc/bin/python"]
    src = ["--index-url", "https://idx/simple", "--extra-index-url", "https://x"]
    assert steps == [
        (["/t/uv", "pip", "sync"] + py + src + ["--compile-bytecode", "/t/sglang.lock"], "uv pip sync of /t/sglang.lock"),
        (["/t/uv", "pip", "install"] + py + src + ["--compile-bytecode", "--no-deps", "-c", "/t/sglang.lock"]
         + ["/t/wheels/flash_attn-2.8.3.whl"], "uv pip install /t/wheels/flash_attn-2.8.3.whl")]
    light = dict(p, packages=["torch==2.9.1"], packages_no_deps=["sglang==0.5.9"], extra=[], index_url=None,
                 extra_index_urls=[], no_index=True, find_links=["/w"], no_binary=["flash-attn"],
                 no_build_isolation=["flash-attn"])
    steps = uv.install_steps(light, "/b")
    flags = ["--python", "/b/bin/python", "--find-links", "/w", "--no-index", "--no-build-isolation-package",
             "flash-attn", "--no-binary", "flash-attn", "--compile-bytecode"]
    assert [s[1] for s in steps] == ["uv pip install --no-deps sglang==0.5.9", "uv pip install torch==2.9.1"]
    assert steps[0][0] == ["/t/uv", "pip", "install"] + flags + ["--no-deps", "-c", "/t/sglang.lock", "sglang==0.5.9"]
    assert steps[1][0] == ["/t/uv", "pip", "install"] + flags + ["-c", "/t/sglang.lock", "torch==2.9.1"]
    assert uv.source_args({"offline": True}) == ["--offline"]
    # a full build with flash-attn from source: `uv pip sync` has no --no-build-isolation-package (uv refuses it),
    # only the install steps get it
    full = dict(p, no_binary=["flash-attn"], no_build_isolation=["flash-attn"])
    sync, extra = uv.install_steps(full, "/b")
    assert sync[0][:3] == ["/t/uv", "pip", "sync"] and "--no-build-isolation-package" not in sync[0]
    assert sync[0][-4:] == ["--no-binary", "flash-attn", "--compile-bytecode", "/t/sglang.lock"]
    assert extra[0][:3] == ["/t/uv", "pip", "install"] and "--no-build-isolation-package" in extra[0]
    verbose = uv.install_steps(light, "/b", verbose=True)            # a source build streams uv -v to the poller
    assert [s[0] for s in verbose] == [s[0][:3] + ["-v"] + s[0][3:] for s in steps]


def test_a_marker_round_trips_and_a_sealed_build_is_roots_without_group_or_other_write(tmp_path):
    build = tmp_path / "abc"
    (build / "lib").mkdir(parents=True)
    f = build / "lib" / "x.py"
    f.write_text("x = 1\n")
    os.chmod(str(f), 0o666)
    os.symlink("/etc/passwd", str(build / "lib" / "link"))      # a planted link: not followed
    assert uv.read_marker(str(build)) is None
    uv.write_marker(str(build), {"build": "abc", "sealed": False})
    assert uv.read_marker(str(build)) == {"build": "abc", "sealed": False}
    (build / uv.MARKER).write_text("{not json")
    assert uv.read_marker(str(build)) is None                     # a torn marker is no marker
    before = os.stat("/etc/passwd").st_mode
    S.seal(str(build))
    assert stat.S_IMODE(os.stat(str(f)).st_mode) == 0o644 and os.stat(str(f)).st_uid == 0
    assert os.stat("/etc/passwd").st_mode == before               # the link's target untouched


def _venv(tmp_path):
    build = tmp_path / "build"
    sp = build / "lib" / "python3.11" / "site-packages"
    (sp / "alpha").mkdir(parents=True)
    (sp / "alpha-1.0.dist-info").mkdir()
    (build / "bin").mkdir()
    real = tmp_path / "python3.11"
    real.write_text("#!/bin/sh\n")
    os.symlink(str(real), str(build / "bin" / "python"))
    return build, sp, real


def test_the_import_check_fingerprint_moves_with_every_input_it_depends_on(tmp_path):
    build, sp, real = _venv(tmp_path)
    gpus = {"nodes": ["nvidia0", "nvidiactl"], "driver": "NVRM version: 580.126.09"}
    base = uv.imports_fingerprint(str(build), ["sglang", "torch"], gpus)
    assert base == uv.imports_fingerprint(str(build), ["torch", "sglang"], dict(gpus))    # order of names: same
    assert base != uv.imports_fingerprint(str(build), ["sglang"], gpus)                   # other names asked
    assert base != uv.imports_fingerprint(str(build), ["sglang", "torch"], dict(gpus, nodes=["nvidiactl"]))
    assert base != uv.imports_fingerprint(str(build), ["sglang", "torch"], dict(gpus, driver="NVRM 575"))
    (sp / "beta").mkdir()                                                                  # a package installed
    installed = uv.imports_fingerprint(str(build), ["sglang", "torch"], gpus)
    assert installed != base
    os.rmdir(str(sp / "beta"))
    os.utime(str(sp / "alpha-1.0.dist-info"), ns=(1, 1))                                  # one replaced
    replaced = uv.imports_fingerprint(str(build), ["sglang", "torch"], gpus)
    assert replaced not in (base, installed)
    os.utime(str(real), ns=(2, 2))                                                         # the interpreter upgraded
    assert uv.imports_fingerprint(str(build), ["sglang", "torch"], gpus) != replaced


def test_an_import_answer_is_read_back_only_for_its_own_fingerprint(tmp_path):
    build = _venv(tmp_path)[0]
    facts = {"sglang": "0.5.9", "errors": {}}
    assert uv.read_imports_cache(str(build), "f1") is None                      # none recorded yet
    assert uv.write_imports_cache(str(build), "f1", facts, 1796150000) is True
    doc = uv.read_imports_cache(str(build), "f1")
    assert doc["imports"] == facts and doc["verified_at"] == 1796150000
    assert uv.read_imports_cache(str(build), "f2") is None                      # anything changed: asked again
    (build / uv.IMPORTS_CACHE).write_text("{torn")
    assert uv.read_imports_cache(str(build), "f1") is None
    assert uv.write_imports_cache(str(tmp_path / "gone"), "f1", facts, 1) is False   # cannot write: not an error


def test_the_gpu_view_is_the_nvidia_nodes_and_the_driver_version(tmp_path):
    dev = tmp_path / "dev"
    dev.mkdir()
    for n in ("nvidia1", "nvidiactl", "null", "nvidia-uvm"):
        (dev / n).write_text("")
    version = tmp_path / "version"
    version.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.126.09\n")
    assert uv.gpu_view(str(dev), str(version)) == {
        "nodes": ["nvidia-uvm", "nvidia1", "nvidiactl"], "driver": "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.126.09"}
    assert uv.gpu_view(str(tmp_path / "nodev"), str(tmp_path / "noversion")) == {"nodes": [], "driver": None}


def _world_readable_dir():
    """A directory the account nobody can traverse (pytest's tmp_path is 0700, root's)."""
    import tempfile  # pylint: disable=import-outside-toplevel
    d = tempfile.mkdtemp(prefix="gpuserve-seal-", dir="/var/tmp")
    os.chmod(d, 0o755)
    return d


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("runuser"), reason="needs root and runuser")
def test_a_set_id_file_the_service_made_is_not_sealed_into_a_set_id_root_program():
    """#42 item 2: seal lchown'ed (the kernel clears the s-bits) then chmod'ed the old mode minus 022, which put them
    back: a file the service made 06777 became root:root 06755 and `runuser -u nobody -- evil` ran with euid 0."""
    top = _world_readable_dir()
    try:
        build = os.path.join(top, "build")
        os.makedirs(os.path.join(build, "bin"), 0o755)
        evil = os.path.join(build, "bin", "evil")
        shutil.copy("/usr/bin/id", evil)
        nobody = pwd.getpwnam("nobody")
        for path in (build, os.path.join(build, "bin"), evil):
            os.chown(path, nobody.pw_uid, nobody.pw_gid)
        os.chmod(evil, 0o6777)
        os.chmod(os.path.join(build, "bin"), 0o3777)        # set-gid and sticky on a directory too
        cleared = S.seal(build)
        assert sorted(cleared) == sorted([os.path.join(build, "bin"), evil])
        assert stat.S_IMODE(os.stat(evil).st_mode) == 0o755 and os.stat(evil).st_uid == 0
        assert stat.S_IMODE(os.stat(os.path.join(build, "bin")).st_mode) == 0o755
        out = subprocess.run(["runuser", "-u", "nobody", "--", evil, "-u"], capture_output=True, text=True, check=True)
        assert out.stdout.strip() == str(nobody.pw_uid)
        assert S.seal(build) == []                          # sealed again: nothing left to clear
    finally:
        shutil.rmtree(top)


def test_seal_changes_a_linked_directory_never_its_target_and_refuses_a_fifo(tmp_path):
    """Nothing is changed by a path the service could swap: a directory that is a link is re-owned itself, what it
    points at keeps its owner and mode; a FIFO in a build (a venv never holds one) is named, not opened blocking."""
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "shadow"
    secret.write_text("x")
    os.chmod(str(secret), 0o4666)
    build = tmp_path / "build"
    (build / "lib").mkdir(parents=True)
    os.symlink(str(outside), str(build / "lib" / "site"))
    before = os.stat(str(secret))
    S.seal(str(build))
    after = os.stat(str(secret))
    assert (after.st_mode, after.st_uid) == (before.st_mode, before.st_uid)
    os.mkfifo(str(build / "lib" / "pipe"))
    with pytest.raises(S.SealError, match=r"lib/pipe: the build made a FIFO"):
        S.seal(str(build))


def test_a_flash_attn_source_build_installs_its_sdist_by_hash_and_never_fetches_a_prebuilt_wheel():
    """#42 item 6: in source mode flash-attn==2.8.3 was not in the lock (no hash), and without
    FLASH_ATTENTION_FORCE_BUILD=TRUE its setup.py first downloads a prebuilt wheel from the internet, unverified."""
    p = {"uv": "/t/uv", "lock": "/t/sglang.lock", "index_url": None, "extra_index_urls": [], "find_links": [],
         "no_index": False, "offline": False, "packages": [], "packages_no_deps": [], "extra": [],
         "no_build_isolation": ["flash-attn"], "no_binary": ["flash-attn"],
         "extra_requirements": "/t/locks/flash-attn-2.8.3.txt"}
    last = uv.install_steps(p, "/b")[-1]
    assert last[0][-7:] == ["--compile-bytecode", "--no-deps", "--require-hashes", "-c", "/t/sglang.lock", "-r",
                            "/t/locks/flash-attn-2.8.3.txt"]
    assert last[0][:3] == ["/t/uv", "pip", "install"] and "flash-attn==2.8.3" not in last[0]
    # the shipped pin: flash-attn 2.8.3's sdist by its sha256 (tests/ci/lock.sh check compares it with the index)
    with open(os.path.join(ROOT, "roles", "sglang_venv", "files", "locks", "flash-attn-2.8.3.txt")) as fh:
        body = " ".join(line.strip().rstrip("\\") for line in fh if not line.startswith("#"))
    assert body.split() == ["flash-attn==2.8.3",
                            "--hash=sha256:1e71dd64a9e0280e0447b8a0c2541bad4bf6ac65bdeaa2f90e51a9e57de0370d"]
    with open(os.path.join(ROOT, "roles", "sglang_venv", "vars", "main.yml")) as fh:
        build_env = yaml.safe_load(fh)["__sglang_venv_build_env"]
    assert "'FLASH_ATTENTION_FORCE_BUILD': 'TRUE'" in build_env       # the source build's environment (a template)


def test_a_transfer_engine_is_installed_by_hash_beside_flash_attn_and_its_file_pins_every_wheel_the_index_states():
    """#59 item 3: role sglang_venv's transfer engine (prefill/decode) is a second hash-pinned file after the lock - one
    install with both files, each requirement --require-hashes - and the shipped files pin Mooncake 0.3.13.post1's
    wheels (CPython 3.10-3.13, x86_64 and aarch64: 8 each) and msgpack, the one requirement the locks lack."""
    p = {"uv": "/t/uv", "lock": "/t/sglang.lock", "index_url": None, "extra_index_urls": [], "find_links": [],
         "no_index": False, "offline": False, "packages": [], "packages_no_deps": [], "extra": [],
         "no_build_isolation": [], "no_binary": [],
         "extra_requirements": ["/t/locks/flash-attn-2.8.3.txt", "/t/locks/mooncake-transfer-engine-0.3.13.post1.txt"]}
    last = uv.install_steps(p, "/b")[-1]
    assert last[0][-9:] == ["--compile-bytecode", "--no-deps", "--require-hashes", "-c", "/t/sglang.lock",
                            "-r", "/t/locks/flash-attn-2.8.3.txt", "-r", "/t/locks/mooncake-transfer-engine-0.3.13.post1.txt"]
    locks = os.path.join(ROOT, "roles", "sglang_venv", "files", "locks")
    for package in ("mooncake-transfer-engine", "mooncake-transfer-engine-non-cuda"):
        with open(os.path.join(locks, "%s-0.3.13.post1.txt" % package)) as fh:
            body = " ".join(line.strip().rstrip("\\") for line in fh if not line.startswith("#")).split()
        pins = [w for w in body if not w.startswith("--hash=")]
        assert pins == ["%s==0.3.13.post1" % package, "msgpack==1.1.2"]
        hashes = [w for w in body if w.startswith("--hash=sha256:")]
        assert len(hashes) == len(set(hashes)) == 16 and len(body) == 18
    # the lock's own requirements of the wheel (aiohttp, requests) are in both SGLang locks; msgpack in neither
    for release in ("0.5.9", "0.5.23"):
        with open(os.path.join(locks, "sglang-%s.lock" % release)) as fh:
            names = [line.split("==")[0] for line in fh if "==" in line and not line.startswith((" ", "#"))]
        assert {"aiohttp", "requests"} <= set(names) and "msgpack" not in names, release


def test_the_extra_requirements_files_decide_the_build_and_one_file_keeps_the_id_it_had_as_a_path(tmp_path):
    """extra_requirements became a list (0.20.0: flash-attn's sdist and a transfer engine together); a venv built with
    one file before keeps its build id - a re-run after the upgrade must not rebuild it."""
    builder = load_module_util("venv.builder")
    fa, te = tmp_path / "fa.txt", tmp_path / "te.txt"
    fa.write_text("flash-attn==2.8.3 --hash=sha256:" + "1" * 64 + "\n")
    te.write_text("msgpack==1.1.2 --hash=sha256:" + "2" * 64 + "\n")
    base = {"path": "/opt/v", "store": None, "index_url": None, "extra_index_urls": [], "find_links": [],
            "no_index": False, "no_binary": []}

    def sources(reqs):
        return builder.VenvManager(dict(base, extra_requirements=reqs), None, None).sources()
    assert "extra_requirements" not in sources([])
    assert sources([str(fa)])["extra_requirements"] == hashlib.sha256(fa.read_bytes()).hexdigest()   # as before
    both = sources([str(fa), str(te)])["extra_requirements"]
    assert both == [hashlib.sha256(fa.read_bytes()).hexdigest(), hashlib.sha256(te.read_bytes()).hexdigest()]
    with pytest.raises(builder.VenvFailed, match=r"extra_requirements=%s cannot be read" % (tmp_path / "gone.txt")):
        sources([str(fa), str(tmp_path / "gone.txt")])


def test_a_tool_is_trusted_only_when_it_and_every_directory_above_are_roots_and_written_by_root_only(tmp_path):
    """#42 item 4 (module uv_venv runs this before any build)."""
    tool = tmp_path / "t" / "bin" / "uv"
    tool.parent.mkdir(parents=True)
    tool.write_text("#!/bin/sh\n")
    os.chmod(str(tool), 0o755)
    assert uv.tool_problem(str(tool)) is None
    os.chmod(str(tool.parent), 0o775)
    assert "%s (a directory above it) is owned by uid 0 with mode 0775" % tool.parent in uv.tool_problem(str(tool))
    os.chmod(str(tool.parent), 0o755)
    link = tmp_path / "link-to-uv"
    os.symlink(str(tool), str(link))                      # judged by what it resolves to
    assert uv.tool_problem(str(link)) is None
    if os.geteuid() == 0:
        os.chown(str(tool), 65534, 65534)
        assert "(the uv in use) is owned by uid 65534" in uv.tool_problem(str(link))


def test_a_uv_older_than_the_builds_options_is_named_with_the_oldest_that_takes_them():
    """#47 item 2: the last link of the chain (the floor itself is measured against the releases in
    tests/integration/test_uv_floor.py)."""
    assert uv.UV_MIN == "0.4.4"
    for ok in ("0.4.4", "0.9.30", "uv 0.9.30 (x86_64-unknown-linux-gnu)", "1.0", "0.10.0"):
        assert uv.uv_version_problem(ok) is None, ok
    assert uv.uv_version_problem("uv 0.4.3") == (
        "uv 0.4.3 is older than the oldest uv that takes every option the build passes (0.4.4; uv 0.4.3's "
        "`uv venv` has no --no-project): use uv 0.4.4 or newer - role sglang_venv pins one (sglang_venv_uv_version)")
    assert uv.uv_version_problem("0.3.5").startswith("uv 0.3.5 is older than")
    assert uv.uv_version_problem("latest") == "'latest' is not a uv version"
    # the role's copy of the floor (its preflight refuses an older sglang_venv_uv_version) is the module's
    with open(os.path.join(ROOT, "roles", "sglang_venv", "vars", "main.yml")) as fh:
        role = yaml.safe_load(fh)
    assert (role["__sglang_venv_uv_min"], role["__sglang_venv_uv_min_why"]) == (uv.UV_MIN, uv.UV_MIN_WHY)


# uv 0.9.30's own lines of a real `uv pip sync -v` (numpy's from PyPI; the DEBUG ones abridged), in the order it
# printed them
UV_SYNC = """DEBUG uv 0.9.30
Using Python 3.11.7 environment at: v
Resolved 3 packages in 86ms
DEBUG Identified uncached distribution: idna==3.10
DEBUG Identified uncached distribution: certifi==2025.8.3
DEBUG Identified uncached distribution: numpy==2.2.6
DEBUG Sending fresh GET request for: https://files.pythonhosted.org/packages/b3/dd/numpy-2.2.6-cp311-cp311-manylinux_2_17_x86_64.whl
Downloading numpy (16.0MiB)
Downloading torch (846.1MiB)
 Downloaded numpy
Prepared 3 packages in 1.93s
Installed 3 packages in 110ms
DEBUG Starting 2 bytecode compilation workers
Bytecode compiled 503 files in 3.44s
 + certifi==2025.8.3
"""


def test_build_progress_follows_uvs_own_phases_resolved_fetched_downloaded_bytes_installed_compiled():
    """#62 item 7: the default build's progress - the packages resolved and to fetch, the large files with their
    bytes as uv downloads them, then installed and compiled - from uv -v's lines (there is no byte count of the
    files under 1 MiB, which uv does not name)."""
    p = uv.BuildProgress(2)
    p.start("uv pip sync of sglang-0.5.9.lock")
    said = []
    for line in UV_SYNC.splitlines(True):
        if p.feed(line):
            said.append(p.message(5))
    prefix = "step 1 of 2 (uv pip sync of sglang-0.5.9.lock) after 5 s: "
    assert [s[len(prefix):] for s in said] == [
        "3 packages resolved",
        "3 packages resolved, 1 to fetch",
        "3 packages resolved, 2 to fetch",
        "3 packages resolved, 3 to fetch",
        "3 packages resolved, 3 to fetch; 0.0 MiB of 16.0 MiB downloaded (0 of 1 large file)",
        "3 packages resolved, 3 to fetch; 0.0 MiB of 862.1 MiB downloaded (0 of 2 large files)",
        "3 packages resolved, 3 to fetch; 16.0 MiB of 862.1 MiB downloaded (1 of 2 large files)",
        "3 packages resolved, 3 fetched (862.1 MiB); installing",
        "3 packages installed, compiling bytecode",
        "3 packages installed, 503 files compiled",
    ] and all(s.startswith(prefix) for s in said)
    doc = p.doc(5)
    assert (doc["resolved"], doc["to_fetch"], doc["installed"], doc["large_done"], doc["large_total"]) == (3, 3, 3, 1, 2)
    assert doc["downloaded_bytes"] == 16 << 20 and doc["download_bytes"] == int(846.1 * (1 << 20)) + (16 << 20)
    p.start("uv pip install --no-deps x")              # the next step counts from nothing
    assert p.message(7) == "step 2 of 2 (uv pip install --no-deps x) after 7 s" and p.doc(7)["download_bytes"] == 0
    for line in ("Resolved 1 package in 3ms", "Downloading x (2.0MiB)"):     # one, in the singular
        p.feed(line)
    assert p.message(7).endswith(": 1 package resolved; 0.0 MiB of 2.0 MiB downloaded (0 of 1 large file)")


def test_build_progress_sizes_read_in_every_unit_uv_prints():
    p = uv.BuildProgress(1)
    p.start("s")
    for line in ("Downloading a (512.0KiB)", "Downloading b (2.5GiB)", "Downloading c (10B)", "Downloading d (1.5 MiB)",
                 " Downloaded b", " Downloaded zzz"):
        p.feed(line)
    assert p.large == {"a": 512 << 10, "b": int(2.5 * (1 << 30)), "c": 10}      # "1.5 MiB" is not uv's form
    assert p.large_done == {"b"} and "2.5 GiB of 2.5 GiB downloaded (1 of 3 large files)" in p.message(0)
