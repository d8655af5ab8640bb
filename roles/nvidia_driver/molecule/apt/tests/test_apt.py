"""apt method: the pinned 570.153.02 is installed although the repository offers 570.172.08."""

testinfra_hosts = ["ansible://pvehost"]


def test_pinned_version_installed_not_the_newest(host):
    for pkg in ("nvidia-driver", "nvidia-kernel-dkms", "nvidia-smi", "nvidia-persistenced"):
        assert host.package(pkg).version == "570.153.02-1"
    policy = host.check_output("apt-cache policy nvidia-driver")
    assert "570.172.08-1" in policy, "the newer version is available, so the pin is what kept it out"
    assert host.file("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.570.153.02").exists


def test_pin_file_names_the_version(host):
    pin = host.file("/etc/apt/preferences.d/gpuserve-nvidia").content_string
    assert "Pin: version 570.153.02-*" in pin and "Pin-Priority: 1001" in pin
