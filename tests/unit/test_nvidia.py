"""nvidia: driver and GPU facts from recorded nvidia-smi, /proc and /sys outputs."""
import os

import pytest

from unit_helpers import FIXTURES, fixture_text, load_module_util

NV = load_module_util("host.nvidia")


def fx(name):
    return fixture_text("nvidia", name)


def test_two_a6000_with_the_open_module_give_gpus_in_mib_versions_and_majors():
    facts = NV.gpu_facts(fx("a6000x2.smi.csv"), "", 0, proc_version=fx("a6000x2.proc-version"),
                         sys_module_version="570.153.02\n", proc_devices=fx("a6000x2.proc-devices"))
    assert facts["state"] == "ok" and facts["hint"] is None
    assert facts["gpu_count"] == 2 and facts["memory_total_mib"] == 2 * 49140
    assert facts["gpus"][1] == {"index": 1, "name": "NVIDIA RTX A6000", "uuid": "GPU-9e1d7b3c-6a2f-4e8d-b5c0-7f3a1d9e2b64",
                                "pci_bus_id": "00000000:C1:00.0", "memory_total_mib": 49140, "memory_used_mib": 4,
                                "memory_free_mib": 48654, "driver_version": "570.153.02", "compute_cap": "8.6",
                                "minor": None, "device": None}   # no /proc/driver/nvidia/gpus/*/information given
    assert facts["driver_version"] == facts["kernel_module_version"] == "570.153.02"
    assert facts["kernel_module_type"] == "open"
    assert facts["device_majors"] == {"nvidia-frontend": 195, "nvidia-uvm": 510, "nvidia-caps": 511,
                                      "nvidia-caps-imex-channels": 238, "nvidia-nvlink": 237, "nvidia-nvswitch": 236}


def test_h200_with_the_proprietary_module_is_named_proprietary():
    facts = NV.gpu_facts(fx("h200x1.smi.csv"), "", 0, proc_version=fx("h200x1.proc-version"))
    assert facts["gpus"][0]["memory_total_mib"] == 143771 and facts["gpus"][0]["compute_cap"] == "9.0"
    assert (facts["kernel_module_version"], facts["kernel_module_type"]) == ("550.127.08", "proprietary")


def test_library_mismatch_is_a_state_with_both_versions_and_the_fix():
    facts = NV.gpu_facts(fx("mismatch.smi.out"), "", 18, proc_version=fx("h200x1.proc-version"))
    assert facts["state"] == "version_mismatch" and facts["gpus"] == []
    assert facts["message"] == "Failed to initialize NVML: Driver/library version mismatch"
    assert facts["driver_version"] == "570.153" and facts["kernel_module_version"] == "550.127.08"
    assert "exactly the host's kernel-module version 550.127.08" in facts["hint"]


@pytest.mark.parametrize("out,rc,state", [
    ("no-driver.smi.out", 9, "no_driver"),
    ("no-gpu.smi.out", 6, "no_gpu"),
])
def test_broken_drivers_are_named_states_not_crashes(out, rc, state):
    facts = NV.gpu_facts(fx(out), "", rc)
    assert facts["state"] == state and facts["gpu_count"] == 0 and facts["hint"]


def test_missing_nvidia_smi_is_no_driver():
    facts = NV.gpu_facts("", "", None)
    assert facts["state"] == "no_driver" and facts["message"] == "nvidia-smi not found"
    assert facts["kernel_module_version"] is None


def test_not_available_columns_become_none_and_a_short_line_is_an_error_state():
    gpus = NV.parse_smi_csv("0, NVIDIA A100-SXM4-80GB [MIG], [N/A], 00000000:07:00.0, 81920, [N/A], [N/A], 570.1, 8.0\n")
    assert gpus[0]["uuid"] is None and gpus[0]["memory_used_mib"] is None and gpus[0]["memory_total_mib"] == 81920
    facts = NV.gpu_facts("0, NVIDIA RTX A6000, 49140\n", "", 0)
    assert facts["state"] == "error" and "expected 9" in facts["message"]


def test_old_drivers_name_the_frontend_major_nvidia():
    assert NV.parse_proc_devices("Character devices:\n195 nvidia\n240 nvidia-uvm\n\nBlock devices:\n195 nvidia\n") == \
        {"nvidia-frontend": 195, "nvidia-uvm": 240}


def test_apt_policy_tells_which_packages_apt_knows_at_the_pinned_version():
    text = fixture_text("apt", "policy_pinned.txt")
    assert NV.policy_versions(text, "570.153.02") == ["nvidia-driver", "nvidia-smi"]
    assert NV.policy_versions(text, "570.172.08") == ["nvidia-driver"]
    assert NV.policy_versions(text, "570.172") == []                 # a prefix of a version is not that version
    assert NV.policy_versions(text) == ["nvidia-driver", "nvidia-smi"]   # has a candidate
    # an emptied index (fresh image): apt-cache policy prints the names with nothing under them
    emptied = "nvidia-driver:\n  Installed: (none)\n  Candidate: (none)\n  Version table:\n"
    assert NV.policy_versions(emptied, "570.153.02") == []


