"""sglang_log_facts through Ansible on a real log file: the last launch only, and what it read."""
import os

from ansible_helpers import ROOT, run_module

M = "gpuserve.sglang.sglang_log_facts"
LOGS = os.path.join(ROOT, "tests", "fixtures", "sglang_logs")


def body(name):
    with open(os.path.join(LOGS, name)) as fh:
        return fh.read().split("\n", 1)[1]


def test_a_healthy_server_is_not_reported_with_an_older_launchs_failure(tmp_path):
    """The runbook's ad-hoc command on a log whose earlier launch died: the answer is the last launch's."""
    log = tmp_path / "qwen.log"
    log.write_text("# gpuserve launch 111111111111 at 2026-11-30 09:00:00\n" + body("kv_pool_oom_tp2_nextn_seed.log") +
                   "# gpuserve launch 222222222222 at 2026-11-30 10:00:00\n" + body("ready_tp1_dense.log"))
    r = run_module(M, {"path": str(log)})
    assert r["outcome"] == "ready" and r["failure"] is None
    assert r["launch"]["id"] == "222222222222" and r["launch"]["by"] == "marker"
    assert r["facts"]["mem_fraction_static"] != 0.85          # no number of the first launch
    whole = run_module(M, {"path": str(log), "since": "all"})
    assert "launch" not in whole and whole["failure"]["kind"] == "kv_pool_oom"


def test_a_launch_that_wrote_nothing_is_stale_not_the_previous_error(tmp_path):
    log = tmp_path / "qwen.log"
    log.write_text("# gpuserve launch 111111111111 at 2026-11-30 09:00:00\n" + body("kv_pool_oom_tp2_nextn_seed.log") +
                   "# gpuserve launch 333333333333 at 2026-11-30 10:00:00\n")
    r = run_module(M, {"path": str(log)})
    assert r["stale"] is True and r["failure"] is None
    assert "launch 333333333333" in r["msg"]
