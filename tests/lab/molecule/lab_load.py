"""A bounded load through the router in CT 100 (tests/lab/loadgen.py, staged in /opt/gpuserve-standin), shared by the
rollout and multinode scenarios' verifier tests: started in the background, its report read when it is done."""
import json
import time

LOADGEN = "/opt/gpuserve-standin/loadgen.py"
ROUTER_URL = "http://127.0.0.1:30080"
ROUTER_KEY_FILE = "/etc/sglang-router/router.key"


def start_load(host, name, requests, seconds, threads=6):
    """``requests`` POST /generate through the router over ``seconds`` (a transient systemd unit in CT 100); the path
    of its report."""
    out = "/tmp/loadgen-%s.json" % name
    host.check_output("pct exec 100 -- rm -f %s", out)
    host.check_output("pct exec 100 -- systemd-run --unit %s --collect python3 %s --url %s --key-file %s --requests %s "
                      "--seconds %s --threads %s --out %s", "gpuserve-loadgen-%s" % name, LOADGEN, ROUTER_URL,
                      ROUTER_KEY_FILE, str(requests), str(seconds), str(threads), out)
    return out


def load_report(host, out, timeout=300):
    """The report start_load's run wrote (bounded wait)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        r = host.run("pct exec 100 -- cat %s", out)
        if r.rc == 0 and r.stdout.strip():
            return json.loads(r.stdout)
        time.sleep(2)
    raise AssertionError("the load generator wrote no report in %d s (%s)" % (timeout, out))
