"""sglang_process helpers that need no process: systemd quoting and the EnvironmentFile body."""
import json
import os

import pytest

from unit_helpers import FIXTURES, fixture_text, load_module_util

SP = load_module_util("server")


def test_exec_line_quotes_every_word_and_doubles_specifiers_and_dollars():
    argv = ["/opt/sglang/venv/bin/python", "-m", "sglang.launch_server", "--served-model-name",
            "it's \"q\" $HOME %h `x` back\\slash\nline"]
    assert SP.systemd_exec_line(argv) == (
        '"/opt/sglang/venv/bin/python" "-m" "sglang.launch_server" "--served-model-name" '
        '"it\'s \\"q\\" $$HOME %%h `x` back\\\\slash\\nline"')


def test_exec_line_escapes_other_control_characters():
    assert SP.systemd_exec_line(["a\x01b", "tab\tc"]) == '"a\\x01b" "tab\\tc"'


def test_environment_file_is_sorted_quoted_and_refuses_what_it_cannot_hold():
    body = SP.environment_file({"NCCL_SOCKET_IFNAME": 'k"$x`\\', "HF_TOKEN": "hf_abc"})
    assert body == 'HF_TOKEN="hf_abc"\nNCCL_SOCKET_IFNAME="k\\"\\$x\\`\\\\"\n'
    with pytest.raises(ValueError, match="contains a line break"):
        SP.environment_file({"A": "x\ny"})
    with pytest.raises(ValueError, match="'1BAD' is not a valid environment variable name"):
        SP.environment_file({"1BAD": "x"})


# ---- the sglang_server module's decisions (pure functions in sglang_process)

def test_a_running_server_is_kept_only_when_started_with_this_very_configuration():
    assert SP.keep_running("started", True, "abc", "abc") is True
    assert SP.keep_running("restarted", True, "abc", "abc") is False
    assert SP.keep_running("started", False, "abc", "abc") is False
    assert SP.keep_running("started", True, "abc", "abd") is False
    assert SP.keep_running("started", True, "", "") is False          # a failed launch records no hash


def test_the_port_owner_is_a_conflict_unless_it_is_our_running_server():
    other = {"pid": 4242, "cmdline": ["nginx", "-g", "daemon off;"]}

    def ours(pid, root):
        return pid == root
    assert SP.port_conflict(None, True, 7, {}, 30000, ours) is None
    assert SP.port_conflict(other, True, 4242, {}, 30000, ours) is None           # our server holds it
    assert SP.port_conflict(other, True, 7, {}, 30000, ours) is other             # a stranger, while we run
    assert SP.port_conflict(other, False, None, {}, 30000, ours) is other
    unnamed = {"pid": None, "cmdline": []}                                        # another namespace: no pid
    prev = {"argv": ["python", "-m", "sglang.launch_server", "--port", "30000"]}
    assert SP.port_conflict(unnamed, True, 7, prev, 30000, ours) is None          # the port our last launch used
    assert SP.port_conflict(unnamed, True, 7, prev, 30001, ours) is unnamed       # a move to a port held by another
    assert SP.port_conflict(unnamed, False, None, prev, 30000, ours) is unnamed   # not running: not ours


def test_port_in_use_names_the_holder_and_says_the_running_server_kept_serving():
    f = SP.port_in_use_failure("127.0.0.1", 30001, {"pid": 4242, "cmdline": ["nginx", "-g", "daemon off;"]}, True)
    assert f["kind"] == "port_in_use" and f["phase"] == "args"
    assert f["message"] == "port 30001 on 127.0.0.1 is already in use by pid 4242 (nginx -g daemon off;)"
    assert f["hint"] == "Stop pid 4242 (nginx -g daemon off;) or set another port; nothing was launched and the running " \
                        "server was left serving."
    f = SP.port_in_use_failure("0.0.0.0", 30000, {"pid": None}, False)
    assert f["hint"] == "Stop another process or set another port; nothing was launched."


