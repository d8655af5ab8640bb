"""After rollout.yml under load (replica-a in CT 100, replica-b in CT 101, the router in CT 100): both replicas
restarted once (a new launch each), both back in the router and healthy, the load generator's report: 0 failed of
600, its p50/p99 printed with the requests per replica; then replica-b killed mid-load: at most its in-flight
requests failed, the router excluded it and took it back after systemd restarted it (times printed). Then
restart.yml as docs/docsite/rst/runbook_restart.rst tells an operator to run it: one container at a time, each ready before
the next is launched; a failed launch stops the roll with its facts, the next container untouched; --limit one."""
import calendar
import json
import os
import re
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))   # tests/lab/molecule
from lab_load import load_report, start_load  # noqa: E402  (shared with multinode)
from lab_runbook import ROOT, ansible_playbook, molecule_inventory  # noqa: E402  (shared with multinode)

testinfra_hosts = ["ansible://pvehost"]
KEY = "lab-rollout-key-91c3"
REPLICAS = ((100, "replica-a"), (101, "replica-b"))
MODEL = "/srv/models/Llama-3.1-8B-Instruct"
MARKER = re.compile(r"^# gpuserve launch ([0-9a-f]+) at (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)", re.M)


def ct(host, *argv, vmid=100):
    return host.check_output("pct exec %d --" % vmid + " %s" * len(argv), *argv)


BOTH_HEALTHY = [("http://10.0.3.101:30002", True), ("http://127.0.0.1:30001", True)]


def router_workers(host):
    """The router's view: [(worker url, healthy)], sorted."""
    workers = json.loads(ct(host, "python3", "-c", (
        "import urllib.request,sys; r=urllib.request.Request('http://127.0.0.1:30080/workers', headers={'Authorization':"
        " 'Bearer ' + sys.argv[1]}); print(urllib.request.urlopen(r).read().decode())"), KEY))["workers"]
    return sorted((w["url"], w["is_healthy"]) for w in workers)


def router_journal(host, lines=40):
    return host.run("pct exec 100 -- journalctl -u sglang-router-router.service -n %d --no-pager", lines).stdout


def test_no_request_failed_and_the_figures_are_printed(host):
    report = json.loads(ct(host, "cat", "/var/lib/gpuserve-sglang/rollout-report.json"))
    print("rollout under load: %(ok)d/%(requests)d ok, %(failed)d failed, p50 %(p50_ms)s ms, p99 %(p99_ms)s ms" % report,
          "- requests answered per replica during it: replica-a (CT 100) %(replica-a)s, replica-b (CT 101) %(replica-b)s"
          % report["per_replica"])
    assert report["failed"] == 0 and report["ok"] == report["requests"] == 600
    assert min(int(v) for v in report["per_replica"].values()) > 0


def test_each_replica_was_relaunched_and_is_back_in_the_router(host):
    for vmid, name in ((100, "replica-a"), (101, "replica-b")):
        log = ct(host, "cat", "/var/log/sglang/%s.log" % name, vmid=vmid)
        assert log.count("# gpuserve launch ") >= 2, name          # the deploy's launch and the rollout's
    assert router_workers(host) == BOTH_HEALTHY


def test_a_killed_replica_costs_at_most_its_in_flight_requests(host):
    r = json.loads(ct(host, "cat", "/var/lib/gpuserve-sglang/kill-report.json"))
    load = r["load"]
    print("replica-b killed mid-load: %d of %d requests failed (%d in flight at the kill); the router marked it "
          "unhealthy after %.1f s and took it back %.1f s after the kill; p50 %s ms, p99 %s ms"
          % (load["failed"], load["requests"], r["in_flight"], r["excluded_after_s"], r["back_after_s"],
             load["p50_ms"], load["p99_ms"]))
    assert load["ok"] + load["failed"] == load["requests"] == 300
    assert load["failed"] <= r["in_flight"] + 2, load["errors"]
    assert r["excluded_after_s"] is not None and r["back_after_s"] > r["excluded_after_s"]


