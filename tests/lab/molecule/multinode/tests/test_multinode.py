"""One SGLang server across CT 100 (rank 0) and CT 101 (rank 1), by deploy.yml on the lab: both ranks up as one
server, then what must stop a group before or at launch - a blocked rendezvous, a rank on another model revision,
a rank failing at start-up - each named with the rank and its facts, nothing left running alone. And restart.yml
refusing a rank alone: the command it prints, run as printed, restarts the group. The router in CT 100 (deploy.yml's
play 4) routes to rank 0 alone, also after the group's restart."""
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
MODEL = "/srv/models/Llama-3.1-8B-Instruct"
UNIT = "sglang-llama.service"
RANK1 = PROBE.replace("http://127.0.0.1:30000", "http://10.0.3.101:30000")   # rank 1 binds its bridge address


def ct(host, vmid, *argv):
    return host.check_output("pct exec %d --" % vmid + " %s" * len(argv), *argv)


def inventories():
    """The scenario's inventory (both ranks) over inventory/lab, as -i arguments."""
    return ["-i", os.path.join(ROOT, "inventory", "lab"), "-i", molecule_inventory()]


def deploy(*extra):
    return ansible_playbook(inventories() + [os.path.join(ROOT, "playbooks", "deploy.yml")] + list(extra))


def rank0_addr(host):
    return ct(host, 100, "ip", "-o", "-4", "addr", "show", "dev", "eth0").split()[3].split("/")[0]


def main_pid(host, vmid):
    return int(ct(host, vmid, "systemctl", "show", "-p", "MainPID", "--value", UNIT))


def cmdline(host, vmid):
    return ct(host, vmid, "cat", "/proc/%d/cmdline" % main_pid(host, vmid)).split("\0")


def test_two_ranks_serve_as_one_server(host):
    addr = rank0_addr(host)
    for vmid, rank in ((100, "0"), (101, "1")):
        assert ct(host, vmid, "systemctl", "is-active", UNIT) == "active"
        argv = cmdline(host, vmid)
        assert argv[argv.index("--nnodes") + 1] == "2" and argv[argv.index("--node-rank") + 1] == rank
        assert argv[argv.index("--dist-init-addr") + 1] == "%s:5000" % addr        # rank 0's default-route address
        assert argv[argv.index("--tp-size") + 1] == "2"
        # a rank restarted alone would wait for peers that never come: systemd leaves a crashed rank down
        assert ct(host, vmid, "systemctl", "show", "-p", "Restart", "--value", UNIT) == "no"
        env = ct(host, vmid, "cat", "/etc/sglang/llama.env")
        assert 'NCCL_SOCKET_IFNAME="eth0"' in env and 'GLOO_SOCKET_IFNAME="eth0"' in env
    # rank 0 serves the API, locked by its key; rank 1 only 0.5.9's health server (200, no API behind it)
    assert ct(host, 100, "python3", "-c", PROBE, "/health_generate") == "200"
    assert ct(host, 100, "python3", "-c", PROBE, "/v1/models") == "401"
    assert ct(host, 100, "python3", "-c", PROBE, "/v1/models", KEY) == "200"
    assert ct(host, 101, "python3", "-c", RANK1, "/health") == "200"
    assert ct(host, 100, "python3", "-c", RANK1, "/health") == "200"                # reachable from the router's CT
    assert ct(host, 101, "python3", "-c", RANK1, "/v1/models", KEY) == "404"
    # the ranks met: rank 1 reached rank 0's store (its connection is open) and both passed the meeting
    for vmid in (100, 101):
        log = ct(host, vmid, "cat", "/var/log/sglang/llama.log")
        assert "Init torch distributed ends." in log.rsplit("gpuserve launch", 1)[-1]


def router_workers(host):
    """The router's workers as [(url, is_healthy)], from its /workers API (with the key)."""
    status, body = ct(host, 100, "python3", "-c", ROUTER, "/workers", KEY).split(" ", 1)
    assert status == "200", status
    return sorted((w["url"], w["is_healthy"]) for w in json.loads(body)["workers"])


def generate_count(host, vmid):
    return int(ct(host, vmid, "sh", "-c", "grep -c '\"POST /generate' /var/log/sglang/llama.log || true"))


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


def wait_stopped(host, vmid, timeout=30):
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