def test_plan_vs_actual_within_and_beyond_the_tolerance():
    record, warning = SP.plan_vs_actual(207346, {"max_total_num_tokens": 207346}, 0.1)
    assert record == {"predicted_max_total_num_tokens": 207346, "actual_max_total_num_tokens": 207346, "ratio": 1.0,
                      "tolerance": 0.1, "within_tolerance": True} and warning is None
    record, warning = SP.plan_vs_actual(207346, {"max_total_num_tokens": 128000}, 0.1)
    assert record["ratio"] == 0.6173 and record["within_tolerance"] is False
    assert warning.startswith("planned 207346 KV tokens, SGLang reports 128000 (ratio 0.6173, beyond the 10 % tolerance)")
    assert "checkpoint that is not the model" in warning
    assert SP.plan_vs_actual(None, {"max_total_num_tokens": 1}, 0.1) == (None, None)
    assert SP.plan_vs_actual(1000, {}, 0.1) == (None, None)
    record, warning = SP.plan_vs_actual(1000, {"max_total_num_tokens": None}, 0.1)
    assert record["ratio"] is None and record["within_tolerance"] is False and warning


def test_systemd_203_with_no_output_is_named_as_a_missing_interpreter():
    out = {"status": "failed", "stale": True, "failure": {"kind": "other", "message": "exited", "hint": "?"}}
    SP.exec_failure(out, "203", "/opt/sglang/venv/bin/python")
    assert out["failure"]["exit_code"] == 203
    assert out["failure"]["message"] == ("systemd could not execute /opt/sglang/venv/bin/python (status 203/EXEC): "
                                         "not an executable")
    out = {"status": "failed", "stale": False, "failure": {"kind": "kv_pool_oom", "message": "m", "hint": "h"}}
    SP.exec_failure(out, "1", "/x")
    assert out["failure"] == {"kind": "kv_pool_oom", "message": "m", "hint": "h", "exit_code": 1}
    assert SP.exec_failure({"status": "failed", "failure": None}, "", "/x") == {"status": "failed", "failure": None}


def test_systemd_226_with_no_output_is_named_the_units_sandbox_with_systemds_words_and_the_fix():
    """status 226/NAMESPACE: systemd could not set up the unit's mount namespace (a Proxmox CT without nesting: its
    AppArmor profile denies the mounts), so SGLang never ran; systemd's own line from the journal is quoted."""
    journal = ("Starting sglang-llama.service - SGLang llama...\n"
               "sglang-llama.service: Failed to set up mount namespacing: /run/systemd/unit-root/proc: Permission denied\n"
               "sglang-llama.service: Main process exited, code=exited, status=226/NAMESPACE\n")
    out = {"status": "failed", "stale": True, "failure": {"kind": "other", "phase": "args", "message": "exited",
                                                          "hint": "?"}}
    SP.exec_failure(out, "226", "/opt/sglang/venv/bin/python", journal)
    f = out["failure"]
    assert f["exit_code"] == 226 and f["kind"] == "other"
    assert f["message"] == ("systemd could not set up the unit's sandbox (status 226/NAMESPACE), so SGLang never ran: "
                            "sglang-llama.service: Failed to set up mount namespacing: /run/systemd/unit-root/proc: "
                            "Permission denied")
    assert "nesting=1" in f["hint"] and "sglang_server_unit_hardening: false" in f["hint"]
    # without the journal: still named; with output, SGLang ran and its log says why (not the sandbox)
    out = {"status": "failed", "stale": True, "failure": {"kind": "other", "message": "m", "hint": "h"}}
    assert SP.exec_failure(out, "226", "/x")["failure"]["message"] == (
        "systemd could not set up the unit's sandbox (status 226/NAMESPACE), so SGLang never ran")
    out = {"status": "failed", "stale": False, "failure": {"kind": "kv_pool_oom", "message": "m", "hint": "h"}}
    assert SP.exec_failure(out, "226", "/x", journal)["failure"]["message"] == "m"


def test_failure_message_for_a_timeout_a_failure_and_a_launch_that_wrote_nothing():
    assert SP.failure_message({"status": "timeout", "phase": "cuda_graph"}, "l1", 1800.0) == \
        "SGLang did not become ready within 1800.0s (last phase: cuda_graph); stopped it"
    out = {"status": "failed", "stale": False,
           "failure": {"kind": "kv_pool_oom", "phase": "kv_cache", "message": "Not enough memory", "hint": "lower X"}}
    assert SP.failure_message(out, "l1", 1) == ("SGLang failed to start: kv_pool_oom in phase kv_cache: Not enough memory"
                                                "\nHint: lower X")
    assert SP.failure_message(dict(out, stale=True), "l1", 1).startswith("no output from this launch (launch l1): ")