def l40s_facts():
    import glob  # pylint: disable=import-outside-toplevel
    infos = [fixture_text("nvidia", "l40sx4.gpus", os.path.basename(f))
             for f in sorted(glob.glob(os.path.join(FIXTURES, "nvidia", "l40sx4.gpus", "*.information")))]
    return NV.gpu_facts(fixture_text("nvidia", "l40sx4.smi.csv"), "", 0, gpu_information=infos)


def test_each_gpu_gets_its_device_minor_which_is_not_its_smi_index():
    gpus = l40s_facts()["gpus"]
    assert [(g["index"], g["minor"], g["device"]) for g in gpus] == [
        (0, 2, "/dev/nvidia2"), (1, 3, "/dev/nvidia3"), (2, 0, "/dev/nvidia0"), (3, 1, "/dev/nvidia1")]


def test_passthrough_of_dev_nvidia0_and_1_plans_with_the_gpus_behind_those_nodes_not_index_0_and_1():
    gpus = l40s_facts()["gpus"]
    selected, problems = NV.select_gpus([0, 1], gpus)
    assert problems == []
    assert [g["pci_bus_id"] for g in selected] == ["00000000:A1:00.0", "00000000:C1:00.0"]


def test_gpus_can_be_named_by_uuid_or_pci_bus_id_and_an_unknown_one_is_named():
    gpus = l40s_facts()["gpus"]
    selected, problems = NV.select_gpus(["GPU-0a1b2c3d-1111-4a4a-8b8b-000000000001", "0000:41:00.0"], gpus)
    assert problems == [] and [g["minor"] for g in selected] == [2, 3]
    _sel, problems = NV.select_gpus([7, "GPU-nope"], gpus)
    assert len(problems) == 2 and problems[0].startswith("/dev/nvidia7 is not a GPU of this node")
    assert "/dev/nvidia0 = GPU-0a1b2c3d-3333-4a4a-8b8b-000000000003 0000:a1:00.0" in problems[0]


# ---- the node's side of the driver (nvidia_gpu_facts node: true; role nvidia_driver's preflight and verify)

def _node_tree(tmp_path, secure_boot=None):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "os-release").write_text(
        'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nNAME="Debian GNU/Linux"\nVERSION_ID="12"\nID=debian\n')
    (tmp_path / "usr" / "bin").mkdir(parents=True)
    (tmp_path / "usr" / "bin" / "pveversion").write_text("")
    libs = tmp_path / "usr" / "lib" / "x86_64-linux-gnu"
    libs.mkdir(parents=True)
    for name in ("libnvidia-ml.so.570.153.02", "libnvidia-ml.so.1", "libnvidia-ml.so.550.127.08",
                 "libnvidia-mlx.so.999.1.1", "libcuda.so.570.153.02"):
        (libs / name).write_text("")
    for bus, vendor in (("0000:01:00.0", "0x10de\n"), ("0000:02:00.0", "0x8086\n"), ("0000:41:00.0", "0x10DE\n")):
        d = tmp_path / "sys" / "bus" / "pci" / "devices" / bus
        d.mkdir(parents=True)
        (d / "vendor").write_text(vendor)
    for k in ("6.8.12-4-pve", "6.8.12-10-pve", "6.5.13-6-pve"):
        (tmp_path / "lib" / "modules" / k).mkdir(parents=True)
    (tmp_path / "lib" / "modules" / "README").write_text("not a kernel")
    if secure_boot is not None:
        efi = tmp_path / "sys" / "firmware" / "efi" / "efivars"
        efi.mkdir(parents=True)
        (efi / "SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c").write_bytes(b"\x06\x00\x00\x00" + secure_boot)
    return str(tmp_path)


