"""Raw passthrough of GPU 0: exact c MAJOR:MINOR rules and bind mounts in the main section, operator
lines and the snapshot section untouched; GPU 0 opens with ENXIO inside, GPU 1 is denied (EPERM)."""
import json
import os

testinfra_hosts = ["ansible://pvehost"]

with open(os.path.join(os.environ["GPUSERVE_ROOT"], "tests", "lab", "probes", "open_nodes.py")) as _fh:
    OPEN = _fh.read()   # the probe run inside CT 100 (ENXIO = allowed, EPERM = denied, ENOENT = absent)


def conf(host):
    return host.file("/etc/pve/lxc/100.conf").content_string


def test_main_section_ends_with_exact_rules_and_mounts_before_the_snapshot(host):
    text = conf(host)
    main, snap = text.split("[before-gpu]\n")
    assert main.endswith("\n\n"), "the blank line before the snapshot section stays"
    assert main.splitlines()[-11:-1] == [
        "lxc.cgroup2.devices.allow: c 226:* rwm",
        "lxc.mount.entry: /dev/dri dev/dri none bind,optional,create=dir",
        "lxc.cgroup2.devices.allow: c 195:0 rwm",
        "lxc.cgroup2.devices.allow: c 195:255 rwm",
        "lxc.cgroup2.devices.allow: c 508:0 rwm",
        "lxc.cgroup2.devices.allow: c 508:1 rwm",
        "lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file",
        "lxc.mount.entry: /dev/nvidiactl dev/nvidiactl none bind,optional,create=file",
        "lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file",
        "lxc.mount.entry: /dev/nvidia-uvm-tools dev/nvidia-uvm-tools none bind,optional,create=file",
    ]
    assert "#operator: intel iGPU for transcoding" in main.splitlines()
    assert snap == "arch: amd64\nhostname: ct100\nlxc.cgroup2.devices.allow: c 195:* rwm\nsnaptime: 1764000000\n"
    assert "dev0:" not in text


def test_gpu0_and_uvm_are_allowed_and_gpu1_is_not_passed(host):
    cmd = host.run("pct exec 100 -- python3 -c %s /dev/nvidia0 /dev/nvidiactl /dev/nvidia-uvm /dev/nvidia1", OPEN)
    assert json.loads(cmd.stdout) == {"/dev/nvidia0": "ENXIO", "/dev/nvidiactl": "ENXIO",
                                      "/dev/nvidia-uvm": "ENXIO", "/dev/nvidia1": "ENOENT"}


def test_a_node_for_gpu1_made_inside_the_ct_is_denied_by_the_exact_rules(host):
    host.check_output("pct exec 100 -- rm -f /root/nv1")
    host.check_output("pct exec 100 -- mknod /root/nv1 c 195 1")
    cmd = host.run("pct exec 100 -- python3 -c %s /root/nv1", OPEN)
    assert json.loads(cmd.stdout) == {"/root/nv1": "EPERM"}
