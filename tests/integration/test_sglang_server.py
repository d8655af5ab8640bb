"""sglang_server against real processes: the SGLang stand-in replays recorded 0.5.9 start-ups."""
import grp
import http.client
import json
import os
import re
import socket
import subprocess
import sys
import time

import pytest
import yaml
from ansible_helpers import STANDIN, run_module, run_playbook

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
    # the role's quick look (check mode) on a ready server is the whole answer, server_info included
    look = run_module(M, scen(server, "ready_tp1_dense"), check=True)
    assert look["changed"] is False and look["status"] == "ready" and look["pid"] == pid
    assert look["server_info"]["max_total_num_tokens"] == 207346
    check = run_module(M, scen(server, "ready_tp1_dense", args={"context_length": 65536}), check=True)
    assert check["changed"] is True and check["status"] == "would_restart"
    assert os.path.exists("/proc/%d" % pid)   # check mode touched nothing
    changed = run_module(M, scen(server, "ready_tp1_dense", args={"context_length": 65536}))
    assert changed["changed"] is True and changed["status"] == "ready" and changed["pid"] != pid
    assert "--context-length" in changed["argv"] and "65536" in changed["argv"]
    assert not os.path.exists("/proc/%d" % pid) or open("/proc/%d/stat" % pid).read().split(") ")[1][0] == "Z"
    stopped = run_module(M, {"name": server["name"], "manager": "process", "state": "stopped",
                             "state_dir": server["state_dir"]})
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
    """Read from the launch's own log when the launch runs (check_args off: the parser asked first refuses it)."""
    r = run_module(M, scen(server, "ready_tp1_dense", args={"speculative_algorithm": "MTP"}, check_args=False))
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


