"""uv_venv through Ansible with the real uv, real venvs and a local wheelhouse (no network): build, no-op,
switch, prune, repair after an interruption, and refusals that leave the venv in service untouched."""
import functools
import http.server
import io
import json
import os
import pathlib
import re
import shutil
import stat
import subprocess
import sys
import tarfile
import threading
import time

import pytest

from ansible_helpers import VENV_BIN, run_module
from make_wheel import make_wheel

M = "gpuserve.sglang.uv_venv"
UV = os.path.join(VENV_BIN, "uv")


@pytest.fixture
def site(tmp_path):
    wh = tmp_path / "wheelhouse"
    for name, version, req in [("alpha", "1.0", ["beta"]), ("alpha", "2.0", ["beta"]), ("beta", "1.0", []),
                               ("gamma", "1.0", [])]:
        make_wheel(str(wh), name, version, requires=req)
    return {"wh": str(wh), "tmp": tmp_path, "path": str(tmp_path / "opt" / "venv")}


def lock(site, *reqs, name="app.lock"):
    """A real lock: uv pip compile against the wheelhouse, with hashes."""
    src = site["tmp"] / (name + ".in")
    src.write_text("\n".join(reqs) + "\n")
    out = site["tmp"] / name
    subprocess.run([UV, "pip", "compile", "-q", "--no-index", "--find-links", site["wh"], "--generate-hashes",
                    str(src), "-o", str(out)], check=True, env=dict(os.environ, UV_PYTHON_DOWNLOADS="never"))
    return str(out)


def args(site, lockfile, **kw):
    a = {"path": site["path"], "uv": UV, "python": sys.executable, "lock": lockfile, "no_index": True,
         "find_links": [site["wh"]]}
    a.update(kw)
    return a


