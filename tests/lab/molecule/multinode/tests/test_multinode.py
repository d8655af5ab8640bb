"""One real SGLang 0.5.9 server across CT 100 (rank 0) and CT 101 (rank 1), by deploy.yml on the lab's CPU engine
(Gloo over TCP between the two containers): both ranks up as one server, its greedy output the same as a --tp-size 1
server's, then what must stop a group before or at launch - a blocked rendezvous, a rank on another model revision,
a rank failing at start-up (its weights unreadable) - each named with the rank and its facts, nothing left running
alone; a rank lost after start-up (stopped, killed) ends the group, and status.yml says so. And restart.yml refusing
a rank alone: the command it prints, run as printed, restarts the group. The router in CT 100 (deploy.yml's play 4)
routes to rank 0 alone, also after the group's restart.

Every launch here is the real server's (about 40 s for the pair on this machine). Not shown here, as a CPU has
neither: NCCL itself and GPU memory (a rank dying of its KV pool) - the stand-in's, tests/integration."""
import json
import os
import re
import shlex
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))   # tests/lab/molecule
from lab_http import KEY, PROBE, ROUTER, ROUTER_SEND  # noqa: E402  (shared with the other lab scenarios)
from lab_runbook import ansible_playbook, molecule_inventory  # noqa: E402

testinfra_hosts = ["ansible://pvehost"]

ROOT = os.environ["GPUSERVE_ROOT"]
MODEL = "/srv/models/tiny-llama"
UNIT = "sglang-tiny.service"
LOG = "/var/log/sglang/tiny.log"
RANK1 = PROBE.replace("http://127.0.0.1:30000", "http://10.0.3.101:30000")   # rank 1 binds its bridge address
# run inside a CT as `python3 -c GREEDY <port> <key|->`: the output token ids of three prompts at temperature 0, as
# JSON - what /generate answers with sampling off, token for token
GREEDY = ("import json, sys, urllib.request\nout = []\n"
          "for text in ('The capital of France is', 'def fibonacci(n):', 'Once upon a time'):\n"
          "    body = json.dumps({'text': text, 'sampling_params': {'temperature': 0, 'max_new_tokens': 16}})\n"
          "    h = {'Content-Type': 'application/json'}\n"
          "    if sys.argv[2] != '-':\n"
          "        h['Authorization'] = 'Bearer ' + sys.argv[2]\n"
          "    r = urllib.request.Request('http://127.0.0.1:%s/generate' % sys.argv[1], data=body.encode(), headers=h)\n"
          "    out.append(json.loads(urllib.request.urlopen(r, timeout=120).read())['output_ids'])\n"
          "print(json.dumps(out))\n")


def ct(host, vmid, *argv):
    return host.check_output("pct exec %d --" % vmid + " %s" * len(argv), *argv)


def inventories():
    """The scenario's inventory (both ranks) over inventory/lab, as -i arguments."""
    return ["-i", os.path.join(ROOT, "inventory", "lab"), "-i", molecule_inventory()]


def deploy(*extra):
    return ansible_playbook(inventories() + [os.path.join(ROOT, "playbooks", "deploy.yml")] + list(extra))


def eth0_addr(host, vmid):
    return ct(host, vmid, "ip", "-o", "-4", "addr", "show", "dev", "eth0").split()[3].split("/")[0]


def main_pid(host, vmid):
    return int(ct(host, vmid, "systemctl", "show", "-p", "MainPID", "--value", UNIT))


def cmdline(host, vmid):
    return ct(host, vmid, "cat", "/proc/%d/cmdline" % main_pid(host, vmid)).split("\0")


def this_launch(host, vmid):
    """The rank's log from its last launch marker on."""
    return ct(host, vmid, "cat", LOG).rsplit("gpuserve launch", 1)[-1]