def get(port, path, key=None):
    """(status, body) of GET http://127.0.0.1:port/path, with a bearer key when given."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path, headers={"Authorization": "Bearer " + key} if key else {})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def test_the_api_key_locks_the_server_and_stays_out_of_argv_environment_and_output(server):
    secret = "sk-very-secret-123"
    group = grp.getgrgid(os.getgid()).gr_name     # the service group in a deployment
    r = run_module(M, scen(server, "ready_tp1_dense", api_key=secret, config_unix_group=group,
                           env={"HF_TOKEN": "hf_other_secret_456"}))
    assert r["status"] == "ready", r.get("msg")
    port = server["port"]
    # SGLang 0.5.9 (and the stand-in, srt/utils/auth.py): health open, everything else needs the key
    assert get(port, "/v1/models")[0] == 401
    assert get(port, "/v1/models", "wrong-key")[0] == 401
    assert get(port, "/v1/models", secret)[0] == 200
    assert get(port, "/server_info")[0] == 401
    assert get(port, "/health")[0] == 200
    with open("/proc/%d/cmdline" % r["pid"], "rb") as fh:
        argv = fh.read().split(b"\0")
    assert secret.encode() not in b" ".join(argv)
    config = os.path.join(server["state_dir"], server["name"] + ".yaml")
    assert argv[argv.index(b"--config") + 1] == config.encode()
    assert os.stat(config).st_mode & 0o777 == 0o640 and os.stat(config).st_gid == os.getgid()
    with open(config) as fh:
        assert yaml.safe_load(fh) == {"api-key": secret}
    with open("/proc/%d/environ" % r["pid"], "rb") as fh:
        environ = fh.read().split(b"\0")
    assert b"HF_TOKEN=hf_other_secret_456" in environ
    assert not [e for e in environ if e.startswith(b"SGLANG_API_KEY=")]
    # SGLang logs server_args with the key: the log has it (root-only file), what we return never does. The
    # line is in log_tail redacted by us, not masked by Ansible (which would print ********).
    with open(os.path.join(server["state_dir"], server["name"] + ".log")) as fh:
        assert "api_key='%s'" % secret in fh.read()
    assert any("api_key='<redacted>'" in line for line in r["log_tail"]), r["log_tail"]
    assert secret not in r["_stdout"] and secret not in r["_stderr"]
    assert "hf_other_secret_456" not in r["_stdout"]
    st = os.stat(os.path.join(server["state_dir"], server["name"] + ".state.json"))
    assert st.st_mode & 0o777 == 0o600
    refused = run_module(M, dict(server, args={"api_key": secret}))
    assert refused["failed"] is True and "never goes on the command line" in refused["msg"]
    assert secret not in refused["_stdout"].replace("api_key", "")
    # #58 item 1: a prefix SGLang's parser takes as --api-key is refused the same way, its value masked everywhere
    for name in ("api_k", "api_ke", "admin_api"):
        refused = run_module(M, dict(server, args={name: secret}))
        assert refused["failed"] is True and "never goes on the command line" in refused["msg"], name
        assert secret not in refused["_stdout"] and secret not in refused["_stderr"], name


def test_the_config_hash_knows_a_new_key_without_being_a_hash_of_it(server):
    first = run_module(M, scen(server, "ready_tp1_dense", api_key="key-one-0123456789"))
    assert first["status"] == "ready"
    same = run_module(M, scen(server, "ready_tp1_dense", api_key="key-one-0123456789"))
    assert same["changed"] is False and same["config_hash"] == first["config_hash"]
    other = run_module(M, scen(server, "ready_tp1_dense", api_key="key-two-0123456789"))
    assert other["changed"] is True and other["config_hash"] != first["config_hash"]
    assert get(server["port"], "/v1/models", "key-one-0123456789")[0] == 401
    assert get(server["port"], "/v1/models", "key-two-0123456789")[0] == 200
    # the digest is keyed by a per-target salt (root-only), so the hash cannot be recomputed from a guessed key
    salt = os.path.join(server["state_dir"], ".secret-salt")
    assert os.stat(salt).st_mode & 0o777 == 0o600 and os.path.getsize(salt) >= 32
    import hashlib  # pylint: disable=import-outside-toplevel
    unsalted = hashlib.sha256(json.dumps({"argv": other["argv"], "env": sorted(server["public_env"].items()),
                                          "revision": "", "secrets": ""}, sort_keys=True).encode()).hexdigest()
    assert other["config_hash"] != unsalted
    unkeyed = run_module(M, scen(server, "ready_tp1_dense"))
    assert unkeyed["changed"] is True and "--config" not in unkeyed["argv"]
    assert not os.path.exists(os.path.join(server["state_dir"], server["name"] + ".yaml"))   # no stale key left
    assert get(server["port"], "/v1/models")[0] == 200


def test_the_standin_ignores_sglang_api_key_like_sglang_059(server, tmp_path):
    """The stand-in must not be kinder than SGLang: an environment variable locks nothing."""
    port = server["port"]
    env = dict(os.environ, PYTHONPATH=STANDIN, SGLANG_STANDIN_SPEED="40", SGLANG_API_KEY="env-key",
               SGLANG_STANDIN_SCENARIO="ready_tp1_dense")
    proc = subprocess.Popen([sys.executable, "-m", "sglang.launch_server", "--model-path", str(tmp_path),
                             "--port", str(port)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for dummy in range(300):
            try:
                if get(port, "/health")[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.1)
        assert get(port, "/v1/models")[0] == 200          # served to anyone: the variable is ignored
    finally:
        proc.kill()
        proc.wait()


def test_a_public_bind_without_a_key_is_refused_and_args_cannot_move_the_bind(server):
    r = run_module(M, scen(server, "ready_tp1_dense", host="0.0.0.0"))
    assert r["failed"] is True and "host=0.0.0.0" in r["msg"] and "api_key" in r["msg"]
    assert r["changed"] is False and not os.path.exists(os.path.join(server["state_dir"], server["name"] + ".log"))
    sneaky = run_module(M, scen(server, "ready_tp1_dense", args={"host": "0.0.0.0"}))
    assert sneaky["failed"] is True and "args.host=0.0.0.0 differs from host=127.0.0.1" in sneaky["msg"]
    opted = run_module(M, scen(server, "ready_tp1_dense", host="0.0.0.0", allow_public_without_api_key=True))
    assert opted["status"] == "ready"


def test_out_of_range_args_are_refused_before_anything_is_launched(server):
    for args, needle in (({"mem_fraction_static": 1.2}, "args.mem_fraction_static=1.2: outside (0.0, 1.0)"),
                         ({"mem_fraction_static": "high"}, "write it without quotes"),
                         ({"mem_fraction_static": "1.5"}, "args.mem_fraction_static=1.5: outside (0.0, 1.0)"),
                         ({"tp_size": 0}, "args.tp_size=0: outside [1, 1024]")):
        r = run_module(M, scen(server, "ready_tp1_dense", args=args))
        assert r["failed"] is True and needle in r["msg"], r["msg"]
        assert r["changed"] is False
    assert not os.path.exists(os.path.join(server["state_dir"], server["name"] + ".log"))


def test_moving_to_a_port_another_process_holds_keeps_the_old_server_serving(server):
    first = run_module(M, scen(server, "ready_tp1_dense"))
    assert first["status"] == "ready"
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    try:
        moved = run_module(M, scen(server, "ready_tp1_dense", port=s.getsockname()[1]))
    finally:
        s.close()
    assert moved["failed"] is True and moved["failure"]["kind"] == "port_in_use"
    assert "left serving" in moved["failure"]["hint"]
    assert os.path.exists("/proc/%d" % first["pid"])
    assert get(server["port"], "/health")[0] == 200


def test_check_mode_on_a_stopped_server_launches_nothing(server):
    r = run_module(M, scen(server, "ready_tp1_dense"), check=True)
    assert r["changed"] is True and r["status"] == "would_start"
    assert not os.path.exists(os.path.join(server["state_dir"], server["name"] + ".state.json"))


def test_a_long_start_up_prints_its_phase_and_numbers_while_it_waits(server, tmp_path):
    """The role's shape: the module in the background, job_progress printing its progress file."""
    progress = os.path.join(server["state_dir"], "p.json")
    a = scen(server, "ready_tp1_dense", progress_file=progress, plan_max_total_num_tokens=150000,
             public_env={"PYTHONPATH": STANDIN, "SGLANG_STANDIN_SPEED": "4"})   # a start-up of several seconds
    p = run_playbook([{"hosts": "localhost", "connection": "local", "gather_facts": False, "tasks": [
        {"name": "start", "gpuserve.sglang.sglang_server": a, "async": 300, "poll": 0, "register": "job"},
        {"name": "wait", "register": "done", "gpuserve.sglang.job_progress": {
            "jid": "{{ job.ansible_job_id }}", "progress_file": progress, "interval": 0.2, "label": "sglang-t"}},
        {"name": "said", "ansible.builtin.debug": {"msg": "status={{ done.status }} tokens={{ done.server_info.max_total_num_tokens }}"}},
    ]}], tmp_path)
    assert p.returncode == 0, p.stdout[-3000:]
    # each line names its launch (#60 item 5): "sglang-t: new launch <id>: phase ..."
    lines = [line for line in p.stdout.splitlines() if re.match(r"sglang-t: new launch [0-9a-f-]+: phase ", line)]
    assert any("phase load_weights" in line for line in lines), p.stdout[-3000:]
    assert any("weights 15.07 GiB" in line for line in lines), lines
    assert len(lines) >= 3 and "status=ready tokens=207346" in p.stdout
    # the job's warning is text, as the module's own would be (ansible-core 2.19 serializes it in the job's file)
    said = p.stdout + p.stderr
    assert "[WARNING]: planned 150000 KV tokens, SGLang reports 207346" in said, said[-3000:]
    assert "__ansible_type" not in said and "'event'" not in said


