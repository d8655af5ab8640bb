"""files: the one writer and reader of the collection's own small files - never through a planted link."""
import json
import os

import pytest

from unit_helpers import load_module_util

F = load_module_util("host.files")
HF = load_module_util("hub.files")


def test_json_round_trip_sorted_keys_and_mode(tmp_path):
    path = str(tmp_path / "marker.json")
    F.write_json(path, {"b": 1, "a": [1, 2]})
    assert F.read_json(path) == {"a": [1, 2], "b": 1}
    with open(path) as f:
        assert f.read() == '{"a": [1, 2], "b": 1}'
    assert oct(os.stat(path).st_mode & 0o777) == "0o644"
    F.write_json(path, {"c": None}, mode=0o600, indent=1)
    assert F.read_json(path) == {"c": None} and oct(os.stat(path).st_mode & 0o777) == "0o600"
    assert os.listdir(str(tmp_path)) == ["marker.json"]        # no temporary file left behind


def test_missing_unreadable_or_torn_files_read_as_none(tmp_path):
    assert F.read_json(str(tmp_path / "absent.json")) is None
    torn = tmp_path / "torn.json"
    torn.write_text('{"state": "downl')
    assert F.read_json(str(torn)) is None
    assert F.read_json(str(tmp_path)) is None                  # a directory


def test_a_link_at_the_files_name_is_replaced_never_followed(tmp_path):
    victim = tmp_path / "shadow"
    victim.write_text("root:$6$...\n")
    link = tmp_path / ".gpuserve-progress.json"
    link.symlink_to(victim)
    F.write_json(str(link), {"state": "downloading"})
    assert victim.read_text() == "root:$6$...\n"
    assert not link.is_symlink() and json.loads(link.read_text()) == {"state": "downloading"}


def test_a_failed_write_removes_its_temporary_file_and_raises(tmp_path):
    target = tmp_path / "is-a-dir"
    target.mkdir()
    (target / "x").write_text("keeps the directory non-empty")
    with pytest.raises(OSError):
        F.write_json(str(target), {"a": 1})                    # rename over a non-empty directory fails
    assert sorted(os.listdir(str(tmp_path))) == ["is-a-dir"]


def test_download_progress_never_writes_through_a_link_planted_at_its_old_temporary_name(tmp_path):
    """The model directory may be the service account's (hf_model_owner): it could plant <progress>.tmp -> a root
    file. The progress file used to be written to exactly that name with open(..., 'w'), following the link."""
    victim = tmp_path / "victim"
    victim.write_text("untouched")
    progress = tmp_path / ".gpuserve-progress.json"
    (tmp_path / ".gpuserve-progress.json.tmp").symlink_to(victim)
    doc = HF.Progress(str(progress), total=100, done=40).write()
    assert victim.read_text() == "untouched"
    assert json.loads(progress.read_text())["bytes_done"] == 40 == doc["bytes_done"]
