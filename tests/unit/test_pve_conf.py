"""pve_conf: Proxmox CT config edits that keep every operator line and never touch snapshots."""
import os
import signal
import re

import pytest

from unit_helpers import fixture_text, load_module_util

PC = load_module_util("pve.conf")
CT129 = fixture_text("pve_conf", "ct129-operator.conf")


def nvidia_owned(key, value):
    """What the passthrough role claims: cgroup rules for NVIDIA majors and binds of /dev/nvidia*."""
    if key.startswith(("lxc.cgroup2.devices.allow", "lxc.cgroup.devices.allow")):
        return bool(re.match(r"^c (195|508|509):", value))
    return key == "lxc.mount.entry" and value.startswith("/dev/nvidia")


def snapshot_part(text):
    return text[text.index("[before-driver-upgrade]"):]


def test_operator_config_parses_into_options_raw_keys_description_and_snapshots():
    opts = PC.parse(CT129)
    assert opts["memory"] == "65536" and opts["unprivileged"] == "1"
    assert opts["lxc"] == [("lxc.cgroup2.devices.allow", "c 226:* rwm"),
                           ("lxc.mount.entry", "/dev/dri dev/dri none bind,optional,create=dir"),
                           ("lxc.cgroup2.devices.allow", "c 195:* rwm"),
                           ("lxc.mount.entry", "/dev/nvidia0 dev/nvidia0 none bind,optional,create=file")]
    assert opts["description"].splitlines() == ["Qwen3.6-27B on 2x A6000 (operator's notes)",
                                                "second line of the description"]
    assert opts["snapshots"] == ["before-driver-upgrade"]
    assert "snaptime" not in opts, "snapshot keys are not the current config"


def test_managed_nvidia_lines_replace_ours_keep_the_operators_dri_lines_and_stay_before_the_snapshot():
    wanted = [("lxc.cgroup2.devices.allow", "c 195:* rwm"), ("lxc.cgroup2.devices.allow", "c 508:* rwm"),
              ("lxc.mount.entry", "/dev/nvidia0 dev/nvidia0 none bind,optional,create=file"),
              ("lxc.mount.entry", "/dev/nvidia1 dev/nvidia1 none bind,optional,create=file"),
              ("lxc.mount.entry", "/dev/nvidiactl dev/nvidiactl none bind,optional,create=file"),
              ("lxc.mount.entry", "/dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file")]
    new = PC.set_raw_lines(CT129, wanted, nvidia_owned)
    main = new[:new.index("[before-driver-upgrade]")]
    assert [kv for kv in PC.parse(new)["lxc"] if nvidia_owned(*kv)] == wanted
    assert "lxc.cgroup2.devices.allow: c 226:* rwm\n" in main and "/dev/dri dev/dri" in main
    assert main.startswith("#Qwen3.6-27B on 2x A6000 (operator's notes)\n#second line")
    assert main.endswith("\n\n"), "a blank line still separates the snapshot section"
    assert snapshot_part(new) == snapshot_part(CT129), "snapshot section byte for byte"
    assert PC.set_raw_lines(new, wanted, nvidia_owned) == new, "a second run changes nothing"


def test_unchanged_managed_lines_return_the_text_untouched():
    ours = [kv for kv in PC.parse(CT129)["lxc"] if nvidia_owned(*kv)]
    assert PC.set_raw_lines(CT129, ours, nvidia_owned) == CT129


def test_removing_passthrough_leaves_no_nvidia_line_and_everything_else():
    new = PC.set_raw_lines(CT129, [], nvidia_owned)
    assert "nvidia0" not in new[:new.index("[")] and "c 195" not in new[:new.index("[")]
    assert "c 195:* rwm" in snapshot_part(new)
    assert len(new.splitlines()) == len(CT129.splitlines()) - 2