def test_a_plan_far_from_the_actual_capacity_is_warned_with_both_numbers(server):
    r = run_module(M, scen(server, "ready_tp1_dense", plan_max_total_num_tokens=150000))
    assert r["status"] == "ready"
    pva = r["plan_vs_actual"]
    assert pva["within_tolerance"] is False and pva["actual_max_total_num_tokens"] == 207346
    assert any("planned 150000 KV tokens, SGLang reports 207346" in w for w in r.get("warnings", [])), r.get("warnings")
    # the same again: nothing launched, the comparison and its warning still there (a plan that no longer matches
    # the server is said on every run), and the context as the launch's log resolved it, not the null of the args
    again = run_module(M, scen(server, "ready_tp1_dense", plan_max_total_num_tokens=150000))
    assert again["changed"] is False and again["pid"] == r["pid"]
    assert again["plan_vs_actual"] == pva
    assert any("planned 150000 KV tokens, SGLang reports 207346" in w for w in again.get("warnings", []))
    assert again["server_info"]["context_length"] == 131072 and again["server_info"]["max_running_requests"] == 2048
    close = run_module(M, scen(server, "ready_tp1_dense", plan_max_total_num_tokens=200000, args={"context_length": 4096}))
    assert close["plan_vs_actual"]["within_tolerance"] is True and not close.get("warnings")