def test_the_secret_config_is_private_and_removed_with_the_key(tmp_path):
    path = str(tmp_path / "etc" / "x.yaml")
    SP.write_secret_config(path, "api_key: k\n", None)
    assert open(path).read() == "api_key: k\n" and oct(os.stat(path).st_mode & 0o777) == "0o600"
    SP.write_secret_config(path, None, None)
    assert not os.path.lexists(path)


def test_the_journal_is_read_again_until_systemds_line_is_there(monkeypatch):
    """journald stores systemd's 226/NAMESPACE line a moment after the unit failed (later under load: seen once in
    the lab with two lanes running, the message then lacked it); unit_journal waits for it, bounded."""
    said = iter(["", "", "sglang-q.service: Failed to set up mount namespacing: /x: No such file or directory\n"])
    calls = []

    class Done(object):
        returncode = 0

        def __init__(self, text):
            self.stdout = text

    def fake_run(argv, **_kw):
        calls.append(argv)
        return Done(next(said))
    monkeypatch.setattr(load_module_util("server.systemd").subprocess, "run", fake_run)
    text = SP.unit_journal("sglang-q.service", want=SP.NAMESPACING, sleep=lambda s: None)
    assert "Failed to set up mount namespacing" in text and len(calls) == 3
    t = [0.0]

    def clock():
        t[0] += 1.0
        return t[0]
    monkeypatch.setattr(load_module_util("server.systemd").subprocess, "run", lambda argv, **kw: Done(""))
    assert SP.unit_journal("sglang-q.service", want=SP.NAMESPACING, wait=3.0, sleep=lambda s: None, clock=clock) == ""


def _serve_json(path):
    """A loopback HTTP server answering every GET with this file's JSON (as SGLang's /server_info answers)."""
    import threading  # pylint: disable=import-outside-toplevel
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer  # pylint: disable=import-outside-toplevel
    with open(path, "rb") as fh:
        body = fh.read()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def test_server_info_returns_what_sglang_resolved_not_the_unset_args():
    """The real 0.5.9's /server_info (CPU engine, --max-total-tokens 5000; tests/fixtures/sglang_http) repeats the args:
    context_length and max_running_requests null. Returned: the scheduler's 2500 and the log's context 2048."""
    srv = _serve_json(os.path.join(FIXTURES, "sglang_http", "server_info_real_cpu_capped.json"))
    try:
        url = "http://127.0.0.1:%d" % srv.server_address[1]
        info = SP.server_info(url, facts={"context_len": 2048, "max_running_requests": 2500})
        assert info["max_total_num_tokens"] == 5000 and info["max_total_tokens"] == 5000
        assert info["max_running_requests"] == 2500 and info["context_length"] == 2048
        assert info["device"] == "cpu" and info["version"] == "0.5.9" and "api_key" not in json.dumps(info)
        # without the log: the scheduler's own answer still; the context stays unknown rather than invented
        bare = SP.server_info(url)
        assert bare["max_running_requests"] == 2500 and bare["context_length"] is None
    finally:
        srv.shutdown()


def test_a_capped_pool_is_named_first_when_the_plan_disagrees():
    """Asked 5,000 (the cap), planned 8,192: the cap is the cause, not free memory or the checkpoint."""
    _record, warning = SP.plan_vs_actual(8192, {"max_total_num_tokens": 5000, "max_total_tokens": 5000}, 0.1)
    assert warning.endswith("--max-total-tokens=5000 caps the pool on purpose: plan with the same cap (the server's "
                            "args), or drop the cap for a pool sized from memory")
    _record, warning = SP.plan_vs_actual(8192, {"max_total_num_tokens": 4000, "max_total_tokens": 5000}, 0.1)
    assert "caps the pool on purpose and memory held only 4000" in warning