def test_two_ranks_serve_as_one_server(host):
    addr = eth0_addr(host, 100)
    for vmid, rank in ((100, "0"), (101, "1")):
        assert ct(host, vmid, "systemctl", "is-active", UNIT) == "active"
        argv = cmdline(host, vmid)
        assert argv[argv.index("--nnodes") + 1] == "2" and argv[argv.index("--node-rank") + 1] == rank
        assert argv[argv.index("--dist-init-addr") + 1] == "%s:5000" % addr        # rank 0's default-route address
        assert argv[argv.index("--tp-size") + 1] == "2" and argv[argv.index("--device") + 1] == "cpu"
        # a rank restarted alone would wait for peers that never come: systemd leaves a crashed rank down
        assert ct(host, vmid, "systemctl", "show", "-p", "Restart", "--value", UNIT) == "no"
        # the network to rank 0, from the rendezvous check: Gloo's interface and SGLang's own address on it (its
        # scheduler broadcast to the other rank is reached there)
        env = ct(host, vmid, "cat", "/etc/sglang/tiny.env")
        assert 'NCCL_SOCKET_IFNAME="eth0"' in env and 'GLOO_SOCKET_IFNAME="eth0"' in env
        assert 'SGLANG_HOST_IP="%s"' % eth0_addr(host, vmid) in env
    # rank 0 serves the API, locked by its key; rank 1 only 0.5.9's health server (200, no API behind it)
    assert ct(host, 100, "python3", "-c", PROBE, "/health_generate") == "200"
    assert ct(host, 100, "python3", "-c", PROBE, "/v1/models") == "401"
    assert ct(host, 100, "python3", "-c", PROBE, "/v1/models", KEY) == "200"
    assert ct(host, 101, "python3", "-c", RANK1, "/health") == "200"
    assert ct(host, 100, "python3", "-c", RANK1, "/health") == "200"                # reachable from the router's CT
    assert ct(host, 101, "python3", "-c", RANK1, "/v1/models", KEY) == "404"
    # the ranks met over Gloo (the CPU engine's backend) and each built its half of the model and the pool
    for vmid in (100, 101):
        log = this_launch(host, vmid)
        assert "Init torch distributed ends." in log and "KV Cache is allocated. #tokens: 8192" in log
        assert "Expected a cuda device" not in log
    assert "Dummy health check server started in background thread at 10.0.3.101:30000" in this_launch(host, 101)


_TP1 = {}


def tp1_greedy(host):
    """GREEDY's answer of a --tp-size 1 server of the same venv and model (started in CT 100 on port 30001, with the
    profile's CPU settings, float32 and no thread binding for a second rank, then stopped): once, kept for the
    prefill/decode pair's test (tests/test_replicas.py)."""
    if "ids" in _TP1:
        return _TP1["ids"]
    env = ["-E", "SGLANG_USE_CPU_ENGINE=1", "-E", "TORCHDYNAMO_DISABLE=1", "-E", "OMP_NUM_THREADS=1",
           "-E", "LD_LIBRARY_PATH=/opt/gpuserve-lab/libcuda1/usr/lib/x86_64-linux-gnu/nvidia/current"]
    ct(host, 100, "systemd-run", "--unit", "gpuserve-test-tp1", "--collect", *env,
       "/opt/sglang/venv/bin/python", "-m", "sglang.launch_server", "--model-path", MODEL, "--device", "cpu",
       "--attention-backend", "torch_native", "--disable-cuda-graph", "--max-total-tokens", "8192", "--dtype", "float32",
       "--host", "127.0.0.1", "--port", "30001")
    try:
        probe = PROBE.replace("127.0.0.1:30000", "127.0.0.1:30001")
        deadline = time.time() + 300
        while host.run("pct exec 100 -- python3 -c %s /health_generate", probe).stdout.strip() != "200":
            assert time.time() < deadline, ct(host, 100, "journalctl", "-u", "gpuserve-test-tp1", "-n", "40")
            time.sleep(2)
        _TP1["ids"] = json.loads(ct(host, 100, "python3", "-c", GREEDY, "30001", "-"))
    finally:
        host.run("pct exec 100 -- systemctl stop gpuserve-test-tp1")
    return _TP1["ids"]


