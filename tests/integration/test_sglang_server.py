"""sglang_server against real processes: the SGLang stand-in replays recorded 0.5.9 start-ups."""
import os
import socket
import time

from ansible_helpers import run_module

M = "gpuserve.sglang.sglang_server"


def scen(base, name, **extra):
    """The stand-in reads its scenario from the model directory (env values are no_log and would be masked)."""
    model = os.path.join(os.path.dirname(base["state_dir"]), "models", name)
    os.makedirs(model, exist_ok=True)
    with open(os.path.join(model, "standin_scenario"), "w") as fh:
        fh.write(name)
    a = dict(base, model_path=model)
    a.update(extra)
    return a


def test_ready_then_idempotent_then_restart_on_changed_args_then_stop(server):
    r = run_module(M, scen(server, "ready_tp1_dense", plan_max_total_num_tokens=207346))
    assert r.get("failed") is not True, r["msg"] if "msg" in r else r
    assert r["status"] == "ready" and r["changed"] is True
    assert r["server_info"]["max_total_num_tokens"] == 207346
    assert r["plan_vs_actual"]["ratio"] == 1.0
    assert r["facts"]["weights_gb"] == 15.07
    pid = r["pid"]
    again = run_module(M, scen(server, "ready_tp1_dense"))
    assert again["changed"] is False and again["status"] == "ready" and again["pid"] == pid
    check = run_module(M, scen(server, "ready_tp1_dense", args={"context_length": 65536}), check=True)
    assert check["changed"] is True and check["status"] == "would_restart"
    assert os.path.exists("/proc/%d" % pid)   # check mode touched nothing
    changed = run_module(M, scen(server, "ready_tp1_dense", args={"context_length": 65536}))
    assert changed["changed"] is True and changed["status"] == "ready" and changed["pid"] != pid
    assert "--context-length" in changed["argv"] and "65536" in changed["argv"]
    assert not os.path.exists("/proc/%d" % pid) or open("/proc/%d/stat" % pid).read().split(") ")[1][0] == "Z"
    stopped = run_module(M, {"name": server["name"], "state": "stopped", "state_dir": server["state_dir"]})
    assert stopped["changed"] is True and stopped["status"] == "stopped"


def test_seed_memory_pool_failure_is_reported_with_facts_and_fast(server):
    r = run_module(M, scen(server, "kv_pool_oom_tp2_nextn_seed"))
    assert r["failed"] is True and r["status"] == "failed"
    assert r["failure"]["kind"] == "kv_pool_oom"
    assert r["failure"]["exit_code"] == -9          # SGLang SIGKILLs itself after the sigquit line
    assert r["facts"]["mem_fraction_static"] == 0.85
    assert "Hint:" in r["msg"] and "0.85 x 46.62" in r["msg"]
    assert r["detected_after_exit_s"] < 1.0
    assert r["stale"] is False


def test_every_failure_kind_the_standin_can_replay(server):
    for scenario, kind in (("weight_load_oom", "weight_load_oom"), ("cuda_graph_oom", "cuda_graph_oom"),
                           ("import_error_sgl_kernel", "import_error"), ("nccl_error", "nccl_error"),
                           ("model_not_found_path", "model_not_found"), ("tp_mismatch", "tp_mismatch"),
                           ("unsupported_model", "unsupported_model")):
        r = run_module(M, scen(server, scenario))
        assert r["status"] == "failed", scenario
        assert r["failure"]["kind"] == kind, (scenario, r["failure"])


def test_a_second_failed_launch_never_reports_the_first_ones_error(server):
    first = run_module(M, scen(server, "kv_pool_oom_tp2_nextn_seed"))
    assert first["failure"]["kind"] == "kv_pool_oom"
    # same log file, a launch that dies without printing anything
    silent = dict(server, python="/bin/false")
    r = run_module(M, silent)
    assert r["status"] == "failed" and r["stale"] is True
    assert r["failure"]["kind"] == "other" and "Not enough memory" not in r["msg"]
    assert "no output from this launch" in r["msg"]


def test_a_missing_interpreter_is_named_with_the_os_error(server):
    r = run_module(M, dict(server, python="/opt/nope/bin/python"))
    assert r["failed"] is True
    assert "/opt/nope/bin/python" in r["msg"] and "No such file" in r["msg"]


def test_bad_argument_exits_2_with_argparse_text(server):
    r = run_module(M, scen(server, "ready_tp1_dense", args={"speculative_algorithm": "MTP"}))
    assert r["failure"]["kind"] == "bad_argument" and r["failure"]["exit_code"] == 2
    assert "invalid choice: 'MTP'" in r["failure"]["message"]


def test_port_taken_by_someone_else_is_refused_before_launch_naming_the_owner(server):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", server["port"]))
    s.listen(1)
    try:
        r = run_module(M, scen(server, "ready_tp1_dense"))
    finally:
        s.close()
    assert r["failed"] is True and r["failure"]["kind"] == "port_in_use"
    assert "pid %d" % os.getpid() in r["msg"]
    assert r["changed"] is False


def test_hang_times_out_with_the_phase_reached_and_is_stopped(server):
    r = run_module(M, scen(server, "hang", ready_timeout=3))
    assert r["failed"] is True and r["status"] == "timeout"
    assert r["phase"] == "load_weights"
    time.sleep(0.2)
    assert not os.path.exists("/proc/%d" % r["pid"]) or \
        open("/proc/%d/stat" % r["pid"]).read().split(") ")[1][0] == "Z"


def test_secrets_never_reach_argv_or_output(server):
    secret = "sk-very-secret-123"
    r = run_module(M, scen(server, "ready_tp1_dense", api_key=secret,
                           env={"HF_TOKEN": secret}))
    assert r["status"] == "ready"
    with open("/proc/%d/cmdline" % r["pid"], "rb") as fh:
        assert secret.encode() not in fh.read()
    with open("/proc/%d/environ" % r["pid"], "rb") as fh:
        environ = fh.read().split(b"\0")
    assert b"HF_TOKEN=" + secret.encode() in environ and b"SGLANG_API_KEY=" + secret.encode() in environ
    assert secret not in r["_stdout"] and secret not in r["_stderr"]
    st = os.stat(os.path.join(server["state_dir"], server["name"] + ".state.json"))
    assert st.st_mode & 0o777 == 0o600
    refused = run_module(M, dict(server, args={"api_key": secret}))
    assert refused["failed"] is True and "never go on the command line" in refused["msg"]
    assert secret not in refused["_stdout"].replace("api_key", "")


def test_check_mode_on_a_stopped_server_launches_nothing(server):
    r = run_module(M, scen(server, "ready_tp1_dense"), check=True)
    assert r["changed"] is True and r["status"] == "would_start"
    assert not os.path.exists(os.path.join(server["state_dir"], server["name"] + ".state.json"))
