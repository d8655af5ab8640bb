"""File names from a listing never leave the model directory: a hostile Hub tree or source manifest is refused
before anything is written, removed or read (hf_files.check_relpath, called by snapshot() for every listed name)."""
import hashlib
import json
import os

import pytest

from unit_helpers import load_module_util

H = load_module_util("hub.snapshot")
F = load_module_util("hub.files")
S = load_module_util("hub.sources")
SHA = "a" * 40


class FakeHub(S.Source):
    """A Hub whose tree lists what the test says and which records every fetch (none must happen)."""
    name = "fake"
    endpoint = "http://fake"

    def __init__(self, names):
        self.names = names
        self.fetched = []

    def commit(self, repo_id, revision):
        return SHA

    def tree(self, repo_id, sha, directory=""):
        return [{"path": n, "size": 5, "sha256": hashlib.sha256(b"owned").hexdigest()} for n in self.names]

    def fetch(self, repo_id, sha, entry, dest, progress=None):
        self.fetched.append(entry["path"])
        with open(dest, "wb") as fh:
            fh.write(b"owned")
        return 5


@pytest.mark.parametrize("name", ["../escape.txt", "/etc/cron.d/owned", "a/../../escape.txt", "a//b", "./x",
                                  "a\\..\\x", "x\0y", "ok/\x1b[31m", ""])
def test_a_hostile_name_in_the_hubs_tree_is_refused_before_anything_is_written(tmp_path, name):
    model = tmp_path / "srv" / "model"
    victim = tmp_path / "srv" / "escape.txt"
    victim.parent.mkdir(parents=True)
    victim.write_text("untouched")
    hub = FakeHub(["config.json", name])
    with pytest.raises(F.HubError) as err:
        H.snapshot(hub, "org/m", SHA, str(model), free_bytes=1 << 30)
    assert err.value.kind == "unsafe_path" and repr(name) in str(err.value)
    assert hub.fetched == [] and victim.read_text() == "untouched" and not model.exists()


def test_a_link_planted_inside_the_model_directory_cannot_redirect_a_file_outside(tmp_path):
    model = tmp_path / "model"
    outside = tmp_path / "outside"
    model.mkdir()
    outside.mkdir()
    (model / "sub").symlink_to(outside)         # the service account owns the directory and plants a link
    hub = FakeHub(["config.json", "sub/weights.safetensors"])
    with pytest.raises(F.HubError, match="resolves outside the model directory"):
        H.snapshot(hub, "org/m", SHA, str(model), free_bytes=1 << 30)
    assert hub.fetched == [] and list(outside.iterdir()) == []


def test_a_refetch_never_deletes_outside_through_a_hostile_manifest(tmp_path):
    """A pinned commit's manifest (ours, but the directory is writable by the service) listing ../ is refused too."""
    model = tmp_path / "model"
    model.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    (model / F.MANIFEST).write_text(json.dumps({
        "complete": True, "repo_id": "org/m", "revision": SHA, "patterns": {"allow": [], "ignore": []},
        "files": [{"path": "../victim", "size": 1, "sha256": "0" * 64}]}))
    with pytest.raises(F.HubError, match="unsafe_path|'../victim'"):
        H.snapshot(FakeHub(["../victim"]), "org/m", SHA, str(model), verify="full", free_bytes=1 << 30)
    assert victim.read_text() == "keep me"


def test_a_source_manifest_listing_a_file_outside_the_source_is_refused(tmp_path):
    src = tmp_path / "old-node" / "model"
    src.mkdir(parents=True)
    secret = tmp_path / "old-node" / "shadow"
    secret.write_bytes(b"root:$6$hash")
    (src / F.MANIFEST).write_text(json.dumps({
        "complete": True, "repo_id": "org/m", "revision": SHA,
        "files": [{"path": "../shadow", "size": secret.stat().st_size,
                   "sha256": hashlib.sha256(secret.read_bytes()).hexdigest()}]}))
    model = tmp_path / "model"
    with pytest.raises(F.HubError) as err:
        H.snapshot(S.LocalSource(str(src)), "org/m", SHA, str(model), free_bytes=1 << 30)
    assert err.value.kind == "unsafe_path"
    assert not model.exists()