def venv_python_says(site, code):
    return subprocess.run([os.path.join(site["path"], "bin", "python"), "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip()


def test_build_then_second_run_is_a_no_op(site):
    lk = lock(site, "alpha==1.0")
    r = run_module(M, args(site, lk))
    assert r.get("failed") is not True, r.get("msg")
    assert r["changed"] is True and r["decision"] == "build" and r["pins"] == 2
    assert os.path.islink(site["path"]) and os.path.realpath(site["path"]) == r["build_path"]
    assert venv_python_says(site, "import alpha, beta; print(alpha.__version__, beta.__version__)") == "1.0 1.0"
    again = run_module(M, args(site, lk))
    assert again["changed"] is False and again["decision"] == "none" and again["build"] == r["build"]


def test_check_mode_predicts_a_build_and_writes_nothing(site):
    r = run_module(M, args(site, lock(site, "alpha==1.0")), check=True)
    assert r["changed"] is True and r["decision"] == "build"
    assert not os.path.lexists(site["path"]) and not os.path.exists(site["path"] + ".builds")


def test_a_new_pin_is_built_beside_the_old_one_then_switched_and_old_builds_pruned(site):
    first = run_module(M, args(site, lock(site, "alpha==1.0", name="a1.lock")))
    second = run_module(M, args(site, lock(site, "alpha==2.0", name="a2.lock")))
    assert second["decision"] == "build" and second["previous"] == first["build"]
    assert venv_python_says(site, "import alpha; print(alpha.__version__)") == "2.0"
    assert os.path.isdir(first["build_path"])  # keep=1: the previous build stays for a quick switch back
    back = run_module(M, args(site, lock(site, "alpha==1.0", name="a1.lock")))
    assert back["decision"] == "switch" and back["build"] == first["build"] and back["removed"] == []
    assert venv_python_says(site, "import alpha; print(alpha.__version__)") == "1.0"
    third = run_module(M, args(site, lock(site, "gamma==1.0", name="g.lock"), keep=0))
    assert sorted(third["removed"]) == sorted([first["build"], second["build"]])
    assert sorted(os.listdir(site["path"] + ".builds")) == [third["build"]]


def test_only_the_selected_packages_of_the_lock(site):
    lk = lock(site, "alpha==1.0", "gamma==1.0")
    r = run_module(M, args(site, lk, packages_no_deps=["alpha"], packages=["gamma"]))
    assert r["changed"] is True
    assert venv_python_says(site, "import importlib.util as u; print([n for n in ('alpha','beta','gamma') if u.find_spec(n)])") \
        == "['alpha', 'gamma']"


def test_an_interrupted_build_is_repaired(site):
    lk = lock(site, "alpha==1.0")
    planned = run_module(M, args(site, lk), check=True)
    os.makedirs(os.path.join(planned["build_path"], "lib"))  # what a killed install leaves: no marker
    r = run_module(M, args(site, lk))
    assert r["decision"] == "repair" and r["changed"] is True
    assert venv_python_says(site, "import alpha; print(alpha.__version__)") == "1.0"


def test_extra_wheels_are_installed_into_the_build(site):
    fa = make_wheel(str(site["tmp"] / "fa"), "flash-attn", "2.8.3", local_tag="cu12torch2.9cxx11abiTRUE")
    r = run_module(M, args(site, lock(site, "alpha==1.0"), extra=[fa]))
    assert r["changed"] is True
    assert venv_python_says(site, "import flash_attn; print(flash_attn.__version__)") == "2.8.3+cu12torch2.9cxx11abiTRUE"


def in_service(site):
    return os.path.realpath(site["path"]), sorted(os.listdir(site["path"] + ".builds"))


def test_an_unresolvable_pin_fails_clearly_and_leaves_the_venv_in_service(site):
    run_module(M, args(site, lock(site, "alpha==1.0")))
    before = in_service(site)
    bad = site["tmp"] / "bad.lock"
    bad.write_text("alpha==9.9\nbeta==1.0\n")
    r = run_module(M, args(site, str(bad)))
    assert r["failed"] is True
    assert "alpha==9.9" in r["msg"] and "untouched" in r["msg"]
    assert in_service(site) == before


def test_a_tampered_file_fails_the_hash_check_and_leaves_the_venv_in_service(site):
    lk = lock(site, "alpha==1.0")
    run_module(M, args(site, lk))
    before = in_service(site)
    text = open(lk).read()
    first = text.split("--hash=sha256:")[1][:64]
    open(lk, "w").write(text.replace(first, "0" * 64))
    r = run_module(M, args(site, lk))
    assert r["failed"] is True and "hash" in r["msg"].lower()
    assert in_service(site) == before


def test_an_unknown_python_is_named_and_nothing_is_written(site):
    r = run_module(M, args(site, lock(site, "alpha==1.0"), python="3.99"))
    assert r["failed"] is True
    assert r["msg"].startswith("python=3.99: no such interpreter on the target")
    assert not os.path.lexists(site["path"]) and not os.path.exists(site["path"] + ".builds")


def test_a_hand_built_venv_at_the_path_is_refused(site):
    os.makedirs(os.path.join(site["path"], "bin"))
    r = run_module(M, args(site, lock(site, "alpha==1.0")))
    assert r["failed"] is True and "is not a symlink managed by this module" in r["msg"]
    assert os.listdir(site["path"]) == ["bin"]


def test_missing_lock_and_uv_are_named(site):
    r = run_module(M, args(site, str(site["tmp"] / "nope.lock")))
    assert r["failed"] is True and r["msg"].startswith("lock=%s cannot be read" % (site["tmp"] / "nope.lock"))
    r = run_module(M, args(site, lock(site, "alpha==1.0"), uv="/nonexistent/uv"))
    assert r["failed"] is True and r["msg"].startswith("uv=/nonexistent/uv is not an executable file")


def test_a_finished_build_is_sealed_root_owned_and_read_only_and_an_old_unsealed_one_is_sealed(site):
    """Root runs the venv's interpreter (the model download, the verify step): nothing in it may be writable by
    the service account. A build made before sealing existed (service-owned) is sealed on the next run."""
    lf = lock(site, "alpha==1.0")
    r = run_module(M, args(site, lf))
    assert r["decision"] == "build", r.get("msg")
    build = r["build_path"]
    for root, dirs, files in os.walk(build):
        for name in [root] + [os.path.join(root, n) for n in dirs + files]:
            st = os.lstat(name)
            assert st.st_uid == 0 and st.st_gid == 0, name
            assert stat.S_ISLNK(st.st_mode) or not st.st_mode & 0o022, name
    assert os.stat(os.path.dirname(build)).st_uid == 0
    assert list(pathlib.Path(build).rglob("__pycache__/*.pyc")), "bytecode compiled at build time"
    # as a build of an earlier release: owned by the service account (nobody here), no seal in its marker
    for root, dirs, files in os.walk(build):
        for name in [root] + [os.path.join(root, n) for n in dirs + files]:
            os.lchown(name, 65534, 65534)
    marker = os.path.join(build, ".gpuserve-build.json")
    data = json.loads(open(marker).read())
    data.pop("sealed")
    with open(marker, "w") as fh:
        json.dump(data, fh)
    again = run_module(M, args(site, lf))
    assert again["changed"] is True and again["decision"] == "seal"
    assert os.lstat(os.path.join(build, "bin", "python")).st_uid == 0
    assert run_module(M, args(site, lf))["decision"] == "none"


def test_a_python_2_interpreter_is_named_as_such_and_nothing_is_built(site, tmp_path):
    """A stand-in for /usr/bin/python2: it answers the version probe the way python2.7 does (2.7.18)."""
    py2 = tmp_path / "python2"
    py2.write_text("#!/bin/sh\necho 2.7.18\n")
    py2.chmod(0o755)
    r = run_module(M, args(site, lock(site, "alpha==1.0"), python=str(py2)))
    assert r["failed"] is True and "is Python 2.7.18: SGLang needs Python 3.10 or newer" in r["msg"]
    assert not os.path.lexists(site["path"]) and not os.path.exists(site["path"] + ".builds")


def build_watching(a, progress):
    """Run the module with ``a`` while reading its progress file every 50 ms: (its result, each new document seen)."""
    seen, box = [], {}
    worker = threading.Thread(target=lambda: box.update(r=run_module(M, a)))
    worker.start()
    while worker.is_alive():
        try:
            with open(progress) as f:
                doc = json.load(f)
        except (OSError, ValueError):
            doc = None
        if doc and (not seen or doc != seen[-1]):
            seen.append(doc)
        time.sleep(0.05)
    worker.join()
    return box["r"], seen


def test_a_source_build_reports_its_compile_steps_while_it_runs_and_no_binary_forces_the_source(site):
    """flash-attn from source takes hours: the module, run async by the role, writes the step and ninja's
    [k/N] counts (read from uv -v, which streams the build backend's output) to a progress file as they come."""
    from make_wheel import make_sdist
    make_sdist(site["wh"], "slowext", "1.0", steps=8, delay=0.3)
    make_wheel(site["wh"], "slowext", "1.0")          # a wheel beside it: no_binary must still build the source
    progress = str(site["tmp"] / "venv.progress.json")
    a = args(site, lock(site, "alpha==1.0"), extra=["slowext==1.0"], no_binary=["slowext"], progress_file=progress,
             public_environment={"UV_CACHE_DIR": str(site["tmp"] / "uv-cache")})   # no earlier build of it cached
    r, seen = build_watching(a, progress)
    assert r.get("failed") is not True, r.get("msg")
    assert r["decision"] == "build"
    counts = sorted(set(d["compiled"] for d in seen if d.get("compile_total") == 8))
    assert len(counts) >= 4 and counts[-1] <= 8, seen          # k of 8 seen as the build went on
    ticks = [d for d in seen if d.get("compiled")]
    assert re.match(r"^step 2 of 2 \(uv pip install slowext==1\.0\) after \d+ s: compiling \d of 8 \(\d+ %\) "
                    r"in the build of slowext==1\.0$", ticks[-1]["message"]), ticks[-1]
    assert seen[0]["step"] == 1 and seen[0]["steps"] == 2           # the lock's sync first, then the extra
    assert not os.path.exists(progress)                               # gone when the build ends
    assert venv_python_says(site, "import slowext; print(slowext.__version__)") == "1.0+source"


class _SlowWheels(http.server.SimpleHTTPRequestHandler):
    """A find-links page over HTTP whose wheels come at about 2 MiB/s - as an index does, only slower, so that a
    download is seen in progress (uv names a file over 1 MiB as it fetches it, with its size)."""

    def copyfile(self, source, outputfile):
        if not self.path.endswith(".whl"):
            return super().copyfile(source, outputfile)
        while True:
            chunk = source.read(256 << 10)
            if not chunk:
                return None
            outputfile.write(chunk)
            time.sleep(0.12)

    def log_message(self, *args):
        pass


def test_the_default_build_reports_packages_resolved_and_fetched_and_the_bytes_downloaded(site):
    """#62 item 7: the default build (4.5 GB downloaded for the 0.5.9 lock) is the longest step; run async by the role,
    the module writes uv's own phases to the progress file as they come: the packages resolved and to fetch, the large
    files with their bytes as they download, then installed - the same file and poller as a source build."""
    make_wheel(site["wh"], "bigone", "1.0", payload_bytes=3 << 20)
    make_wheel(site["wh"], "bigtwo", "1.0", payload_bytes=2 << 20)
    lk = lock(site, "alpha==1.0", "bigone==1.0", "bigtwo==1.0")      # hashed from the same files the server sends
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_SlowWheels, directory=site["wh"]))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    progress = str(site["tmp"] / "venv.progress.json")
    a = args(site, lk, find_links=["http://127.0.0.1:%d/" % server.server_address[1]], progress_file=progress,
             public_environment={"UV_CACHE_DIR": str(site["tmp"] / "uv-cache")})
    try:
        r, seen = build_watching(a, progress)
    finally:
        server.shutdown()
    assert r.get("failed") is not True, r.get("msg")
    assert r["decision"] == "build" and not os.path.exists(progress)
    total = sum(os.path.getsize(os.path.join(site["wh"], w)) for w in os.listdir(site["wh"]) if w.startswith("big"))
    downloading = [d for d in seen if d.get("large_total") == 2]
    assert downloading, seen
    # both large files named with their sizes (uv's one decimal of MiB), seen part way and then whole
    assert all(abs(d["download_bytes"] - total) < 0.1 * (1 << 20) for d in downloading), (total, downloading[-1])
    assert any(d["downloaded_bytes"] < d["download_bytes"] for d in downloading), downloading
    assert downloading[-1]["large_done"] == 2 and downloading[-1]["downloaded_bytes"] == downloading[-1]["download_bytes"]
    assert any(re.match(r"^step 1 of 1 \(uv pip sync of \S+app\.lock\) after \d+ s: 4 packages resolved, 4 to fetch; "
                        r"\d+\.\d MiB of 5\.0 MiB downloaded \([01] of 2 large files\)$", d["message"])
               for d in downloading), [d["message"] for d in downloading]
    assert venv_python_says(site, "import bigone, bigtwo; print(bigone.__version__, bigtwo.__version__)") == "1.0 1.0"


