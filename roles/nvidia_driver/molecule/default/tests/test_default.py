"""nvidia_driver on the lab host: the pinned installer ran once with the right flags, nouveau is
blacklisted, the units that make nvidia-uvm exist before the guests are enabled; a kernel update whose module DKMS
did not build gets it built by the role."""

import os
import re
import sys
import time

sys.path.insert(0, os.path.join(os.environ["GPUSERVE_ROOT"], "tests", "lab", "molecule"))
from lab_runbook import ansible_playbook, molecule_inventory  # noqa: E402  (shared with the lab's scenarios)

testinfra_hosts = ["ansible://pvehost"]
RUN = os.path.join(os.environ["GPUSERVE_ROOT"], "tests", "lab", "fake-nvidia", "NVIDIA-Linux-x86_64-570.153.02.run")
# the role as the scenario's converge runs it, then its result on one line
ROLE_PLAY = """
- hosts: pve_nodes
  gather_facts: false
  tasks:
    - ansible.builtin.stat: {path: "%s", checksum_algorithm: sha256}
      delegate_to: localhost
      register: __run
    - ansible.builtin.include_role: {name: gpuserve.sglang.nvidia_driver}
      vars:
        nvidia_driver_version: 570.153.02
        nvidia_driver_runfile_path: /root/NVIDIA-Linux-x86_64-570.153.02.run
        nvidia_driver_runfile_sha256: "{{ __run.stat.checksum }}"
        nvidia_driver_install_headers: false
        nvidia_driver_skip_gpu_check: true
        nvidia_driver_metrics: %s
        nvidia_driver_metrics_interval: 5
        nvidia_driver_metrics_node: pve1
    - ansible.builtin.debug:
        msg: "RESULT boot={{ nvidia_driver_result.boot_kernel }} built={{ nvidia_driver_result.dkms_built }}"
"""
PROM = "/var/lib/prometheus/node-exporter/gpuserve_nvidia.prom"


def test_installer_ran_exactly_once_silently_with_dkms_and_open_modules(host):
    runs = host.file("/var/log/gpuserve-fake-nvidia-installer.log").content_string.splitlines()
    assert runs == ["--silent --dkms --no-x-check --no-nouveau-check --kernel-module-type=open"]
    assert host.file("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.570.153.02").exists


def test_nouveau_is_blacklisted(host):
    conf = host.file("/etc/modprobe.d/gpuserve-blacklist-nouveau.conf")
    assert conf.mode == 0o644 and "blacklist nouveau" in conf.content_string.splitlines()


def test_the_initramfs_was_rebuilt_once_when_nouveaus_blacklist_was_written(host):
    """The handler runs `update-initramfs -u -k all` when the blacklist file changed - the first converge - and not
    for the re-runs, where the same layout call also holds the units (the driver is the pinned one by then)."""
    log = host.file("/var/log/gpuserve-lab-update-initramfs.log")
    assert log.exists and log.content_string.splitlines() == ["-u -k all"]


def test_device_nodes_unit_runs_before_the_guests_and_units_are_enabled(host):
    unit = host.file("/etc/systemd/system/gpuserve-nvidia-devices.service").content_string
    assert "Before=pve-guests.service lxc.service" in unit and "ExecStart=/usr/bin/nvidia-modprobe -u -c=0" in unit
    for name in ("gpuserve-nvidia-devices.service", "nvidia-persistenced.service"):
        assert host.run("systemctl is-enabled %s", name).stdout.strip() == "enabled"


def test_the_ct_userspace_driver_was_replaced_by_the_hosts_version_once_without_kernel_modules(host):
    libs = host.check_output("pct exec 100 -- ls /usr/lib/x86_64-linux-gnu/").split()
    assert [n for n in libs if n.startswith("libnvidia-ml.so.")] == ["libnvidia-ml.so.570.153.02"]
    runs = host.check_output("pct exec 100 -- cat /var/log/gpuserve-fake-nvidia-installer.log").splitlines()
    assert runs == ["--silent --no-kernel-modules --no-x-check --no-nouveau-check --no-nvidia-modprobe"]
    assert host.run("pct exec 100 -- test -e /root/NVIDIA-Linux-x86_64-570.153.02.run").rc == 1  # removed after use