def runbook(name, *extra):
    """A runbook as an operator runs it, with the scenario's inventory."""
    return ansible_playbook(["-i", molecule_inventory(), os.path.join(ROOT, "playbooks", name)] + list(extra))


def launches(host, vmid, name):
    """The replica's launches, from the markers the collection writes into its log: [(launch id, epoch s)] (the
    marker's time is the CT's local time, UTC in the lab)."""
    log = ct(host, "cat", "/var/log/sglang/%s.log" % name, vmid=vmid)
    return [(m.group(1), calendar.timegm(time.strptime(m.group(2), "%Y-%m-%d %H:%M:%S"))) for m in MARKER.finditer(log)]


def progress(host, vmid, name):
    return json.loads(ct(host, "cat", "/var/lib/gpuserve-sglang/%s.progress.json" % name, vmid=vmid))


def main_pid(host, vmid, name):
    return int(ct(host, "systemctl", "show", "-p", "MainPID", "--value", "sglang-%s.service" % name, vmid=vmid))


def test_restart_rolls_one_container_at_a_time_each_ready_before_the_next(host):
    before = {name: (main_pid(host, vmid, name), len(launches(host, vmid, name))) for vmid, name in REPLICAS}
    p = runbook("restart.yml")
    assert p.returncode == 0, p.stdout[-3000:]
    for vmid, name in REPLICAS:
        assert main_pid(host, vmid, name) not in (0, before[name][0]), name
        assert len(launches(host, vmid, name)) == before[name][1] + 1, name       # one new launch each
        assert progress(host, vmid, name)["state"] == "ready", name
    # replica-b was launched only after replica-a had answered ready (serial: 1)
    ready_a = progress(host, 100, "replica-a")["updated"]
    launched_b = launches(host, 101, "replica-b")[-1][1]
    assert launched_b >= int(ready_a), (ready_a, launched_b)
    assert ct(host, "python3", "-c", (
        "import urllib.request,sys; print(urllib.request.urlopen(sys.argv[1]).status)"),
        "http://127.0.0.1:30001/health") == "200"


def test_a_failed_launch_stops_the_roll_with_its_facts_and_the_next_container_is_untouched(host):
    """replica-a (first in the roll) dies at start-up of the seed's KV-pool error: restart.yml fails on it, names
    the failure with its numbers, leaves it stopped (no crash loop) and never reaches replica-b. Then restart.yml
    --limit ct100 brings replica-a back alone, replica-b still untouched."""
    pid_b, launches_b = main_pid(host, 101, "replica-b"), len(launches(host, 101, "replica-b"))
    ct(host, "python3", "-c", "import sys; open(sys.argv[1], 'w').write('kv_pool_oom_tp2_nextn_seed\\n')",
       MODEL + "/standin_scenario")
    try:
        p = runbook("restart.yml")
    finally:
        ct(host, "rm", "-f", MODEL + "/standin_scenario")
    out = p.stdout
    assert p.returncode != 0
    assert "fatal: [ct100]" in out and "kind: kv_pool_oom" in out, out[-4000:]
    assert "Not enough memory" in out and "mem_fraction_static: 0.85" in out          # the launch's own numbers
    assert "ct101" not in out.split("fatal: [ct100]", 1)[1].split("PLAY RECAP", 1)[0]   # the roll stopped there
    assert host.run("pct exec 100 -- systemctl is-active sglang-replica-a.service").stdout.strip() != "active"
    assert (main_pid(host, 101, "replica-b"), len(launches(host, 101, "replica-b"))) == (pid_b, launches_b)
    again = runbook("restart.yml", "--limit", "ct100")
    assert again.returncode == 0, again.stdout[-3000:]
    assert main_pid(host, 100, "replica-a") != 0 and progress(host, 100, "replica-a")["state"] == "ready"
    assert (main_pid(host, 101, "replica-b"), len(launches(host, 101, "replica-b"))) == (pid_b, launches_b)