def test_ordinary_nested_names_pass(tmp_path):
    assert F.check_relpath(str(tmp_path), "onnx/model.onnx") == os.path.join(str(tmp_path), "onnx/model.onnx")
    assert F.check_relpath(str(tmp_path), "a..b/c...d.json").endswith("a..b/c...d.json")


def test_a_partial_file_replaced_by_a_link_is_not_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    dest = tmp_path / "model.safetensors"
    (tmp_path / "model.safetensors.incomplete").symlink_to(victim)
    entry = {"path": "model.safetensors", "size": 5, "sha256": hashlib.sha256(b"hello").hexdigest()}
    data = iter([b"hello", b""])
    with pytest.raises(OSError):
        F.receive(str(dest) + ".incomplete", str(dest), entry, lambda n: next(data), 0, None,
                  lambda e, d: e, lambda *a: "bad")
    assert victim.read_bytes() == b"keep"


@pytest.mark.parametrize("repo_id", ["../etc", "org/..", "org/../x", "/org/name", "org/name/", "org name/x", "org/na me",
                                     "org", "a/b/c", "org/-x", "org/x--y", "org/" + "x" * 100, ""])
def test_a_repo_id_that_is_not_org_slash_name_is_named(repo_id):
    assert "expected <org>/<name>" in F.repo_id_problem(repo_id)


@pytest.mark.parametrize("repo_id", ["Qwen/Qwen3.6-27B", "meta-llama/Llama-3.1-8B-Instruct", "a/b", "org_1/m.v2"])
def test_real_repo_ids_pass(repo_id):
    assert F.repo_id_problem(repo_id) is None


@pytest.mark.parametrize("rev", ["../main", "main..x", "/main", "-x", "ma in", "v1:2", "x\n", "", "refs/"])
def test_a_revision_that_cannot_be_a_ref_is_named(rev):
    assert "not a commit sha, branch or tag" in F.revision_problem(rev)


@pytest.mark.parametrize("rev", ["main", "v1.0", "refs/pr/3", "cddbd3b36b67d5afd1f423f823c0254f263ad48c", "release/2026-11"])
def test_real_revisions_pass(rev):
    assert F.revision_problem(rev) is None


def test_an_intermediate_directory_swapped_for_a_link_after_the_check_sends_no_write_outside(tmp_path):
    """#42 item 3: names are checked first and written later; the model's owner (not root) can swap a subdirectory
    for a link in between. O_NOFOLLOW on the last component alone let root's write follow it; each component is now
    opened relative to its parent's descriptor."""
    model = tmp_path / "model"
    model.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    dest = F.check_relpath(str(model), "onnx/weights.bin")          # checked while onnx/ did not exist yet
    (model / "onnx").symlink_to(outside)                              # ... then planted by the owner
    entry = {"path": "onnx/weights.bin", "size": 5, "sha256": hashlib.sha256(b"owned").hexdigest()}
    data = iter([b"owned", b""])
    with pytest.raises(F.HubError) as exc:
        F.receive(dest + ".incomplete", dest, entry, lambda n: next(data), 0, None, lambda e, d: e, lambda *a: "bad")
    assert exc.value.kind == "unsafe_path" and "onnx/weights.bin" in str(exc.value)
    assert os.listdir(str(outside)) == []


def test_receive_makes_missing_directories_beneath_the_model_and_renames_in_place(tmp_path):
    dest = F.check_relpath(str(tmp_path), "a/b/c.json")
    entry = {"path": "a/b/c.json", "size": 2, "sha256": hashlib.sha256(b"{}").hexdigest()}
    data = iter([b"{}", b""])
    assert F.receive(dest + ".incomplete", dest, entry, lambda n: next(data), 0, None, lambda e, d: e,
                     lambda *a: "bad") == 2
    assert (tmp_path / "a" / "b" / "c.json").read_bytes() == b"{}"
    assert not (tmp_path / "a" / "b" / "c.json.incomplete").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (chown)")
