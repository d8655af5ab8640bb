"""Security round 3 (#58 item 3): a multi-node group's outcomes on the controller. They were kept in
/tmp/gpuserve-groups/<ppid>-<start>, made with makedirs(exist_ok=True) and written with open(..., "w"), following
links: another local user could plant the tree, forge a peer's failure (every rank stops itself) or make the operator
overwrite a file of theirs. Now: this run's private local temporary directory, owner and mode checked on a
descriptor, files created anew relative to it, never through a link."""
import importlib.util
import json
import os
import pwd
import shutil
import subprocess
import tempfile

import pytest

from unit_helpers import CONTROLLER, ROOT, collection_by_path, load_module_util

pytestmark = CONTROLLER


@pytest.fixture(scope="module")
def jp():
    collection_by_path()
    spec = importlib.util.spec_from_file_location("gpuserve_job_progress",
                                                  os.path.join(ROOT, "plugins", "action", "job_progress.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_default_directory_is_inside_the_runs_private_temporary_directory(jp):
    from ansible import constants as C  # pylint: disable=import-outside-toplevel
    assert jp.run_dir() == os.path.join(C.DEFAULT_LOCAL_TMP, "gpuserve-groups")
    assert os.stat(C.DEFAULT_LOCAL_TMP).st_mode & 0o777 == 0o700
    assert not jp.run_dir().startswith("/tmp/gpuserve-groups")


def test_outcomes_are_written_and_read_back_in_a_private_directory(jp, tmp_path):
    gdir = os.path.join(jp.run_dir(str(tmp_path)), "g")
    jp.write_outcome(gdir, "r1", {"member": "r1", "status": "ready"})
    assert jp.read_outcomes(gdir, ["r0", "r1"]) == {"r1": {"member": "r1", "status": "ready"}}
    assert os.stat(gdir).st_mode & 0o777 == 0o700
    assert os.stat(os.path.join(gdir, "r1.json")).st_mode & 0o777 == 0o600


def test_a_link_planted_for_a_members_file_is_replaced_never_written_through(jp, tmp_path):
    victim = tmp_path / "operators-file"
    victim.write_text("keep me\n")
    gdir = os.path.join(jp.run_dir(str(tmp_path / "base")), "g")
    os.makedirs(gdir, 0o700)
    os.symlink(str(victim), os.path.join(gdir, "r0.json"))
    os.symlink(str(victim), os.path.join(gdir, "r0.json.tmp%d" % os.getpid()))
    assert jp.read_outcomes(gdir, ["r0"]) == {}          # a link is not read as an outcome
    jp.write_outcome(gdir, "r0", {"status": "ready"})
    assert victim.read_text() == "keep me\n"
    assert not os.path.islink(os.path.join(gdir, "r0.json"))


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/usr/bin/python3"),
                    reason="plants a tree as another account (needs root and the system's python3)")
def test_a_tree_another_user_planted_is_refused_and_no_forged_failure_is_read(jp):
    nobody = pwd.getpwnam("nobody")
    shared = tempfile.mkdtemp(dir="/tmp")           # a directory anyone may write in, as /tmp is
    try:
        os.chmod(shared, 0o1777)
        # another local user plants the group directory with a forged failure of rank 0
        code = ("import json, os; d = %r; os.makedirs(d + '/gpuserve-groups/g', 0o755); "
                "json.dump({'member': 'r0', 'status': 'failed', 'msg': 'forged'}, "
                "open(d + '/gpuserve-groups/g/r0.json', 'w'))" % shared)
        subprocess.run(["/usr/bin/python3", "-c", code], check=True, user=nobody.pw_uid, group=nobody.pw_gid,
                       extra_groups=[], cwd="/")
        gdir = os.path.join(jp.run_dir(shared), "g")
        with pytest.raises(jp.AnsibleActionFail, match="belongs to uid %d" % nobody.pw_uid):
            jp.read_outcomes(gdir, ["r0"])
        with pytest.raises(jp.AnsibleActionFail, match="no one else may write"):
            jp.write_outcome(gdir, "r1", {"status": "ready"})
    finally:
        shutil.rmtree(shared)


def test_a_directory_others_may_write_is_refused(jp, tmp_path):
    base = tmp_path / "shared"
    base.mkdir()
    os.chmod(str(base), 0o777)
    with pytest.raises(jp.AnsibleActionFail, match="mode 777"):
        jp.write_outcome(os.path.join(str(base), "g"), "r1", {"status": "ready"})


def test_a_linked_group_directory_is_refused(jp, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    base = tmp_path / "base" / "gpuserve-groups"
    base.mkdir(parents=True, mode=0o700)
    os.symlink(str(elsewhere), str(base / "g"))
    with pytest.raises(jp.AnsibleActionFail, match="not a directory of this user's"):
        jp.write_outcome(str(base / "g"), "r1", {"status": "ready"})
    assert os.listdir(str(elsewhere)) == []


def test_outcome_json_round_trip_is_plain_json(jp, tmp_path):
    gdir = os.path.join(jp.run_dir(str(tmp_path)), "g")
    jp.write_outcome(gdir, "r0", {"member": "r0", "status": "failed", "msg": "x"})
    with open(os.path.join(gdir, "r0.json")) as fh:
        assert json.load(fh)["status"] == "failed"


# rank 0's and rank 1's outcomes as the real 0.5.9 left them in the multinode scenario (rank 1's weights unreadable)
ECHO = {"member": "ct100", "rank": 0, "status": "failed", "failure": {"kind": "other", "message": (
    "ValueError: TP rank 0 could finish the model loading, but there are other ranks that didn't finish loading. It is "
    "likely due to unexpected failures (e.g., OOM) or a slow node.")}, "msg": "SGLang failed to start: other ..."}
CAUSE = {"member": "ct101", "rank": 1, "status": "failed", "failure": {"kind": "other", "message": (
    "safetensors._safetensors_rust.SafetensorError: Error while deserializing header: invalid shape, data type, or "
    "offset for tensor")}, "msg": "SGLang failed to start: other in phase load_weights: SafetensorError"}


def test_what_only_echoes_another_ranks_failure_is_told_from_a_cause(jp):
    assert jp.is_echo(ECHO) and not jp.is_echo(CAUSE)
    assert jp.is_echo({"failure": {"kind": "nccl_error", "message": "Connection reset by peer"}})
    assert not jp.is_echo({"status": "failed", "failure": None})


def test_a_rank_failing_with_the_echo_names_the_rank_that_failed_first(jp, tmp_path):
    gdir = os.path.join(jp.run_dir(str(tmp_path)), "lab")
    jp.write_outcome(gdir, "ct101", CAUSE)
    result = {"failed": True, "msg": ECHO["msg"], "failure": ECHO["failure"]}
    jp.ActionModule._name_the_cause(result, {"group": "lab", "group_timeout": 5.0}, gdir, "ct100", ["ct101"])
    assert result["group_failure"]["member"] == "ct101"
    assert result["msg"].startswith("ct101 (rank 1) of group lab failed first: SGLang failed to start: other in phase "
                                    "load_weights") and result["msg"].endswith("its echo: " + ECHO["msg"])


def test_an_echo_with_no_cause_among_the_others_keeps_its_own_message_after_a_bounded_wait(jp, tmp_path):
    gdir = os.path.join(jp.run_dir(str(tmp_path)), "lab")
    jp.write_outcome(gdir, "ct101", dict(ECHO, member="ct101", rank=1))      # both echo: neither is named the cause
    result = {"failed": True, "msg": ECHO["msg"], "failure": ECHO["failure"]}
    jp.ActionModule._name_the_cause(result, {"group": "lab", "group_timeout": 600.0}, gdir, "ct100", ["ct101"],
                                    wait=0.2)
    assert result["msg"] == ECHO["msg"] and "group_failure" not in result


def test_an_earlier_launchs_last_line_is_not_printed_and_each_line_names_its_launch(jp):
    """#60 item 5: a run that failed and was put back printed "phase ready after 35 s ... 8192 KV tokens" (the launch
    being replaced, read from the progress file it left) first. The lines a poller prints, from the documents the
    module writes in turn: the old launch's last document is skipped, each line names its launch, and the restored
    launch's lines name the failed launch's last phase (the poller need not have seen that launch's own last line)."""
    watch = load_module_util("server.watch")
    docs = [{"state": "ready", "message": watch.progress_message("ready", {"max_total_num_tokens": 8192}, 35,
                                                                 "new launch 0001")},
            None,                                       # the file half rewritten while read: nothing
            {"state": "starting", "message": "new launch: the configuration is checked (the server's own parser, "
                                             "the port)"},
            {"state": "starting", "message": watch.progress_message("args", {}, 1, "new launch 0002")},
            {"state": "ended", "message": watch.progress_message("memory_pool", {"weights_gb": 0.03}, 20,
                                                                 "new launch 0002")},
            {"state": "starting", "message": watch.progress_message(
                "warmup", {}, 9, "restored launch 0003 (the last good configuration; new launch 0002 died in phase "
                                 "memory_pool: kv_pool_oom)")}]
    fresh, lines = False, []
    for doc in docs:
        fresh, line = jp.fresh_line("sglang-tiny", json.dumps(doc) if doc else '{"state": "star', fresh)
        lines.append(line)
    assert lines == [None, None,
                     "sglang-tiny: new launch: the configuration is checked (the server's own parser, the port)",
                     "sglang-tiny: new launch 0002: phase args after 1 s",
                     "sglang-tiny: new launch 0002: phase memory_pool after 20 s: weights 0.03 GiB",
                     "sglang-tiny: restored launch 0003 (the last good configuration; new launch 0002 died in phase "
                     "memory_pool: kv_pool_oom): phase warmup after 9 s"]
    # a download's progress (no server states) is printed from the first poll
    assert jp.fresh_line("model", json.dumps({"state": "downloading", "bytes_done": 1, "bytes_total": 2}), False)[1].startswith(
        "model: 0.0 of 0.0 MiB")


def test_the_finished_jobs_last_document_is_its_last_line_when_it_says_something_new(jp):
    """A download that completed between two polls: the finishing poll's progress file (written "complete" before the
    job's result) gives the 100 % line; nothing when no live line of this job was seen, the file is empty, or the
    line was the last one printed (CI: the last line printed was 87.5 % of a download that then completed)."""
    done = json.dumps({"state": "complete", "bytes_done": 8 * 1048576, "bytes_total": 8 * 1048576,
                       "rate_bytes_per_s": 0.3 * 1048576})
    line = jp.last_word("org/model", done, True, "org/model: 7.0 of 8.0 MiB (87.5 %), 0.3 MiB/s")
    assert line == "org/model: 8.0 of 8.0 MiB (100.0 %), 0.3 MiB/s"
    assert jp.last_word("org/model", done, True, line) is None
    assert jp.last_word("org/model", "", True, "x") is None
    ready = json.dumps({"state": "ready", "message": "phase ready after 35 s"})
    assert jp.last_word("sglang-tiny", ready, False, None) is None       # an earlier launch's word: never


def test_a_venv_builds_progress_is_printed_as_its_own_words_not_as_a_download(jp):
    """The lab caught it: a build's progress document once carried bytes_done/bytes_total, and the poller printed it as
    a model download's line ("0.0 of 5.0 MiB (0.0 %), 0.0 MiB/s"), dropping the packages resolved and the step."""
    from ansible_collections.gpuserve.sglang.plugins.module_utils.venv import BuildProgress  # pylint: disable=import-outside-toplevel
    p = BuildProgress(1)
    p.start("uv pip sync of sglang-0.5.9.lock")
    for line in ("Resolved 212 packages in 1.2s", "Downloading torch (846.1MiB)"):
        p.feed(line)
    assert jp.progress_line("venv /opt/sglang/venv", p.doc(95)) == (
        "venv /opt/sglang/venv: step 1 of 1 (uv pip sync of sglang-0.5.9.lock) after 95 s: 212 packages resolved; "
        "0.0 MiB of 846.1 MiB downloaded (0 of 1 large file)")