def test_a_rollout_that_would_leave_no_replica_serving_stops_before_anything_moves(host):
    """replica-b is down (its unit stopped) and the router lists it unhealthy: rollout.yml --limit ct100 would take
    the only healthy replica out. It waits (-e rollout_healthy_timeout=4), then stops naming the router's view;
    replica-a is untouched and still in the router. replica-b is started again after."""
    pid_a, launches_a = main_pid(host, 100, "replica-a"), len(launches(host, 100, "replica-a"))
    ct(host, "systemctl", "stop", "sglang-replica-b.service", vmid=101)
    try:
        deadline = time.time() + 60
        while ("http://10.0.3.101:30002", False) not in router_workers(host) and time.time() < deadline:
            time.sleep(1)
        assert ("http://10.0.3.101:30002", False) in router_workers(host), router_journal(host)
        p = runbook("rollout.yml", "--limit", "ct100", "-e", "rollout_healthy_timeout=4")
    finally:
        ct(host, "systemctl", "start", "sglang-replica-b.service", vmid=101)
    text = " ".join(p.stdout.split())
    assert p.returncode != 0
    assert re.search(r"rollout stopped before ct100 \(http://127\.0\.0\.1:30001\) left a router: ct100 lists no other "
                     r"replica healthy after 4 s \(.*http://10\.0\.3\.101:30002 healthy: False.*\); taking it out would "
                     r"leave none serving\. Nothing was taken out, built or restarted", text), text[-3000:]
    assert (main_pid(host, 100, "replica-a"), len(launches(host, 100, "replica-a"))) == (pid_a, launches_a)
    assert ("http://127.0.0.1:30001", True) in router_workers(host)


# -- #47 item 3: an upgrade under load, and one that does not start, rolled back by itself ------------------------------
LIGHT = ["numpy", "tqdm", "pybase64", "requests", "ipython", "pydantic", "aiohttp", "huggingface-hub", "pyyaml"]


def venv_build(host, vmid):
    """The build id /opt/sglang/venv points at in that CT."""
    return ct(host, "readlink", "/opt/sglang/venv", vmid=vmid).strip().rsplit("/", 1)[1]


def router_steady(host, timeout=120):
    """The state an upgrade starts from: the router lists both replicas healthy and a round of requests through it is
    all answered. The test before restarts replica-a behind the router's back (restart.yml does not drain), and in
    one CI run the upgrade's load, started right after it, got 503 for its first two requests (0.0 and 0.15 s). The
    wait is bounded and printed; what the router did meanwhile is in the failure."""
    t0, seen = time.time(), []
    while time.time() - t0 < timeout:
        view = router_workers(host)
        if view == BOTH_HEALTHY:
            ct(host, "python3", "/opt/gpuserve-standin/loadgen.py", "--url", "http://127.0.0.1:30080", "--key-file",
               "/etc/sglang-router/router.key", "--requests", "8", "--seconds", "1", "--threads", "2", "--out",
               "/tmp/loadgen-steady.json")
            probe = json.loads(ct(host, "cat", "/tmp/loadgen-steady.json"))
            if probe["failed"] == 0:
                print("the router served both replicas %.1f s after the test before (%s)" % (
                    time.time() - t0, "; ".join(seen[-3:]) or "at once"))
                return
            seen.append("%d of 8 probe requests failed: %s" % (probe["failed"], probe["errors"][:2]))
        else:
            seen.append("router view %s" % view)
        time.sleep(2)
    raise AssertionError("the router did not serve both replicas within %d s: %s\n%s"
                         % (timeout, seen[-5:], router_journal(host)))


