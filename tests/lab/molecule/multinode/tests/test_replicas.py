"""After the group's tests (test_multinode.py): the same two containers as two replicas of the real SGLang 0.5.9 behind
the real router in CT 100 (#59 item 2, the part this machine's disk allows): deploy.yml makes them replicas (no
sglang_server_group, --tp-size 1 each), then rollout.yml restarts them one at a time while requests go through the
router - none may fail - and a rollout whose launch cannot start stops at the first replica, the other untouched,
again with no failed request.

Real here: both servers, the router, the drain through 0.5.9's /get_load, every launch. Not here: an upgrade of the
two replicas to 0.5.23 under load. Each replica would hold both releases' venvs (10 and 11 GB) beside the other
container's and the other lane's: about 60 GB, more than a CI machine's disk has (a clean-clone run ran out at 47).
The upgrade to the real 0.5.23 is the real scenario's (one container), the upgrade under load the rollout scenario's
(the stand-in, two builds of the 0.5.9 lock)."""
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))   # tests/lab/molecule
from lab_http import KEY, ROUTER_SEND  # noqa: E402
from lab_load import load_report, start_load  # noqa: E402
from lab_runbook import ansible_playbook  # noqa: E402
from test_multinode import ROOT, ct, generate_count, inventories, main_pid, router_workers  # noqa: E402

testinfra_hosts = ["ansible://pvehost"]

# the scenario's two ranks as two replicas: no group, the CPU-engine profile's own args and environment (tp 1)
REPLICAS = {"sglang_server_group": "", "sglang_server_args": "{{ gpuserve_lab_cpu_args }}",
            "sglang_server_public_env": "{{ gpuserve_lab_cpu_env }}"}
BOTH = [("http://10.0.3.101:30000", True), ("http://127.0.0.1:30000", True)]


def playbook(name, extra=None, *argv):
    return ansible_playbook(inventories() + [os.path.join(ROOT, "playbooks", name), "-e",
                                             json.dumps(dict(REPLICAS, **(extra or {})))] + list(argv))


def wait_both(host, timeout=60):
    deadline = time.time() + timeout
    while router_workers(host) != BOTH and time.time() < deadline:
        time.sleep(1)
    assert router_workers(host) == BOTH


def test_the_two_containers_become_two_real_replicas_behind_the_router(host):
    p = playbook("deploy.yml", None, "--tags", "server,router")     # the venv and the model stay as they are
    assert p.returncode == 0, p.stdout[-4000:]
    for vmid in (100, 101):
        line = ct(host, vmid, "systemctl", "show", "-p", "ExecStart", "--value", "sglang-tiny.service")
        assert "--nnodes" not in line and "--tp-size" not in line, line
    wait_both(host)
    before = generate_count(host, 100) + generate_count(host, 101)
    assert ct(host, 100, "python3", "-c", ROUTER_SEND, KEY, "8") == "8"
    assert generate_count(host, 100) + generate_count(host, 101) - before == 8


def test_a_rollout_under_load_restarts_each_real_replica_with_no_failed_request(host):
    pids = (main_pid(host, 100), main_pid(host, 101))
    served = (generate_count(host, 100), generate_count(host, 101))
    out = start_load(host, "restart", 240, 120, threads=4)
    t0 = time.time()
    p = playbook("rollout.yml")
    took = time.time() - t0
    report = load_report(host, out, timeout=400)
    print("real replicas rolled under load: %(ok)d/%(requests)d ok, %(failed)d failed, p50 %(p50_ms)s ms, p99 "
          "%(p99_ms)s ms" % report, "- the rollout of 2 replicas took %.0f s; answered during the load: CT 100 %d, "
          "CT 101 %d" % (took, generate_count(host, 100) - served[0], generate_count(host, 101) - served[1]))
    assert p.returncode == 0, p.stdout[-4000:]
    assert report["failed"] == 0 and report["ok"] == 240, report["errors"]
    assert main_pid(host, 100) not in (0, pids[0]) and main_pid(host, 101) not in (0, pids[1])
    # each drained through its own /get_load (0.5.9's) before its restart, then back into the router
    assert p.stdout.count("Its in-flight requests reach 0 (GET /get_load") == 2, p.stdout[-3000:]
    wait_both(host)


def test_a_rollout_whose_launch_cannot_start_stops_at_the_first_replica_with_no_failed_request(host):
    """A pool of 16 tokens, smaller than SGLang's own warm-up request: the first replica's new launch dies at warm-up
    (deterministic, the real 0.5.9), the module puts its last good configuration back (it serves again, out of the
    router), the rollout stops naming the failure, the second replica is untouched, and the router keeps answering
    through it."""
    untouched = main_pid(host, 101)
    out = start_load(host, "stopped", 120, 60, threads=4)
    p = playbook("rollout.yml", {"sglang_server_args": "{{ gpuserve_lab_cpu_args | combine({'max_total_tokens': 16}) }}"})
    report = load_report(host, out)
    text = " ".join(p.stdout.split())
    print("a rollout stopped at a launch that cannot start, under load: %(ok)d/%(requests)d ok, %(failed)d failed"
          % report)
    assert p.returncode != 0
    assert "rollout stopped at ct100:" in text and "warmup_failed in phase warmup" in text, text[-4000:]
    assert "The replicas after it were not touched." in text
    assert main_pid(host, 101) == untouched
    assert report["failed"] == 0 and report["ok"] == 120, report["errors"]
    assert ("http://10.0.3.101:30000", True) in router_workers(host)
    assert ct(host, 100, "systemctl", "is-active", "sglang-tiny.service") == "active"      # put back, serving