def test_crlf_and_missing_final_newline_are_handled_without_merging_lines():
    text = "arch: amd64\r\nmemory: 1024"
    new = PC.set_raw_lines(text, [("lxc.mount.entry", "/dev/nvidia0 dev/nvidia0 none bind,optional,create=file")],
                           nvidia_owned)
    assert new.splitlines() == ["arch: amd64", "memory: 1024",
                                "lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file"]


def test_set_options_adds_devn_before_raw_keys_replaces_and_deletes_in_place():
    new = PC.set_options(CT129, {"dev0": "/dev/nvidia0,gid=44,mode=0666", "memory": "98304"}, deletes=["swap"])
    lines = new[:new.index("[")].splitlines()
    assert "memory: 98304" in lines and "swap: 0" not in lines
    assert lines.index("dev0: /dev/nvidia0,gid=44,mode=0666") < lines.index("lxc.cgroup2.devices.allow: c 226:* rwm")
    assert snapshot_part(new) == snapshot_part(CT129)
    assert PC.set_options(new, {"memory": "98304"}) == new


def test_devices_are_read_as_property_strings_and_a_bad_mode_is_named():
    opts = PC.parse("dev1: /dev/nvidiactl,mode=0666\ndev0: path=/dev/nvidia0,gid=44,deny-write=1\n")
    assert PC.devices(opts) == [(0, {"path": "/dev/nvidia0", "gid": "44", "deny-write": "1"}),
                                (1, {"path": "/dev/nvidiactl", "mode": "0666"})]
    with pytest.raises(PC.PveConfError, match=r"dev0: mode=rw is not an octal mode"):
        PC.devices(PC.parse("dev0: /dev/nvidia0,mode=rw\n"))


def test_a_line_proxmox_would_refuse_is_named_with_its_number():
    with pytest.raises(PC.PveConfError, match=r"line 2: 'this is not an option'"):
        PC.parse("arch: amd64\nthis is not an option\n")


def test_one_property_string_parser_for_config_files_and_api_values():
    pc = load_module_util("pve.conf")
    assert pc.parse_property_string("/dev/nvidia0,gid=44,mode=0666", default_key="path") == {
        "path": "/dev/nvidia0", "gid": "44", "mode": "0666"}
    assert pc.parse_property_string("path=/dev/nvidia1", default_key="path") == {"path": "/dev/nvidia1"}
    with pytest.raises(pc.PveConfError, match="has no key"):
        pc.parse_property_string("nesting=1,keyctl", default_key=None)           # a config file: strict
    # what the API returns is compared leniently: a bare flag is a flag (pve_lxc uses this same parser)
    assert pc.parse_property_string("nesting=1,keyctl", flags=True) == {"nesting": "1", "keyctl": "1"}
    lxc = load_module_util("pve.lxc")
    want = {"name": "eth0", "bridge": "vmbr0", "ip": "dhcp"}
    assert lxc.parse_prop("name=eth0,bridge=vmbr0,ip=dhcp", "name") == want


@pytest.mark.parametrize("value,ok", [(100, True), ("129", True), (999999999, True), (" 129 ", True),
                                      (99, False), ("0129", False), (1000000000, False), ("129; reboot", False),
                                      (None, False), ("", False), (True, False), (-129, False), ("1e3", False)])
def test_one_rule_for_a_ct_id_names_the_variable(value, ok):
    problem = PC.vmid_problem(value, "proxmox_vmid")
    assert (problem == "") is ok
    if not ok:
        shown = "(unset)" if value in (None, "") else str(value).strip()
        assert problem == "proxmox_vmid=%s must be a Proxmox CT id, 100-999999999" % shown


# ---- devN and raw-line planning (module pve_lxc_conf's logic, unit-tested here)