def keep_figure(what, report, rollout_s):
    """The figure for `make bench` (tests/bench/bench_upgrade.py prints build/bench/upgrade.json)."""
    path = os.path.join(ROOT, "build", "bench", "upgrade.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    figures = json.load(open(path)) if os.path.exists(path) else {}
    figures[what] = dict((k, report[k]) for k in ("requests", "ok", "failed", "p50_ms", "p99_ms", "max_ms"))
    figures[what]["rollout_s"] = round(rollout_s, 1)
    with open(path, "w") as fh:
        json.dump(figures, fh, indent=1, sort_keys=True)


def test_an_upgrade_under_load_moves_each_replica_to_the_next_venv_with_no_failed_request(host):
    """rollout.yml -e rollout_venv=true with a new venv in the inventory (one more package: a new build of the 0.5.9
    lock): each replica's next venv is built beside the live one and planned before it leaves the router, then
    switched in and restarted, one at a time, while 600 requests go through the router."""
    before = {vmid: (venv_build(host, vmid), len(launches(host, vmid, name))) for vmid, name in REPLICAS}
    router_steady(host)
    out = start_load(host, "upgrade", 600, 90)
    t0 = time.time()
    p = runbook("rollout.yml", "-e", json.dumps({"rollout_venv": True, "sglang_venv_light_packages": LIGHT + ["orjson", "uvloop"]}))
    took = time.time() - t0
    report = load_report(host, out)
    assert p.returncode == 0, p.stdout[-4000:]
    print("upgrade under load: %(ok)d/%(requests)d ok, %(failed)d failed, p50 %(p50_ms)s ms, p99 %(p99_ms)s ms, max "
          "%(max_ms)s ms" % report, "- the rollout of 2 replicas took %.0f s (%.0f s per replica)" % (took, took / 2))
    keep_figure("upgrade", report, took)
    assert report["failed"] == 0 and report["ok"] == 600, (report["errors"], router_journal(host))
    for vmid, name in REPLICAS:
        build = venv_build(host, vmid)
        assert build != before[vmid][0], name                                    # the next venv serves
        assert len(launches(host, vmid, name)) == before[vmid][1] + 1, name      # restarted once on it
        assert ct(host, "/opt/sglang/venv/bin/python", "-c", "import uvloop, orjson; print('ok')", vmid=vmid) == "ok"
        # the build that served is kept beside it (sglang_venv_keep 1: the way back)
        assert before[vmid][0] in ct(host, "ls", "/opt/sglang/venv.builds", vmid=vmid).split(), name
    # the next venv was planned (its own interpreter: its release) before the first replica left the router
    assert 0 <= p.stdout.find("Memory plan of this launch") < p.stdout.find("Out of every router"), p.stdout[:3000]


def test_an_upgrade_that_does_not_start_is_rolled_back_by_itself_and_stops_the_rollout(host):
    """A next venv without orjson (which 0.5.9's http_server.py imports first): replica-a does not start on it, is
    switched back to the build that served, started on it and put back into the router; the rollout stops there
    naming the failure, replica-b untouched; no request through the router failed."""
    live = {vmid: venv_build(host, vmid) for vmid, _name in REPLICAS}
    untouched = (main_pid(host, 101, "replica-b"), len(launches(host, 101, "replica-b")))
    router_steady(host)
    out = start_load(host, "rollback", 400, 60)
    t0 = time.time()
    p = runbook("rollout.yml", "-e", json.dumps({"rollout_venv": True, "sglang_venv_light_packages": LIGHT}))
    took = time.time() - t0
    report = load_report(host, out)
    keep_figure("rolled_back", report, took)
    print("failed upgrade rolled back under load: %(ok)d/%(requests)d ok, %(failed)d failed, p50 %(p50_ms)s ms, "
          "p99 %(p99_ms)s ms" % report, "- the rollout took %.0f s to stop" % took)
    text = " ".join(p.stdout.split())
    assert p.returncode != 0
    m = re.search(r"rollout stopped at ct100: it did not start on the next venv \(build ([0-9a-f]{16}), sglang 0\.5\.9\); "
                  r"switched back to build %s, started on it and put back into the routers - " % live[100], text)
    assert m, text[-4000:]
    assert "No module named 'orjson'" in text.split("rollout stopped at ct100", 1)[1], text[-3000:]
    assert "The replicas after it were not touched." in text
    assert venv_build(host, 100) == live[100] and m.group(1) in ct(host, "ls", "/opt/sglang/venv.builds").split()
    assert progress(host, 100, "replica-a")["state"] == "ready"
    assert (main_pid(host, 101, "replica-b"), len(launches(host, 101, "replica-b"))) == untouched
    assert venv_build(host, 101) == live[101]
    assert router_workers(host) == BOTH_HEALTHY
    assert report["failed"] == 0 and report["ok"] == 400, (report["errors"], router_journal(host))
