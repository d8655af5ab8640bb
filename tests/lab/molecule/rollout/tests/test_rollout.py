"""After rollout.yml under load (replica-a in CT 100, replica-b in CT 101, the router in CT 100): both replicas
restarted once (a new launch each), both back in the router and healthy, the load generator's report: 0 failed of
600, its p50/p99 printed with the requests per replica; then replica-b killed mid-load: at most its in-flight
requests failed, the router excluded it and took it back after systemd restarted it (times printed)."""
import json

testinfra_hosts = ["ansible://pvehost"]
KEY = "lab-rollout-key-91c3"


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