def test_plan_devices_keeps_indexes_reuses_freed_ones_and_never_takes_a_foreign_one():
    opts = {"dev0": "/dev/dri/renderD128,gid=104", "dev1": "/dev/nvidia0,mode=0666", "dev2": "/dev/nvidiactl",
            "dev4": "/dev/nvidia-uvm"}
    devices = [{"path": "/dev/nvidiactl"}, {"path": "/dev/nvidia1", "mode": "0666"},
               {"path": "/dev/nvidia-uvm", "deny_write": True}]
    changes, deletes, final = PC.plan_devices(opts, devices, "^/dev/nvidia")
    # nvidiactl keeps dev2; nvidia-uvm keeps dev4 (its value changes); nvidia1 takes the lowest index that is neither
    # the operator's (dev0) nor kept: dev1, which nvidia0 (no longer wanted) frees
    assert final == [{"index": 1, "value": "/dev/nvidia1,mode=0666"}, {"index": 2, "value": "/dev/nvidiactl"},
                     {"index": 4, "value": "/dev/nvidia-uvm,deny-write=1"}]
    assert changes == {"dev1": "/dev/nvidia1,mode=0666", "dev4": "/dev/nvidia-uvm,deny-write=1"}
    assert deletes == []                      # dev1 is rewritten, not deleted
    changes, deletes, final = PC.plan_devices(opts, [], "^/dev/nvidia")
    assert changes == {} and sorted(deletes) == ["dev1", "dev2", "dev4"] and final == []   # dev0 is not ours


def test_raw_lines_are_rules_then_mounts_and_the_owner_knows_its_lines():
    lines = PC.raw_device_lines([{"path": "/dev/nvidia0", "rdev": ("c", 195, 0)},
                                 {"path": "/dev/nvidia-uvm", "rdev": ("c", 510, 0), "deny_write": True}])
    assert lines == [("lxc.cgroup2.devices.allow", "c 195:0 rwm"), ("lxc.cgroup2.devices.allow", "c 510:0 rm"),
                     ("lxc.mount.entry", "/dev/nvidia0 dev/nvidia0 none bind,optional,create=file"),
                     ("lxc.mount.entry", "/dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file,ro")]
    owns = PC.line_owner({195, 510}, "^/dev/nvidia")
    assert all(owns(k, v) for k, v in lines)
    assert owns("lxc.cgroup.devices.allow", "c 195:* rwm")              # a cgroup v1 rule of ours
    assert not owns("lxc.cgroup2.devices.allow", "c 226:0 rwm")         # the iGPU's: never touched
    assert not owns("lxc.mount.entry", "/dev/dri dev/dri none bind,optional,create=dir")
    assert not owns("lxc.apparmor.profile", "unconfined")
    with pytest.raises(re.error):
        PC.line_owner({195}, "(")


def test_backups_are_unique_within_a_second_and_only_the_newest_are_kept(tmp_path):
    conf = tmp_path / "129.conf"
    conf.write_text("arch: amd64\n")
    backups = tmp_path / "b"
    backups.mkdir()
    (backups / "130.conf.20260101T000000.000000").write_text("another CT's")
    made = [PC.backup_config(str(conf), str(backups), 129, 3) for dummy in range(5)]
    assert len(set(made)) == 5                                   # no two runs overwrite each other
    left = sorted(p.name for p in backups.iterdir())
    assert len([n for n in left if n.startswith("129.conf.")]) == 3 and "130.conf.20260101T000000.000000" in left
    assert all(open(p).read() == "arch: amd64\n" for p in made if os.path.exists(p))
    assert oct(os.stat(made[-1]).st_mode & 0o777) == "0o600"


def node_read(**over):
    """nvidia_gpu_facts as a two-GPU node with its UVM nodes answers (majors as /proc/devices lists them)."""
    read = {"state": "ok", "message": "2 GPU(s)", "device_majors": {"nvidia-frontend": 195, "nvidia-uvm": 508},
            "device_nodes": [{"path": p, "major": m, "minor": n} for p, m, n in (
                ("/dev/nvidia0", 195, 0), ("/dev/nvidia1", 195, 1), ("/dev/nvidia-uvm", 508, 0),
                ("/dev/nvidia-uvm-tools", 508, 1), ("/dev/nvidiactl", 195, 255))]}
    read.update(over)
    return read


