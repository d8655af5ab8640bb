"""The real SGLang router (sglang-router 0.3.2 from the role's hash-checked lock, in .venv-router) in front of two
SGLang stand-ins (tests/lab/sglang_standin, each locked with the same key through --config as 0.5.9 reads it),
started by the role's launcher (roles/sglang_router/files/gpuserve-sglang-router) as the unit starts it.

Checked for real: a request without the key gets 401 from the router, also on its /workers API; with the key it is
served by both workers in turn; the key is in no process's command line or environment; module
sglang_router_workers adds and removes a worker through the router's API while the router keeps running (same PID)
and serving, a second run changes nothing, check mode changes nothing, a worker URL that is not one is refused, and
a wrong key is named."""
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from ansible_helpers import ROOT, STANDIN, descendants, kill_tree, run_module
from local_hub import free_port

sys.path.insert(0, os.path.join(ROOT, "tests", "unit"))
from unit_helpers import load_module_util  # noqa: E402  pylint: disable=wrong-import-position

M = "gpuserve.sglang.sglang_router_workers"
ROUTER_PYTHON = os.path.join(ROOT, ".venv-router", "bin", "python")
LAUNCHER = os.path.join(ROOT, "roles", "sglang_router", "files", "gpuserve-sglang-router")
KEY = "replica-key-6c1f0a9e"


def http(port, path, method="GET", body=None, key=None, timeout=10):
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = "Bearer " + key
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), method=method, headers=headers,
                                 data=None if body is None else json.dumps(body).encode())
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def wait(pred, what, timeout=60):
    end = time.time() + timeout
    while time.time() < end:
        try:
            if pred():
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError("timed out waiting for " + what)


def start_worker(tmp_path, name):
    d = tmp_path / name
    d.mkdir()
    cfg = d / "server.yaml"
    cfg.write_text("api-key: %s\n" % KEY)
    port = free_port()
    log = open(str(d / "access.log"), "w")
    env = dict(os.environ, PYTHONPATH=STANDIN, SGLANG_STANDIN_SPEED="200", SGLANG_STANDIN_SCENARIO="ready_tp1_dense",
               SGLANG_STANDIN_GEN_MS="5")
    proc = subprocess.Popen(["python3", "-m", "sglang.launch_server", "--model-path", str(d), "--port", str(port),
                             "--config", str(cfg)], env=env, stdout=log, stderr=subprocess.DEVNULL)
    wait(lambda: http(port, "/health")[0] == 200, "worker %s" % name)
    return {"proc": proc, "port": port, "url": "http://127.0.0.1:%d" % port, "log": d / "access.log"}


def served(worker):
    return worker["log"].read_text().count('"POST /generate')


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    if not os.path.exists(ROUTER_PYTHON):
        pytest.fail("%s is missing: run tests/ci/bootstrap.sh (make deps)" % ROUTER_PYTHON)
    tmp = tmp_path_factory.mktemp("router")
    workers = [start_worker(tmp, "w1"), start_worker(tmp, "w2"), start_worker(tmp, "w3")]
    port = free_port()
    # its metrics on a free port too: the router's default (29000) may be taken by another router on this machine (a
    # router left running by an interrupted run made the whole module fail at setup)
    (tmp / "args.json").write_text(json.dumps(["--host", "127.0.0.1", "--port", str(port), "--policy", "round_robin",
                                               "--health-check-interval-secs", "2",
                                               "--prometheus-port", str(free_port())]))
    (tmp / "workers.json").write_text(json.dumps([w["url"] for w in workers[:2]]))
    key_file = tmp / "router.key"
    key_file.write_text(KEY + "\n")
    os.chmod(str(key_file), 0o600)
    router = subprocess.Popen([ROUTER_PYTHON, LAUNCHER, "--args", str(tmp / "args.json"), "--workers",
                               str(tmp / "workers.json"), "--key-file", str(key_file)],
                              stdout=open(str(tmp / "router.log"), "w"), stderr=subprocess.STDOUT)
    wait(lambda: http(port, "/health")[0] == 200, "the router")
    wait(lambda: len(json.loads(http(port, "/workers", key=KEY)[1])["workers"]) == 2, "the router's two workers")
    yield {"port": port, "router": router, "workers": workers, "key_file": str(key_file), "tmp": tmp,
           "url": "http://127.0.0.1:%d" % port}
    kill_tree(router)
    for w in workers:
        w["proc"].kill()
        w["proc"].wait()


def args(lab, urls, **kw):
    a = {"url": lab["url"], "api_key_file": lab["key_file"], "workers": urls, "timeout": 30}
    a.update(kw)
    return a