def test_a_build_is_private_to_its_builder_while_it_is_made_and_readable_once_sealed(site):
    """#58 item 2: while a build is made nothing of it may be reachable by the serving account - uv leaves its venv's
    .lock writable by all, and the lab's attacker (tests/lab/probes/build_attacker.py, as the serving account)
    held it open so that the seal refused the build. The store watched during a slow source build: every build
    directory not yet root's is 0700; the sealed one is root's 0755 and its .lock no longer writable by others."""
    from make_wheel import make_sdist
    make_sdist(site["wh"], "slowext", "1.0", steps=8, delay=0.3)
    a = args(site, lock(site, "alpha==1.0"), extra=["slowext==1.0"], no_binary=["slowext"],
             public_environment={"UV_CACHE_DIR": str(site["tmp"] / "uv-cache")})
    store, modes, box = site["path"] + ".builds", set(), {}
    worker = threading.Thread(target=lambda: box.update(r=run_module(M, a)))
    worker.start()
    while worker.is_alive():
        try:
            for name in os.listdir(store):
                st = os.lstat(os.path.join(store, name))
                if stat.S_ISDIR(st.st_mode) and not name.startswith(".scratch-") and not os.path.exists(
                        os.path.join(store, name, ".gpuserve-build.json")):
                    modes.add(stat.S_IMODE(st.st_mode))
        except OSError:
            pass
        time.sleep(0.02)
    worker.join()
    r = box["r"]
    assert r.get("failed") is not True, r.get("msg")
    assert modes == {0o700}, sorted(oct(m) for m in modes)       # seen while made (about 2.4 s of compiling)
    st = os.stat(r["build_path"])
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o755)
    lock_file = os.path.join(r["build_path"], ".lock")
    assert not os.path.exists(lock_file) or not os.stat(lock_file).st_mode & 0o022


