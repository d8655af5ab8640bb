"""devN passthrough: the CT config has one devN per node and every node opens inside CT 100 with ENXIO
(allowed by the device cgroup; no driver behind the lab's fake nodes)."""
import json
import os

testinfra_hosts = ["ansible://pvehost"]

NODES = ["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]
with open(os.path.join(os.environ["GPUSERVE_ROOT"], "tests", "lab", "probes", "open_nodes.py")) as _fh:
    OPEN = _fh.read()   # the probe run inside CT 100 (ENXIO = allowed, EPERM = denied, ENOENT = absent)


def guest_open(host, nodes):
    cmd = host.run("pct exec 100 -- python3 -c %s" + " %s" * len(nodes), OPEN, *nodes)
    assert cmd.rc == 0, cmd.stderr
    return json.loads(cmd.stdout)


def test_config_has_one_devn_per_node_with_mode_and_gid(host):
    conf = host.file("/etc/pve/lxc/100.conf").content_string
    devs = sorted(line for line in conf.splitlines() if line.startswith("dev"))
    assert devs == ["dev%d: %s,gid=44,mode=0666" % (i, p) for i, p in enumerate(NODES)]
    assert "lxc.cgroup" not in conf, "devn mode writes no raw lines"


def test_every_node_is_allowed_inside_the_ct_enxio_not_eperm(host):
    assert guest_open(host, NODES) == dict((p, "ENXIO") for p in NODES)


def test_nodes_inside_carry_the_host_major_minor_mode_and_group(host):
    out = host.check_output("pct exec 100 -- stat -c %%n:%%t:%%T:%%a:%%g %s %s %s", *NODES[:3])
    assert out.splitlines() == ["/dev/nvidia0:c3:0:666:44", "/dev/nvidia1:c3:1:666:44", "/dev/nvidiactl:c3:ff:666:44"]


def test_a_backup_of_the_original_config_was_kept_outside_etc_pve(host):
    backups = host.check_output("ls /var/lib/gpuserve-sglang/pve-backups").split()
    assert backups and all(b.startswith("100.conf.") for b in backups)
    first = host.file("/var/lib/gpuserve-sglang/pve-backups/" + sorted(backups)[0]).content_string
    assert "dev0" not in first and "hostname: ct100" in first
