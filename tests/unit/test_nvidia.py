"""nvidia: driver and GPU facts from recorded nvidia-smi, /proc and /sys outputs."""
import pytest

from unit_helpers import fixture_text, load_module_util

NV = load_module_util("nvidia")


def fx(name):
    return fixture_text("nvidia", name)


def test_two_a6000_with_the_open_module_give_gpus_in_mib_versions_and_majors():
    facts = NV.gpu_facts(fx("a6000x2.smi.csv"), "", 0, proc_version=fx("a6000x2.proc-version"),
                         sys_module_version="570.153.02\n", proc_devices=fx("a6000x2.proc-devices"))
    assert facts["state"] == "ok" and facts["hint"] is None
    assert facts["gpu_count"] == 2 and facts["memory_total_mib"] == 2 * 49140
    assert facts["gpus"][1] == {"index": 1, "name": "NVIDIA RTX A6000", "uuid": "GPU-9e1d7b3c-6a2f-4e8d-b5c0-7f3a1d9e2b64",
                                "pci_bus_id": "00000000:C1:00.0", "memory_total_mib": 49140, "memory_used_mib": 4,
                                "memory_free_mib": 48654, "driver_version": "570.153.02", "compute_cap": "8.6"}
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
    assert NV.policy_versions("nvidia-driver:\n  Installed: (none)\n  Candidate: (none)\n  Version table:\n",
                             "570.153.02") == []
