"""sglang_server in CT 100: a systemd unit runs exactly the argv we built, secrets only in a 0600 file and the
process environment, health answers, and the failed launch left no unit running or restarting."""
import json

testinfra_hosts = ["ansible://pvehost"]

UNIT = "sglang-llama.service"
NAME = "llama \"8b\" it's $HOME %h `x`"
KEY = "lab-key-5f3a9c0d8e71"


def ct(host, *argv):
    """Run argv inside CT 100 (quoted for the node's shell by testinfra) and return stdout."""
    return host.check_output("pct exec 100 --" + " %s" * len(argv), *argv)


def main_pid(host):
    return int(ct(host, "systemctl", "show", "-p", "MainPID", "--value", UNIT))


def test_unit_is_active_and_enabled(host):
    assert ct(host, "systemctl", "is-active", UNIT) == "active"
    assert ct(host, "systemctl", "is-enabled", UNIT) == "enabled"


def test_process_argv_is_exactly_ours_byte_for_byte_through_systemd_quoting(host):
    pid = main_pid(host)
    raw = ct(host, "python3", "-c", "import sys; print(repr(open('/proc/%s/cmdline' % sys.argv[1], 'rb').read()))", str(pid))
    argv = [a.decode() for a in eval(raw).split(b"\0")[:-1]]  # noqa: S307 (our own repr of bytes)
    assert argv[:3] == ["/usr/bin/python3", "-m", "sglang.launch_server"]
    assert argv[argv.index("--served-model-name") + 1] == NAME
    assert argv[argv.index("--context-length") + 1] == "8192"
    assert KEY not in " ".join(argv)


def test_runs_as_the_service_account_with_the_key_only_in_sglangs_config_file(host):
    pid = str(main_pid(host))
    assert ct(host, "ps", "-o", "user=", "-p", pid) == "sglang"
    env = ct(host, "python3", "-c", "import sys; print(open('/proc/%s/environ' % sys.argv[1]).read().replace('\\0', '\\n'))", pid)
    assert KEY not in env                       # SGLang 0.5.9 ignores SGLANG_API_KEY: the key is not there at all
    assert "HOME=/var/lib/sglang" in env.splitlines()
    assert ct(host, "stat", "-c", "%a %U", "/etc/sglang/llama.env") == "600 root"
    assert ct(host, "stat", "-c", "%a %U %G", "/etc/sglang/llama.yaml") == "640 root sglang"
    assert ct(host, "stat", "-c", "%a %U %G", "/etc/sglang") == "750 root sglang"
    assert ct(host, "cat", "/etc/sglang/llama.yaml").splitlines()[-1] == 'api-key: "%s"' % KEY
    raw = ct(host, "python3", "-c", "import sys; print(repr(open('/proc/%s/cmdline' % sys.argv[1], 'rb').read()))", pid)
    argv = [a.decode() for a in eval(raw).split(b"\0")[:-1]]  # noqa: S307 (our own repr of bytes)
    assert argv[-2:] == ["--config", "/etc/sglang/llama.yaml"]


PROBE = ("import json, sys, urllib.request, urllib.error\n"
         "h = {'Authorization': 'Bearer ' + sys.argv[2]} if len(sys.argv) > 2 else {}\n"
         "req = urllib.request.Request('http://127.0.0.1:30000' + sys.argv[1], headers=h)\n"
         "try:\n"
         "    r = urllib.request.urlopen(req, timeout=10)\n"
         "    print(json.dumps({'code': r.status, 'body': r.read().decode()}))\n"
         "except urllib.error.HTTPError as e:\n"
         "    print(json.dumps({'code': e.code, 'body': e.read().decode()}))\n")


def test_the_key_locks_the_server_through_systemd(host):
    assert json.loads(ct(host, "python3", "-c", PROBE, "/v1/models"))["code"] == 401
    assert json.loads(ct(host, "python3", "-c", PROBE, "/v1/models", "not-the-key"))["code"] == 401
    assert json.loads(ct(host, "python3", "-c", PROBE, "/v1/models", KEY))["code"] == 200
    assert json.loads(ct(host, "python3", "-c", PROBE, "/health"))["code"] == 200   # open, as in SGLang 0.5.9


def test_health_answers_with_the_key_and_server_info_has_the_capacity(host):
    health = json.loads(ct(host, "python3", "-c", PROBE, "/health_generate", KEY))
    assert health["code"] == 200
    info = json.loads(json.loads(ct(host, "python3", "-c", PROBE, "/server_info", KEY))["body"])
    assert info["max_total_num_tokens"] > 0


def test_the_log_with_sglangs_server_args_is_readable_by_root_only(host):
    assert ct(host, "stat", "-c", "%a %U %G", "/var/log/sglang") == "750 root sglang"
    assert ct(host, "stat", "-c", "%a %U", "/var/log/sglang/llama.log") == "640 root"
    # SGLang logs it, like 0.5.9; the side effect rotated the log while llama served: its launch's start, the
    # server_args line with it, is in the copy, which logrotate gives the log's own mode and owner
    assert ct(host, "stat", "-c", "%a %U", "/var/log/sglang/llama.log.1") == "640 root"
    assert "api_key='%s'" % KEY in ct(host, "cat", "/var/log/sglang/llama.log.1", "/var/log/sglang/llama.log")


def test_the_unit_is_hardened(host):
    props = ct(host, "systemctl", "show", "-p", "NoNewPrivileges", "-p", "ProtectSystem", "-p", "ProtectHome",
               "-p", "PrivateTmp", UNIT).splitlines()
    assert sorted(props) == ["NoNewPrivileges=yes", "PrivateTmp=yes", "ProtectHome=yes", "ProtectSystem=full"]


def test_log_has_this_launch_marker_then_the_ready_line(host):
    # the side effect rotated the log while llama served: its launch begins in the copy and goes on in the log
    log = ct(host, "cat", "/var/log/sglang/llama.log.1", "/var/log/sglang/llama.log")
    marker = [i for i, line in enumerate(log.splitlines()) if line.startswith("# gpuserve launch ")]
    assert marker and "The server is fired up and ready to roll!" in "\n".join(log.splitlines()[marker[-1]:])


def test_the_failed_launch_is_stopped_not_crash_looping(host):
    state = ct(host, "systemctl", "show", "-p", "ActiveState", "-p", "NRestarts", "sglang-llama-oom.service")
    assert "ActiveState=inactive" in state.splitlines() or "ActiveState=failed" in state.splitlines()
    log = ct(host, "cat", "/var/log/sglang/llama-oom.log")
    assert "Not enough memory. Please try to increase --mem-fraction-static" in log


def test_the_log_is_rotated_by_logrotate_with_copytruncate_and_the_copy_holds_the_launch(host):
    """#47 item 5: the role's /etc/logrotate.d file (the side effect ran the real logrotate with it while llama
    served); the copy, <log>.1, is plain text and holds the launch's marker, the log goes on after it."""
    conf = ct(host, "cat", "/etc/logrotate.d/sglang-llama")
    assert "/var/log/sglang/llama.log {" in conf and "copytruncate" in conf and "delaycompress" in conf
    state = json.loads(ct(host, "cat", "/var/lib/gpuserve-sglang/llama.state.json"))
    copy = ct(host, "cat", "/var/log/sglang/llama.log.1")
    assert "# gpuserve launch %s" % state["launch_id"] in copy
    assert ct(host, "stat", "-c", "%a %U", "/etc/logrotate.d/sglang-llama").split() == ["644", "root"]