def test_the_router_refuses_a_request_without_the_key_and_serves_with_it_on_both_workers(lab):
    port, (w1, w2, _w3) = lab["port"], lab["workers"]
    assert http(port, "/generate", "POST", {"text": "hi"})[0] == 401
    assert http(port, "/generate", "POST", {"text": "hi"}, key="wrong")[0] == 401
    assert http(port, "/workers")[0] == 401                        # its control API too
    assert http(port, "/health")[0] == 200                         # health stays open
    before = (served(w1), served(w2))
    for dummy in range(6):
        status, body = http(port, "/generate", "POST", {"text": "hi", "sampling_params": {"max_new_tokens": 2}},
                            key=KEY)
        assert status == 200 and json.loads(body)["meta_info"]["completion_tokens"] == 2
    assert (served(w1) - before[0], served(w2) - before[1]) == (3, 3)   # round_robin: in turn


def test_the_key_is_in_no_command_line_and_no_environment(lab):
    pids = [lab["router"].pid] + descendants(lab["router"].pid)
    assert len(pids) >= 1
    for pid in pids:
        for what in ("cmdline", "environ"):
            try:
                with open("/proc/%d/%s" % (pid, what), "rb") as fh:
                    assert KEY.encode() not in fh.read(), "the key is in /proc/%d/%s" % (pid, what)
            except FileNotFoundError:
                pass
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True).stdout
    assert KEY not in ps


def test_workers_change_through_the_api_without_a_restart_and_a_second_run_changes_nothing(lab):
    w1, w2, w3 = lab["workers"]
    pid = lab["router"].pid
    want = [w1["url"], w3["url"]]
    dry = run_module(M, args(lab, want), check=True)
    assert dry["changed"] is True and dry["added"] == [w3["url"]] and dry["removed"] == [w2["url"]]
    assert sorted(w["url"] for w in dry["workers"]) == sorted([w1["url"], w2["url"]])       # check mode: untouched
    r = run_module(M, args(lab, want))
    assert r.get("failed") is not True, r.get("msg")
    assert r["changed"] is True and sorted(w["url"] for w in r["workers"]) == sorted(want)
    assert lab["router"].poll() is None and lab["router"].pid == pid                       # the same router
    again = run_module(M, args(lab, want))
    assert again["changed"] is False and again["added"] == [] and again["removed"] == []
    before = (served(w1), served(w2), served(w3))
    for dummy in range(4):
        assert http(lab["port"], "/generate", "POST", {"text": "x"}, key=KEY)[0] == 200
    assert served(w2) == before[1] and served(w1) - before[0] == 2 and served(w3) - before[2] == 2
    assert KEY not in json.dumps(r) and KEY not in json.dumps(dry)
    # back to the first two, for the other tests
    assert run_module(M, args(lab, [w1["url"], w2["url"]]))["changed"] is True


def test_bad_input_and_a_wrong_key_are_named(lab, tmp_path):
    r = run_module(M, args(lab, ["10.0.0.5:30000"]))
    assert r["failed"] is True and "expected http://<host>:<port>" in r["msg"] and "nothing was changed" in r["msg"]
    wrong = tmp_path / "wrong.key"
    wrong.write_text("not-the-key")
    r = run_module(M, args(lab, [lab["workers"][0]["url"]], api_key_file=str(wrong)))
    assert r["failed"] is True and "answered 401 to GET /workers" in r["msg"] and "not-the-key" not in r["msg"]
    r = run_module(M, args(lab, [lab["workers"][0]["url"]], api_key_file=str(tmp_path / "absent")))
    assert r["failed"] is True and "cannot be read" in r["msg"]