def test_the_gpu_metrics_timer_keeps_the_nodes_textfile_fresh(host):
    """nvidia_driver_metrics: the timer is enabled and running, and its service - the collection's host reads copied
    to the node, run by the node's python3 - rewrites the textfile every 5 s with nvidia_gpu_facts' families."""
    assert host.run("systemctl is-enabled gpuserve-gpu-metrics.timer").stdout.strip() == "enabled"
    assert host.run("systemctl is-active gpuserve-gpu-metrics.timer").stdout.strip() == "active"
    assert host.file("/usr/local/lib/gpuserve-sglang/gpuserve_host/gpu_textfile.py").exists
    f = host.file(PROM)
    assert f.mode == 0o644 and 'gpuserve_nvidia_gpus{node="pve1"} ' in f.content_string
    assert re.search(r'^gpuserve_nvidia_state\{node="pve1",state="[a-z_]+"\} 1$', f.content_string, re.M)
    first = f.mtime
    deadline = time.time() + 30
    while host.file(PROM).mtime == first:
        assert time.time() < deadline, "the timer did not rewrite %s within 30 s" % PROM
        time.sleep(1)


def test_a_kernel_update_without_the_module_gets_it_built_by_dkms_before_any_reboot(host, tmp_path):
    """A newer kernel with its headers (/lib/modules/K/build) but no NVIDIA module - installed before the driver, or
    while DKMS's hook had no headers; the .run builds only for the running kernel: the role runs `dkms install` for
    it (the lab's dkms stand-in keeps dkms 3.0.10's checks and words), the module is there for the next boot, and a
    second run builds nothing."""
    play = tmp_path / "role.yml"
    play.write_text(ROLE_PLAY % (RUN, "true"))
    built = "/etc/gpuserve-lab/dkms-built"
    before = host.file(built).content_string
    assert host.run("mkdir -p /lib/modules/6.8.12-9-pve/build").rc == 0
    try:
        first = ansible_playbook(["-i", molecule_inventory(), str(play)])
        assert first.returncode == 0, first.stdout[-3000:]
        assert "RESULT boot=6.8.12-9-pve built=6.8.12-9-pve" in first.stdout
        assert re.search(r"pvehost\s*: ok=\d+\s+changed=1\s", first.stdout), first.stdout[-1500:]
        assert host.file(built).content_string.split() == before.split() + ["6.8.12-9-pve"]
        again = ansible_playbook(["-i", molecule_inventory(), str(play)])
        assert again.returncode == 0, again.stdout[-3000:]
        assert re.search(r"RESULT boot=6\.8\.12-9-pve built=['\"]?$", again.stdout, re.M), again.stdout[-3000:]
        assert re.search(r"pvehost\s*: ok=\d+\s+changed=0\s", again.stdout), again.stdout[-1500:]
    finally:
        host.run("rm -rf /lib/modules/6.8.12-9-pve && printf %s '%s' > %s" % ("%s", before, built))
    assert host.file(built).content_string == before


def test_gpu_metrics_off_removes_the_timer_its_units_the_copy_and_the_file(host, tmp_path):
    """nvidia_driver_metrics back to false (the default): the timer is stopped and disabled, its units, the copied
    reads and the textfile are gone; a second run changes nothing."""
    play = tmp_path / "role.yml"
    play.write_text(ROLE_PLAY % (RUN, "false"))
    off = ansible_playbook(["-i", molecule_inventory(), str(play)])
    assert off.returncode == 0, off.stdout[-3000:]
    assert host.run("systemctl is-active gpuserve-gpu-metrics.timer").stdout.strip() != "active"
    for path in (PROM, "/etc/systemd/system/gpuserve-gpu-metrics.timer",
                 "/etc/systemd/system/gpuserve-gpu-metrics.service", "/usr/local/lib/gpuserve-sglang"):
        assert not host.file(path).exists, path
    again = ansible_playbook(["-i", molecule_inventory(), str(play)])
    assert again.returncode == 0 and re.search(r"pvehost\s*: ok=\d+\s+changed=0\s", again.stdout), \
        again.stdout[-1500:]
