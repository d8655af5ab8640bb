"""Role hf_model on localhost against the local Hub (olah on loopback): the download runs asynchronously and its
progress is reported, the token lands in a 0600 file and never in the output, a second run changes nothing
and sends no request, check mode writes nothing, a gated repo stops the play with the reason."""
import os
import re
import shutil
import tempfile

import pytest

from ansible_helpers import HFLIB_PYTHON, recap, run_playbook, serve_local_hub
from local_hub import tiny_model_files

REPO = "tiny-org/role-model"
TOKEN = "hf_gpuserveROLEtoken9876543210fedcba"


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    yield from serve_local_hub(tmp_path_factory, "rolehub", REPO, tiny_model_files(weights_mib=4, seed=b"role"))


def play(hub, tmp_path, check=False, **extra):
    v = {"hf_model_repo_id": REPO, "hf_model_revision": hub.sha, "hf_model_dir": str(tmp_path / "model"),
         "hf_model_endpoint": hub.endpoint, "hf_model_token": TOKEN, "hf_model_token_file": str(tmp_path / "etc" / "hf-token"),
         "hf_model_owner": "root", "hf_model_group": "root", "hf_model_poll_interval": 1, "hf_model_disk_margin_mib": 0,
         "hf_model_python": str(tmp_path / "no-venv" / "bin" / "python")}  # downloader auto: builtin, no venv
    v.update(extra)
    return run_playbook([{"hosts": "localhost", "connection": "local", "gather_facts": False,
                          "roles": [{"role": "gpuserve.sglang.hf_model", "vars": v}]}], tmp_path, check)


def test_download_with_progress_then_nothing_on_the_second_run(hub, tmp_path):
    hub.required_token = TOKEN
    hub.throttle_bps = 2 * 1024 * 1024  # 8 MiB of weights: a few seconds, so progress is polled
    hub.requests[:] = []
    p = play(hub, tmp_path)
    assert p.returncode == 0, p.stdout[-3000:]
    assert "MiB/s" in p.stdout and " of " in p.stdout  # bytes done / total / rate while it ran
    assert "huggingface_hub" not in " ".join(p.stdout.split()).split("The model is complete")[1]  # auto, no venv: builtin
    assert "tiny-org/role-model@%s" % hub.sha in p.stdout
    assert recap(p.stdout)["changed"] >= 1
    st = os.stat(str(tmp_path / "etc" / "hf-token"))
    assert oct(st.st_mode & 0o777) == "0o600"
    assert all(r[3] for r in hub.requests)
    assert TOKEN not in p.stdout and TOKEN not in p.stderr
    hub.throttle_bps = 0
    hub.requests[:] = []
    again = play(hub, tmp_path)
    assert again.returncode == 0, again.stdout[-3000:]
    assert recap(again.stdout)["changed"] == 0
    assert hub.requests == []
    assert TOKEN not in again.stdout


def test_check_mode_writes_nothing(hub, tmp_path):
    hub.required_token = None
    p = play(hub, tmp_path, check=True, hf_model_token="")
    assert p.returncode == 0, p.stdout[-3000:]
    assert "(would be, check mode)" in p.stdout
    assert not (tmp_path / "model").exists()


def test_a_gated_repo_stops_with_the_reason(hub, tmp_path):
    hub.required_token = None
    hub.gated.add(REPO)
    try:
        p = play(hub, tmp_path, hf_model_token="")
    finally:
        hub.gated.clear()
    assert p.returncode != 0
    assert "403 Forbidden" in p.stdout and "error_kind: forbidden" in p.stdout, p.stdout[-4000:]


def test_auto_downloads_with_huggingface_hub_when_the_venv_has_it_and_reports_its_version(hub, tmp_path):
    """The library runs as the model's owner (here nobody), never as root (#42 item 4); with the owner root, auto
    takes the builtin client."""
    base = tempfile.mkdtemp(prefix="gpuserve-hfrole-", dir="/var/tmp")
    os.chmod(base, 0o755)                            # the owner account reaches the model directory
    try:
        hub.required_token = TOKEN
        hub.throttle_bps = 2 * 1024 * 1024
        hub.requests[:] = []
        owned = {"hf_model_python": HFLIB_PYTHON, "hf_model_owner": "nobody", "hf_model_group": "nogroup",
                 "hf_model_dir": os.path.join(base, "model")}
        p = play(hub, tmp_path, **owned)
        assert p.returncode == 0, p.stdout[-3000:]
        assert "(huggingface_hub 0.36.2)" in " ".join(p.stdout.split()) and "MiB/s" in p.stdout, p.stdout
        assert [r for r in hub.requests if r[0] == "HEAD"] and all(r[3] for r in hub.requests)
        assert TOKEN not in p.stdout and TOKEN not in p.stderr
        assert os.stat(os.path.join(base, "model", "config.json")).st_uid == 65534
        hub.throttle_bps = 0
        hub.requests[:] = []
        again = play(hub, tmp_path, **owned)
        assert again.returncode == 0 and recap(again.stdout)["changed"] == 0 and hub.requests == []
        as_root = play(hub, tmp_path, hf_model_python=HFLIB_PYTHON)      # owner root: the builtin client
        assert as_root.returncode == 0, as_root.stdout[-3000:]
        assert "huggingface_hub" not in " ".join(as_root.stdout.split()).split("The model is complete")[1]
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_a_relative_python_is_refused_before_anything_changes(hub, tmp_path):
    p = play(hub, tmp_path, hf_model_downloader="huggingface_hub", hf_model_python="venv/bin/python")
    assert p.returncode != 0 and "hf_model_python the absolute path" in p.stdout
    assert not (tmp_path / "model").exists() and not (tmp_path / "etc").exists()


def test_a_download_polled_more_than_600_times_finishes_with_progress(hub, tmp_path, monkeypatch):
    """The poll loop is flat: the old self-including poll file died of Python's recursion limit at ~246 polls."""
    monkeypatch.setenv("ANSIBLE_VERBOSITY", "1")     # task results printed: the poll count
    hub.reset()
    # 8 MiB of weights: about 43 s. A poll is one low-level command (a process spawned on the target), so how many
    # fit in the download depends on the machine's load: 591 in 20 s on two loaded cores (CI's two lanes), too few
    hub.throttle_bps = 192 * 1024
    p = play(hub, tmp_path, hf_model_poll_interval=0.01, hf_model_token="")
    assert p.returncode == 0, p.stdout[-3000:]
    polls = [int(n) for n in re.findall(r"polls: (\d+)", p.stdout)]
    assert polls and polls[0] >= 600, p.stdout[-3000:]
    lines = [line for line in p.stdout.splitlines() if line.startswith(REPO + ": ") and "MiB/s" in line]
    assert len(lines) >= 4 and len(set(lines)) == len(lines)   # bytes done / total / rate as it went, each new
    assert "8.0 of 8.0 MiB (100.0 %)" in lines[-1]
    assert "tiny-org/role-model@%s" % hub.sha in p.stdout


def test_a_repo_id_the_hub_would_refuse_is_named_by_the_role_before_anything_is_written(hub, tmp_path):
    p = play(hub, tmp_path, hf_model_repo_id="tiny-org/..")
    assert p.returncode != 0
    assert "hf_model_repo_id='tiny-org/..': expected <org>/<name>" in p.stdout
    assert not (tmp_path / "model").exists()
    assert all("tiny-org/.." not in str(r) for r in hub.requests)          # nothing was asked of the Hub