def test_a_killed_replica_is_excluded_and_at_most_its_in_flight_requests_fail(lab, tmp_path):
    """Mid-load, one replica's process is killed (SIGKILL): report how many requests failed (at most those it had
    in flight, plus a stated tolerance of 2 for the race between reading its load and the kill) and how long until
    the router stopped routing to it (its health check every 2 s, 3 failures; the router retries a refused request
    on another worker)."""
    w1, w2 = lab["workers"][0], lab["workers"][1]
    w4 = start_worker(tmp_path, "w4")
    try:
        assert run_module(M, args(lab, [w1["url"], w2["url"], w4["url"]]))["changed"] is True
        out = tmp_path / "load.json"
        load = subprocess.Popen(["python3", os.path.join(ROOT, "tests", "lab", "loadgen.py"), "--url", lab["url"],
                                 "--key-file", lab["key_file"], "--requests", "300", "--seconds", "12", "--threads", "6",
                                 "--out", str(out)], stdout=subprocess.DEVNULL)
        time.sleep(4)
        in_flight = sum(x["num_reqs"] for x in json.loads(http(w4["port"], "/get_load", key=KEY)[1]))
        killed = time.time()
        w4["proc"].kill()
        w4["proc"].wait()
        excluded = None
        while time.time() - killed < 40:
            workers = json.loads(http(lab["port"], "/workers", key=KEY)[1])["workers"]
            if not [w for w in workers if w["url"] == w4["url"] and w["is_healthy"]]:
                excluded = time.time() - killed
                break
            time.sleep(0.2)
        assert load.wait(timeout=60) == 0
        report = json.loads(out.read_text())
        print("kill mid-load: %d of %d requests failed (%d in flight at the kill); the router marked it unhealthy "
              "after %.1f s; p50 %s ms, p99 %s ms" % (report["failed"], report["requests"], in_flight,
                                                      excluded if excluded is not None else -1, report["p50_ms"],
                                                      report["p99_ms"]))
        assert excluded is not None, "the router still called the killed replica healthy after 40 s"
        assert report["failed"] <= in_flight + 2, report["errors"]
        assert report["ok"] + report["failed"] == 300
    finally:
        w4["proc"].kill()
        run_module(M, args(lab, [w1["url"], w2["url"]], timeout=60))


def test_pd_mode_from_the_roles_argv_routes_each_request_to_its_prefill_and_its_decode_server(tmp_path):
    """PD mode (#59 item 3, the router's part): the role's argument builder (sglang_router_pd_prefill/_decode) and
    launcher start the real router 0.3.2 with --pd-disaggregation in front of a prefill and a decode server (two
    stand-ins, keyed); it lists them as such - the prefill with its bootstrap port - and sends one request to both,
    answering with the key only. The status entry point's comparison (the module in check mode, with both URLs)
    finds nothing to change. What the stand-ins cannot show - KV moved between them - is docs/scale-out.md's (the
    real SGLang with Mooncake over TCP)."""
    R = load_module_util("server.router")
    prefill, decode = start_worker(tmp_path, "prefill"), start_worker(tmp_path, "decode")
    port = free_port()
    argv = R.router_argv("127.0.0.1", port, "round_robin", [], prometheus_port=free_port(),
                         extra={"health_check_interval_secs": 2},
                         prefill=[{"url": prefill["url"], "bootstrap_port": 8998}], decode=[decode["url"]])
    (tmp_path / "args.json").write_text(json.dumps(argv))
    (tmp_path / "workers.json").write_text("[]\n")               # the role's workers file in PD mode
    key_file = tmp_path / "router.key"
    key_file.write_text(KEY + "\n")
    router = subprocess.Popen([ROUTER_PYTHON, LAUNCHER, "--args", str(tmp_path / "args.json"), "--workers",
                               str(tmp_path / "workers.json"), "--key-file", str(key_file)],
                              stdout=open(str(tmp_path / "router.log"), "w"), stderr=subprocess.STDOUT)
    try:
        wait(lambda: http(port, "/health")[0] == 200, "the router")
        # both listed and healthy (an empty list is not: the router registers its PD servers after /health answers,
        # later on a loaded machine - seen in a CI run, where the counts read 0 and 0)
        wait(lambda: [w["is_healthy"] for w in json.loads(http(port, "/workers", key=KEY)[1])["workers"]]
             == [True, True], "the router's prefill and decode servers")
        doc = json.loads(http(port, "/workers", key=KEY)[1])
        assert doc["stats"] == {"prefill_count": 1, "decode_count": 1, "regular_count": 0}
        kinds = sorted((w["worker_type"], w["url"], w.get("bootstrap_port")) for w in doc["workers"])
        assert kinds == [("decode", decode["url"], None), ("prefill", prefill["url"], 8998)]
        assert http(port, "/generate", "POST", {"text": "hi"})[0] == 401
        status, body = http(port, "/generate", "POST", {"text": "hi", "sampling_params": {"max_new_tokens": 4}},
                            key=KEY)
        assert status == 200 and json.loads(body)["meta_info"]["completion_tokens"] == 4
        assert (served(prefill), served(decode)) == (1, 1)          # one request: prefilled there, decoded here
        look = run_module(M, {"url": "http://127.0.0.1:%d" % port, "api_key_file": str(key_file),
                              "workers": [prefill["url"], decode["url"]]}, check=True)
        assert look["changed"] is False and not look["added"] and not look["removed"], look
    finally:
        kill_tree(router)
        for w in (prefill, decode):
            w["proc"].kill()
            w["proc"].wait()