def test_the_greedy_output_through_rank_0_is_a_tp_1_servers(host):
    """The pass the issue sets: the same prompts at temperature 0 through the two-rank server and through a
    --tp-size 1 server of the same venv and model (tp1_greedy), token for token."""
    group = json.loads(ct(host, 100, "python3", "-c", GREEDY, "30000", KEY))
    single = tp1_greedy(host)
    print("\ngreedy token ids, --tp-size 2 over two CTs: %s\n                  --tp-size 1:                %s"
          % (group, single))
    assert all(len(ids) == 16 for ids in group)
    assert group == single


def router_workers(host):
    """The router's workers as [(url, is_healthy)], from its /workers API (with the key)."""
    status, body = ct(host, 100, "python3", "-c", ROUTER, "/workers", KEY).split(" ", 1)
    assert status == "200", status
    return sorted((w["url"], w["is_healthy"]) for w in json.loads(body)["workers"])


def generate_count(host, vmid):
    return int(ct(host, vmid, "sh", "-c", "grep -c '\"POST /generate' %s || true" % LOG))


def test_the_router_in_front_of_the_group_routes_to_rank_0_alone(host):
    """deploy.yml's play 4 with a multi-node server behind it: the router's one worker is rank 0 - rank 1 has a URL
    and its health server answers /health 200 (0.5.9), so a router counting it would send it requests that 0.5.9
    answers 404 - and every request through the router is answered by the group (rank 0's log counts them)."""
    assert ct(host, 100, "systemctl", "is-active", "sglang-router-router.service") == "active"
    assert router_workers(host) == [("http://127.0.0.1:30000", True)]
    assert ct(host, 100, "python3", "-c", ROUTER, "/workers") == "401"          # the replicas' key locks it
    before = generate_count(host, 100)
    assert ct(host, 100, "python3", "-c", ROUTER_SEND, KEY, "8") == "8"
    assert generate_count(host, 100) - before == 8
    assert generate_count(host, 101) == 0                                       # rank 1 serves no API


def wait_stopped(host, vmid, timeout=60):
    """Until the rank's unit in CT ``vmid`` is no longer active (bounded)."""
    host.run("pct exec %d -- timeout %d sh -c 'while systemctl is-active -q %s; do sleep 0.2; done'"
             % (vmid, timeout, UNIT))


def recap(out, name):
    line = [x for x in out.splitlines() if x.startswith(name + " ")][-1]
    return dict((k, int(v)) for k, v in (kv.split("=") for kv in line.split(":", 1)[1].split()))


def slow_stop(host, vmid, on):
    """A stop of the rank's unit that waits 3 s before systemd's SIGTERM (a drop-in ExecStop), or back to the quick
    stop: the old process then still runs - and rank 0 still serves its rendezvous - for 3 s of a restart."""
    path = "/etc/systemd/system/%s.d/gpuserve-test-slow-stop.conf" % UNIT
    if on:
        ct(host, vmid, "mkdir", "-p", os.path.dirname(path))
        ct(host, vmid, "python3", "-c", "import sys; open(sys.argv[1], 'w').write(sys.argv[2])", path,
           "[Service]\nExecStop=/bin/sleep 3\n")
    else:
        ct(host, vmid, "rm", "-f", path)
    ct(host, vmid, "systemctl", "daemon-reload")


# Gloo's words on rank 0 when rank 1's end of their pair goes (torch 2.9.1's gloo/transport/tcp/pair.cc): "closed"
# for a rank that closed its sockets, "reset" for one killed; with rank 1's bridge address
PEER_GONE = re.compile(r"(Connection closed by peer|Read error) \[10\.0\.3\.101\]:\d+")