def _two_ranks(server, tmp_path, dist_timeout):
    """Module args of rank 0 and rank 1 of one --nnodes 2 server on this machine (rank 0 on the fixture's port)."""
    from ansible_helpers import free_port
    group = {"tp_size": 2, "nnodes": 2, "dist_init_addr": "127.0.0.1:%d" % free_port(), "dist_timeout": dist_timeout}
    rank0 = scen(server, "ready_tp1_dense", args=dict(group, node_rank=0))
    port1 = free_port()
    rank1 = scen(dict(server, name="t%d" % port1, port=port1, state_dir=str(tmp_path / "state1")), "ready_tp1_dense",
                 args=dict(group, node_rank=1))
    return rank0, rank1, group["dist_init_addr"]


def _start_together(rank0, rank1):
    """Both ranks started at once (each waits for the other at the meeting): {"r0": result, "r1": result}."""
    import threading
    results = {}
    threads = [threading.Thread(target=lambda k=k, a=a: results.__setitem__(k, run_module(M, a)))
               for k, a in (("r0", rank0), ("r1", rank1))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def test_two_ranks_meet_and_a_rank_other_than_0_is_ready_by_its_health_server_alone(server, tmp_path):
    """Two ranks of one --nnodes 2 server on this machine: neither starts up until both have met at rank 0's
    --dist-init-addr; rank 1 logs no readiness (0.5.9) and is watched by its health server; alone, rank 1 fails
    with torch's TCPStore timeout, named as a meeting that failed."""
    rank0, rank1, dist = _two_ranks(server, tmp_path, 60)
    try:
        results = _start_together(rank0, rank1)
        r0, r1 = results["r0"], results["r1"]
        assert r0["status"] == "ready" and r1["status"] == "ready", (r0.get("msg"), r1.get("msg"))
        assert r0["server_info"]["max_total_num_tokens"] == 207346
        assert r1["server_info"] is None                 # no API on a rank other than 0
        assert "The server is fired up" not in "\n".join(r1["log_tail"])
        # rank 1's log as 0.5.9 writes it: its scheduler lines prefixed TP1, none of what only TP rank 0 prints
        tail1 = "\n".join(r1["log_tail"])
        assert "TP1] Capture cuda graph end." in tail1 and "max_total_num_tokens=" not in tail1, tail1
        assert "Using KV cache dtype" not in tail1 and "Capture cuda graph bs" not in tail1
        assert "TP0] Capture cuda graph end." in "\n".join(r0["log_tail"])
        assert "--node-rank" in r1["argv"] and r1["argv"][r1["argv"].index("--dist-init-addr") + 1] == dist
        # rank 1 again, ready: the quick look answers by its health server too
        again = run_module(M, rank1)
        assert again["changed"] is False and again["status"] == "ready"
        # rank 0 stopped: a restarted rank 1 waits for it, then gives up with torch's words (60 s / speed 40)
        run_module(M, {"name": server["name"], "manager": "process", "state": "stopped", "state_dir": server["state_dir"]})
        alone = run_module(M, dict(rank1, state="restarted"))
        assert alone["status"] == "failed" and alone["failure"]["kind"] == "nccl_error"
        assert "The client socket has timed out after 60000ms while trying to connect to (127.0.0.1, %s)" % \
            dist.split(":")[1] in alone["failure"]["message"]
        assert "never met at --dist-init-addr" in alone["failure"]["hint"]
    finally:
        run_module(M, {"name": rank1["name"], "manager": "process", "state": "stopped", "state_dir": rank1["state_dir"]})


@pytest.mark.parametrize("rank0_stops", [True, False], ids=["rank0-stops", "rank0-lives-on"])
def test_a_rank_restarted_alone_joins_the_old_rank_0_and_is_told_why_it_failed(server, tmp_path, rank0_stops):
    """Rank 1 restarted alone while rank 0 is busy (what deploy.yml's group stop prevents, and what a `systemctl
    restart` of one rank does): rank 0's request in flight waits in NCCL for the rank that left, so rank 0 lives on
    (idle, it would have ended at once), and torch's store there serves while it lives - the new rank 1 joins it and
    waits for a meeting that is over. When rank 0 then stops, rank 1 fails with torch's lost-store words and is told
    rank 0 went away; while it lives on, rank 1's store wait times out and is named a meeting that failed."""
    import threading
    rank0, rank1, dist = _two_ranks(server, tmp_path, 600 if rank0_stops else 60)
    # a request of 10 s: still in flight when rank 1 leaves, however long its stop takes on a loaded machine (2 s was
    # over before a slow stop under two lanes, and rank 0, idle, ended at once)
    rank0["public_env"] = dict(rank0["public_env"], SGLANG_STANDIN_GEN_MS="10000")
    stop0 = {"name": server["name"], "manager": "process", "state": "stopped", "state_dir": server["state_dir"]}

    def busy():                         # a request rank 0 is answering when rank 1 leaves
        try:
            body = json.dumps({"text": "hi", "sampling_params": {"max_new_tokens": 1}}).encode()
            conn = http.client.HTTPConnection("127.0.0.1", rank0["port"], timeout=60)
            conn.request("POST", "/generate", body, {"Content-Type": "application/json"})
            conn.getresponse().read()
        except OSError:
            pass                        # rank 0 stopped under it
    try:
        results = _start_together(rank0, rank1)
        assert results["r0"]["status"] == "ready" and results["r1"]["status"] == "ready"
        threading.Thread(target=busy, daemon=True).start()
        time.sleep(0.5)
        log1 = os.path.join(rank1["state_dir"], rank1["name"] + ".log")
        begun = open(log1).read().count("Init torch distributed begin.")
        again = threading.Thread(target=lambda: results.__setitem__("again", run_module(M, dict(rank1, state="restarted"))))
        again.start()
        if rank0_stops:
            end = time.time() + 30
            while open(log1).read().count("Init torch distributed begin.") == begun and time.time() < end:
                time.sleep(0.1)
            time.sleep(1.0)                     # rank 1 has connected to rank 0's store and waits there
            run_module(M, stop0)
        again.join()
        f = results["again"]["failure"]
        assert results["again"]["status"] == "failed" and f["kind"] == "nccl_error" and f["rank"] == "TP1", f
        if rank0_stops:
            assert f["message"].startswith("torch.distributed.DistNetworkError: recvValue failed on SocketImpl(")
            assert "Connection was likely closed" in f["message"], f["message"]
            assert "lost the connection" in f["hint"] and "(%s)" % dist in f["hint"], f["hint"]
            assert "Exception raised from recvBytes" in open(log1).read()
        else:
            assert f["message"] == "torch.distributed.DistStoreError: wait timeout after 60000ms, keys: /init/"
            assert "never met at --dist-init-addr" in f["hint"] and "earlier launch" in f["hint"], f["hint"]
    finally:
        run_module(M, {"name": rank1["name"], "manager": "process", "state": "stopped", "state_dir": rank1["state_dir"]})
        run_module(M, stop0)


def test_a_rank_lost_after_start_up_ends_the_other_and_its_failure_names_the_lost_rank(server, tmp_path):
    """Both ranks serving and idle; rank 1 killed (a crash): rank 0 ends at once, as 0.5.9's scheduler does at its
    next Gloo broadcast, and its failure is named the echo of another rank's loss, with that rank's address."""
    import signal
    rank0, rank1, _dist = _two_ranks(server, tmp_path, 60)
    try:
        results = _start_together(rank0, rank1)
        assert results["r0"]["status"] == "ready" and results["r1"]["status"] == "ready"
        os.kill(results["r1"]["pid"], signal.SIGKILL)
        end = time.time() + 20
        while time.time() < end:
            try:
                os.kill(results["r0"]["pid"], 0)
            except OSError:
                break
            time.sleep(0.1)
        else:
            raise AssertionError("rank 0 still runs 20 s after rank 1 was killed")
        # what an operator reads (diagnose.yml, status.yml): the last launch of rank 0's log
        look = run_module("gpuserve.sglang.sglang_log_facts",
                          {"path": os.path.join(rank0["state_dir"], rank0["name"] + ".log")})
        f = look["failure"]
        assert look["outcome"] == "failed" and f["kind"] == "nccl_error" and f["rank"] == "TP0", look
        assert "Connection closed by peer [127.0.0.1]:" in f["message"], f["message"]
        assert f["hint"].startswith("Another rank of this server went away: Gloo's connection to the rank at "
                                    "127.0.0.1 closed."), f["hint"]
    finally:
        run_module(M, {"name": rank1["name"], "manager": "process", "state": "stopped", "state_dir": rank1["state_dir"]})


def _group_run(server, tmp_path, scenarios):
    """Two ranks as two inventory hosts (local connection), started in the background in one task and waited for
    by job_progress with group= (the role's shape); returns the run and each rank's module args."""
    from ansible_helpers import free_port
    dist = "127.0.0.1:%d" % free_port()
    hosts = {}
    for rank, scenario in enumerate(scenarios):
        port = server["port"] if rank == 0 else free_port()
        a = scen(dict(server, name="t%d" % port, port=port, state_dir=str(tmp_path / ("state%d" % rank))), scenario,
                 args={"tp_size": 2, "nnodes": 2, "node_rank": rank, "dist_init_addr": dist, "dist_timeout": 60})
        state = os.path.join(a["state_dir"], a["name"] + ".state.json")
        stop = [sys.executable, "-c", "import json, os; os.kill(json.load(open(%r))['pid'], 15)" % state]
        hosts["r%d" % rank] = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                               "a": a, "rank": rank, "stop": stop}
    p = run_playbook([{"hosts": "all", "gather_facts": False, "tasks": [
        {"name": "start", "gpuserve.sglang.sglang_server": "{{ a }}", "async": 300, "poll": 0, "register": "job"},
        {"name": "wait", "register": "done", "gpuserve.sglang.job_progress": {
            "jid": "{{ job.ansible_job_id }}", "interval": 0.2, "label": "sglang-{{ inventory_hostname }}",
            "group": "g", "group_members": ["r0", "r1"], "group_rank": "{{ rank }}", "group_stop": "{{ stop }}",
            "group_timeout": 60}},
        {"name": "said", "ansible.builtin.debug": {"msg": "{{ inventory_hostname }} group {{ done.group.members | dictsort | map('join', '=') | join(',') }}"}},
    ]}], tmp_path, inventory={"all": {"hosts": hosts}})
    return p, [hosts["r0"]["a"], hosts["r1"]["a"]]


