"""apt method: the pinned 570.153.02 is installed although the repository offers 570.172.08; a changed pin moves
every package to it, up and down; CT 100 gets the same version's userspace packages (no kernel module package),
held there by an apt pin, and follows the host's version."""

import os
import re
import sys

sys.path.insert(0, os.path.join(os.environ["GPUSERVE_ROOT"], "tests", "lab", "molecule"))
from lab_runbook import ansible_playbook, molecule_inventory  # noqa: E402  (shared with the lab's scenarios)

testinfra_hosts = ["ansible://pvehost"]
NODE = ("nvidia-driver", "nvidia-kernel-dkms", "nvidia-smi", "nvidia-persistenced")
# the scenario's converge play: the role at the pin 570.153.02 (replaced for another pin)
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "converge.yml")) as _fh:
    CONVERGE = _fh.read()


def test_pinned_version_installed_not_the_newest(host):
    for pkg in NODE:
        assert host.package(pkg).version == "570.153.02-1"
    policy = host.check_output("apt-cache policy nvidia-driver")
    assert "570.172.08-1" in policy, "the newer version is available, so the pin is what kept it out"
    assert host.file("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.570.153.02").exists


def test_pin_file_names_the_version(host):
    pin = host.file("/etc/apt/preferences.d/gpuserve-nvidia").content_string
    assert "Pin: version 570.153.02-*" in pin and "Pin-Priority: 1001" in pin


USERSPACE = ("libcuda1", "libnvidia-ml1", "nvidia-smi")


def ct_version(host, pkg):
    """The version dpkg has installed in CT 100 ('' when the package is not installed)."""
    out = host.run("pct exec 100 -- dpkg-query -W -f '${db:Status-Abbrev}${Version}' %s" % pkg)
    return out.stdout[3:].strip() if out.rc == 0 and out.stdout.startswith("ii") else ""


def test_the_container_has_the_userspace_at_the_host_version_and_no_kernel_module_package(host):
    for pkg in USERSPACE:
        assert ct_version(host, pkg) == "570.153.02-1", pkg
    # libcuda1 recommends the kernel module package: installed without recommends, no DKMS in a CT
    assert ct_version(host, "nvidia-kernel-dkms") == "" and ct_version(host, "nvidia-driver") == ""
    assert host.run("pct exec 100 -- test -e /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.570.153.02").rc == 0
    pin = host.check_output("pct exec 100 -- cat /etc/apt/preferences.d/gpuserve-nvidia")
    assert "Pin: version 570.153.02-*" in pin and "libcuda1" in pin and "Pin-Priority: 1001" in pin
    # the pin is what keeps an upgrade in the CT from moving the userspace away from the host's module
    assert "570.172.08-1" in host.check_output("pct exec 100 -- apt-cache policy libcuda1")
    assert "Candidate: 570.153.02-1" in host.check_output("pct exec 100 -- apt-cache policy libcuda1")


def _converge_at(tmp_path, version):
    """The role again with another pin, as an operator changes nvidia_driver_version in the inventory."""
    play = tmp_path / ("pin-%s.yml" % version)
    play.write_text(CONVERGE.replace("570.153.02", version))
    return ansible_playbook(["-i", molecule_inventory(), str(play)])


def _moved(host, run, version, before):
    """The role's run at ``version`` (over ``before``) said so and left the node's packages and CT 100's userspace
    packages at it, the CT without the kernel module package."""
    assert run.returncode == 0, run.stdout[-3000:]
    assert "installing NVIDIA driver %s over %s" % (version, before) in run.stdout
    assert re.search(r"host kernel\s+module %s: installing\s+%s" % (re.escape(version), re.escape(version)),
                     run.stdout), run.stdout[-3000:]
    for pkg in NODE:
        assert host.package(pkg).version == version + "-1", pkg
    for pkg in USERSPACE:
        assert ct_version(host, pkg) == version + "-1", pkg
    assert ct_version(host, "nvidia-kernel-dkms") == ""


def test_a_new_pin_upgrades_and_an_older_one_downgrades_every_package(host, tmp_path):
    """Changing nvidia_driver_version moves every package to it, on the node and (following the host's driver,
    dependencies included) in the CT: apt's state=present alone keeps whatever version is installed, so a changed
    pin would leave the old driver in place (the role said 'installing X over Y')."""
    try:
        _moved(host, _converge_at(tmp_path, "570.172.08"), "570.172.08", "570.153.02")
        assert host.file("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.570.172.08").exists
        assert not host.file("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.570.153.02").exists
        assert "Pin: version 570.172.08-*" in host.file("/etc/apt/preferences.d/gpuserve-nvidia").content_string
    finally:
        down = _converge_at(tmp_path, "570.153.02")
    _moved(host, down, "570.153.02", "570.172.08")
    again = _converge_at(tmp_path, "570.153.02")
    assert again.returncode == 0, again.stdout[-3000:]
    for name in ("pvehost", "ct100"):
        assert re.search(r"%s\s+: ok=\d+\s+changed=0 " % name, again.stdout), again.stdout[-3000:]
