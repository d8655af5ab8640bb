"""hf_snapshot's source_host: the migration case, the verified copy on the old node fetched with rsync over a real
ssh (OpenSSH on loopback, tests/lab/loopback_sshd.py) instead of 52 GB from the Hub. Copied and verified with no
Hub, a re-run without even an ssh login, a copy broken off mid-file (the link dropped) continued from its partial
file, a damaged source refused, an unknown host key and a directory without a manifest named."""
import json
import os
import shutil
import signal
import tempfile
import time

import pytest

from ansible_helpers import descendants, recap, run_module, run_playbook, serve_local_hub, start_module
from local_hub import tiny_model_files
from loopback_sshd import SSHD, LoopbackSshd

M = "gpuserve.sglang.hf_snapshot"
REPO = "tiny-org/moving-model"
FILES = tiny_model_files(weights_mib=6, seed=b"rsync")
W1 = "model-00001-of-00002.safetensors"
W2 = "model-00002-of-00002.safetensors"


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    yield from serve_local_hub(tmp_path_factory, "rsynchub", REPO, FILES)


def shared_dir(prefix):
    """A directory the ssh account can read (pytest's own temporary tree is root's only)."""
    d = tempfile.mkdtemp(prefix=prefix)
    os.chmod(d, 0o755)
    return d


