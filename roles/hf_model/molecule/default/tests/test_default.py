"""hf_model in CT 100: the lab repo at its commit, complete, root's, readable; after the side effect the damaged
file is whole again and the token file is gone with the token."""
import json

testinfra_hosts = ["ansible://ct100"]
D = "/srv/models/hf-scenario"


def test_manifest_is_complete_at_the_pinned_commit(host):
    manifest = json.loads(host.file(D + "/.gpuserve-snapshot.json").content_string)
    assert manifest["complete"] is True and manifest["repo_id"] == "gpuserve-lab/Llama-3.1-8B-Instruct"
    assert manifest["revision"] == "cddbd3b36b67d5afd1f423f823c0254f263ad48c"
    assert sorted(f["path"] for f in manifest["files"]) == sorted(
        f["path"] for f in manifest["files"] if host.file(D + "/" + f["path"]).exists)
    assert "downloader" not in manifest or "huggingface_hub" not in (manifest["downloader"] or {})  # no venv: builtin


def test_every_file_matches_its_recorded_hash_after_the_repair(host):
    manifest = json.loads(host.file(D + "/.gpuserve-snapshot.json").content_string)
    lfs = [f for f in manifest["files"] if f.get("sha256")]
    assert "model-00001-of-00002.safetensors" in [f["path"] for f in lfs]    # the file the side effect damaged
    for f in lfs:
        got = host.check_output("sha256sum -- %s/%s", D, f["path"]).split()[0]
        assert got == f["sha256"], f["path"]


def test_files_are_roots_and_nothing_of_the_download_is_left(host):
    assert host.file(D + "/config.json").user == "root" and host.file(D + "/config.json").mode == 0o644
    names = host.run("ls -a %s" % D).stdout.split()
    assert not [n for n in names if n.endswith(".incomplete")] and ".cache" not in names
    assert json.loads(host.file(D + "/.gpuserve-progress.json").content_string)["state"] == "complete"
    assert not host.file("/srv/models/hf-refused").exists


def test_the_token_file_went_with_the_token(host):
    assert not host.file("/etc/sglang/hf-token").exists
