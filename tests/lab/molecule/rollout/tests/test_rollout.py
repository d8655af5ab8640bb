"""After rollout.yml under load (replica-a in CT 100, replica-b in CT 101, the router in CT 100): both replicas
restarted once (a new launch each), both back in the router and healthy, the load generator's report: 0 failed of
600, its p50/p99 printed with the requests per replica; then replica-b killed mid-load: at most its in-flight
requests failed, the router excluded it and took it back after systemd restarted it (times printed). Then
restart.yml as docs/runbooks/restart.md tells an operator to run it: one container at a time, each ready before
the next is launched; a failed launch stops the roll with its facts, the next container untouched; --limit one."""
import calendar
import json
import os
import re
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))   # tests/lab/molecule
from lab_runbook import ROOT, ansible_playbook, molecule_inventory  # noqa: E402  (shared with multinode)

testinfra_hosts = ["ansible://pvehost"]
KEY = "lab-rollout-key-91c3"
REPLICAS = ((100, "replica-a"), (101, "replica-b"))
MODEL = "/srv/models/Llama-3.1-8B-Instruct"
MARKER = re.compile(r"^# gpuserve launch ([0-9a-f]+) at (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)", re.M)


def ct(host, *argv, vmid=100):
    return host.check_output("pct exec %d --" % vmid + " %s" * len(argv), *argv)


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
    workers = json.loads(ct(host, "python3", "-c", (
        "import urllib.request,sys; r=urllib.request.Request('http://127.0.0.1:30080/workers', headers={'Authorization':"
        " 'Bearer ' + sys.argv[1]}); print(urllib.request.urlopen(r).read().decode())"), KEY))["workers"]
    want = [("http://10.0.3.101:30002", True), ("http://127.0.0.1:30001", True)]
    assert sorted((w["url"], w["is_healthy"]) for w in workers) == want


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