def test_one_rank_down_restarts_both_and_check_mode_says_so(host):
    """Rank 1 stopped: rank 0, idle, ends with it (0.5.9's scheduler broadcasts over Gloo every loop), and its log
    names the echo; check mode says both would change and changes nothing; a run brings both up - the meeting is
    once, at start-up, so the ranks start together. Then a restart of the running group with rank 0's stop slow:
    were rank 1 started while the old rank 0 still runs, it would meet the old rendezvous and die at dist_init (this
    happened in CI, where it is a race the lab's quick stop usually wins); every rank is stopped before any starts."""
    ct(host, 101, "systemctl", "stop", UNIT)
    wait_stopped(host, 100)
    assert main_pid(host, 100) == 0 and main_pid(host, 101) == 0
    log0 = ct(host, 100, "cat", "/var/log/sglang/llama.log").rsplit("gpuserve launch", 1)[-1]
    assert re.search(r"Connection closed by peer \[10\.0\.3\.\d+\]:\d+", log0), log0[-2000:]
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
    addr = rank0_addr(host)
    pids = (main_pid(host, 100), main_pid(host, 101))
    ct(host, 101, "ip", "route", "add", "prohibit", addr + "/32")       # the CT's own firewall rule
    try:
        p = deploy()
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
    other = json.loads(original)
    other["revision"] = "0" * 40
    ct(host, 101, "python3", "-c", "import sys; open(sys.argv[1], 'w').write(sys.argv[2])", path, json.dumps(other))
    try:
        p = deploy("--tags", "group")
    finally:
        ct(host, 101, "python3", "-c", "import sys; open(sys.argv[1], 'w').write(sys.argv[2])", path, original)
    assert p.returncode != 0
    assert ("ct101 (rank 1 of group lab): the model revision - not the same as rank 0's (ct101: 000000000000, "
            "ct100: cddbd3b36b67) - pin one hf_model_revision for the group") in p.stdout, p.stdout[-3000:]
    assert "Nothing was launched." in p.stdout


def test_a_rank_failing_at_start_stops_the_other_and_is_named_with_its_facts(host):
    """Rank 1 meets rank 0, then dies of the seed's KV-pool error; rank 0 would wait on it in a collective: it is
    stopped, and its task names rank 1's failure with rank 1's numbers. A plain re-run then starts both again."""
    ct(host, 101, "python3", "-c", "import sys; open(sys.argv[1], 'w').write('kv_pool_oom_tp2_nextn_seed\\n')",
       MODEL + "/standin_scenario")
    try:
        p = deploy("--tags", "server", "-e", "sglang_server_restart=true")
    finally:
        ct(host, 101, "rm", "-f", MODEL + "/standin_scenario")
    out = p.stdout
    said = [line for line in out.splitlines() if "stopping this member" in line or "stopped because" in line
            or "kind:" in line]
    print("\n" + "\n".join(said))
    assert p.returncode != 0
    assert "fatal: [ct101]" in out and "kind: kv_pool_oom" in out, out[-4000:]
    assert "sglang-llama: stopping this member of group lab: ct101 (rank 1) failed" in out
    assert "stopped because ct101 (rank 1) of group lab failed:" in out and "Not enough memory" in out
    assert "mem_fraction_static: 0.85" in out                                  # rank 1's logged numbers
    for vmid in (100, 101):
        assert host.run("pct exec %d -- systemctl is-active %s" % (vmid, UNIT)).stdout.strip() != "active"
    again = deploy("--tags", "server")
    assert again.returncode == 0, again.stdout[-3000:]
    for vmid in (100, 101):
        assert ct(host, vmid, "systemctl", "is-active", UNIT) == "active"


def test_status_reads_the_group_as_a_whole_and_names_a_rank_lost_after_start_up(host):
    """Both ranks up: status.yml says the group serves, and rank 1's line says what its health means (0.5.9's health
    server there answers 200 whatever rank 0 does); diagnose.yml reads both. Rank 1 then dies (SIGKILL, as a crash; Restart=no leaves it
    down): rank 0, idle, ends at once as 0.5.9's does (its scheduler's next Gloo broadcast fails), and status.yml
    says the group does not serve, names both ranks - rank 0's failure the echo of rank 1's loss - and prints the
    command that restarts both. (The next test runs that command.)"""
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
    print("\n" + "\n".join(line for line in out.splitlines() if "group lab" in line or "sglang-llama:" in line))
    assert bad.returncode == 0, out[-3000:]                                     # a status, not a failure
    assert "group lab NOT serving: ct100 (rank 0) is failed/failed, its last launch failed: nccl_error; ct101 (rank 1) " \
           "is failed/failed" in out, out[-3000:]
    assert "still run" not in [x for x in out.splitlines() if "group lab NOT serving" in x][0]
    assert ("restart them together with `ansible-playbook -i <inventory> playbooks/deploy.yml --tags server -e "
            "sglang_server_restart=true --limit pvehost,ct100,ct101`") in out
    # rank 0's own log says why it ended: the echo of rank 1's loss, with rank 1's address
    log0 = ct(host, 100, "cat", "/var/log/sglang/llama.log").rsplit("gpuserve launch", 1)[-1]
    assert re.search(r"Connection closed by peer \[10\.0\.3\.\d+\]:\d+", log0), log0[-2000:]   # CT 101 on lxcbr0


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
        log = ct(host, vmid, "cat", "/var/log/sglang/llama.log")
        assert "Init torch distributed ends." in log.rsplit("gpuserve launch", 1)[-1]
    # the router (not in the command's tags) took the restarted rank 0 back at its next health check (2 s here)
    deadline = time.time() + 30
    while router_workers(host) != [("http://127.0.0.1:30000", True)] and time.time() < deadline:
        time.sleep(0.5)
    assert router_workers(host) == [("http://127.0.0.1:30000", True)]
    assert ct(host, 100, "python3", "-c", ROUTER_SEND, KEY, "4") == "4"