def test_one_rank_down_restarts_both_and_check_mode_says_so(host):
    """Rank 1 stopped: rank 0, idle, ends with it (0.5.9's scheduler broadcasts over Gloo every loop), and its log
    names the echo; check mode says both would change and changes nothing; a run brings both up - the meeting is
    once, at start-up, so the ranks start together. Then a restart of the running group with rank 0's stop slow:
    were rank 1 started while the old rank 0 still runs, it would meet the old rendezvous and die at dist_init (this
    happened in CI, where it is a race the lab's quick stop usually wins); every rank is stopped before any starts."""
    ct(host, 101, "systemctl", "stop", UNIT)
    wait_stopped(host, 100)
    assert main_pid(host, 100) == 0 and main_pid(host, 101) == 0
    log0 = this_launch(host, 100)
    assert PEER_GONE.search(log0) and "It usually means one child failed" in log0, log0[-2000:]
    look = deploy("--check", "--tags", "server")
    assert look.returncode == 0, look.stdout[-3000:]
    assert recap(look.stdout, "ct100")["changed"] >= 1 and recap(look.stdout, "ct101")["changed"] >= 1
    assert main_pid(host, 100) == 0 and main_pid(host, 101) == 0
    up = deploy("--tags", "server")
    assert up.returncode == 0, up.stdout[-3000:]
    pid0 = main_pid(host, 100)
    assert pid0 != 0 and main_pid(host, 101) != 0
    slow_stop(host, 100, True)
    try:
        run = deploy("--tags", "server", "-e", "sglang_server_restart=true")
    finally:
        slow_stop(host, 100, False)
    assert run.returncode == 0, run.stdout[-3000:]
    assert "Every rank of the group is stopped before any starts" in run.stdout
    assert main_pid(host, 100) not in (0, pid0) and main_pid(host, 101) != 0
    assert ct(host, 100, "python3", "-c", PROBE, "/health_generate") == "200"


def test_a_blocked_rendezvous_is_refused_before_launch_naming_rank_and_address(host):
    addr = eth0_addr(host, 100)
    pids = (main_pid(host, 100), main_pid(host, 101))
    ct(host, 101, "ip", "route", "add", "prohibit", addr + "/32")       # the CT's own firewall rule
    try:
        # the plays a server change runs (the node's GPUs, the group's checks, the server's): the venv and model
        # plays before them have nothing to do here and cost a minute of make test
        p = deploy("--tags", "server")
    finally:
        ct(host, 101, "ip", "route", "del", "prohibit", addr + "/32")
    out = p.stdout
    assert p.returncode != 0
    assert ("ct101 (rank 1 of group lab) cannot reach rank 0's rendezvous %s:5000 (ct100): Permission denied"
            % addr) in out, out[-3000:]
    assert "Open TCP port 5000 from this container to ct100" in out and "Nothing was launched." in out
    assert "TASK [gpuserve.sglang.sglang_server" not in out                     # the server play never ran
    assert (main_pid(host, 100), main_pid(host, 101)) == pids                  # nothing restarted


def test_a_rank_on_another_model_revision_is_refused(host):
    path = MODEL + "/.gpuserve-snapshot.json"
    original = ct(host, 101, "cat", path)
    revision = json.loads(ct(host, 100, "cat", path))["revision"]                 # rank 0's, from its own snapshot
    other = json.loads(original)
    other["revision"] = "0" * 40
    ct(host, 101, "python3", "-c", "import sys; open(sys.argv[1], 'w').write(sys.argv[2])", path, json.dumps(other))
    try:
        p = deploy("--tags", "group")
    finally:
        ct(host, 101, "python3", "-c", "import sys; open(sys.argv[1], 'w').write(sys.argv[2])", path, original)
    assert p.returncode != 0
    assert ("ct101 (rank 1 of group lab): the model revision - not the same as rank 0's (ct101: 000000000000, "
            "ct100: %s) - pin one hf_model_revision for the group" % revision[:12]) in p.stdout, p.stdout[-3000:]
    assert "Nothing was launched." in p.stdout


