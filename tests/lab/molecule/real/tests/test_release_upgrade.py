"""#47: the real SGLang 0.5.23 in CT 100 on the CPU engine, reached the way an operator moves a replica to another
release: rollout.yml -e rollout_venv=true with the inventory's sglang_venv_sglang_version at 0.5.23. test_real.py runs
first (file order) and leaves the real 0.5.9 serving behind the real router.

First the compatibility chain against the lab node's driver (570.153.02: CUDA 12.8; 0.5.23's lock pins torch
2.14.1+cu130): refused before anything is built, the 0.5.9 server untouched. Then with the node's driver given as a
580 one (what the node reports after the nvidia_driver role moved it; the lab loads no kernel module, and the CPU
engine uses none): 0.5.23's whole lock built beside the live venv, the launch planned with 0.5.23's own rules through
that venv's interpreter, the replica drained out of the router, switched, started and read ready from 0.5.23's own
start-up log, chat answered directly and through the router, the plan's KV tokens beside 0.5.23's. Last, a rollout of
the 0.5.23 replica: drained through /v1/loads (0.5.23 has no /get_load; 0.5.9's /v1/loads answers 500 while
--enable-metrics is on, so 0.5.9 is drained through /get_load). Real here: both SGLang releases, their HTTP servers, auth, schedulers and
memory pools, the router; not: CUDA, the GPU driver (README "What the lab runs")."""
import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))   # tests/lab/molecule
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lab_http import KEY, PROBE  # noqa: E402
from test_real import CHAT, UNIT, ct, entry_points_import, runbook, said  # noqa: E402  (the same CT, server and helpers)

testinfra_hosts = ["ansible://pvehost"]
NEXT = "0.5.23"
# what the node reports once its driver is moved to a CUDA 13 one (580.65.06 and later: compat.MAJOR_MINIMUM)
DRIVER_580 = "580.95.05"


def sglang_version(host):
    return ct(host, "/opt/sglang/venv/bin/python", "-c", "import importlib.metadata as m; print(m.version('sglang'))")


def builds(host):
    return sorted(ct(host, "ls", "/opt/sglang/venv.builds").split())


def upgrade(*extra):
    """rollout.yml -e rollout_venv=true with the release moved to 0.5.23. No uv cache is kept (UV_NO_CACHE, as the
    lab's profile has it): uv's temporary cache sits beside the build and the files are hard-linked from it, so
    0.5.23's 9.5 GB are on the disk once (the disk of a CI machine is not always large enough for more)."""
    return runbook("rollout.yml", "-e", json.dumps(dict({"rollout_venv": True, "sglang_venv_sglang_version": NEXT,
                                                         "sglang_venv_public_environment": {"UV_NO_CACHE": "1"}},
                                                        **dict(extra))))


def test_the_next_release_is_refused_on_a_driver_too_old_for_its_cuda_before_anything_is_built(host):
    before = (builds(host), ct(host, "systemctl", "show", "-p", "MainPID", "--value", UNIT))
    p = upgrade()
    text = said(p)
    assert p.returncode != 0
    assert ("the lock's torch runs on CUDA 13.0, which an NVIDIA driver loads from 580.65.06 on (580.65.06 for all of "
            "it), and pvehost has 570.153.02: no CUDA call would work in this venv. Set nvidia_driver_version >= "
            "580.65.06 for pvehost (role nvidia_driver): upgrading the driver restarts every GPU container of pvehost "
            "(ct100)") in text, text[-3000:]
    assert "Nothing was changed." in text
    assert "Out of every router" not in text                  # the replica never left the router
    assert (builds(host), ct(host, "systemctl", "show", "-p", "MainPID", "--value", UNIT)) == before
    assert sglang_version(host) == "0.5.9"
    assert ct(host, "python3", "-c", PROBE, "/v1/models", KEY) == "200"


def test_the_replica_moves_to_the_real_next_release_planned_by_its_own_rules(host):
    live = ct(host, "readlink", "/opt/sglang/venv").rsplit("/", 1)[1]
    p = upgrade(("sglang_venv_node_driver_version", DRIVER_580))
    text = said(p)
    assert p.returncode == 0, text[-4000:]
    # planned with the next venv's interpreter before the replica left the router, drained through 0.5.9's /get_load
    assert 0 <= text.find("Memory plan of this launch") < text.find("Out of every router") \
        < text.find("Its in-flight requests reach 0 (GET /get_load")
    assert "CUDA 13.0 of the lock runs on the driver %s of pvehost" % DRIVER_580 in text
    assert sglang_version(host) == NEXT
    assert live in builds(host) and len(builds(host)) == 2        # the build that served is kept: the way back
    info = json.loads(ct(host, "python3", "-c", (
        "import sys, urllib.request; print(urllib.request.urlopen(urllib.request.Request("
        "'http://127.0.0.1:30000/server_info', headers={'Authorization': 'Bearer ' + sys.argv[1]}), timeout=10)"
        ".read().decode())"), KEY))
    assert info["version"] == NEXT and info["max_total_num_tokens"] == 8192
    # its own start-up log, read by the collection: this launch ready, no failure
    s = runbook("status.yml")
    assert "this launch's log: ready (phase ready)" in said(s) and "no failure in this launch" in said(s), said(s)[-3000:]
    # 0.5.23's plan beside 0.5.23's pool (the textfile the role writes at a ready launch)
    prom = ct(host, "cat", "/var/lib/prometheus/node-exporter/gpuserve_sglang_tiny.prom")
    assert 'gpuserve_sglang_planned_max_total_num_tokens{server="tiny"} 8192' in prom
    assert 'gpuserve_sglang_plan_within_tolerance{server="tiny"} 1' in prom
    # serving: the key enforced by 0.5.23 itself, chat directly and through the router
    assert ct(host, "python3", "-c", PROBE, "/v1/models") == "401"
    assert ct(host, "python3", "-c", CHAT, "30000", KEY, "0") == "200 assistant length True"
    assert ct(host, "python3", "-c", CHAT, "30000", KEY, "1") == "200 data: [DONE]"
    assert ct(host, "python3", "-c", CHAT, "30080", KEY, "0") == "200 assistant length True"
    entry_points_import(host)                                     # SGLang's own tools in 0.5.23's venv too


def test_a_rollout_of_the_next_release_drains_it_through_v1_loads(host):
    pid = ct(host, "systemctl", "show", "-p", "MainPID", "--value", UNIT)
    p = runbook("rollout.yml")
    text = said(p)
    assert p.returncode == 0, text[-4000:]
    assert re.search(r"TASK \[Its in-flight requests reach 0 \(GET /get_load, bounded\)\] \**\s*ok: \[ct100\]", text)
    assert re.search(r"TASK \[Its in-flight requests reach 0 \(GET /v1/loads, bounded - a release without /get_load\)\] "
                     r"\**\s*ok: \[ct100\]", text), text[-4000:]
    assert ct(host, "systemctl", "show", "-p", "MainPID", "--value", UNIT) != pid          # restarted
    assert sglang_version(host) == NEXT
    assert ct(host, "python3", "-c", CHAT, "30080", KEY, "0") == "200 assistant length True"
