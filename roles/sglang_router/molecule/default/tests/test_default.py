"""sglang_router in CT 100: the real router, locked with the replicas' key (keyless 401, also on /workers), serving
both replicas in turn with the key, the key in no command line, environment or world-readable file, the unit's argv
the launcher's, the venv the pinned build."""
import json

testinfra_hosts = ["ansible://pvehost"]

UNIT = "sglang-router-router.service"
KEY = "lab-router-key-4e7d21"


def ct(host, *argv):
    return host.check_output("pct exec 100 --" + " %s" * len(argv), *argv)


def curl(host, *args):
    return ct(host, "python3", "-c", CURL, *args)


# a tiny HTTP client run in the CT (it has no curl): method url [key] [json] -> "status body"
CURL = """
import sys, urllib.request, urllib.error
m, url = sys.argv[1], sys.argv[2]
key = sys.argv[3] if len(sys.argv) > 3 and sys.argv[3] else None
body = sys.argv[4].encode() if len(sys.argv) > 4 else None
h = {"Content-Type": "application/json"}
if key:
    h["Authorization"] = "Bearer " + key
try:
    r = urllib.request.urlopen(urllib.request.Request(url, data=body, method=m, headers=h), timeout=10)
    print(r.status, r.read().decode())
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode())
"""


def test_unit_active_enabled_and_the_venv_is_the_pinned_router(host):
    assert ct(host, "systemctl", "is-active", UNIT) == "active"
    assert ct(host, "systemctl", "is-enabled", UNIT) == "enabled"
    v = ct(host, "/opt/sglang-router/venv/bin/python", "-c", "import sglang_router; print(sglang_router.__version__)")
    assert v == "0.3.2"
    assert ct(host, "readlink", "/opt/sglang-router/venv").startswith("/opt/sglang-router/venv.builds/")


def test_keyless_requests_get_401_and_keyed_ones_reach_both_replicas_in_turn(host):
    assert curl(host, "POST", "http://127.0.0.1:30080/generate", "", '{"text": "hi"}').startswith("401")
    assert curl(host, "GET", "http://127.0.0.1:30080/workers").startswith("401")
    assert curl(host, "GET", "http://127.0.0.1:30080/health").startswith("200")
    before = [int(ct(host, "sh", "-c", "journalctl -u standin-%s -o cat | grep -c 'POST /generate' || true" % w))
              for w in ("w1", "w2")]
    for dummy in range(4):
        out = curl(host, "POST", "http://127.0.0.1:30080/generate", KEY, '{"text": "hi"}')
        assert out.startswith("200 ") and "meta_info" in out
    after = [int(ct(host, "sh", "-c", "journalctl -u standin-%s -o cat | grep -c 'POST /generate' || true" % w))
             for w in ("w1", "w2")]
    assert [a - b for a, b in zip(after, before)] == [2, 2]
    workers = json.loads(curl(host, "GET", "http://127.0.0.1:30080/workers", KEY).split(" ", 1)[1])["workers"]
    assert sorted(w["url"] for w in workers) == ["http://127.0.0.1:30001", "http://127.0.0.1:30002"]


def test_the_key_is_in_no_command_line_environment_or_readable_file(host):
    pid = ct(host, "systemctl", "show", "-p", "MainPID", "--value", UNIT)
    for what in ("cmdline", "environ"):
        assert KEY not in ct(host, "sh", "-c", "tr '\\0' ' ' < /proc/%s/%s" % (pid, what))
    assert KEY not in ct(host, "ps", "-eo", "args")
    assert KEY not in ct(host, "cat", "/etc/systemd/system/" + UNIT)
    assert KEY not in ct(host, "cat", "/etc/sglang-router/router.json")
    stat = ct(host, "stat", "-c", "%a %U", "/etc/sglang-router/router.key")
    assert stat == "600 sglang"
    args = json.loads(ct(host, "cat", "/etc/sglang-router/router.json"))
    # the role's own flags after the extra args (#58 item 1: argparse keeps the last of a repeated option)
    own = args.index("--host")
    assert args[own:own + 6] == ["--host", "0.0.0.0", "--port", "30080", "--policy", "round_robin"]
    assert all(not a.startswith("--") or a in ("--health-check-interval-secs",) for a in args[:own]), args
