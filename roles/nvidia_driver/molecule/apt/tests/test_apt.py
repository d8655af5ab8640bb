"""apt method: the pinned 570.153.02 is installed although the repository offers 570.172.08; a changed pin moves
every package to it, up and down."""

import os
import re

testinfra_hosts = ["ansible://pvehost"]
# the scenario's converge play: the role at the pin 570.153.02 (replaced for another pin)
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "converge.yml")) as _fh:
    CONVERGE = _fh.read()


def test_pinned_version_installed_not_the_newest(host):
    for pkg in ("nvidia-driver", "nvidia-kernel-dkms", "nvidia-smi", "nvidia-persistenced"):
        assert host.package(pkg).version == "570.153.02-1"
    policy = host.check_output("apt-cache policy nvidia-driver")
    assert "570.172.08-1" in policy, "the newer version is available, so the pin is what kept it out"
    assert host.file("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.570.153.02").exists


def test_pin_file_names_the_version(host):
    pin = host.file("/etc/apt/preferences.d/gpuserve-nvidia").content_string
    assert "Pin: version 570.153.02-*" in pin and "Pin-Priority: 1001" in pin


def _converge_at(tmp_path, version):
    """The role again with another pin, as an operator changes nvidia_driver_version in the inventory."""
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..", "..",
                                    "tests", "lab", "molecule"))
    from lab_runbook import ansible_playbook, molecule_inventory
    play = tmp_path / ("pin-%s.yml" % version)
    play.write_text(CONVERGE.replace("570.153.02", version))
    return ansible_playbook(["-i", molecule_inventory(), str(play)])


def test_a_new_pin_upgrades_and_an_older_one_downgrades_every_package(host, tmp_path):
    """Changing nvidia_driver_version moves every package to it: apt's state=present alone keeps whatever version
    is installed, so a changed pin would leave the old driver in place (the role said 'installing X over Y')."""
    try:
        up = _converge_at(tmp_path, "570.172.08")
        assert up.returncode == 0, up.stdout[-3000:]
        assert "installing NVIDIA driver 570.172.08 over 570.153.02" in up.stdout
        for pkg in ("nvidia-driver", "nvidia-kernel-dkms", "nvidia-smi", "nvidia-persistenced"):
            assert host.package(pkg).version == "570.172.08-1", pkg
        assert host.file("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.570.172.08").exists
        assert not host.file("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.570.153.02").exists
        assert "Pin: version 570.172.08-*" in host.file("/etc/apt/preferences.d/gpuserve-nvidia").content_string
    finally:
        down = _converge_at(tmp_path, "570.153.02")
    assert down.returncode == 0, down.stdout[-3000:]
    assert "installing NVIDIA driver 570.153.02 over 570.172.08" in down.stdout
    for pkg in ("nvidia-driver", "nvidia-kernel-dkms", "nvidia-smi", "nvidia-persistenced"):
        assert host.package(pkg).version == "570.153.02-1", pkg
    again = _converge_at(tmp_path, "570.153.02")
    assert again.returncode == 0 and re.search(r"pvehost\s+: ok=\d+\s+changed=0 ", again.stdout), again.stdout[-3000:]
