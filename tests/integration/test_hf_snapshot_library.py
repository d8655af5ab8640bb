"""hf_snapshot with downloader=huggingface_hub: the library at the SGLang lock's version (.venv-hflib, the
interpreter standing for the SGLang venv's) against the same real Hub-compatible server (olah behind
tests/lab/local_hub.py). Fresh download verified, a re-run without a request, a killed download resumed by the
library with a Range request, a corrupted file repaired, a 403 on a file named, the token sent and never printed, and
an interpreter without the library refused before a byte is written. The library runs as the model's owner (here
nobody), never as root: the interpreter is the SGLang venv's, which the service account built (#42 item 4)."""
import json
import os
import pathlib
import shutil
import tempfile
import time

import pytest

from ansible_helpers import HFLIB_PYTHON, kill_tree, run_module, serve_local_hub, snapshot_args, start_module, write_token
from local_hub import tiny_model_files

M = "gpuserve.sglang.hf_snapshot"
REPO = "tiny-org/tiny-lib-model"
TOKEN = "hf_gpuserveLIBtoken0123456789abcdef"
# 12 MiB weights: huggingface_hub writes a download in 10 MiB chunks, so only a file past 10 MiB leaves partial bytes
FILES = tiny_model_files(weights_mib=12, seed=b"library")
W1 = "model-00001-of-00002.safetensors"
W2 = "model-00002-of-00002.safetensors"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def pins():
    with open(os.path.join(ROOT, "tests", "ci", "locks", "hflib.in")) as f:
        return dict(line.strip().split("==") for line in f if "==" in line)


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    if not os.path.exists(HFLIB_PYTHON):
        pytest.fail("%s is missing: run tests/ci/bootstrap.sh (make deps)" % HFLIB_PYTHON)
    yield from serve_local_hub(tmp_path_factory, "hublib", REPO, FILES)


@pytest.fixture(autouse=True)
def reset(hub):
    hub.reset()


@pytest.fixture
def tmp_path():
    """A directory the owner account (nobody) can reach: pytest's own is under root's 0700 tree."""
    d = tempfile.mkdtemp(prefix="gpuserve-hflib-", dir="/var/tmp")
    os.chmod(d, 0o755)
    yield pathlib.Path(d)
    shutil.rmtree(d, ignore_errors=True)


def args(hub, d, **kw):
    return snapshot_args(REPO, hub, d, {"downloader": "huggingface_hub", "python": HFLIB_PYTHON, "owner": "nobody"},
                         **kw)


def gets(hub, name):
    return [r for r in hub.file_requests(name) if r[0] == "GET"]


def test_the_library_downloads_everything_verified_and_a_rerun_sends_nothing(hub, tmp_path):
    d = tmp_path / "m"
    r = run_module(M, args(hub, d))
    assert r.get("failed") is not True, r.get("msg")
    assert r["changed"] is True and r["revision"] == hub.sha and len(r["fetched"]) == len(FILES) + 1
    want = pins()
    assert r["downloader"] == {"huggingface_hub": want["huggingface-hub"], "hf_xet": want["hf-xet"],
                               "hf_transfer": want["hf-transfer"]}
    for name, data in FILES.items():
        assert (d / name).read_bytes() == data
        assert len(gets(hub, name)) == 1  # the library's GET, after its HEAD
    assert any(q[0] == "HEAD" for q in hub.requests)
    assert not (d / ".cache").exists()  # the library's metadata and locks are not left in the model directory
    manifest = json.loads((d / ".gpuserve-snapshot.json").read_text())
    assert manifest["complete"] is True and manifest["downloader"] == r["downloader"]  # who fetched it, on record
    hub.requests[:] = []
    again = run_module(M, args(hub, d))
    assert again["changed"] is False and again["network"] is False and hub.requests == []
    assert "downloader" not in again  # nothing to fetch: the library is not even started


def test_check_mode_probes_the_library_and_writes_nothing(hub, tmp_path):
    d = tmp_path / "m"
    r = run_module(M, args(hub, d), check=True)
    assert r["changed"] is True and r["downloader"]["huggingface_hub"] == pins()["huggingface-hub"]
    assert not d.exists() and not gets(hub, W1)