def test_ranks_of_a_group_are_ready_together(server, tmp_path):
    p, ranks = _group_run(server, tmp_path, ["ready_tp1_dense", "ready_tp1_dense"])
    try:
        assert p.returncode == 0, p.stdout[-3000:]
        assert "msg: r0 group r0=ready,r1=ready" in p.stdout and "msg: r1 group r0=ready,r1=ready" in p.stdout
    finally:
        for a in ranks:
            run_module(M, {"name": a["name"], "manager": "process", "state": "stopped", "state_dir": a["state_dir"]})


def test_a_failing_rank_stops_the_other_and_is_named_with_its_own_facts(server, tmp_path):
    """Rank 1 joins the meeting, then dies of the seed's KV-pool error; rank 0 would wait on it for ever (as in a
    collective): it is stopped, and its task names rank 1's failure and numbers, not an echo of its own."""
    t0 = time.time()
    p, ranks = _group_run(server, tmp_path, ["ready_tp1_dense", "kv_pool_oom_tp2_nextn_seed"])
    try:
        took = time.time() - t0
        assert p.returncode != 0
        out = p.stdout
        assert "stopping this member of group g: r1 (rank 1) failed" in out, out[-4000:]
        assert "stopped because r1 (rank 1) of group g failed:" in out and "Not enough memory" in out
        assert "kind: kv_pool_oom" in out and "mem_fraction_static: 0.85" in out      # rank 1's facts, in rank 0's task
        assert "fatal: [r1]" in out and "fatal: [r0]" in out
        for a in ranks:                                   # nothing left running
            st = json.load(open(os.path.join(a["state_dir"], a["name"] + ".state.json")))
            assert st["pid"] is None or not os.path.exists("/proc/%d" % st["pid"]) or \
                open("/proc/%d/stat" % st["pid"]).read().split(") ")[1][0] == "Z", st
        assert took < 60                                  # not rank 0's ready timeout
    finally:
        for a in ranks:
            run_module(M, {"name": a["name"], "manager": "process", "state": "stopped", "state_dir": a["state_dir"]})


