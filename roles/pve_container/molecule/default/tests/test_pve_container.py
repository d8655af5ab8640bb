"""CT 101 made by role pve_container through the lab's Proxmox API stand-in: a real, running LXC guest with the
asked options, adopted in place (the marker survives a memory change), a create-only change refused by name, and
every request the role sent valid against the real PVE 9 schema."""
import json

testinfra_hosts = ["ansible://pvehost"]


def conf(host):
    return dict(line.split(": ", 1) for line in host.file("/etc/pve/lxc/101.conf").content_string.splitlines()
                if ": " in line)


def test_ct101_runs_with_the_asked_options_and_its_static_address(host):
    c = conf(host)
    assert host.check_output("pct status 101") == "status: running"
    assert (c["hostname"], c["cores"], c["swap"], c["onboot"]) == ("ct101", "2", "512", "1")
    assert c["rootfs"] == "local:101/vm-101-disk-0.raw,size=8G"
    assert c["net0"].startswith("name=eth0,bridge=lxcbr0,ip=10.0.3.101/24,gw=10.0.3.1,type=veth,hwaddr=")
    assert "inet 10.0.3.101/24" in host.check_output("pct exec 101 -- ip -4 -o addr show eth0")
    assert host.check_output("pct exec 101 -- hostname") == "ct101"


def test_ct100_reaches_ct101_over_the_bridge(host):
    probe = "import socket; socket.create_connection(('10.0.3.101', 22), 3); print('ok')"
    assert host.check_output("pct exec 100 -- python3 -c %s", probe) == "ok"


def test_memory_changed_in_place_and_only_memory_was_sent(host):
    r = json.loads(host.file("/root/gpuserve-pve-memory.json").content_string)
    assert r["changed"] is True and r["created"] is False and r["changes"] == {"memory": "3072"}
    assert conf(host)["memory"] == "3072"
    assert host.file("/var/lib/lxc/101/rootfs/root/gpuserve-marker").exists, "CT 101 was recreated"


def test_a_create_only_change_is_refused_by_name(host):
    r = json.loads(host.file("/root/gpuserve-pve-refused.json").content_string)
    assert r["failed"] is True
    assert "CT 101 on pve-lab: unprivileged: is None, asked '1' (fixed at creation" in r["msg"], r["msg"]
    assert "unprivileged" not in conf(host)


def test_every_request_matched_the_pve9_schema(host):
    assert not host.file("/run/gpuserve-lab/pve-api-violations.jsonl").exists