def test_passthrough_check_passes_the_asked_gpus_then_control_then_uvm():
    got = PC.passthrough_check(node_read(), [1], True, "raw", "pve1", "/proc/devices")
    passed = ["/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]
    assert got == {"found": [0, 1], "problem": "", "nodes": passed, "open_argv": [],
                   "paths": ["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
                             "/dev/nvidiactl"]}
    # with the CT: the one command that opens them there (the role's after-change task runs it)
    assert PC.passthrough_check(node_read(), [1], True, "raw", "pve1", "/proc/devices", vmid=129)["open_argv"] == [
        "pct", "exec", "129", "--", "head", "-q", "-c", "0", "--"] + passed
    # no GPUs asked: every one found; no UVM
    assert PC.passthrough_check(node_read(), [], False, "dev", "pve1", "/proc/devices")["nodes"] == [
        "/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl"]


def test_passthrough_check_names_the_first_problem_in_order():
    check = PC.passthrough_check
    msg = check(node_read(), [1, 5], True, "raw", "pve1", "/proc/devices")["problem"]
    assert msg.startswith("lxc_gpu_passthrough_gpus=[1, 5]: this node has GPU nodes [0, 1] (ok: 2 GPU(s)). Pick from")
    none = node_read(device_nodes=[], state="no_driver", message="nvidia-smi not found")
    assert "GPU nodes [] (no_driver: nvidia-smi not found)" in check(none, [], True, "raw", "pve1", "/p")["problem"]
    no_uvm = node_read(device_nodes=[n for n in node_read()["device_nodes"] if "uvm" not in n["path"]])
    assert check(no_uvm, [0], True, "raw", "pve1", "/p")["problem"].startswith(
        "/dev/nvidiactl or /dev/nvidia-uvm is missing on pve1: nvidia-uvm appears only after the first CUDA use")
    assert check(no_uvm, [0], False, "raw", "pve1", "/p")["problem"] == ""   # UVM not passed: not needed
    no_major = node_read(device_majors={"nvidia-frontend": 195})
    assert check(no_major, [0], True, "raw", "pve1", "/proc/devices")["problem"] == (
        "/proc/devices lists no nvidia-frontend/nvidia-uvm major ({'nvidia-frontend': 195}): the driver is not "
        "loaded, so raw cgroup lines cannot be written.")
    assert check(no_major, [0], True, "dev", "pve1", "/proc/devices")["problem"] == ""   # dev mode needs no majors
    # the dynamic UVM major moved (a driver or kernel update): the old nodes are stale, named with the fix
    moved = node_read(device_majors={"nvidia-frontend": 195, "nvidia-uvm": 510})
    assert check(moved, [0], True, "dev", "pve1", "/proc/devices")["problem"].startswith(
        "stale device node(s) ['/dev/nvidia-uvm', '/dev/nvidia-uvm-tools']: their major differs from /proc/devices "
        "({'nvidia-frontend': 195, 'nvidia-uvm': 510})")


def test_the_open_command_run_for_real_is_read_by_passthrough_access(tmp_path):
    """open_nodes_argv's command after `pct exec <vmid> --`, run here on real files (coreutils head): one that
    opens, one missing, one under a file (ENOTDIR); passthrough_access reads what head said about each, and the
    rest is tried after a failure."""
    import subprocess  # pylint: disable=import-outside-toplevel
    ok = tmp_path / "nvidiactl"
    ok.write_bytes(b"x" * 100)
    gone, under_file = str(tmp_path / "nvidia0"), str(ok / "nvidia1")
    argv = PC.open_nodes_argv(100, [gone, under_file, str(ok)], pct="/usr/sbin/pct")
    assert argv[:5] == ["/usr/sbin/pct", "exec", "100", "--", "head"]
    p = subprocess.run(argv[4:], capture_output=True, text=True, check=False)
    assert p.returncode == 1 and p.stdout == ""                                  # reads nothing
    got = PC.passthrough_access({"rc": p.returncode, "stderr": p.stderr, "stderr_lines": p.stderr.splitlines()},
                                [gone, under_file, str(ok)])
    assert [n["access"] for n in got] == ["missing", "error", "open"], got


def test_passthrough_access_classifies_each_node_by_what_head_said():
    nodes = ["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm"]
    err = ["head: cannot open '/dev/nvidia0' for reading: No such device or address",
           "head: cannot open '/dev/nvidia1' for reading: Operation not permitted",
           "head: cannot open '/dev/nvidia-uvm' for reading: No such file or directory"]
    got = PC.passthrough_access({"rc": 1, "stderr": "\n".join(err), "stderr_lines": err}, nodes)
    assert [(n["path"], n["access"]) for n in got] == [
        ("/dev/nvidia0", "reachable_no_driver"), ("/dev/nvidia1", "denied"), ("/dev/nvidiactl", "open"),
        ("/dev/nvidia-uvm", "missing")]
    assert got[1]["message"] == err[1] and got[2]["message"] == ""
    # a failure that names no node (pct exec itself failed) is an error on every node, with rc and stderr
    failed = PC.passthrough_access({"rc": 255, "stderr": "CT 100 not running", "stderr_lines": ["CT 100 not running"]},
                                   nodes[:1])
    assert failed == [{"path": "/dev/nvidia0", "access": "error", "message": "rc 255: CT 100 not running"}]
    # nothing run (a skipped task): nothing classified
    assert PC.passthrough_access({"skipped": True}, nodes) == [] and PC.passthrough_access({}, nodes) == []


def test_every_lock_of_the_pve_schema_has_a_meaning_and_the_message_says_how_to_clear_it():
    """The `lock` enum of the real PVE 9 API schema (tests/fixtures/pve_api, the CT's config and status paths): each
    value is explained; `mounted` is cleared by pct unmount, the rest by pct unlock."""
    import json  # pylint: disable=import-outside-toplevel
    with open(os.path.join(os.path.dirname(__file__), "..", "fixtures", "pve_api", "pve9-lxc.json")) as fh:
        schema = json.dumps(json.load(fh)["paths"])
    enums = set(re.findall(r'"lock": \{[^}]*?"enum": (\[[^\]]*\])', schema))
    assert len(enums) == 1
    assert sorted(PC.LOCK_MEANING) == json.loads(enums.pop())
    msg = PC.locked_problem(129, "backup", "/etc/pve/lxc/129.conf")
    assert msg == ("CT 129 is locked (backup) in /etc/pve/lxc/129.conf: a backup (vzdump) of it is running, and "
                   "Proxmox changes nothing in a locked CT (pct set and start say 'CT is locked (backup)'). Run again "
                   "when that has ended; if nothing runs (a job that failed left the lock), `pct unlock 129` first. "
                   "Nothing was changed.")
    assert "`pct unmount 129` first" in PC.locked_problem(129, "mounted", "/x")
    assert "a Proxmox operation holds it" in PC.locked_problem(129, "suspended", "/x")     # a lock a later PVE adds
    assert PC.locked_problem(129, "", "/x") == "" and PC.parse("lock: migrate\n")["lock"] == "migrate"
    # a lock in a snapshot section is that snapshot's, not the CT's
    assert "lock" not in PC.parse("arch: amd64\n\n[snap1]\nlock: snapshot\n")


def test_proxmoxs_config_lock_is_a_real_flock_that_waits_then_names_the_file(tmp_path):
    """take_config_lock against another process holding the same flock(2) lock (util-linux flock, as Perl's
    flock in PVE::Tools::lock_file_full): refused after the timeout with Proxmox's words; taken once released; the
    lock directory made when missing (a node where no pct ran since boot)."""
    import subprocess  # pylint: disable=import-outside-toplevel
    lock_dir = str(tmp_path / "run" / "lock" / "lxc")
    fd = PC.take_config_lock(129, lock_dir, timeout=0)
    os.close(fd)
    path = os.path.join(lock_dir, "pve-config-129.lock")
    holder = subprocess.Popen(["flock", "-x", path, "sh", "-c", "echo held; exec sleep 30"], stdout=subprocess.PIPE,
                              text=True, start_new_session=True)
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(PC.PveConfError) as err:
            PC.take_config_lock(129, lock_dir, timeout=0.3)
        assert str(err.value).startswith("can't lock file '%s' - got timeout" % path)
        other = PC.take_config_lock(130, lock_dir, timeout=0)          # another CT's lock is another file
        os.close(other)
    finally:
        os.killpg(holder.pid, signal.SIGKILL)   # flock and the command holding its lock
        holder.wait()
    fd = PC.take_config_lock(129, lock_dir, timeout=1)
    try:
        probe = subprocess.run(["flock", "-n", "-x", path, "true"], check=False)
        assert probe.returncode == 1                                    # held by us now: others are refused
    finally:
        os.close(fd)
    assert subprocess.run(["flock", "-n", "-x", path, "true"], check=False).returncode == 0


PENDING_CT = ("arch: amd64\nhostname: sglang\ndev0: /dev/nvidia0,mode=0666\ndev1: /dev/dri/card0\n"
              "\n[before-driver-upgrade]\ndev0: /dev/nvidia9\n"
              "\n[pve:pending]\ndev2: /dev/nvidiactl,mode=0666\ndev3: /dev/ttyUSB0\ndelete: !dev0,memory\n")


def test_pending_changes_are_read_from_their_section_only_with_forced_deletes():
    assert PC.pending_changes(PENDING_CT) == ({"dev2": "/dev/nvidiactl,mode=0666", "dev3": "/dev/ttyUSB0"},
                                              ["dev0", "memory"])
    assert PC.pending_changes("arch: amd64\n\n[snap]\ndev0: /dev/nvidia0\n") == ({}, [])
    assert PC.parse(PENDING_CT)["dev0"] == "/dev/nvidia0,mode=0666"          # the current config is the main section


def test_pending_devn_over_the_passthrough_is_named_and_others_are_left_alone():
    """Proxmox applies [pve:pending] at the next start: a pending set or delete of a devN the module owns (its
    current or pending path is NVIDIA's) or writes (an index of its plan) would overwrite the passthrough."""
    opts = PC.parse(PENDING_CT)
    devices = [{"path": "/dev/nvidia0", "mode": "0666"}, {"path": "/dev/nvidiactl", "mode": "0666"}]
    _changes, _deletes, final = PC.plan_devices(opts, devices, "^/dev/nvidia")
    assert [d["index"] for d in final] == [0, 2]
    over = PC.pending_over_devices(PENDING_CT, final, "^/dev/nvidia")
    assert over == ["dev2: /dev/nvidiactl,mode=0666", "delete dev0"]           # not dev3 (a tty), not memory
    msg = PC.pending_problem(129, "/etc/pve/lxc/129.conf", over)
    assert msg.startswith("CT 129 has pending changes to its device passthrough (dev2: /dev/nvidiactl,mode=0666; "
                          "delete dev0 in the [pve:pending] section of /etc/pve/lxc/129.conf) that Proxmox applies at "
                          "the CT's next start")
    assert "`pct set 129 --revert dev0,dev2`; `pct pending 129` lists them. Nothing was changed." in msg
    # a pending devN of another device at an index the plan does not use: not the module's business
    other = "arch: amd64\ndev0: /dev/nvidia0\n\n[pve:pending]\ndev5: /dev/ttyUSB0\n"
    assert PC.pending_over_devices(other, [{"index": 0, "value": "/dev/nvidia0"}], "^/dev/nvidia") == []
    # ... but one at an index the plan gives a new NVIDIA node is
    assert PC.pending_over_devices(other, [{"index": 0, "value": "/dev/nvidia0"}, {"index": 5, "value": "/dev/x"}],
                                   "^/dev/nvidia") == ["dev5: /dev/ttyUSB0"]
