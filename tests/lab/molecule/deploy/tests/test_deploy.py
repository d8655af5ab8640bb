"""deploy.yml on the lab, two replicas: GPU 0 reaches CT 100 and GPU 1 CT 101 (ENXIO, not EPERM), SGLang (stand-in)
answers in both, and the router in CT 100 spreads requests over both."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))   # tests/lab/molecule
from lab_http import KEY, PROBE, ROUTER, ROUTER_SEND  # noqa: E402  (shared with the other lab scenarios)

testinfra_hosts = ["ansible://pvehost"]


def ct(host, *argv, vmid=100):
    return host.check_output("pct exec %d --" % vmid + " %s" * len(argv), *argv)


def test_gpu0_passthrough_is_in_the_config_and_opens_inside(host):
    conf = host.file("/etc/pve/lxc/100.conf").content_string
    assert "dev0: /dev/nvidia0,mode=0666" in conf and "/dev/nvidia1" not in conf
    out = ct(host, "python3", "-c",
             "import errno, os\ntry:\n    os.open('/dev/nvidia0', os.O_RDWR)\nexcept OSError as e:\n    print(errno.errorcode[e.errno])")
    assert out == "ENXIO"


def test_sglang_unit_is_active_healthy_and_locked_by_its_key(host):
    assert ct(host, "systemctl", "is-active", "sglang-llama.service") == "active"
    assert ct(host, "python3", "-c", PROBE, "/health_generate") == "200"
    assert ct(host, "python3", "-c", PROBE, "/v1/models") == "401"
    assert ct(host, "python3", "-c", PROBE, "/v1/models", KEY) == "200"


def test_secrets_are_files_only_root_and_the_service_read(host):
    assert ct(host, "stat", "-c", "%a %U", "/etc/sglang/hf-token") == "600 root"
    assert ct(host, "stat", "-c", "%a %U %G", "/etc/sglang/llama.yaml") == "640 root sglang"
    assert ct(host, "stat", "-c", "%a %U %G", "/etc/sglang") == "750 root sglang"


def test_the_venv_serves_the_real_sglang_package_and_the_unit_uses_it(host):
    assert ct(host, "readlink", "/opt/sglang/venv").startswith("/opt/sglang/venv.builds/")
    probe = "import importlib.metadata as m; print(m.version('sglang'))"
    assert ct(host, "/opt/sglang/venv/bin/python", "-c", probe) == "0.5.9"
    unit = ct(host, "systemctl", "cat", "sglang-llama.service")
    assert 'ExecStart="/opt/sglang/venv/bin/python" "-m" "sglang.launch_server"' in unit


def test_the_model_came_from_the_local_hub_complete_and_verified(host):
    import json
    manifest = json.loads(ct(host, "cat", "/srv/models/Llama-3.1-8B-Instruct/.gpuserve-snapshot.json"))
    assert manifest["complete"] is True and manifest["repo_id"] == "gpuserve-lab/Llama-3.1-8B-Instruct"
    assert manifest["revision"] == "cddbd3b36b67d5afd1f423f823c0254f263ad48c"
    names = sorted(f["path"] for f in manifest["files"])
    assert "config.json" in names and "model-00001-of-00002.safetensors" in names
    # the model's own account's (the huggingface_hub library ran as it, never as root) and read-only to the service
    assert ct(host, "stat", "-c", "%U %a", "/srv/models/Llama-3.1-8B-Instruct/config.json") == "gpuserve-models 644"
    assert ct(host, "runuser", "-u", "sglang", "--", "head", "-c", "1", "/srv/models/Llama-3.1-8B-Instruct/config.json")
    assert host.run("pct exec 100 -- runuser -u sglang -- touch /srv/models/Llama-3.1-8B-Instruct/config.json").rc != 0
    # fetched by the SGLang venv's own huggingface_hub (the lock's version), its bookkeeping not left behind
    assert manifest["downloader"]["huggingface_hub"] == "0.36.2"
    assert ".cache" not in ct(host, "ls", "-a", "/srv/models/Llama-3.1-8B-Instruct").split()


def test_the_ct_got_the_hosts_userspace_driver_without_kernel_modules(host):
    libs = ct(host, "ls", "/usr/lib/x86_64-linux-gnu/").split()
    assert [n for n in libs if n.startswith("libnvidia-ml.so.")] == ["libnvidia-ml.so.570.153.02"]
    runs = ct(host, "cat", "/var/log/gpuserve-fake-nvidia-installer.log").splitlines()
    assert runs == ["--silent --no-kernel-modules --no-x-check --no-nouveau-check --no-nvidia-modprobe"]


def test_the_unit_runs_exactly_the_argv_the_module_built(host):
    """One argv builder (module_utils/server/argv.py server_argv) for the unit template and the module: systemd's parsed
    ExecStart, the module's launch record and the running process's command line are the same list."""
    import json
    state = json.loads(ct(host, "cat", "/var/lib/gpuserve-sglang/llama.state.json"))
    exec_start = ct(host, "systemctl", "show", "-p", "ExecStart", "--value", "sglang-llama.service")
    # "{ path=/opt/... ; argv[]=/opt/sglang/venv/bin/python -m sglang.launch_server ... ; ignore_errors=no ; ... }"
    unit_argv = exec_start.split("argv[]=", 1)[1].split(" ; ", 1)[0].split()
    pid = ct(host, "systemctl", "show", "-p", "MainPID", "--value", "sglang-llama.service")
    cmdline = json.loads(ct(host, "python3", "-c", "import json, sys; print(json.dumps(open('/proc/%s/cmdline' % "
                            "sys.argv[1]).read().split(chr(0))[:-1]))", pid))
    assert state["argv"] == unit_argv, (state["argv"], unit_argv)
    assert cmdline == unit_argv and "--config" in unit_argv
    assert not any("lab-api-key" in a for a in unit_argv)   # the key is in the --config file, not in argv


def test_the_router_fronts_both_replicas_with_the_replicas_key(host):
    """deploy.yml's play 4: the router (sglang-router 0.3.2) in front of the inventory's two replicas (CT 100 on
    loopback, CT 101 over the lab bridge), its one key the replicas', a keyless request refused."""
    import json  # pylint: disable=import-outside-toplevel
    assert ct(host, "systemctl", "is-active", "sglang-router-router.service") == "active"
    assert ct(host, "python3", "-c", ROUTER, "/workers") == "401"
    status, body = ct(host, "python3", "-c", ROUTER, "/workers", KEY).split(" ", 1)
    assert status == "200"
    assert sorted((w["url"], w["is_healthy"]) for w in json.loads(body)["workers"]) == [
        ("http://10.0.3.101:30000", True), ("http://127.0.0.1:30000", True)]


