"""After the group's tests (test_multinode.py): the same two containers as two replicas of the real SGLang 0.5.9 behind
the real router in CT 100 (#59 item 2, the part this machine's disk allows): deploy.yml makes them replicas (no
sglang_server_group, --tp-size 1 each), then rollout.yml restarts them one at a time while requests go through the
router - none may fail - and a rollout whose launch cannot start stops at the first replica, the other untouched,
again with no failed request.

Then what deploy.yml put in place in each (the passthrough, secrets, model, venv and argv: the stand-in deploy
scenario's checks, here on the real server), the two containers as a prefill/decode pair of the real 0.5.9 behind the
router in PD mode (#59 item 3: Mooncake over TCP between them), and undeploy.yml last.

Real here: both servers, the router, the drain through 0.5.9's /get_load, every launch, the KV moved between the two
containers. Not here: an upgrade of the
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
from test_multinode import (GREEDY, LOG, MODEL, ROOT, UNIT, ct, eth0_addr, generate_count, inventories,  # noqa: E402
                            main_pid, router_workers, this_launch, tp1_greedy)

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


# -- what deploy.yml put in place for two replicas (the stand-in deploy scenario's checks, here on the real SGLang) ---
def test_each_gpu_reaches_its_own_container_and_opens_inside(host):
    """GPU 0 in CT 100 and GPU 1 in CT 101 (devN lines), each opened inside its container: ENXIO (allowed; the lab's
    device nodes have no driver behind them), not EPERM; the userspace driver came without kernel modules."""
    for vmid, mine, other in ((100, "nvidia0", "nvidia1"), (101, "nvidia1", "nvidia0")):
        conf = host.file("/etc/pve/lxc/%d.conf" % vmid).content_string
        assert "dev0: /dev/%s,mode=0666" % mine in conf and "/dev/%s," % other not in conf
        out = ct(host, vmid, "python3", "-c", "import errno, os\ntry:\n    os.open('/dev/%s', os.O_RDWR)\n"
                 "except OSError as e:\n    print(errno.errorcode[e.errno])" % mine)
        assert out == "ENXIO"
        libs = ct(host, vmid, "ls", "/usr/lib/x86_64-linux-gnu/").split()
        assert [n for n in libs if n.startswith("libnvidia-ml.so.")] == ["libnvidia-ml.so.570.153.02"]
        runs = ct(host, vmid, "cat", "/var/log/gpuserve-fake-nvidia-installer.log").splitlines()
        assert runs == ["--silent --no-kernel-modules --no-x-check --no-nouveau-check --no-nvidia-modprobe"]


def test_secrets_model_and_venv_are_each_replicas_own_and_the_unit_runs_the_argv_the_module_built(host):
    """In each container: the secrets root's (the config with the key readable by the service's group only), the
    model from the lab's Hub complete at its revision, the model account's and read-only to the service, the venv
    a sealed build with Mooncake's engine beside SGLang; systemd's parsed ExecStart, the launch record and the
    process's command line are the same list, the key in none of them."""
    for vmid in (100, 101):
        assert ct(host, vmid, "stat", "-c", "%a %U", "/etc/sglang/hf-token") == "600 root"
        assert ct(host, vmid, "stat", "-c", "%a %U %G", "/etc/sglang/tiny.yaml") == "640 root sglang"
        assert ct(host, vmid, "stat", "-c", "%a %U %G", "/etc/sglang") == "750 root sglang"
        manifest = json.loads(ct(host, vmid, "cat", MODEL + "/.gpuserve-snapshot.json"))
        assert manifest["complete"] is True and manifest["repo_id"] == "gpuserve-lab/tiny-llama"
        assert manifest["revision"] == "39072edf7903d4d5d6251ea1ff857e98bf5c6a7c"
        assert ct(host, vmid, "stat", "-c", "%U %a", MODEL + "/config.json") == "gpuserve-models 644"
        assert host.run("pct exec %d -- runuser -u sglang -- touch %s/config.json" % (vmid, MODEL)).rc != 0
        assert ct(host, vmid, "readlink", "/opt/sglang/venv").startswith("/opt/sglang/venv.builds/")
        probe = "import importlib.metadata as m; print(m.version('sglang'), m.version('mooncake-transfer-engine-non-cuda'))"
        assert ct(host, vmid, "/opt/sglang/venv/bin/python", "-c", probe) == "0.5.9 0.3.13.post1"
        state = json.loads(ct(host, vmid, "cat", "/var/lib/gpuserve-sglang/tiny.state.json"))
        exec_start = ct(host, vmid, "systemctl", "show", "-p", "ExecStart", "--value", UNIT)
        unit_argv = exec_start.split("argv[]=", 1)[1].split(" ; ", 1)[0].split()
        cmdline = ct(host, vmid, "cat", "/proc/%d/cmdline" % main_pid(host, vmid)).split("\0")[:-1]
        assert state["argv"] == unit_argv == cmdline, (state["argv"], unit_argv, cmdline)
        assert "--config" in unit_argv and not any(KEY in a for a in unit_argv)
    # CT 101 bound to its bridge address alone (reached by the router over the bridge)
    listening = ct(host, 101, "ss", "-Hltn", "sport = :30000").split()
    assert "10.0.3.101:30000" in listening and "0.0.0.0:30000" not in listening


