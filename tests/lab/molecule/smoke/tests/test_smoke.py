"""The lab works: CT 100 is a real nested guest reached through pct, and argv survives byte for byte.

File contents are compared by sha256 computed where the file lives: testinfra's ansible backend
strips trailing newlines from command output, which would hide exactly the bytes we check.
"""
import hashlib
import os

import yaml

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
with open(os.path.join(HERE, "vars", "smoke.yml")) as fh:
    VARS = yaml.safe_load(fh)


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def sha256_of(host, path):
    return host.check_output("sha256sum %s" % path).split()[0]


testinfra_hosts = ["ansible://ct100", "ansible://pvehost"]


def test_guest_got_the_file_and_is_the_guest_not_the_host(host):
    if host.backend.get_hostname() != "ct100":
        return
    assert host.check_output("hostname") == "ct100"
    f = host.file("/etc/gpuserve-lab-smoke")
    assert sha256_of(host, f.path) == sha256(b"converged by gpuserve.sglang.pct into ct100\n")
    assert f.mode == 0o644


def test_nasty_argument_arrived_byte_for_byte(host):
    if host.backend.get_hostname() != "ct100":
        return
    assert sha256_of(host, VARS["smoke_nasty_path"]) == sha256(VARS["smoke_nasty_arg"].encode())
    assert sha256_of(host, VARS["smoke_nasty_path"] + ".upstream") == sha256(VARS["smoke_nasty_arg"].encode())


def test_host_sees_the_guest_rootfs_and_the_fake_gpus(host):
    if host.backend.get_hostname() != "pvehost":
        return
    assert host.check_output("pct status 100") == "status: running"
    rootfs = "/var/lib/lxc/100/rootfs"
    assert sha256_of(host, rootfs + VARS["smoke_nasty_path"]) == sha256(VARS["smoke_nasty_arg"].encode())
    # fake GPUs: char 195:0 and 195:255 (stat prints majors/minors in hex)
    assert host.check_output("stat -c %F:%t:%T /dev/nvidia0 /dev/nvidiactl").splitlines() == \
        ["character special file:c3:0", "character special file:c3:ff"]


def test_pct_stand_in_refuses_what_proxmox_refuses_and_changes_nothing(host):
    if host.backend.get_hostname() != "pvehost":
        return

    def pct(args):
        # pct exits 255 on errors, which testinfra's ssh backend takes for an ssh failure: read rc in-band
        out = host.check_output("pct %s 2>&1; echo rc=$?" % args)
        return out.rsplit("rc=", 1)[1], out

    before = host.check_output("sha256sum /etc/pve/lxc/100.conf")
    rc, out = pct("set 100 --dev7 /dev/nvidia9,mode=0666")
    assert rc == "255" and "Device /dev/nvidia9 does not exist" in out
    rc, out = pct("set 100 --lxc.cgroup2.devices.allow 'c 195:* rwm'")
    assert rc == "255" and "Unknown option: lxc.cgroup2.devices.allow" in out
    rc, out = pct("status 999")
    assert rc == "255" and "999.conf' does not exist" in out
    assert host.check_output("sha256sum /etc/pve/lxc/100.conf") == before