def test_repair_owner_never_chowns_outside_through_a_directory_swapped_for_a_link(tmp_path, monkeypatch):
    """#42 item 3: with os.walk + chown by path, a subdirectory swapped for a link between the listing and the chown
    gave a file outside the model directory to the owner. Reproduced here by swapping it at the moment the walk
    lists the subdirectory; the walk by descriptors changes the link itself, never what it points at."""
    model = tmp_path / "model"
    (model / "sub").mkdir(parents=True)
    (model / "sub" / "victim").write_text("model file")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim").write_text("root's")
    swapped = []

    def racing(real):
        def walk(top, *a, **kw):
            for item in real(top, *a, **kw):
                if item[0] == str(model / "sub") and not swapped:   # sub listed: now the owner swaps it for a link
                    os.rename(str(model / "sub"), str(tmp_path / "sub-moved"))
                    os.symlink(str(outside), str(model / "sub"))
                    swapped.append(True)
                yield item
        return walk
    monkeypatch.setattr(H.os, "walk", racing(os.walk))       # what the repair walked with before
    monkeypatch.setattr(H.os, "fwalk", racing(os.fwalk))
    assert H.repair_owner(str(model), 65534, 65534) is True and swapped
    assert os.stat(str(outside / "victim")).st_uid == 0 and os.stat(str(outside)).st_uid == 0
    assert os.stat(str(tmp_path / "sub-moved" / "victim")).st_uid == 65534   # the model's file, where it went


def test_a_name_too_long_for_a_file_is_unsafe_path_not_an_uncaught_oserror(tmp_path):
    """#42 item 7: a 300-character name from a hostile listing raised ENAMETOOLONG from deep inside the write."""
    for name in ("x" * 300, "d" * 256 + "/config.json", "y" * 250):   # 250 + '.incomplete' > 255 too
        with pytest.raises(F.HubError) as exc:
            F.check_relpath(str(tmp_path), name)
        assert exc.value.kind == "unsafe_path" and "longer than a file name can be" in str(exc.value)
    assert F.check_relpath(str(tmp_path), "z" * 244).endswith("z" * 244)
    hub = FakeHub(["x" * 300])
    with pytest.raises(F.HubError) as exc:
        H.snapshot(hub, "org/name", SHA, str(tmp_path / "m"), free_bytes=1 << 30)
    assert exc.value.kind == "unsafe_path" and hub.fetched == []


def test_a_name_listed_twice_is_taken_once_and_refused_when_the_two_differ(tmp_path):
    """#42 item 7: duplicate manifest entries were taken twice (fetched twice, counted twice)."""
    same = {"path": "config.json", "size": 2, "sha256": "a" * 64}
    assert F.unique_listing([same, dict(same), {"path": "b", "size": 1}], "org/name") == [same, {"path": "b", "size": 1}]
    with pytest.raises(F.HubError, match=r"names 'config.json' twice, with different sizes or hashes"):
        F.unique_listing([same, dict(same, size=3)], "org/name")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (chown)")
def test_the_library_cache_given_to_the_owner_is_reached_by_descriptor_never_through_a_planted_link(tmp_path):
    """The owner account owns the model directory while root makes the library's cache in it: a `.cache` it planted
    as a link to another directory is refused (unsafe_path), and nothing outside changes hands."""
    import pwd  # pylint: disable=import-outside-toplevel
    model = tmp_path / "model"
    model.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(str(outside), str(model / ".cache"))
    lib = S.LibraryHub("http://hub", "/usr/bin/python3", account=pwd.getpwnam("nobody"))
    with pytest.raises(F.HubError) as exc:
        lib._give(str(model))                     # pylint: disable=protected-access
    assert exc.value.kind == "unsafe_path"
    assert os.listdir(str(outside)) == [] and os.stat(str(outside)).st_uid == 0
    os.unlink(str(model / ".cache"))
    lib._give(str(model))                         # pylint: disable=protected-access
    assert os.stat(str(model / ".cache" / "huggingface" / "home")).st_uid == 65534