def test_a_failing_source_build_names_the_failure_not_uv_debug_noise(site):
    from make_wheel import make_sdist
    path = make_sdist(site["wh"], "brokenext", "1.0", steps=2, delay=0.0)
    with tarfile.open(path) as t:                    # the same sdist, its backend raising as a failed nvcc would
        members = [(m, t.extractfile(m).read()) for m in t.getmembers()]
    with tarfile.open(path, "w:gz") as t:
        for m, data in members:
            if m.name.endswith("slow_backend.py"):
                data += b"\n\ndef build_wheel(*a, **k):\n    raise SystemExit('nvcc fatal   : Unsupported gpu architecture compute_120')\n"
                m.size = len(data)
            t.addfile(m, io.BytesIO(data))
    progress = str(site["tmp"] / "venv.progress.json")
    r = run_module(M, args(site, lock(site, "alpha==1.0"), extra=["brokenext==1.0"], no_binary=["brokenext"],
                           progress_file=progress, public_environment={"UV_CACHE_DIR": str(site["tmp"] / "uv-cache")}))
    assert r["failed"] is True
    assert "uv pip install brokenext==1.0 failed" in r["msg"] and "Unsupported gpu architecture" in r["msg"]
    assert "DEBUG " not in r["msg"] and "the venv in service (none) is untouched" in r["msg"]
    assert not os.path.exists(progress) and not os.path.lexists(site["path"])