def test_check_mode_on_a_fresh_host_lists_the_files_before_the_venv_exists(hub, tmp_path):
    r = run_module(M, args(hub, tmp_path / "m", python=str(tmp_path / "venv" / "bin" / "python")), check=True)
    assert r.get("failed") is not True, r.get("msg")
    assert r["changed"] is True and len(r["fetched"]) == len(FILES) + 1 and "downloader" not in r
    assert any("is not there yet" in w for w in r.get("warnings", []))
    assert not (tmp_path / "m").exists()


def test_a_killed_library_download_resumes_with_a_range_request(hub, tmp_path):
    d = tmp_path / "m"
    hub.throttle_bps = 4 * 1024 * 1024  # a 12 MiB weight file takes 3 s
    p = start_module(M, args(hub, d, workers=1), tmp_path / "tmp")
    cache = d / ".cache" / "huggingface" / "download"
    part, progress = None, None
    deadline = time.time() + 90
    while time.time() < deadline:
        parts = [n for n in os.listdir(cache) if n.endswith(".incomplete")] if cache.exists() else []
        if parts and os.path.getsize(cache / parts[0]) > 1024 * 1024 and (d / "config.json").exists():
            part = parts[0]
            progress = json.loads((d / ".gpuserve-progress.json").read_text())
            break
        time.sleep(0.05)
    assert part, "the library never had a partial file next to a complete one"
    kill_tree(p)
    assert progress["state"] == "downloading" and 0 < progress["bytes_done"] < progress["bytes_total"]
    partial_bytes = os.path.getsize(cache / part)
    complete_before = sorted(n for n in FILES if (d / n).exists())
    assert "config.json" in complete_before and not (d / ".gpuserve-snapshot.json").exists()
    hub.requests[:] = []
    hub.throttle_bps = 0
    r = run_module(M, args(hub, d))
    assert r.get("failed") is not True, r.get("msg")
    for name in complete_before:
        assert gets(hub, name) == [], "%s was complete and was fetched again" % name
    ranged = [q for q in hub.requests if q[0] == "GET" and q[2]]
    assert [q[2] for q in ranged] == ["bytes=%d-" % partial_bytes]  # continued where it stopped
    for n, data in FILES.items():
        assert (d / n).read_bytes() == data


def test_a_corrupted_file_is_fetched_again_by_the_library(hub, tmp_path):
    d = tmp_path / "m"
    run_module(M, args(hub, d))
    data = bytearray((d / W2).read_bytes())
    data[4096] ^= 0x10
    (d / W2).write_bytes(bytes(data))
    hub.requests[:] = []
    r = run_module(M, args(hub, d, verify="full"))
    assert r["changed"] is True and r["repaired"] == [W2] and r["fetched"] == [W2]
    assert (d / W2).read_bytes() == FILES[W2] and len(gets(hub, W2)) == 1 and gets(hub, W1) == []


def test_a_refused_file_is_named_and_nothing_is_marked_complete(hub, tmp_path):
    d = tmp_path / "m"
    hub.denied_files.add(W2)
    r = run_module(M, args(hub, d))
    assert r["failed"] is True and r["error_kind"] == "forbidden" and r["status"] == 403
    assert r["msg"].startswith("403 Forbidden for") and "accept its terms" in r["msg"]
    assert not (d / W2).exists() and not (d / ".gpuserve-snapshot.json").exists()


def test_the_token_reaches_the_library_and_is_never_printed(hub, tmp_path):
    """A token file is root's (0600): the owner account gets the token it holds in its environment (HF_TOKEN)."""
    hub.required_token = TOKEN
    r = run_module(M, args(hub, tmp_path / "m", token_file=write_token(tmp_path, TOKEN)))
    assert r.get("failed") is not True, r.get("msg")
    assert [q for q in hub.requests if q[0] == "HEAD"] and all(q[3] for q in hub.requests)
    hub.requests[:] = []
    hub.denied_files.add(W1)
    bad = run_module(M, args(hub, tmp_path / "n", token=TOKEN))
    assert bad["failed"] is True and bad["error_kind"] == "forbidden"
    for res in (r, bad):
        assert TOKEN not in res["_stdout"] and TOKEN not in res["_stderr"]


def test_an_interpreter_without_the_library_is_refused_before_a_byte_is_written(hub, tmp_path):
    d = tmp_path / "m"
    r = run_module(M, args(hub, d, python=os.path.join(ROOT, ".venv-hub", "bin", "python3") + "-missing"))
    assert r["failed"] is True and r["error_kind"] == "downloader" and "cannot run" in r["msg"]
    r = run_module(M, args(hub, d, python="/usr/bin/env"))
    assert r["failed"] is True and r["error_kind"] == "downloader"
    assert not d.exists() and gets(hub, W1) == []


