"""nvidia_gpu_facts through Ansible, with a real nvidia-smi stand-in process and real device nodes."""
import os
import stat
import time

from ansible_helpers import ROOT, run_module, run_playbook

M = "gpuserve.sglang.nvidia_gpu_facts"
NV = os.path.join(ROOT, "tests", "fixtures", "nvidia")


def fake_smi(tmp_path, fixture, rc):
    """An executable that prints a recorded nvidia-smi output (minus its provenance line) and exits rc."""
    path = tmp_path / "nvidia-smi"
    path.write_text("#!/bin/sh\ntail -n +2 '%s'\nexit %d\n" % (os.path.join(NV, fixture), rc))
    path.chmod(0o755)
    return str(path)


def test_a6000_node_reports_gpus_majors_and_the_device_nodes_it_finds(tmp_path):
    dev = tmp_path / "dev"
    dev.mkdir()
    os.mknod(str(dev / "nvidia0"), 0o666 | stat.S_IFCHR, os.makedev(195, 0))
    os.mknod(str(dev / "nvidiactl"), 0o666 | stat.S_IFCHR, os.makedev(195, 255))
    (dev / "nvidia-not-a-node").write_text("")
    r = run_module(M, {"nvidia_smi": fake_smi(tmp_path, "a6000x2.smi.csv", 0),
                       "proc_devices_path": os.path.join(NV, "a6000x2.proc-devices"),
                       "proc_version_path": os.path.join(NV, "a6000x2.proc-version"),
                       "dev_glob": [str(dev / "nvidia*")], "require": "gpu"})
    assert r.get("failed") is not True, r.get("msg")
    assert r["state"] == "ok" and r["gpu_count"] == 2 and r["memory_total_mib"] == 98280
    assert r["kernel_module_type"] == "open" and r["device_majors"]["nvidia-uvm"] == 510
    assert [(n["path"].rsplit("/", 1)[1], n["major"], n["minor"]) for n in r["device_nodes"]] == \
        [("nvidia0", 195, 0), ("nvidiactl", 195, 255)]
    assert r["ansible_facts"]["gpuserve_nvidia"]["gpus"] == r["gpus"] and r["changed"] is False


def test_mismatch_is_reported_and_require_driver_fails_with_the_hint(tmp_path):
    args = {"nvidia_smi": fake_smi(tmp_path, "mismatch.smi.out", 18),
            "proc_version_path": os.path.join(NV, "h200x1.proc-version"), "dev_glob": []}
    r = run_module(M, args)
    assert r.get("failed") is not True and r["state"] == "version_mismatch"
    r = run_module(M, dict(args, require="driver"))
    assert r["failed"] is True
    assert r["msg"].startswith("require=driver: Failed to initialize NVML: Driver/library version mismatch")
    assert "550.127.08" in r["msg"]


def test_no_nvidia_smi_on_this_machine_is_a_clean_no_driver_state(tmp_path):
    r = run_module(M, {"nvidia_smi": str(tmp_path / "absent" / "nvidia-smi"), "dev_glob": [str(tmp_path / "x*")],
                       "proc_version_path": str(tmp_path / "absent-version")}, check=True)
    assert r.get("failed") is not True and r["state"] == "no_driver" and r["gpus"] == []
    assert "nvidia_driver" in r["hint"]


def test_a_hanging_nvidia_smi_is_killed_and_named_not_waited_for_forever(tmp_path):
    """A wedged GPU makes nvidia-smi hang (Xid 79 & co.): the call is bounded and the state says why."""
    path = tmp_path / "nvidia-smi"
    path.write_text("#!/bin/sh\nsleep 600\n")
    path.chmod(0o755)
    t0 = time.time()
    r = run_module(M, {"nvidia_smi": str(path), "timeout": 2, "require": "gpu", "dev_glob": [str(tmp_path / "x*")]})
    assert time.time() - t0 < 60
    assert r["failed"] is True and r["state"] == "error"
    assert "did not answer within 2.0 s" in r["message"] and "Xid" in r["hint"]