@pytest.fixture(scope="module")
def sshd():
    if not os.path.exists(SSHD) or os.geteuid() != 0:
        pytest.fail("these tests need openssh-server and rsync (tests/ci/bootstrap.sh installs them) and root")
    d = shared_dir("gpuserve-sshd-")
    s = LoopbackSshd(d).start()
    yield s
    s.stop()
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def sources():
    """Where the old node's copies live."""
    d = shared_dir("gpuserve-old-node-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def old(hub, sources):
    """The old node's verified snapshot, made by hf_snapshot from the Hub."""
    d = os.path.join(sources, "model")
    r = run_module(M, {"repo_id": REPO, "revision": hub.sha, "local_dir": d, "endpoint": hub.endpoint,
                       "disk_margin_mib": 0})
    assert r.get("failed") is not True, r.get("msg")
    return d


def args(hub, sshd, src, d, **kw):
    a = {"repo_id": REPO, "revision": hub.sha, "local_dir": str(d), "endpoint": "http://127.0.0.1:9",  # no Hub there
         "source_host": "%s@127.0.0.1" % sshd.user, "source_host_dir": str(src), "ssh_port": sshd.port, "ssh_key_file": sshd.key,
         "ssh_known_hosts_file": sshd.known_hosts, "disk_margin_mib": 0}
    a.update(kw)
    return a


def test_the_old_nodes_copy_arrives_verified_without_the_hub_and_a_rerun_does_not_even_log_in(hub, sshd, old, tmp_path):
    d = tmp_path / "new-node"
    hub.requests[:] = []
    r = run_module(M, args(hub, sshd, old, d))
    assert r.get("failed") is not True, r.get("msg")
    assert r["changed"] is True and r["revision"] == hub.sha and r["downloader"] == {"rsync": "rsync"}
    assert hub.requests == [] and len(r["fetched"]) == len(FILES) + 1
    for name, data in FILES.items():
        assert (d / name).read_bytes() == data
    assert r["bytes_transferred"] >= sum(len(v) for v in FILES.values())  # rsync's own count of bytes received
    assert json.loads((d / ".gpuserve-snapshot.json").read_text())["revision"] == hub.sha
    assert not [n for n in os.listdir(d) if n.startswith(".gpuserve-rsync")]
    logins = sshd.logins()
    again = run_module(M, args(hub, sshd, old, d))
    assert again["changed"] is False and again["network"] is False and sshd.logins() == logins


def test_a_copy_broken_off_mid_file_continues_from_its_partial_file(hub, sshd, old, tmp_path):
    d = tmp_path / "new-node"
    p = start_module(M, args(hub, sshd, old, d, bwlimit_kib=2048, workers=1), tmp_path / "tmp")  # 6 MiB weights: 3 s each
    partial = d / ".gpuserve-rsync-partial"
    ssh = []
    deadline = time.time() + 60
    while time.time() < deadline:
        temps = [n for n in os.listdir(d) if n.startswith("." + W1) or n.startswith("." + W2)] if d.exists() else []
        if temps and os.path.getsize(d / temps[0]) > 1024 * 1024:
            ssh = [pid for pid in descendants(p.pid) if open("/proc/%d/comm" % pid).read().strip() == "ssh"]
            break
        time.sleep(0.05)
    assert ssh, "the copy never got a partial weight file"
    os.kill(ssh[0], signal.SIGKILL)  # the link drops: the receiving rsync keeps what it has
    p.wait()
    kept = sorted(os.listdir(partial))
    assert len(kept) == 1 and kept[0] in (W1, W2) and not (d / ".gpuserve-snapshot.json").exists()
    have = os.path.getsize(partial / kept[0])
    complete = [n for n in FILES if (d / n).exists()]
    r = run_module(M, args(hub, sshd, old, d))
    assert r.get("failed") is not True, r.get("msg")
    assert kept[0] in r["fetched"] and not set(complete) & set(r["fetched"])  # complete files not copied again
    remaining = sum(len(FILES[n]) for n in r["fetched"] if n in FILES) - have
    assert r["bytes_transferred"] < remaining + 256 * 1024  # the partial file was not sent again
    for name, data in FILES.items():
        assert (d / name).read_bytes() == data
    assert not partial.exists()


def test_a_damaged_source_is_refused_not_served(hub, sshd, old, sources, tmp_path):
    src = os.path.join(sources, "damaged")
    r = run_module(M, {"repo_id": REPO, "revision": hub.sha, "local_dir": src, "source_dir": str(old),
                       "disk_margin_mib": 0})
    assert r.get("failed") is not True, r.get("msg")
    with open(os.path.join(src, W2), "r+b") as f:
        f.seek(100)
        b = f.read(1)
        f.seek(100)
        f.write(bytes([b[0] ^ 0x01]))  # same size: only the hash tells
    d = tmp_path / "new-node"
    r = run_module(M, args(hub, sshd, src, d))
    assert r["failed"] is True and r["error_kind"] == "integrity" and "the source is damaged" in r["msg"]
    assert W2 in r["msg"] and not (d / W2).exists() and not (d / ".gpuserve-snapshot.json").exists()


def test_an_unknown_host_key_or_a_missing_manifest_is_named_and_nothing_is_written(hub, sshd, old, sources, tmp_path):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    r = run_module(M, args(hub, sshd, old, tmp_path / "a", ssh_known_hosts_file=str(empty)))
    assert r["failed"] is True and r["error_kind"] == "network" and "hf_model_source_known_hosts" in r["msg"]
    assert "Host key verification failed" in r["msg"] and not (tmp_path / "a").exists()
    # a refused host key is refused again on every retry: said at once, not "(after 5 retries)" 62 s later
    assert "retries)" not in r["msg"], r["msg"]
    bare = os.path.join(sources, "bare")
    os.mkdir(bare)
    r = run_module(M, args(hub, sshd, bare, tmp_path / "b"))
    assert r["failed"] is True and r["error_kind"] == "not_found" and "has no complete .gpuserve-snapshot.json" in r["msg"]
    assert "source_host=%s@127.0.0.1:%s" % (sshd.user, bare) in r["msg"] and not (tmp_path / "b").exists()


def test_accept_new_records_the_host_key_on_first_contact(hub, sshd, old, tmp_path):
    kh = tmp_path / "known_hosts"
    r = run_module(M, args(hub, sshd, old, tmp_path / "m", ssh_known_hosts_file=str(kh), ssh_host_key_checking="accept-new",
                           allow_patterns=["*.json"]))
    assert r.get("failed") is not True, r.get("msg")
    with open(sshd.host_key + ".pub") as f:
        assert f.read().split()[1] in kh.read_text()  # the server's key, recorded (the name may be hashed)


def test_what_cannot_go_into_the_ssh_command_is_refused(hub, sshd, old, tmp_path):
    r = run_module(M, args(hub, sshd, old, tmp_path / "m", source_host="root@old node"))
    assert r["failed"] is True and r["msg"].startswith("source_host=root@old node: expected [user@]host")
    r = run_module(M, args(hub, sshd, old, tmp_path / "m", ssh_key_file="/nonexistent/key"))
    assert r["failed"] is True and "ssh_key_file=/nonexistent/key does not exist" in r["msg"]
    assert not (tmp_path / "m").exists()


def role(hub, sshd, old, tmp_path, check=False, **extra):
    with open(sshd.key) as f:
        key = f.read()
    with open(sshd.known_hosts) as f:
        known = f.read().strip()
    v = {"hf_model_repo_id": REPO, "hf_model_revision": hub.sha, "hf_model_dir": str(tmp_path / "model"),
         "hf_model_endpoint": "http://127.0.0.1:9", "hf_model_source_host": "%s@127.0.0.1" % sshd.user,
         "hf_model_source_host_dir": old, "hf_model_source_ssh_port": sshd.port, "hf_model_source_ssh_key": key,
         "hf_model_source_ssh_key_file": str(tmp_path / "etc" / "source-key"), "hf_model_source_known_hosts": [known],
         "hf_model_source_known_hosts_file": str(tmp_path / "etc" / "known_hosts"), "hf_model_owner": "root",
         "hf_model_group": "root", "hf_model_poll_interval": 1, "hf_model_disk_margin_mib": 0}
    v.update(extra)
    return run_playbook([{"hosts": "localhost", "connection": "local", "gather_facts": False,
                          "roles": [{"role": "gpuserve.sglang.hf_model", "vars": v}]}], tmp_path, check), key


def test_the_role_copies_from_the_source_host_with_its_key_in_a_0600_file_and_changes_nothing_the_second_time(
        hub, sshd, old, tmp_path):
    p, key = role(hub, sshd, old, tmp_path, check=True)
    assert p.returncode == 0, p.stdout[-3000:]
    assert not (tmp_path / "model").exists()
    p, key = role(hub, sshd, old, tmp_path, hf_model_source_bwlimit_kib=4096)
    assert p.returncode == 0, p.stdout[-3000:]
    out = " ".join(p.stdout.split())
    assert "(rsync from %s@127.0.0.1)" % sshd.user in out and "MiB/s" in out
    assert oct(os.stat(str(tmp_path / "etc" / "source-key")).st_mode & 0o777) == "0o600"
    body = key.strip().splitlines()[1]
    assert body not in p.stdout and body not in p.stderr  # the private key is never printed
    for name, data in FILES.items():
        assert (tmp_path / "model" / name).read_bytes() == data
    logins = sshd.logins()
    again = role(hub, sshd, old, tmp_path)[0]
    assert again.returncode == 0 and recap(again.stdout)["changed"] == 0 and sshd.logins() == logins


def test_the_role_refuses_a_source_host_without_its_key_unless_trust_on_first_use_is_asked_for(hub, sshd, old, tmp_path):
    p = role(hub, sshd, old, tmp_path, hf_model_source_known_hosts=[])[0]
    assert p.returncode != 0 and "give its host key in hf_model_source_known_hosts" in p.stdout
    assert not (tmp_path / "etc").exists() and not (tmp_path / "model").exists()
    ok = role(hub, sshd, old, tmp_path, hf_model_source_known_hosts=[], hf_model_source_accept_new_host_key=True)[0]
    assert ok.returncode == 0, ok.stdout[-3000:]
    with open(sshd.known_hosts) as fh:
        host_key = fh.read().split()[2]            # "[host]:port type base64 [comment]"
    assert host_key in (tmp_path / "etc" / "known_hosts").read_text()     # the key recorded on first use


def test_the_role_refuses_two_sources(hub, sshd, old, tmp_path):
    p = role(hub, sshd, old, tmp_path, hf_model_source_dir=old)[0]
    assert p.returncode != 0 and "not both" in p.stdout and not (tmp_path / "etc").exists()