def test_auto_asks_the_interpreter_in_the_same_call_and_falls_back_to_the_builtin_client(hub, tmp_path):
    """downloader auto (the role's default): the library when python imports it, the builtin client otherwise
    (an interpreter without it, or none there yet) - decided inside the module, no separate probe task."""
    r = run_module(M, args(hub, tmp_path / "lib", downloader="auto"), check=True)
    assert r.get("failed") is not True, r.get("msg")
    assert r["downloader"]["huggingface_hub"] == pins()["huggingface-hub"] and r["up_to_date"] is False
    r = run_module(M, args(hub, tmp_path / "sys", downloader="auto", python="/usr/bin/python3"))
    assert r.get("failed") is not True, r.get("msg")
    assert "huggingface_hub" not in (r.get("downloader") or {}) and r["file_count"] > 0
    r = run_module(M, args(hub, tmp_path / "sys", downloader="auto", python="/usr/bin/python3"), check=True)
    assert r["changed"] is False and r["up_to_date"] is True          # the quick look the role takes
    r = run_module(M, args(hub, tmp_path / "none", downloader="auto", python=str(tmp_path / "absent" / "python")),
                   check=True)
    assert r.get("failed") is not True and "huggingface_hub" not in (r.get("downloader") or {})


def test_auto_starts_the_interpreter_only_when_there_is_something_to_fetch(hub, tmp_path):
    """downloader auto on a re-run with nothing to do starts no interpreter (importing huggingface_hub costs seconds
    on every no-op deploy); a download starts it twice - the check that it has the library, then the download."""
    starts = tmp_path / "starts"
    starts.write_text("")
    starts.chmod(0o666)                      # written by the wrapper, run as the owner account
    wrapper = tmp_path / "python"
    wrapper.write_text("#!/bin/sh\necho start >> %s\nexec %s \"$@\"\n" % (starts, HFLIB_PYTHON))
    wrapper.chmod(0o755)
    d = tmp_path / "m"
    r = run_module(M, args(hub, d, downloader="auto", python=str(wrapper)))
    assert r.get("failed") is not True, r.get("msg")
    assert r["changed"] is True and r["downloader"]["huggingface_hub"] == pins()["huggingface-hub"]
    assert starts.read_text().count("start") == 2
    for rev in (hub.sha, "main"):            # the pinned commit (no request at all) and a branch (the Hub asked)
        r = run_module(M, args(hub, d, downloader="auto", python=str(wrapper), revision=rev))
        assert r.get("failed") is not True and r["changed"] is False, r.get("msg")
        assert starts.read_text().count("start") == 2


def test_root_never_runs_the_venvs_library_without_an_owner_account(hub, tmp_path):
    """#42 item 4: with downloader auto, root ran <venv>/bin/python - a venv the service account built, so a service
    that poisoned its build got code run as root at the next download. Without an owner other than root the library
    is refused (huggingface_hub) or not used (auto: the builtin client); with one it runs as that account."""
    refused = run_module(M, args(hub, tmp_path / "r", owner=None))
    assert refused["failed"] is True and refused["error_kind"] == "input" and "never runs it" in refused["msg"]
    assert not (tmp_path / "r").exists() and gets(hub, W1) == []
    auto = run_module(M, args(hub, tmp_path / "a", owner="root", downloader="auto"))
    assert auto.get("failed") is not True, auto.get("msg")
    assert "huggingface_hub" not in (auto.get("downloader") or {}) and auto["file_count"] > 0
    spy = tmp_path / "uids"
    spy.write_text("")
    spy.chmod(0o666)
    wrapper = tmp_path / "python"
    wrapper.write_text("#!/bin/sh\nid -u >> %s\nexec %s \"$@\"\n" % (spy, HFLIB_PYTHON))
    wrapper.chmod(0o755)
    owned = run_module(M, args(hub, tmp_path / "o", python=str(wrapper)))
    assert owned.get("failed") is not True, owned.get("msg")
    assert set(spy.read_text().split()) == {"65534"}
    assert all(os.stat(str(tmp_path / "o" / n)).st_uid == 65534 for n in FILES)