# run inside a CT as `python3 -c BREAK_HEADER <file>`: one tensor's shape in the safetensors header made one column
# short ([64,128] -> [64,127]: the same header length, its offsets left as they are) - a checkpoint SGLang cannot load
BREAK_HEADER = ("import struct, sys\nwith open(sys.argv[1], 'r+b') as f:\n"
                "    n = struct.unpack('<Q', f.read(8))[0]\n    head = f.read(n)\n"
                "    i = head.index(b'\"shape\":[64,128]')\n    f.seek(8 + i)\n    f.write(b'\"shape\":[64,127]')\n")


def test_a_rank_failing_at_start_ends_the_group_and_every_rank_names_it_with_its_facts(host):
    """Rank 1's checkpoint broken (one tensor's shape in its header, the file's size and the manifest unchanged): the
    real 0.5.9 meets rank 0, then rank 1 dies loading the weights (safetensors refuses the header) and rank 0 ends
    too - its own words only say that other ranks did not finish loading. Each rank's task names rank 1's failure
    first, with rank 1's words: rank 0's as the cause of its echo (or, had it been ready, as what stopped it). The
    file put back, a plain re-run starts both again."""
    weights = MODEL + "/model.safetensors"
    ct(host, 101, "cp", "-p", weights, "/root/model.safetensors.orig")
    ct(host, 101, "python3", "-c", BREAK_HEADER, weights)
    try:
        p = deploy("--tags", "server", "-e", "sglang_server_restart=true")
    finally:
        ct(host, 101, "cp", "-p", "/root/model.safetensors.orig", weights)
    out = " ".join(p.stdout.split())                      # the yaml result format folds long messages
    telling = ("msg:", "failed first", "stopped because", "stopping this member")
    print("\n" + "\n".join(line for line in p.stdout.splitlines() if any(w in line for w in telling)))
    assert p.returncode != 0
    assert "fatal: [ct101]" in out and "fatal: [ct100]" in out, out[-4000:]
    assert ("SGLang failed to start: other in phase load_weights: safetensors._safetensors_rust.SafetensorError: "
            "Error while deserializing header: invalid shape, data type, or offset for tensor") in out, out[-4000:]
    # rank 0's task leads with rank 1's failure, whichever way it ended (its echo, or stopped by the collection)
    assert ("ct101 (rank 1) of group lab failed first: SGLang failed to start: other in phase load_weights" in out
            or "stopped because ct101 (rank 1) of group lab failed: SGLang failed to start: other in phase "
            "load_weights" in out), out[-4000:]
    for vmid in (100, 101):
        assert host.run("pct exec %d -- systemctl is-active %s" % (vmid, UNIT)).stdout.strip() != "active"
    again = deploy("--tags", "server")
    assert again.returncode == 0, again.stdout[-3000:]
    for vmid in (100, 101):
        assert ct(host, vmid, "systemctl", "is-active", UNIT) == "active"


