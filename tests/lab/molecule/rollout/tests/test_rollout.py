"""After rollout.yml under load: both replicas restarted once (a new launch each), both back in the router and
healthy, and the load generator's report: 0 failed of 600, its p50/p99 printed with the requests per replica."""
import json

testinfra_hosts = ["ansible://pvehost"]
KEY = "lab-rollout-key-91c3"


def ct(host, *argv):
    return host.check_output("pct exec 100 --" + " %s" * len(argv), *argv)


def test_no_request_failed_and_the_figures_are_printed(host):
    report = json.loads(ct(host, "cat", "/var/lib/gpuserve-sglang/rollout-report.json"))
    served = [int(ct(host, "sh", "-c", "grep -c '\"POST /generate' /var/log/sglang/%s.log || true" % r))
              for r in ("replica-a", "replica-b")]
    print("rollout under load: %(ok)d/%(requests)d ok, %(failed)d failed, p50 %(p50_ms)s ms, p99 %(p99_ms)s ms" % report,
          "- requests answered per replica (whole scenario): replica-a %d, replica-b %d" % tuple(served))
    assert report["failed"] == 0 and report["ok"] == report["requests"] == 600
    assert min(served) > 0


def test_each_replica_was_relaunched_and_is_back_in_the_router(host):
    for name in ("replica-a", "replica-b"):
        log = ct(host, "cat", "/var/log/sglang/%s.log" % name)
        assert log.count("# gpuserve launch ") >= 2, name          # the deploy's launch and the rollout's
    workers = json.loads(ct(host, "python3", "-c", (
        "import urllib.request,sys; r=urllib.request.Request('http://127.0.0.1:30080/workers', headers={'Authorization':"
        " 'Bearer ' + sys.argv[1]}); print(urllib.request.urlopen(r).read().decode())"), KEY))["workers"]
    want = [("http://127.0.0.1:30001", True), ("http://127.0.0.1:30002", True)]
    assert sorted((w["url"], w["is_healthy"]) for w in workers) == want