def test_verify_imports_answers_in_the_same_call_also_when_nothing_changed(site):
    """verify_imports (role sglang_venv's check, once a copy + a command): the venv's interpreter imports them after
    the build and on a no-op; absent is null, a broken import is named; check mode does not ask a venv to come."""
    lk = lock(site, "alpha==1.0")
    names = ["alpha", "beta", "absent_pkg", "broken"]
    r = run_module(M, args(site, lk, verify_imports=names), check=True)
    assert r["changed"] is True and "imports" not in r
    r = run_module(M, args(site, lk, verify_imports=names))
    assert r.get("failed") is not True, r.get("msg")
    imp = r["imports"]
    assert imp["alpha"] == "1.0" and imp["beta"] == "1.0" and imp["absent_pkg"] is None and imp["errors"] == {}
    assert imp["executable"] == os.path.join(site["path"], "bin", "python") and imp["python"] == r["python_version"]
    site_packages = venv_python_says(site, "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    broken = pathlib.Path(site_packages) / "broken"
    broken.mkdir()
    (broken / "__init__.py").write_text("import a_dependency_that_is_missing\n")
    again = run_module(M, args(site, lk, verify_imports=names), check=True)
    assert again["changed"] is False and again["imports"]["broken"] is None
    assert "a_dependency_that_is_missing" in again["imports"]["errors"]["broken"]


def test_verify_cached_reuses_the_last_answer_until_something_it_depends_on_changes(site):
    """verify_cached (role sglang_venv's re-runs): the first real run imports and records its answer in the build;
    a no-op re-run returns that answer without starting the interpreter (same verified_at); a package added to the
    venv makes it ask again; an answer with an import error is never recorded; check mode records nothing."""
    lk = lock(site, "alpha==1.0")
    names = ["alpha", "beta"]
    built = run_module(M, args(site, lk, verify_imports=names, verify_cached=True))
    assert built.get("failed") is not True, built.get("msg")
    cache = os.path.join(built["build_path"], ".gpuserve-imports.json")
    assert built["imports"]["cached"] is False and built["imports"]["alpha"] == "1.0" and os.path.isfile(cache)
    assert os.stat(cache).st_uid == 0 and stat.S_IMODE(os.stat(cache).st_mode) == 0o644
    time.sleep(1.1)
    again = run_module(M, args(site, lk, verify_imports=names, verify_cached=True))
    assert again["changed"] is False and again["imports"]["cached"] is True
    assert again["imports"]["verified_at"] == built["imports"]["verified_at"]
    assert again["imports"]["alpha"] == "1.0" and again["imports"]["beta"] == "1.0"
    uncached = run_module(M, args(site, lk, verify_imports=names))                # without verify_cached: asked
    assert uncached["imports"]["cached"] is False and uncached["imports"]["verified_at"] > built["imports"]["verified_at"]

    site_packages = venv_python_says(site, "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    broken = pathlib.Path(site_packages) / "broken"
    broken.mkdir()
    (broken / "__init__.py").write_text("import a_dependency_that_is_missing\n")
    names = names + ["broken"]
    with_error = run_module(M, args(site, lk, verify_imports=names, verify_cached=True))
    assert with_error["imports"]["cached"] is False and "broken" in with_error["imports"]["errors"]
    still = run_module(M, args(site, lk, verify_imports=names, verify_cached=True))
    assert still["imports"]["cached"] is False and "broken" in still["imports"]["errors"]   # a failure is asked again

    (broken / "__init__.py").write_text("__version__ = '0.1'\n")
    os.utime(str(broken), ns=(1, 1))                                              # its entry in site-packages changed
    os.unlink(cache)
    checked = run_module(M, args(site, lk, verify_imports=names, verify_cached=True), check=True)
    assert checked["imports"]["cached"] is False and checked["imports"]["broken"] == "0.1"
    assert not os.path.exists(cache)                                              # check mode wrote nothing
    fixed = run_module(M, args(site, lk, verify_imports=names, verify_cached=True))
    assert fixed["imports"]["cached"] is False and fixed["imports"]["broken"] == "0.1" and os.path.isfile(cache)
    assert run_module(M, args(site, lk, verify_imports=names, verify_cached=True))["imports"]["cached"] is True


def uv_said():
    return subprocess.run([UV, "--version"], capture_output=True, text=True, check=True).stdout.split()[1]


def test_uv_version_is_asked_only_when_uv_is_about_to_run(site):
    """uv_version (role sglang_venv's build call): a build with uv at another version, or missing, does nothing
    and says so (uv_ok false, uv_found) for the caller to install the pinned uv; with the pinned one it builds; a
    no-op, a check-mode preview with a Python path and a switch never ask uv - a missing uv is then no error."""
    lk = lock(site, "alpha==1.0")
    pinned = uv_said()
    wrong = run_module(M, args(site, lk, uv_version="0.9.29"))
    assert wrong.get("failed") is not True, wrong.get("msg")
    assert wrong["changed"] is False and wrong["uv_ok"] is False and wrong["uv_found"] == pinned
    assert wrong["decision"] == "build" and not os.path.lexists(site["path"])     # nothing was built
    assert not os.path.exists(site["path"] + ".builds")
    missing = run_module(M, args(site, lk, uv=str(site["tmp"] / "no-uv"), uv_version=pinned))
    assert missing["changed"] is False and missing["uv_ok"] is False and missing["uv_found"] is None
    preview = run_module(M, args(site, lk, uv=str(site["tmp"] / "no-uv"), uv_version=pinned), check=True)
    assert preview["changed"] is True and preview["decision"] == "build" and "uv_ok" not in preview
    built = run_module(M, args(site, lk, uv_version=pinned))
    assert built["changed"] is True and built["uv_ok"] is True and os.path.islink(site["path"])
    again = run_module(M, args(site, lk, uv=str(site["tmp"] / "no-uv"), uv_version=pinned))
    assert again.get("failed") is not True, again.get("msg")
    assert again["changed"] is False and again["decision"] == "none" and "uv_ok" not in again
    by_version = run_module(M, args(site, lk, python="%d.%d" % sys.version_info[:2], uv_version="0.9.29"))
    assert by_version["changed"] is False and by_version["uv_ok"] is False and by_version["decision"] == "uv"
    without = run_module(M, args(site, lk, uv=str(site["tmp"] / "no-uv")))                # no uv_version: as before
    assert without["failed"] is True and "is not an executable file; install uv first" in without["msg"]
    # #47 item 2: a uv_version older than the build's options allow is refused before anything, even a no-op
    old = run_module(M, args(site, lk, uv_version="0.4.3"))
    assert old["failed"] is True and old["msg"] == (
        "uv_version=0.4.3: uv 0.4.3 is older than the oldest uv that takes every option the build passes (0.4.4; uv "
        "0.4.3's `uv venv` has no --no-project): use uv 0.4.4 or newer - role sglang_venv pins one "
        "(sglang_venv_uv_version); nothing was built")


def test_a_uv_the_service_account_could_replace_is_not_run_and_is_named(site):
    """#42 item 4: uv lived in <tools>/uv, the service account's; a compromised service swaps it, the next build is
    poisoned, sealed, then run by root. A uv (or a directory above it) not root's or writable by others is 'not the
    pinned uv' (uv_ok false, uv_problem naming it, nothing built) - the role installs it again, root's."""
    lk = lock(site, "alpha==1.0")
    pinned = uv_said()
    tools = site["tmp"] / "tools"
    (tools / "bin").mkdir(parents=True)
    uv = tools / "bin" / "uv"
    shutil.copy(UV, str(uv))
    os.chown(str(tools / "bin"), 65534, 65534)                     # as an earlier release left it: the service's
    r = run_module(M, args(site, lk, uv=str(uv), uv_version=pinned))
    assert r.get("failed") is not True, r.get("msg")
    assert r["uv_ok"] is False and r["changed"] is False and not os.path.lexists(site["path"])
    assert "%s (a directory above it) is owned by uid 65534" % (tools / "bin") in r["uv_problem"]
    without = run_module(M, args(site, lk, uv=str(uv)))
    assert without["failed"] is True and "the service account could replace it" in without["msg"]
    os.chown(str(tools / "bin"), 0, 0)
    os.chmod(str(uv), 0o777)
    writable = run_module(M, args(site, lk, uv=str(uv), uv_version=pinned))
    assert writable["uv_ok"] is False and "(the uv in use) is owned by uid 0 with mode 0777" in writable["uv_problem"]
    os.chmod(str(uv), 0o755)
    built = run_module(M, args(site, lk, uv=str(uv), uv_version=pinned))
    assert built.get("failed") is not True and built["uv_ok"] is True and os.path.islink(site["path"])


def test_absent_removes_the_link_and_the_builds_it_made_and_leaves_anything_else(site):
    """#47 item 4: state=absent takes the venv away - the symlink, every build (sealed, and one a killed install left
    unsealed), the store - without uv or the lock; check mode names the same paths and removes none; a second run
    changes nothing. A file of someone else's in the store is left, named, and keeps the store."""
    first = run_module(M, args(site, lock(site, "alpha==1.0", name="a1.lock")))
    second = run_module(M, args(site, lock(site, "alpha==2.0", name="a2.lock")))
    store = site["path"] + ".builds"
    unsealed = os.path.join(store, "0123456789abcdef")
    os.makedirs(os.path.join(unsealed, "lib"))
    gone = {"path": site["path"], "state": "absent"}
    look = run_module(M, gone, check=True)
    want = sorted([site["path"], first["build_path"], second["build_path"], unsealed, store])
    assert look["changed"] is True and sorted(look["removed"]) == want
    assert os.path.islink(site["path"]) and os.path.isdir(first["build_path"])
    done = run_module(M, gone)
    assert done.get("failed") is not True, done.get("msg")
    assert sorted(done["removed"]) == want and not os.path.lexists(site["path"]) and not os.path.exists(store)
    again = run_module(M, gone)
    assert again["changed"] is False and again["removed"] == []
    run_module(M, args(site, lock(site, "alpha==1.0", name="a1.lock")))
    with open(os.path.join(store, "notes.txt"), "w") as fh:
        fh.write("the operator's\n")
    kept = run_module(M, gone)
    assert kept["changed"] is True and store not in kept["removed"] and os.path.isfile(os.path.join(store, "notes.txt"))
    assert any("not built by this module" in w and "notes.txt" in w for w in kept.get("warnings", [])), kept
    assert not os.path.lexists(site["path"])


def test_a_build_made_beside_is_not_in_service_until_activated_and_switch_to_puts_the_old_one_back(site):
    """#47 item 3's steps: the next build made beside the one in service (activate=false: the path untouched, its own
    interpreter returned and asked), activated by the same call with activate=true (a switch, nothing built), and the
    kept build put back by its id (switch_to: no uv, no lock) - the rollback of an upgrade that did not start."""
    live = run_module(M, args(site, lock(site, "alpha==1.0", name="a1.lock")))
    a2 = lock(site, "alpha==2.0", name="a2.lock")
    planned = run_module(M, args(site, a2, activate=False), check=True)
    assert planned["changed"] is True and planned["decision"] == "build" and planned["active"] == live["build"]
    assert not os.path.exists(planned["build_path"])
    beside = run_module(M, args(site, a2, activate=False, verify_imports=["alpha"]))
    assert beside["changed"] is True and beside["decision"] == "build" and beside["active"] == live["build"]
    assert beside["python"] == os.path.join(beside["build_path"], "bin", "python")
    assert beside["imports"]["alpha"] == "2.0"                       # its own interpreter was asked, not the live one
    assert os.path.realpath(site["path"]) == live["build_path"]
    assert venv_python_says(site, "import alpha; print(alpha.__version__)") == "1.0"
    ready = run_module(M, args(site, a2, activate=False))
    assert ready["changed"] is False and ready["decision"] == "ready" and ready["build"] == beside["build"]
    up = run_module(M, args(site, a2, verify_imports=["alpha"]))
    assert up["changed"] is True and up["decision"] == "switch" and up["previous"] == live["build"]
    assert up["imports"]["alpha"] == "2.0" and venv_python_says(site, "import alpha; print(alpha.__version__)") == "2.0"
    # the rollback: no uv, no lock - only the id of the build to put back
    preview = run_module(M, {"path": site["path"], "switch_to": live["build"]}, check=True)
    assert preview["changed"] is True and preview["decision"] == "switch"
    assert os.path.realpath(site["path"]) == up["build_path"]
    back = run_module(M, {"path": site["path"], "switch_to": live["build"], "verify_imports": ["alpha"]})
    assert back["changed"] is True and back["decision"] == "switch" and back["previous"] == up["build"]
    assert back["imports"]["alpha"] == "1.0" and os.path.realpath(site["path"]) == live["build_path"]
    assert os.path.isdir(up["build_path"])                           # keep=1: the failed one stays, for a look
    again = run_module(M, {"path": site["path"], "switch_to": live["build"]})
    assert again["changed"] is False and again["decision"] == "none"


def test_switch_to_a_build_that_is_not_there_is_refused_with_the_builds_there(site):
    live = run_module(M, args(site, lock(site, "alpha==1.0")))
    for bad in ("0123456789abcdef", "../../etc", live["build"] + "x"):
        r = run_module(M, {"path": site["path"], "switch_to": bad})
        assert r.get("failed") is True
        assert r["msg"] == ("switch_to=%s: %s.builds holds no complete sealed build of that id (it holds: %s); %s is "
                            "unchanged" % (bad, site["path"], live["build"], site["path"]))
    assert os.path.realpath(site["path"]) == live["build_path"]


def test_the_build_accounts_uv_config_is_never_read_and_every_file_is_a_copy(site):
    """#58 item 2: uv read the build account's ~/.config/uv/uv.toml - link-mode = "symlink" there made the venv's
    files links into that account's cache, which root then imports from. The build runs with UV_NO_CONFIG=1 and
    copies (UV_LINK_MODE=copy): each file is the build's own, with one link."""
    conf = site["tmp"] / "xdg" / "uv"
    conf.mkdir(parents=True)
    (conf / "uv.toml").write_text('link-mode = "symlink"\ncache-dir = "%s"\n' % (site["tmp"] / "their-cache"))
    r = run_module(M, args(site, lock(site, "alpha==1.0")), env={"XDG_CONFIG_HOME": str(site["tmp"] / "xdg")})
    assert r.get("failed") is not True, r.get("msg")
    init = pathlib.Path(r["build_path"]).glob("lib/python3*/site-packages/alpha/__init__.py")
    init = next(init)
    assert not init.is_symlink() and os.stat(str(init)).st_nlink == 1
    assert not (site["tmp"] / "their-cache").exists()


def test_a_poisoned_cache_entry_never_comes_out_sealed(site):
    """#58 item 2: an entry of uv's cache changed by whoever can write the cache was copied into the build and sealed
    as root's. Every installed file is checked against its package's RECORD before the switch: the build is refused
    and removed, the venv in service untouched."""
    cache = site["tmp"] / "uv-cache"
    env = {"UV_CACHE_DIR": str(cache)}
    first = run_module(M, args(site, lock(site, "alpha==1.0", name="a.lock"), public_environment=env))
    assert first.get("failed") is not True, first.get("msg")
    poisoned = list(cache.rglob("beta/__init__.py"))
    assert poisoned, "uv kept no unpacked beta in its cache"
    for p in poisoned:
        os.chmod(str(p), 0o644)
        p.write_text("import os\nos.system('touch /tmp/pwned-by-cache')\n")
    r = run_module(M, args(site, lock(site, "alpha==1.0", "gamma==1.0", name="b.lock"), public_environment=env))
    assert r["failed"] is True and r["changed"] is False
    assert "an installed file is not what its package's RECORD says" in r["msg"] and "beta/__init__.py" in r["msg"]
    assert "the build is refused and removed" in r["msg"]
    assert os.path.realpath(site["path"]) == first["build_path"]
    assert sorted(os.listdir(site["path"] + ".builds")) == [first["build"]]


@pytest.mark.skipif(os.geteuid() != 0, reason="building as another account needs root")
def test_a_build_account_that_is_not_apart_from_the_serving_one_is_refused_before_anything_is_built(site):
    """#58 item 2: owner (the build account) and run_as (the serving account) through the module, real accounts of
    this machine: the same account, and a build account whose uv cache the serving account can write (the shared
    1777 kind), are each refused with the fix, nothing built and no venv made."""
    lk = lock(site, "alpha==1.0")
    same = run_module(M, args(site, lk, owner="nobody", run_as="nobody"))
    assert same.get("failed") is True and "owner=nobody and run_as=nobody are the same uid" in same["msg"], same
    assert "give a dedicated build account" in same["msg"] and same["msg"].endswith("nothing was built")
    shared = site["tmp"] / "shared-uv-cache"
    shared.mkdir()
    os.chmod(str(shared), 0o1777)
    cache = run_module(M, args(site, lk, owner="daemon", run_as="nobody",
                               public_environment={"UV_CACHE_DIR": str(shared)}))
    assert cache.get("failed") is True, cache
    assert "the uv cache %s can be written by run_as=nobody" % shared in cache["msg"], cache["msg"]
    assert not os.path.lexists(site["path"]) and not os.path.exists(site["path"] + ".builds")


def test_check_mode_before_the_build_account_exists_previews_and_a_real_run_names_it(site):
    """An existing deployment moving to the build account: check mode runs before the role has made the account
    (check mode makes nothing), and must preview the build, not fail; a real run without it names the account."""
    lk = lock(site, "alpha==1.0")
    look = run_module(M, args(site, lk, owner="gpuserve-no-such-build", run_as="gpuserve-no-such-service"), check=True)
    assert look.get("failed") is not True, look.get("msg")
    assert look["changed"] is True and look["decision"] == "build" and not os.path.lexists(site["path"])
    real = run_module(M, args(site, lk, owner="gpuserve-no-such-build", run_as="nobody"))
    assert real.get("failed") is True and real["msg"].startswith(
        "owner=gpuserve-no-such-build: no such user on the target; create the account first")
    assert not os.path.lexists(site["path"])


def test_a_build_with_no_cache_kept_links_from_uvs_temporary_cache_beside_it_not_twice_on_the_disk(site):
    """With UV_NO_CACHE, uv unpacks every wheel into a temporary cache and copies each file from it: the build twice
    on the disk while it is made (10 GB for 0.5.9's lock; a CI machine's disk ran out). The temporary cache is put in
    a private scratch directory of the store (TMPDIR, the build's file system) and the files hard-linked from it; it
    is gone after the build, so every installed file has one link before the seal. With a cache kept: copies, no
    TMPDIR of ours. (A wrapper around the real uv records what each call was given.)"""
    said = site["tmp"] / "uv-calls"
    wrapper = site["tmp"] / "uvwrap"
    wrapper.write_text('#!/bin/sh\necho "${TMPDIR:-none} ${UV_LINK_MODE:-none} $1" >> %s\nexec %s "$@"\n' % (said, UV))
    wrapper.chmod(0o755)
    r = run_module(M, args(site, lock(site, "alpha==1.0"), uv=str(wrapper),
                           public_environment={"UV_NO_CACHE": "1"}))
    assert r.get("failed") is not True, r.get("msg")
    store = site["path"] + ".builds"
    scratch = os.path.join(store, ".scratch-" + r["build"])
    calls = [line.split() for line in said.read_text().splitlines()]
    installs = [c for c in calls if c[2] == "pip"]
    assert installs and all(c[0] == scratch and c[1] == "hardlink" for c in installs), calls
    assert not os.path.exists(scratch) and sorted(os.listdir(store)) == [r["build"]]
    files = [p for p in pathlib.Path(r["build_path"]).rglob("*") if p.is_file() and not p.is_symlink()]
    assert files and all(os.stat(str(p)).st_nlink == 1 for p in files)
    assert venv_python_says(site, "import alpha, beta; print('ok')") == "ok"
    # a cache kept: copies, and no scratch directory of ours
    said.write_text("")
    r = run_module(M, args(site, lock(site, "alpha==2.0", name="two.lock"), uv=str(wrapper),
                           public_environment={"UV_CACHE_DIR": str(site["tmp"] / "cache")}))
    assert r.get("failed") is not True, r.get("msg")
    installs = [line.split() for line in said.read_text().splitlines() if line.split()[2] == "pip"]
    assert installs and all(c[1] == "copy" and not c[0].startswith(store) for c in installs), installs