def test_read_node_reads_what_the_driver_role_needs_in_one_pass(tmp_path):
    node = NV.read_node(root=_node_tree(tmp_path, secure_boot=b"\x00"), uname=("6.8.12-4-pve", "x86_64"))
    assert node["os_family"] == "Debian" and node["distribution"] == "Debian GNU/Linux"
    assert node["distribution_version"] == "12" and node["kernel"] == "6.8.12-4-pve"
    assert node["pve"] is True and node["initramfs"] is False and node["secure_boot"] is False
    assert node["nvidia_pci"] == ["0000:01:00.0", "0000:41:00.0"]
    # versions sorted as versions: newest last, the bare soname link and other libraries ignored
    assert node["userspace_versions"] == ["550.127.08", "570.153.02"] and node["userspace_version"] == "570.153.02"
    # -10 is newer than -4 (a string sort says the opposite); a file is not a kernel
    assert node["kernels"] == ["6.5.13-6-pve", "6.8.12-4-pve", "6.8.12-10-pve"]
    assert node["newest_kernel"] == "6.8.12-10-pve"
    # no kernel pinned: the node boots the newest; headers of the running kernel and of that one
    assert node["boot_kernel"] == "6.8.12-10-pve" and node["boot_kernel_pin"] is None
    assert node["headers_packages"] == ["proxmox-default-headers", "proxmox-headers-6.8.12-4-pve",
                                        "proxmox-headers-6.8.12-10-pve"]
    st = os.statvfs(str(tmp_path))
    assert abs(node["free_mib"] - st.f_bavail * st.f_frsize // (1 << 20)) <= 16


def test_the_kernel_the_node_boots_next_is_the_one_proxmox_boot_tool_pinned(tmp_path):
    """proxmox-boot-tool kernel pin V writes V to /etc/kernel/proxmox-boot-pin, `--next-boot` to
    /etc/kernel/next-boot-pin (which wins for that boot); a pin naming a kernel that is not installed is not booted."""
    root = _node_tree(tmp_path)
    etc = tmp_path / "etc" / "kernel"
    etc.mkdir(parents=True)

    def boot():
        node = NV.read_node(root=root, uname=("6.8.12-10-pve", "x86_64"))
        return node["boot_kernel"], node["boot_kernel_pin"], node["headers_packages"]

    (etc / "proxmox-boot-pin").write_text("6.8.12-4-pve\n")
    assert boot() == ("6.8.12-4-pve", "/etc/kernel/proxmox-boot-pin",
                      ["proxmox-default-headers", "proxmox-headers-6.8.12-10-pve", "proxmox-headers-6.8.12-4-pve"])
    (etc / "next-boot-pin").write_text("6.5.13-6-pve")
    assert boot()[:2] == ("6.5.13-6-pve", "/etc/kernel/next-boot-pin")
    (etc / "next-boot-pin").write_text("6.2.16-3-pve\n")            # removed since: the permanent pin counts
    assert boot()[:2] == ("6.8.12-4-pve", "/etc/kernel/proxmox-boot-pin")
    (etc / "proxmox-boot-pin").write_text("")
    assert boot()[:2] == ("6.8.12-10-pve", None)
    # the running kernel is the one booted next: its headers once
    assert boot()[2] == ["proxmox-default-headers", "proxmox-headers-6.8.12-10-pve"]


def test_headers_packages_on_debian_and_proxmox():
    assert NV.headers_packages(False, "6.1.0-28-amd64", "6.1.0-31-amd64") == [
        "linux-headers-6.1.0-28-amd64", "linux-headers-6.1.0-31-amd64"]
    assert NV.headers_packages(False, "6.1.0-28-amd64", None) == ["linux-headers-6.1.0-28-amd64"]
    assert NV.headers_packages(True, "6.8.12-4-pve", "6.8.12-4-pve") == [
        "proxmox-default-headers", "proxmox-headers-6.8.12-4-pve"]


def test_read_node_secure_boot_on_and_a_bare_machine(tmp_path):
    on = tmp_path / "on"
    on.mkdir()
    assert NV.read_node(root=_node_tree(on, secure_boot=b"\x01"), uname=("6.1.0-28-amd64", "x86_64"))["secure_boot"] is True
    bare = tmp_path / "bare"
    bare.mkdir()
    node = NV.read_node(root=str(bare), uname=("6.1.0-28-amd64", "aarch64"))
    assert node["os_family"] is None and node["secure_boot"] is None and node["pve"] is False
    assert node["nvidia_pci"] == [] and node["userspace_version"] is None and node["newest_kernel"] is None
    assert node["architecture"] == "aarch64"


def test_os_release_family_follows_id_like():
    assert NV.parse_os_release("ID=ubuntu\nID_LIKE=debian\n")["family"] == "Debian"
    assert NV.parse_os_release("ID='rocky'\nID_LIKE=\"rhel centos fedora\"\n")["family"] == "Rocky"
    assert NV.parse_os_release("# comment\n\n")["family"] is None


def test_dkms_status_installed_for_exactly_that_kernel():
    out = ("nvidia/570.153.02, 6.8.12-4-pve, x86_64: installed\n"
           "nvidia/570.153.02, 6.8.12-10-pve, x86_64: built\n")
    assert NV.dkms_has_module(out, "6.8.12-4-pve") is True
    assert NV.dkms_has_module(out, "6.8.12-10-pve") is False   # built, not installed
    assert NV.dkms_has_module(out, "6.8.12-1") is False         # a prefix of another kernel is not that kernel
    assert NV.dkms_has_module("nvidia, 550.127.08, 6.5.13-6-pve, x86_64: installed", "6.5.13-6-pve") is True
    assert NV.dkms_has_module("", "6.8.12-4-pve") is False


def a6000_information(bus, minor, uuid):
    """/proc/driver/nvidia/gpus/<bus>/information of one GPU (the shape of the l40sx4.gpus fixtures)."""
    return "Model: \t\t NVIDIA RTX A6000\nGPU UUID: \t %s\nBus Location: \t %s\nDevice Minor: \t %d\n" % (uuid, bus, minor)


LOST_INFO = [a6000_information("0000:41:00.0", 0, "GPU-5f2c8e1a-3b7d-4c9e-a1f0-2d6b8e4c7a91"),
             a6000_information("0000:c1:00.0", 1, "GPU-9e1d7b3c-6a2f-4e8d-b5c0-7f3a1d9e2b64")]


def test_a_gpu_fallen_off_the_bus_is_its_own_state_naming_it_and_the_others_still_listed():
    facts = NV.gpu_facts(fx("gpu-lost.smi.out"), "", 15, gpu_information=LOST_INFO)
    assert facts["state"] == "gpu_lost"
    assert facts["message"] == ("GPU 0000:c1:00.0 lost: Unable to determine the device handle for GPU0000:C1:00.0: "
                                "Unknown Error")
    assert [(g["minor"], g["pci_bus_id"]) for g in facts["gpus"]] == [(0, "00000000:41:00.0")]
    assert facts["lost_gpus"] == [{"pci_bus_id": "0000:c1:00.0", "minor": 1, "device": "/dev/nvidia1",
                                   "uuid": "GPU-9e1d7b3c-6a2f-4e8d-b5c0-7f3a1d9e2b64"}]
    assert "Xid 79" in facts["hint"] and "reboot" in facts["hint"]
    # the same words on stderr with a space before the bus id, or only the exit code: still the state
    assert NV.gpu_facts("", "Unable to determine the device handle for GPU 0000:c1:00.0: GPU is lost.  Reboot the "
                        "system to recover this GPU", 15)["lost_gpus"][0]["pci_bus_id"] == "0000:c1:00.0"
    bare = NV.gpu_facts("", "", 15)
    assert bare["state"] == "gpu_lost" and bare["message"] == "nvidia-smi exited 15" and bare["lost_gpus"] == []
    assert NV.gpu_facts(fx("a6000x2.smi.csv"), "", 0)["lost_gpus"] == []


def test_the_containers_of_a_node_with_a_lost_gpu_stop_only_when_they_use_it():
    facts = NV.gpu_facts(fx("gpu-lost.smi.out"), "", 15, gpu_information=LOST_INFO)
    for sel in ([1], ["GPU-9e1d7b3c-6a2f-4e8d-b5c0-7f3a1d9e2b64"], ["0000:C1:00.0"], [0, 1], []):
        said = NV.gpus_problem(facts, sel, "pve1")
        assert said.startswith("/dev/nvidia1 (0000:c1:00.0) of pve1, which this container uses, is lost - GPU "
                               "0000:c1:00.0 lost: "), (sel, said)
        assert said.endswith("Nothing was launched.") and "Xid 79" in said
    assert NV.gpus_problem(facts, [0], "pve1") == ""                      # GPU 0 still answers
    assert NV.gpus_problem(NV.gpu_facts("", "", 15), [0], "pve1").startswith("a GPU of pve1")   # which one: unknown
    assert NV.gpus_problem(NV.gpu_facts(fx("a6000x2.smi.csv"), "", 0), [0, 1], "pve1") == ""
    assert NV.gpus_problem({}, [0], "pve1") == ""                          # not read (a --tags run): nothing to say
    broken = NV.gpus_problem(NV.gpu_facts(fx("mismatch.smi.out"), "", 18, proc_version=fx("h200x1.proc-version")),
                             [0], "pve1")
    assert broken.startswith("the GPUs of pve1 cannot be used: version_mismatch - Failed to initialize NVML: "
                             "Driver/library version mismatch. Reboot to load the installed kernel module")
    # without /proc/driver/nvidia/gpus/*/information the lost GPU's minor is unknown: a container naming GPUs by
    # minor may use it (stopped, saying so); one naming GPUs by PCI bus id can be told apart
    blind = NV.gpu_facts(fx("gpu-lost.smi.out"), "", 15)
    assert NV.gpus_problem(blind, [0], "pve1").startswith(
        "a GPU (0000:c1:00.0) of pve1 is lost, and the driver does not say which /dev/nvidiaN it was, so this "
        "container may use it - GPU 0000:c1:00.0 lost")
    assert NV.gpus_problem(blind, ["0000:41:00.0"], "pve1") == ""