def test_ct101_is_a_whole_replica_of_its_own(host):
    """CT 101 (made through the lab's Proxmox API, adopted by deploy.yml): GPU 1 passed and open, its own venv,
    model and unit, bound to its bridge address only, locked by the key."""
    conf = host.file("/etc/pve/lxc/101.conf").content_string
    assert "dev0: /dev/nvidia1,mode=0666" in conf and "/dev/nvidia0," not in conf
    out = ct(host, "python3", "-c", "import errno, os\ntry:\n    os.open('/dev/nvidia1', os.O_RDWR)\n"
             "except OSError as e:\n    print(errno.errorcode[e.errno])", vmid=101)
    assert out == "ENXIO"
    assert ct(host, "systemctl", "is-active", "sglang-llama.service", vmid=101) == "active"
    assert ct(host, "readlink", "/opt/sglang/venv", vmid=101).startswith("/opt/sglang/venv.builds/")
    assert '"complete": true' in ct(host, "cat", "/srv/models/Llama-3.1-8B-Instruct/.gpuserve-snapshot.json", vmid=101)
    remote = PROBE.replace("http://127.0.0.1:30000", "http://10.0.3.101:30000")
    assert ct(host, "python3", "-c", remote, "/v1/models") == "401"        # from CT 100, over the bridge
    assert ct(host, "python3", "-c", remote, "/v1/models", KEY) == "200"
    listening = ct(host, "ss", "-Hltn", "sport = :30000", vmid=101).split()
    assert "10.0.3.101:30000" in listening and "0.0.0.0:30000" not in listening