def l40s_node(tmp_path):
    """The recorded 4x L40S node: nvidia-smi and the driver's per-GPU directories (named by bus id, as the driver does)."""
    gpus_dir = tmp_path / "gpus"
    for f in sorted(os.listdir(os.path.join(NV, "l40sx4.gpus"))):
        with open(os.path.join(NV, "l40sx4.gpus", f)) as fh:
            text = fh.read().split("\n", 1)[1]
        bus = [line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Bus Location")][0]
        (gpus_dir / bus).mkdir(parents=True)
        (gpus_dir / bus / "information").write_text(text)
    return {"nvidia_smi": fake_smi(tmp_path, "l40sx4.smi.csv", 0), "proc_gpus_dir": str(gpus_dir),
            "dev_glob": [str(tmp_path / "x*")]}


def test_the_module_gives_each_gpu_its_device_node_from_the_driver(tmp_path):
    r = run_module(M, l40s_node(tmp_path))
    assert r["state"] == "ok"
    assert [(g["index"], g["device"]) for g in r["gpus"]] == [
        (0, "/dev/nvidia2"), (1, "/dev/nvidia3"), (2, "/dev/nvidia0"), (3, "/dev/nvidia1")]


def test_the_plan_and_the_passthrough_name_the_same_gpus(tmp_path):
    """deploy.yml's two uses: the nodes passed (minors) and the GPUs planned, for /dev/nvidia0 and a UUID."""
    args = l40s_node(tmp_path)
    p = run_playbook([{"hosts": "localhost", "connection": "local", "gather_facts": False, "tasks": [
        {"name": "facts", "gpuserve.sglang.nvidia_gpu_facts": args},
        {"name": "both", "ansible.builtin.debug": {"msg": "{{ {'minors': __sel | gpuserve.sglang.nvidia_gpu_minors("
                                                          "gpuserve_nvidia.gpus), 'planned': gpuserve_nvidia.gpus | "
                                                          "gpuserve.sglang.nvidia_select_gpus(__sel) | "
                                                          "map(attribute='pci_bus_id') | list} | to_json }}"},
         "vars": {"__sel": [0, "GPU-0a1b2c3d-1111-4a4a-8b8b-000000000001"]}},
        {"name": "unknown", "ansible.builtin.debug": {"msg": "{{ [9] | gpuserve.sglang.nvidia_gpu_minors(gpuserve_nvidia.gpus) }}"},
         "ignore_errors": True}]}], tmp_path)
    out = p.stdout
    assert '{"minors": [0, 2], "planned": ["00000000:A1:00.0", "00000000:21:00.0"]}' in out, out[-3000:]
    assert "lxc_gpu_passthrough_gpus: /dev/nvidia9 is not a GPU of this node" in out


def test_the_runbooks_ad_hoc_look_prints_each_fact_once(tmp_path):
    r = run_module(M, {"nvidia_smi": fake_smi(tmp_path, "a6000x2.smi.csv", 0), "set_facts": False,
                       "dev_glob": [str(tmp_path / "x*")]})
    assert r["state"] == "ok" and "ansible_facts" not in r
    assert r["_stdout"].count("GPU-5f2c8e1a-3b7d-4c9e-a1f0-2d6b8e4c7a91") == 1


def test_node_mode_reads_the_node_and_asks_dkms_once_bounded(tmp_path):
    """node: true (the nvidia_driver role's one call for preflight and verify): the node's facts, and dkms asked
    with argv (no shell) for the pinned version; a dkms that hangs is killed and named."""
    libs = tmp_path / "lib"
    libs.mkdir()
    (libs / "libnvidia-ml.so.570.153.02").write_text("")
    dkms = tmp_path / "dkms"
    dkms.write_text("#!/bin/sh\necho \"$@\" > '%s'\necho 'nvidia/570.153.02, 9.9.9-gpuserve, x86_64: installed'\n"
                    % (tmp_path / "argv"))
    dkms.chmod(0o755)
    base = {"nvidia_smi": str(tmp_path / "absent"), "dev_glob": [], "node": True, "set_facts": False,
            "lib_dirs": [str(libs)], "free_path": str(tmp_path), "dkms_binary": str(dkms), "timeout": 5}
    r = run_module(M, dict(base, dkms_version="570.153.02"), check=True)
    assert r.get("failed") is not True, r.get("msg")
    node = r["node"]
    assert node["userspace_version"] == "570.153.02" and node["kernel"] == os.uname()[2]
    assert node["free_path"] == str(tmp_path) and node["free_mib"] > 0 and "ansible_facts" not in r
    assert (tmp_path / "argv").read_text().split() == ["status", "-m", "nvidia", "-v", "570.153.02"]
    assert "9.9.9-gpuserve" in node["dkms_status"]
    # the module is installed for 9.9.9-gpuserve only; the newest kernel here is another (or none)
    assert node["newest_kernel_has_module"] is (node["newest_kernel"] == "9.9.9-gpuserve")
    # the kernel this machine boots next (no proxmox-boot-tool pin here: the newest) is asked about too
    assert node["boot_kernel"] == node["newest_kernel"] and node["boot_kernel_pin"] is None
    assert node["boot_kernel_has_module"] is (node["boot_kernel"] == "9.9.9-gpuserve")
    assert "linux-headers-" + os.uname()[2] in node["headers_packages"]
    # without dkms_version dkms is not asked; without dkms the answer is null, not a failure
    (tmp_path / "argv").unlink()
    r = run_module(M, base)
    assert "dkms_status" not in r["node"] and not (tmp_path / "argv").exists()
    r = run_module(M, dict(base, dkms_version="570.153.02", dkms_binary=str(tmp_path / "no-dkms")))
    assert r["node"]["dkms_status"] is None and r["node"]["newest_kernel_has_module"] is None
    assert r["node"]["boot_kernel_has_module"] is None
    dkms.write_text("#!/bin/sh\nsleep 600\n")
    t0 = time.time()
    r = run_module(M, dict(base, dkms_version="570.153.02", timeout=1))
    assert r["failed"] is True and "did not answer within 1.0 s" in r["msg"] and time.time() - t0 < 30


def test_a_gpu_fallen_off_the_bus_is_named_with_its_device_and_require_gpu_fails(tmp_path):
    """nvidia-smi exiting 15 with NVML's line for the lost GPU: state gpu_lost, the GPU that answers listed, the lost
    one named by bus id and - from /proc/driver/nvidia/gpus/<bus>/information - by its /dev/nvidiaN."""
    gpus_dir = tmp_path / "gpus"
    for bus, minor in (("0000:41:00.0", 0), ("0000:c1:00.0", 1)):
        (gpus_dir / bus).mkdir(parents=True)
        (gpus_dir / bus / "information").write_text("Model: \t\t NVIDIA RTX A6000\nBus Location: \t %s\n"
                                                    "Device Minor: \t %d\n" % (bus, minor))
    args = {"nvidia_smi": fake_smi(tmp_path, "gpu-lost.smi.out", 15), "proc_gpus_dir": str(gpus_dir), "dev_glob": []}
    r = run_module(M, args)
    assert r.get("failed") is not True and r["state"] == "gpu_lost", r
    assert [g["device"] for g in r["gpus"]] == ["/dev/nvidia0"]
    assert [(g["pci_bus_id"], g["device"]) for g in r["lost_gpus"]] == [("0000:c1:00.0", "/dev/nvidia1")]
    failed = run_module(M, dict(args, require="gpu"))
    assert failed["failed"] is True
    assert failed["msg"].startswith("require=gpu: GPU 0000:c1:00.0 lost: Unable to determine the device handle for "
                                    "GPU0000:C1:00.0: Unknown Error (gpu_lost). The GPU stopped answering"), failed["msg"]


def test_the_nodes_gpus_are_written_for_prometheus_and_not_in_check_mode(tmp_path):
    """#48 item 1 (part): metrics_file, through Ansible with the nvidia-smi stand-in: the state, the GPUs and their
    memory, labelled by node; a mismatch says 1; check mode writes nothing."""
    prom = tmp_path / "gpuserve_nvidia.prom"
    args = {"nvidia_smi": fake_smi(tmp_path, "a6000x2.smi.csv", 0), "dev_glob": [],
            "proc_version_path": os.path.join(NV, "a6000x2.proc-version"), "metrics_file": str(prom),
            "metrics_node": "pve1"}
    assert run_module(M, args, check=True)["state"] == "ok" and not prom.exists()
    r = run_module(M, args)
    assert r["state"] == "ok" and r["changed"] is False
    text = prom.read_text()
    assert 'gpuserve_nvidia_state{node="pve1",state="ok"} 1\n' in text
    assert 'gpuserve_nvidia_gpus{node="pve1"} 2\n' in text
    assert 'gpuserve_nvidia_driver_mismatch{node="pve1"} 0\n' in text
    assert text.count("gpuserve_nvidia_gpu_memory_total_bytes{") == 2 and oct(prom.stat().st_mode & 0o777) == "0o644"
    run_module(M, dict(args, nvidia_smi=fake_smi(tmp_path, "mismatch.smi.out", 18),
                       proc_version_path=os.path.join(NV, "h200x1.proc-version")))
    again = prom.read_text()
    assert 'gpuserve_nvidia_state{node="pve1",state="version_mismatch"} 1\n' in again
    assert 'gpuserve_nvidia_driver_mismatch{node="pve1"} 1\n' in again