def test_a_smuggled_flag_or_a_short_key_is_refused_and_the_running_server_keeps_serving(server):
    """#42 items 1 and 8, with the module as a user runs it (manager=process): a list value that would put
    ``--host 0.0.0.0`` (or a key) on argv, and a one-character key, are refused before anything is stopped."""
    first = run_module(M, scen(server, "ready_tp1_dense"))
    assert first["status"] == "ready", first.get("msg")
    for args in ({"log_level": ["info", "--host", "0.0.0.0"]}, {"log_level": ["info", "--api-key=secret-in-argv"]}):
        r = run_module(M, scen(server, "ready_tp1_dense", args=args))
        assert r["failed"] is True and r["changed"] is False, r
        assert "args.log_level='--" in r["msg"] and "would reach the program as a flag of its own" in r["msg"]
    short = run_module(M, scen(server, "ready_tp1_dense", api_key="Z"))
    assert short["failed"] is True and "api_key is 1 characters long: use at least 16" in short["msg"]
    assert short["changed"] is False
    assert os.path.exists("/proc/%d" % first["pid"])
    assert get(server["port"], "/health")[0] == 200
    again = run_module(M, scen(server, "ready_tp1_dense"))
    assert again["changed"] is False and again["pid"] == first["pid"]


def test_a_misspelt_argument_is_refused_by_sglangs_own_parser_and_the_running_server_keeps_serving(server):
    """#42 item 9: `speculative_algo_typo: 1` stopped a healthy server and launched one SGLang's argparse refused (exit
    status 2) - the server stayed down. The venv's own parser (sglang.srt.server_args; here the stand-in's) is asked
    first, in check mode too; nothing is stopped."""
    first = run_module(M, scen(server, "ready_tp1_dense"))
    assert first["status"] == "ready", first.get("msg")
    for check in (True, False):
        r = run_module(M, scen(server, "ready_tp1_dense", args={"speculative_algo_typo": 1}), check=check)
        assert r["failed"] is True and r["changed"] is False and r["failure"]["kind"] == "bad_argument", r
        assert "unrecognized arguments: --speculative-algo-typo 1" in r["msg"]
        assert os.path.exists("/proc/%d" % first["pid"]) and get(server["port"], "/health")[0] == 200
    choice = run_module(M, scen(server, "ready_tp1_dense", args={"speculative_algorithm": "MTP"}))
    assert "argument --speculative-algorithm: invalid choice: 'MTP'" in choice["failure"]["message"]
    again = run_module(M, scen(server, "ready_tp1_dense"))
    assert again["changed"] is False and again["pid"] == first["pid"]