def test_requests_through_the_router_reach_both_replicas(host):
    """40 requests with distinct prompts, one after the other, through the router: every one answered by one of the
    two replicas (counted in each replica's own server log; the split is printed, not asserted - sglang-router 0.3.2's
    cache_aware sent all 40 to one replica in two runs, as it may while the load is balanced: the rollout scenario
    asserts that both replicas answer under load)."""
    before = [int(ct(host, "sh", "-c", "grep -c '\"POST /generate' /var/log/sglang/llama.log || true", vmid=v))
              for v in (100, 101)]
    assert ct(host, "python3", "-c", ROUTER_SEND, KEY, "40") == "40"
    after = [int(ct(host, "sh", "-c", "grep -c '\"POST /generate' /var/log/sglang/llama.log || true", vmid=v))
             for v in (100, 101)]
    served = [a - b for a, b in zip(after, before)]
    print("requests answered per replica through the router: CT 100 %d, CT 101 %d" % tuple(served))
    assert sum(served) == 40


def test_undeploy_removes_what_deploy_put_in_place_and_keeps_the_rest(host):
    """#47 item 4, last (it takes the deployment away): undeploy.yml in check mode changes nothing; then the routers,
    both servers (units, secrets, records), the venvs and the passthrough lines go, the operator's own line in the CT
    config, the model, the logs and the CTs stay; a second run changes nothing; undeploy_purge takes the model and
    the logs too."""
    import re  # pylint: disable=import-outside-toplevel
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    from lab_runbook import ROOT, ansible_playbook, molecule_inventory  # pylint: disable=import-outside-toplevel
    inventories = ["-i", os.path.join(ROOT, "inventory", "lab"), "-i", molecule_inventory()]
    undeploy = os.path.join(ROOT, "playbooks", "undeploy.yml")

    def changed(out):
        return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\S+)\s+: ok=\d+\s+changed=(\d+)", out, re.M)}

    operator = "lxc.cgroup2.devices.allow: c 10:200 rwm"        # /dev/net/tun: the operator's, not an NVIDIA major
    host.check_output("echo '%s' >> /etc/pve/lxc/100.conf" % operator)
    look = ansible_playbook(inventories + [undeploy, "--check", "--diff"])
    assert look.returncode == 0, look.stdout[-3000:]
    assert changed(look.stdout)["ct100"] > 0 and changed(look.stdout)["pvehost"] > 0
    assert ct(host, "systemctl", "is-active", "sglang-llama.service") == "active"          # check mode: nothing
    assert "dev0: /dev/nvidia0" in host.file("/etc/pve/lxc/100.conf").content_string
    run = ansible_playbook(inventories + [undeploy])
    assert run.returncode == 0, run.stdout[-3000:]
    for vmid in (100, 101):
        gone = ["/etc/systemd/system/sglang-llama.service", "/etc/sglang/llama.env", "/etc/sglang/llama.yaml",
                "/etc/sglang/hf-token", "/var/lib/gpuserve-sglang/llama.state.json", "/var/lib/gpuserve-sglang/llama.last-good",
                "/etc/logrotate.d/sglang-llama", "/opt/sglang/venv", "/opt/sglang/venv.builds"]
        left = host.run("pct exec %d -- ls -d %s" % (vmid, " ".join(gone))).stdout.split()
        assert left == [], (vmid, left)
        assert host.run("pct exec %d -- systemctl is-active sglang-llama.service" % vmid).stdout.strip() != "active"
        assert ct(host, "test", "-s", "/var/log/sglang/llama.log", vmid=vmid) == ""                   # kept
        assert ct(host, "test", "-f", "/srv/models/Llama-3.1-8B-Instruct/.gpuserve-snapshot.json", vmid=vmid) == ""
    router = ["/etc/systemd/system/sglang-router-router.service", "/etc/sglang-router/router.key", "/opt/sglang-router/venv"]
    assert host.run("pct exec 100 -- ls -d %s" % " ".join(router)).stdout.split() == []
    conf = host.file("/etc/pve/lxc/100.conf").content_string
    assert "/dev/nvidia" not in conf and operator in conf
    assert "/dev/nvidia" not in host.file("/etc/pve/lxc/101.conf").content_string
    again = ansible_playbook(inventories + [undeploy])
    assert again.returncode == 0 and set(changed(again.stdout).values()) == {0}, again.stdout[-3000:]
    purge = ansible_playbook(inventories + [undeploy, "-e", "undeploy_purge=true"])
    assert purge.returncode == 0, purge.stdout[-3000:]
    for vmid in (100, 101):
        assert host.run("pct exec %d -- ls -d /srv/models/Llama-3.1-8B-Instruct /var/log/sglang/llama.log"
                        % vmid).stdout.split() == []
    print("undeploy: check mode changed %s, then removed; the second run changed=0; purge took the model and logs"
          % changed(look.stdout))