def test_launch_facts_reads_the_launchs_own_log_from_its_offset(tmp_path):
    log = tmp_path / "sglang.log"
    old = fixture_text("sglang_logs", "real_cpu_warmup_input_too_long.log")
    new = fixture_text("sglang_logs", "real_cpu_ready_capped.log")
    log.write_text(old + new)
    facts = SP.launch_facts({"log_path": str(log), "log_offset": len(old.encode())})
    assert facts["max_total_num_tokens"] == 8192 and facts["context_len"] == 2048
    assert SP.launch_facts({}) == {} and SP.launch_facts({"log_path": str(tmp_path / "gone")}) == {}


def test_the_progress_line_prints_a_weight_that_rounds_to_zero_without_a_sign():
    """#60 item 6: SGLang logs the tiny model's weights as "mem usage=-0.00 GB"; the line an operator waits on says
    0.00, and a real number keeps its value and sign."""
    watch = load_module_util("server.watch")
    line = watch.progress_message("ready", {"weights_gb": -0.004, "avail_mem_after_load_gb": 20.05,
                                            "max_total_num_tokens": 8192}, 21.7)
    assert line == "phase ready after 21 s: weights 0.00 GiB, 20.05 GiB free after load, 8192 KV tokens"
    assert "weights 12.50 GiB" in watch.progress_message("load_weights", {"weights_gb": 12.5}, 3)


# ---- systemd_start against a systemctl that behaves as systemd does for a stop: it returns once the old process has
# gone, and that process logs while it goes (SGLang's shutdown; a rank's Gloo error when the group's other ranks go
# at the same time - the multinode scenario's replicas, made from a running group, met this)
FAKE_SYSTEMCTL = r'''#!/usr/bin/env python3
import json, os, sys
here = os.path.dirname(os.path.abspath(__file__))
state_path = os.path.join(here, "state.json")
state = json.load(open(state_path))
args = sys.argv[1:]
state["calls"].append(args)
def dies():       # the old process's last words, written before systemd's stop job ends
    with open(state["log"], "a") as fh:
        fh.write("RuntimeError: [gloo/transport/tcp/pair.cc:538] Read error [10.0.3.101]:46787: Connection reset by peer\n")
        fh.write("SIGQUIT received. signum=None, frame=None. It usually means one child failed.\n")
    state["active"] = False
if args[0] in ("stop", "restart") and state["active"]:
    dies()
if args[0] in ("start", "restart"):
    state["active"] = True
if args[0] == "show":
    print("MainPID=%d" % (4242 if state["active"] else 0))
    print("ActiveState=%s" % ("active" if state["active"] else "inactive"))
json.dump(state, open(state_path, "w"))
'''


def test_a_restart_writes_its_marker_after_the_old_process_has_gone_so_its_last_words_are_not_the_new_launchs(
        tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "systemctl"
    fake.write_text(FAKE_SYSTEMCTL)
    fake.chmod(0o755)
    log = tmp_path / "tiny.log"
    log.write_text("# gpuserve launch aaaaaaaaaaaa at 2026-12-07 01:50:00 (systemd sglang-tiny.service)\nserving\n")
    (bin_dir / "state.json").write_text(json.dumps({"active": True, "log": str(log), "calls": []}))
    monkeypatch.setenv("PATH", "%s:%s" % (bin_dir, os.environ["PATH"]))
    pid, launch_id, offset, err = SP.systemd_start("sglang-tiny.service", str(log), restart=True)
    assert err is None and pid == 4242 and launch_id
    this_launch = log.read_bytes()[offset:].decode()
    assert "Connection reset by peer" in log.read_text()           # the old process did log while it went ...
    assert "Connection reset by peer" not in this_launch            # ... before this launch's marker
    marker = log.read_text().splitlines()[-1]
    assert marker.startswith("# gpuserve launch %s " % launch_id) and log.read_text().endswith(marker + "\n")
    calls = [c[0] for c in json.loads((bin_dir / "state.json").read_text())["calls"]]
    assert calls.index("stop") < calls.index("start") and "restart" not in calls
    # a unit that is not running is started, not stopped first
    (bin_dir / "state.json").write_text(json.dumps({"active": False, "log": str(log), "calls": []}))
    pid, launch_id, offset, err = SP.systemd_start("sglang-tiny.service", str(log), restart=False)
    assert err is None and pid == 4242
    assert "stop" not in [c[0] for c in json.loads((bin_dir / "state.json").read_text())["calls"]]