def test_the_plan_next_to_reality_is_written_for_prometheus_at_each_ready_and_not_in_check_mode(server, tmp_path):
    """#48 item 1 (part): metrics_file gets the planned and SGLang's KV tokens after a launch, again at a look at the
    ready server (its time moves on), and not in check mode; a file that cannot be written is a warning only."""
    prom = tmp_path / "textfile" / "gpuserve_sglang_t.prom"
    prom.parent.mkdir()
    a = scen(server, "ready_tp1_dense", plan_max_total_num_tokens=207346, metrics_file=str(prom))
    look = run_module(M, a, check=True)
    assert look["status"] == "would_start" and not prom.exists()
    r = run_module(M, a)
    assert r["status"] == "ready", r.get("msg")
    first = prom.read_text()
    assert 'gpuserve_sglang_planned_max_total_num_tokens{server="%s"} 207346\n' % server["name"] in first
    assert 'gpuserve_sglang_max_total_num_tokens{server="%s"} 207346\n' % server["name"] in first
    assert 'gpuserve_sglang_plan_within_tolerance{server="%s"} 1\n' % server["name"] in first
    assert oct(os.stat(str(prom)).st_mode & 0o777) == "0o644"
    time.sleep(1.1)
    again = run_module(M, a)
    assert again["changed"] is False and prom.read_text() != first      # rewritten at the look: its time moved
    bad = run_module(M, dict(a, metrics_file=str(tmp_path / "missing-dir" / "x.prom")))
    assert bad["status"] == "ready" and bad.get("failed") is not True
    assert any("metrics_file=" in w and "could not be written" in w for w in bad.get("warnings", [])), bad