# -- the same two containers as a prefill/decode pair (#59 item 3) ---------------------------------------------------
def pd_vars(prefill_addr):
    """CT 100 the prefill server, CT 101 the decode server, each bound to its bridge address (the decode server reaches
    the prefill's bootstrap server at the address of the prefill's URL, and the prefill registers there at its own
    --host: loopback would not do); float32 as the --tp-size 1 server it is compared with; Mooncake over TCP
    (MC_FORCE_TCP, lab-only: these containers have no RDMA device)."""
    hosts = {"ct100": prefill_addr, "ct101": "10.0.3.101"}
    return {"sglang_server_args": "{{ gpuserve_lab_cpu_args | combine({'dtype': 'float32'}) }}",
            "sglang_server_public_env": "{{ gpuserve_lab_cpu_env | combine({'MC_FORCE_TCP': '1'}) }}",
            "sglang_server_disaggregation_mode": "{{ %r.get(inventory_hostname, '') }}"
                                                 % {"ct100": "prefill", "ct101": "decode"},
            "sglang_server_host": "{{ %r.get(inventory_hostname, '127.0.0.1') }}" % hosts,
            "sglang_server_url": "http://{{ sglang_server_host }}:30000"}


def test_the_two_containers_as_a_prefill_decode_pair_answer_through_the_router_as_one_plain_server(host):
    """deploy.yml (--tags server,router) with CT 100 a prefill and CT 101 a decode server of the real SGLang 0.5.9, the
    transfer engine Mooncake's over TCP (in the venv since the first build): the router becomes sglang-router 0.3.2
    in PD mode with the prefill's bootstrap port; three prompts at temperature 0 through it give the token ids a
    plain --tp-size 1 server gives, and the decode server's log shows decode batches only - the prompts' KV came
    from the prefill server over Mooncake, not from a prefill of its own."""
    prefill = eth0_addr(host, 100)
    p = playbook("deploy.yml", pd_vars(prefill), "--tags", "server,router")
    assert p.returncode == 0, p.stdout[-4000:]
    for vmid, mode in ((100, "prefill"), (101, "decode")):
        argv = ct(host, vmid, "cat", "/proc/%d/cmdline" % main_pid(host, vmid)).split("\0")
        assert argv[argv.index("--disaggregation-mode") + 1] == mode
        assert argv[argv.index("--disaggregation-transfer-backend") + 1] == "mooncake"
        assert argv[argv.index("--disaggregation-bootstrap-port") + 1] == "8998"
    # the router's argv as its launcher execs it (the running router renames itself sglang::router: its cmdline is not
    # there to read)
    router = json.loads(ct(host, 100, "cat", "/etc/sglang-router/router.json"))
    assert ct(host, 100, "systemctl", "is-active", "sglang-router-router.service") == "active"
    assert "--pd-disaggregation" in router
    assert router[router.index("--prefill") + 1:router.index("--prefill") + 3] == ["http://%s:30000" % prefill, "8998"]
    assert router[router.index("--decode") + 1] == "http://10.0.3.101:30000"
    sent = generate_count(host, 100)
    deadline = time.time() + 120
    while True:     # the router admits the pair once its health checks pass
        got = host.run("pct exec 100 -- python3 -c %s 30080 %s", GREEDY, KEY)
        if got.rc == 0 or time.time() > deadline:
            break
        time.sleep(3)
    assert got.rc == 0, (got.stderr[-2000:], ct(host, 101, "tail", "-n", "30", LOG))
    pd = json.loads(got.stdout)
    single = tp1_greedy(host)
    print("\ngreedy token ids, prefill CT 100 + decode CT 101 through the router: %s\n"
          "                  a plain --tp-size 1 server:                        %s" % (pd, single))
    assert all(len(ids) == 16 for ids in pd) and pd == single
    decode = this_launch(host, 101)
    assert "Decode batch" in decode and "Prefill batch" not in decode, decode[-3000:]
    # the router sent each prompt to the prefill server too (its access log), which moved the KV over Mooncake's TCP
    assert generate_count(host, 100) - sent >= 3
    assert 'MC_FORCE_TCP="1"' in ct(host, 101, "cat", "/etc/sglang/tiny.env")


