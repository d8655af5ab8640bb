"""#47 item 5 with the real logrotate: the role's own configuration (roles/sglang_server/templates/logrotate.j2,
rendered by Ansible as the role renders it) rotates a launch's log in the middle of its start-up and again while it
serves, and what reads that log still reads the launch: the module's watch (ready, with the numbers logged before
the rotation), the module's look at the running server on a re-run, and sglang_log_facts by default and by the
launch record's offset (what status.yml and diagnose.yml call). The log is written as the unit writes it: one
descriptor opened for appending (the module's process manager hands the stand-in that descriptor)."""
import json
import os
import shutil
import subprocess
import threading
import time

import pytest

from ansible_helpers import STANDIN, run_module, run_playbook

LOGROTATE = shutil.which("logrotate") or "/usr/sbin/logrotate"
M = "gpuserve.sglang.sglang_server"


def _conf(tmp_path, log):
    """The role's logrotate configuration for ``log``, rendered by Ansible from the role's template."""
    conf = tmp_path / "sglang-t.logrotate"
    p = run_playbook([{"hosts": "localhost", "connection": "local", "gather_facts": False, "tasks": [
        {"name": "conf", "ansible.builtin.template": {
            "src": os.path.join(os.path.dirname(__file__), "..", "..", "roles", "sglang_server", "templates",
                                "logrotate.j2"),
            "dest": str(conf), "mode": "0644"},
         "vars": {"__sglang_server_log": log, "__sglang_server_unit": "sglang-t.service",
                  "sglang_server_log_max_size": "1k", "sglang_server_log_keep": 2}}]}], tmp_path)
    assert p.returncode == 0, p.stdout[-3000:]
    return str(conf)


def _rotate(conf, state):
    out = subprocess.run([LOGROTATE, "-s", state, conf], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr


def test_the_roles_logrotate_config_rotates_a_launch_mid_start_up_and_while_serving_and_it_is_still_read(
        server, tmp_path):
    assert os.access(LOGROTATE, os.X_OK), "logrotate is not installed (tests/ci/bootstrap.sh installs it)"
    log = os.path.join(server["state_dir"], server["name"] + ".log")
    conf = _conf(tmp_path, log)
    text = open(conf).read()
    assert "copytruncate" in text and "delaycompress" in text and "size 1k" in text and log + " {" in text
    state = str(tmp_path / "logrotate.state")
    model = tmp_path / "models" / "ready_tp1_dense"
    model.mkdir(parents=True)
    (model / "standin_scenario").write_text("ready_tp1_dense")
    args = dict(server, model_path=str(model), plan_max_total_num_tokens=207346,
                public_env={"PYTHONPATH": STANDIN, "SGLANG_STANDIN_SPEED": "3"})    # a start-up of a few seconds
    rotated = {}

    def rotate_mid_start_up():
        end = time.time() + 60
        while time.time() < end:
            try:
                with open(log) as fh:
                    seen = fh.read()
            except OSError:
                seen = ""
            if "Load weight end" in seen:
                rotated["ready_before"] = "ready to roll" in seen
                _rotate(conf, state)
                rotated["done"] = os.path.exists(log + ".1")
                return
            time.sleep(0.05)
    rotator = threading.Thread(target=rotate_mid_start_up)
    rotator.start()
    r = run_module(M, args)
    rotator.join()
    assert rotated == {"ready_before": False, "done": True}, rotated      # logrotate ran in the middle of start-up
    assert r.get("failed") is not True, r.get("msg")
    assert r["status"] == "ready" and r["facts"]["weights_gb"] == 15.07       # logged before the rotation
    assert r["server_info"]["max_total_num_tokens"] == 207346 and r["plan_vs_actual"]["ratio"] == 1.0
    with open(log + ".1") as fh:
        assert "# gpuserve launch %s" % r["launch_id"] in fh.read()       # its marker is in the copy now
    record = json.loads(open(os.path.join(server["state_dir"], server["name"] + ".state.json")).read())

    # while it serves: traffic, then a second rotation (the previous copy is compressed: delaycompress)
    for _request in range(3):
        run_module("ansible.builtin.uri", {"url": "http://127.0.0.1:%d/health_generate" % server["port"]})
    with open(log, "a") as fh:
        fh.write("[2026-12-03 13:01:43] Decode batch. #running-req: 1, #token: 64, token usage: 0.00\n" * 40)
    _rotate(conf, state)
    assert os.path.exists(log + ".2.gz") and os.path.getsize(log) < record["log_offset"] + 10

    again = run_module(M, args)                 # the module's look at the running server: nothing to do
    assert again["changed"] is False and again["status"] == "ready" and again["launch_id"] == r["launch_id"]
    assert again["plan_vs_actual"]["ratio"] == 1.0
    by_default = run_module("gpuserve.sglang.sglang_log_facts", {"path": log})
    assert by_default["outcome"] == "ready" and by_default["launch"]["id"] == r["launch_id"], by_default
    assert by_default["launch"]["rotated"] is True and by_default["facts"]["weights_gb"] == 15.07
    by_record = run_module("gpuserve.sglang.sglang_log_facts", {"path": log, "since": str(record["log_offset"])})
    assert by_record["outcome"] == "ready" and by_record["log_rotated"] is True
    assert by_record["facts"]["max_total_num_tokens"] == 207346


@pytest.mark.parametrize("size", ["100", "100k", "100M", "1G"])
def test_the_sizes_the_role_accepts_are_sizes_logrotate_reads(tmp_path, size):
    """The role's preflight accepts digits then k, M or G; logrotate parses each (`logrotate -d` reads the config
    and changes nothing)."""
    log = str(tmp_path / "x.log")
    open(log, "w").close()
    conf = tmp_path / "c"
    conf.write_text("%s {\n    size %s\n    rotate 1\n    copytruncate\n}\n" % (log, size))
    out = subprocess.run([LOGROTATE, "-d", "-s", str(tmp_path / "s"), str(conf)], capture_output=True, text=True,
                         check=False)
    assert out.returncode == 0 and "error" not in out.stderr.lower(), out.stderr