def test_absent_stops_the_server_and_removes_its_secrets_and_records_but_keeps_the_log(server, tmp_path):
    """#47 item 4: state=absent stops a serving server and removes what the module wrote or keeps for it - the
    --config file with the key, the launch record, the last good copies, the progress and metrics files - and keeps
    the log (what ran). Check mode names the same paths and touches nothing; a second run changes nothing."""
    prom, progress = tmp_path / "plan.prom", tmp_path / "progress.json"
    a = scen(server, "ready_tp1_dense", api_key="sk-absent-test-key-1234", metrics_file=str(prom),
             plan_max_total_num_tokens=207346, progress_file=str(progress))
    r = run_module(M, a)
    assert r["status"] == "ready", r.get("msg")
    sd, name = server["state_dir"], server["name"]
    files = [os.path.join(sd, name + ".yaml"), os.path.join(sd, name + ".state.json"), str(progress), str(prom),
             os.path.join(sd, name + ".last-good")]
    present = [f for f in files if os.path.lexists(f)]
    assert present == files or present == [f for f in files if f != os.path.join(sd, name + ".last-good")], present
    gone = {"name": name, "manager": "process", "state": "absent", "state_dir": sd, "metrics_file": str(prom),
            "progress_file": str(progress)}
    look = run_module(M, gone, check=True)
    assert look["changed"] is True and look["status"] == "absent" and sorted(look["removed"]) == sorted(present)
    assert os.path.exists("/proc/%d" % r["pid"]) and all(os.path.lexists(f) for f in present)   # check: nothing
    done = run_module(M, gone)
    assert done["changed"] is True and sorted(done["removed"]) == sorted(present)
    assert not [f for f in files if os.path.lexists(f)]
    assert not os.path.exists("/proc/%d" % r["pid"]) or open("/proc/%d/stat" % r["pid"]).read().split(") ")[1][0] == "Z"
    assert os.path.getsize(os.path.join(sd, name + ".log")) > 0
    again = run_module(M, gone)
    assert again["changed"] is False and again["removed"] == []