# -- last: it takes the deployment away -------------------------------------------------------------------------------
def test_undeploy_removes_what_deploy_put_in_place_and_keeps_the_rest(host):
    """#47 item 4: undeploy.yml in check mode changes nothing; then the router, both servers (units, secrets,
    records), the venvs and the passthrough lines go, the operator's own line in the CT config, the model, the logs
    and the CTs stay; a second run changes nothing; undeploy_purge takes the model and the logs too."""
    import re  # pylint: disable=import-outside-toplevel

    def changed(out):
        return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\S+)\s+: ok=\d+\s+changed=(\d+)", out, re.M)}

    undeploy = os.path.join(ROOT, "playbooks", "undeploy.yml")
    operator = "lxc.cgroup2.devices.allow: c 10:200 rwm"        # /dev/net/tun: the operator's, not an NVIDIA major
    host.check_output("echo '%s' >> /etc/pve/lxc/100.conf" % operator)
    look = ansible_playbook(inventories() + [undeploy, "--check", "--diff"])
    assert look.returncode == 0, look.stdout[-3000:]
    assert changed(look.stdout)["ct100"] > 0 and changed(look.stdout)["pvehost"] > 0
    assert ct(host, 100, "systemctl", "is-active", UNIT) == "active"          # check mode: nothing
    assert "dev0: /dev/nvidia0" in host.file("/etc/pve/lxc/100.conf").content_string
    run = ansible_playbook(inventories() + [undeploy])
    assert run.returncode == 0, run.stdout[-3000:]
    for vmid in (100, 101):
        gone = ["/etc/systemd/system/" + UNIT, "/etc/sglang/tiny.env", "/etc/sglang/tiny.yaml", "/etc/sglang/hf-token",
                "/var/lib/gpuserve-sglang/tiny.state.json", "/var/lib/gpuserve-sglang/tiny.last-good",
                "/etc/logrotate.d/sglang-tiny", "/opt/sglang/venv", "/opt/sglang/venv.builds"]
        left = host.run("pct exec %d -- ls -d %s" % (vmid, " ".join(gone))).stdout.split()
        assert left == [], (vmid, left)
        assert host.run("pct exec %d -- systemctl is-active %s" % (vmid, UNIT)).stdout.strip() != "active"
        assert ct(host, vmid, "test", "-s", LOG) == ""                                      # kept
        assert ct(host, vmid, "test", "-f", MODEL + "/.gpuserve-snapshot.json") == ""
    router = ["/etc/systemd/system/sglang-router-router.service", "/etc/sglang-router/router.key", "/opt/sglang-router/venv"]
    assert host.run("pct exec 100 -- ls -d %s" % " ".join(router)).stdout.split() == []
    conf = host.file("/etc/pve/lxc/100.conf").content_string
    assert "/dev/nvidia" not in conf and operator in conf
    assert "/dev/nvidia" not in host.file("/etc/pve/lxc/101.conf").content_string
    again = ansible_playbook(inventories() + [undeploy])
    assert again.returncode == 0 and set(changed(again.stdout).values()) == {0}, again.stdout[-3000:]
    purge = ansible_playbook(inventories() + [undeploy, "-e", "undeploy_purge=true"])
    assert purge.returncode == 0, purge.stdout[-3000:]
    for vmid in (100, 101):
        assert host.run("pct exec %d -- ls -d %s %s" % (vmid, MODEL, LOG)).stdout.split() == []
    print("undeploy: check mode changed %s, then removed; the second run changed=0; purge took the model and logs"
          % changed(look.stdout))
