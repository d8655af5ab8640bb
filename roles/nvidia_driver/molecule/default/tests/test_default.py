"""nvidia_driver on the lab host: the pinned installer ran once with the right flags, nouveau is
blacklisted, the units that make nvidia-uvm exist before the guests are enabled."""

testinfra_hosts = ["ansible://pvehost"]


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