def test_status_reads_the_group_as_a_whole_and_names_a_rank_lost_after_start_up(host):
    """Both ranks up: status.yml says the group serves, and rank 1's line says what its health means (0.5.9's health
    server there answers 200 whatever rank 0 does); diagnose.yml reads both. Rank 1 then dies (SIGKILL, as a crash;
    Restart=no leaves it down): rank 0, idle, ends at once as 0.5.9's does (its scheduler's next Gloo broadcast fails),
    and status.yml says the group does not serve, names both ranks - rank 0's failure the echo of rank 1's loss - and
    prints the command that restarts both. (The next test runs that command.)"""
    # results as JSON here (one line per message: the YAML form an operator reads folds long lines)
    ok = ansible_playbook(inventories() + [os.path.join(ROOT, "playbooks", "status.yml")],
                          ANSIBLE_CALLBACK_RESULT_FORMAT="json")
    assert ok.returncode == 0, ok.stdout[-3000:]
    assert "group lab serving: 2 ranks up, ct100 (rank 0) healthy, KV tokens " in ok.stdout, ok.stdout[-3000:]
    # the node's GPUs in one line, read over ssh (the lab's node has no nvidia-smi: it says so, with the fix)
    assert '"msg": "pvehost GPUs no_driver: nvidia-smi not found. Install the driver' in ok.stdout
    assert "health server up (rank 1 of 2: SGLang serves no API here" in ok.stdout
    assert "this launch's log: ready as rank 1 (its scheduler is up and its health server answers" in ok.stdout
    # diagnose.yml reads each rank's status first (it failed on rank 1 when /server_info's 404 was not a status)
    diag = ansible_playbook(inventories() + [os.path.join(ROOT, "playbooks", "diagnose.yml")])
    assert diag.returncode == 0, diag.stdout[-3000:]
    assert diag.stdout.count("no failure in the last launch") == 2
    ct(host, 101, "systemctl", "kill", "-s", "KILL", UNIT)
    for vmid in (101, 100):
        wait_stopped(host, vmid)
    bad = ansible_playbook(inventories() + [os.path.join(ROOT, "playbooks", "status.yml")],
                           ANSIBLE_CALLBACK_RESULT_FORMAT="json")
    out = bad.stdout
    print("\n" + "\n".join(line for line in out.splitlines() if "group lab" in line or "sglang-tiny:" in line))
    assert bad.returncode == 0, out[-3000:]                                     # a status, not a failure
    assert "group lab NOT serving: ct100 (rank 0) is failed/failed, its last launch failed: nccl_error; ct101 (rank 1) " \
           "is failed/failed" in out, out[-3000:]
    assert "still run" not in [x for x in out.splitlines() if "group lab NOT serving" in x][0]
    assert ("restart them together with `ansible-playbook -i <inventory> playbooks/deploy.yml --tags server -e "
            "sglang_server_restart=true --limit pvehost,ct100,ct101`") in out
    # rank 0's own log says why it ended: the echo of rank 1's loss, with rank 1's address; its status names it
    assert PEER_GONE.search(this_launch(host, 100))
    assert "Another rank of this server went away: Gloo's connection to the rank at 10.0.3.101" in out


def test_restart_yml_refuses_a_rank_alone_and_the_command_it_prints_restarts_the_group(host):
    """restart.yml --limit ct101 refuses rank 1 before anything restarts and prints the deploy.yml command that
    restarts the group; that command, run as printed (only <inventory> filled in), restarts both ranks - the
    --limit it names holds every host the group needs (inventory/lab's localhost is left out) - and they serve."""
    pids = (main_pid(host, 100), main_pid(host, 101))
    refused = ansible_playbook(inventories() + [os.path.join(ROOT, "playbooks", "restart.yml"), "--limit", "ct101"])
    assert refused.returncode != 0 and "Nothing was restarted." in refused.stdout, refused.stdout[-3000:]
    assert (main_pid(host, 100), main_pid(host, 101)) == pids
    printed = re.search(r"`(ansible-playbook -i <inventory> [^`]+)`", refused.stdout)
    assert printed, refused.stdout[-3000:]
    argv = shlex.split(printed.group(1))
    print("\nrestart.yml printed: " + printed.group(1))
    assert argv[1:3] == ["-i", "<inventory>"] and argv[argv.index("--limit") + 1] == "pvehost,ct100,ct101"
    run = ansible_playbook(inventories() + argv[3:])                # playbooks/deploy.yml, relative to the repo
    assert run.returncode == 0, run.stdout[-3000:]
    assert "localhost" not in run.stdout.split("PLAY RECAP", 1)[1]
    assert main_pid(host, 100) not in (0, pids[0]) and main_pid(host, 101) not in (0, pids[1])
    assert ct(host, 100, "python3", "-c", PROBE, "/health_generate") == "200"
    for vmid in (100, 101):
        assert "Init torch distributed ends." in this_launch(host, vmid)
    # the router (not in the command's tags) took the restarted rank 0 back at its next health check (2 s here)
    deadline = time.time() + 30
    while router_workers(host) != [("http://127.0.0.1:30000", True)] and time.time() < deadline:
        time.sleep(0.5)
    assert router_workers(host) == [("http://127.0.0.1:30000", True)]
    assert ct(host, 100, "python3", "-c", ROUTER_SEND, KEY, "4") == "4"
