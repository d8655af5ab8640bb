"""pve_lxc_conf through Ansible on real files and real device nodes (mknod in a temp dir)."""
import os
import signal
import stat
import subprocess
import time

import pytest

from ansible_helpers import ROOT, run_module

M = "gpuserve.sglang.pve_lxc_conf"
with open(os.path.join(ROOT, "tests", "fixtures", "pve_conf", "ct129-operator.conf")) as fh:
    CT129 = fh.read().split("\n", 1)[1]


@pytest.fixture
def node(tmp_path):
    dev = tmp_path / "dev"
    dev.mkdir()
    for name, major, minor in [("nvidia0", 195, 0), ("nvidia1", 195, 1), ("nvidiactl", 195, 255), ("nvidia-uvm", 510, 0)]:
        os.mknod(str(dev / name), 0o666 | stat.S_IFCHR, os.makedev(major, minor))
    conf_dir = tmp_path / "lxc"
    conf_dir.mkdir()
    (conf_dir / "129.conf").write_text(CT129)
    return {"dev": str(dev), "conf_dir": str(conf_dir), "conf": conf_dir / "129.conf",
            "backup_dir": str(tmp_path / "backups"), "lock_dir": str(tmp_path / "lock")}


def args(node, **kw):
    base = {"vmid": 129, "conf_dir": node["conf_dir"], "backup_dir": node["backup_dir"], "owned_paths": "nvidia",
            "owned_mounts": "nvidia", "lock_dir": node["lock_dir"]}
    base.update(kw)
    return base


def devs(node, *names, **extra):
    return [dict({"path": os.path.join(node["dev"], n)}, **extra) for n in names]


def test_check_mode_predicts_the_change_writes_nothing_and_diff_shows_it(node):
    r = run_module(M, args(node, devices=devs(node, "nvidia0", "nvidiactl", mode="0666")), check=True)
    assert r["changed"] is True and r["restart_needed"] is True
    assert node["conf"].read_text() == CT129 and not os.path.exists(node["backup_dir"])


def test_devn_written_in_place_then_idempotent_with_a_backup_and_the_snapshot_untouched(node):
    ino = os.stat(str(node["conf"])).st_ino
    r = run_module(M, args(node, devices=devs(node, "nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", mode="0666", gid=44)))
    assert r["changed"] is True, r.get("msg")
    text = node["conf"].read_text()
    assert os.stat(str(node["conf"])).st_ino == ino, "written in place, not replaced (pmxcfs)"
    assert "dev0: %s/nvidia0,gid=44,mode=0666\n" % node["dev"] in text
    assert [d["index"] for d in r["devices"]] == [0, 1, 2, 3]
    assert text[text.index("[before-driver-upgrade]"):] == CT129[CT129.index("[before-driver-upgrade]"):]
    with open(r["backup_file"]) as fh:
        assert fh.read() == CT129
    again = run_module(M, args(node, devices=devs(node, "nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", mode="0666", gid=44)))
    assert again["changed"] is False and again["restart_needed"] is False


def test_dropping_a_gpu_keeps_the_other_indexes_and_a_new_node_takes_the_free_one(node):
    run_module(M, args(node, devices=devs(node, "nvidia0", "nvidia1", "nvidiactl")))
    r = run_module(M, args(node, devices=devs(node, "nvidia1", "nvidiactl", "nvidia-uvm")))
    got = dict((d["index"], d["value"].rsplit("/", 1)[1]) for d in r["devices"])
    assert got == {1: "nvidia1", 2: "nvidiactl", 0: "nvidia-uvm"}
    assert "nvidia0" not in node["conf"].read_text().split("[")[0].replace("/dev/nvidia0 dev/nvidia0", "")


def test_switching_to_raw_removes_devn_and_writes_exact_rules_keeping_the_operators_dri_lines(node):
    run_module(M, args(node, devices=devs(node, "nvidia0", "nvidiactl")))
    r = run_module(M, args(node, passthrough="raw", owned_majors=[195, 510],
                           devices=devs(node, "nvidia1", "nvidiactl", "nvidia-uvm")))
    assert r["changed"] is True
    main = node["conf"].read_text().split("[before-driver-upgrade]")[0]
    assert "dev0:" not in main and "dev1:" not in main
    assert "lxc.cgroup2.devices.allow: c 226:* rwm\n" in main, "the iGPU rule is the operator's"
    assert "lxc.cgroup2.devices.allow: c 195:* rwm" not in main, "the old wildcard NVIDIA rule is replaced"
    assert [line for line in main.splitlines() if "195:" in line or "510:" in line] == [
        "lxc.cgroup2.devices.allow: c 195:1 rwm", "lxc.cgroup2.devices.allow: c 195:255 rwm",
        "lxc.cgroup2.devices.allow: c 510:0 rwm"]
    assert "lxc.mount.entry: %s/nvidia1 %s/nvidia1 none bind,optional,create=file" % (node["dev"], node["dev"].lstrip("/")) in main


@pytest.mark.parametrize("bad,needle", [
    ({"devices": [{"path": "/dev/nvidia9"}]}, "devices: /dev/nvidia9 does not exist on this node"),
    ({"devices": [{"path": "/etc/hostname"}]}, "devices: /etc/hostname is not a device node"),
    ({"vmid": 999}, "CT 999 has no config at "),
    ({"raw": [["lxc.cgroup2.devices.allow", "c 226:* rwm"]]}, "is not a line this module owns"),
])
def test_bad_input_is_named_and_changes_nothing(node, bad, needle):
    r = run_module(M, args(node, **bad))
    assert r["failed"] is True and needle in r["msg"]
    assert node["conf"].read_text() == CT129


def test_bad_mode_is_named(node):
    r = run_module(M, args(node, devices=devs(node, "nvidia0", mode="rw")))
    assert r["failed"] is True and "mode=rw" in r["msg"] and node["conf"].read_text() == CT129


def test_backups_within_one_second_never_overwrite_each_other_and_only_the_newest_are_kept(node):
    """Four changes in quick succession: four distinct backups of the right contents, pruned to backup_keep."""
    seen = []
    for i, gpus in enumerate((["nvidia0"], ["nvidia0", "nvidia1"], ["nvidia1"], ["nvidia0"])):
        before = node["conf"].read_text()
        r = run_module(M, args(node, backup_keep=3, devices=devs(node, *(gpus + ["nvidiactl"]))))
        assert r["changed"] is True, (i, r.get("msg"))
        with open(r["backup_file"]) as fh:
            assert fh.read() == before
        seen.append(os.path.basename(r["backup_file"]))
    assert len(set(seen)) == 4
    assert sorted(os.listdir(node["backup_dir"])) == sorted(seen[1:])
    assert oct(os.stat(os.path.join(node["backup_dir"], seen[-1])).st_mode & 0o777) == "0o600"


def fake_pct(tmp_path, out, rc=0):
    """A pct on PATH that records its argv and answers as PVE's `pct status` does: "status: <state>" on stdout, or
    for a CT the cluster does not know its error on stderr with a non-zero exit (the module fails on any)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    (tmp_path / "pct.out").write_text(out + "\n")
    script = bin_dir / "pct"
    script.write_text("#!/bin/sh\necho \"$*\" >> %s\ncat %s%s\nexit %d\n" % (
        tmp_path / "pct.argv", tmp_path / "pct.out", "" if rc == 0 else " >&2", rc))
    script.chmod(0o755)
    return {"PATH": "%s:%s" % (bin_dir, os.environ["PATH"])}


def test_status_comes_in_the_same_call_and_a_failing_pct_is_named_with_nothing_written(node, tmp_path):
    """The role reads the CT's state from this call instead of a second `pct status` round trip."""
    want = args(node, devices=devs(node, "nvidia0", "nvidiactl", mode="0666"), status=True)
    r = run_module(M, want, env=fake_pct(tmp_path / "a", "status: stopped"))
    assert r["changed"] is True and r["status"] == "stopped", r.get("msg")
    assert (tmp_path / "a" / "pct.argv").read_text() == "status 129\n"
    written = node["conf"].read_text()
    plain = run_module(M, args(node, devices=devs(node, "nvidia0", "nvidiactl", mode="0666")))
    assert plain["changed"] is False and "status" not in plain
    bad = run_module(M, dict(want, devices=devs(node, "nvidia0", mode="0666")),
                     env=fake_pct(tmp_path / "b", "Configuration file 'nodes/pve/lxc/129.conf' does not exist", rc=2))
    assert bad["failed"] is True
    assert bad["msg"] == "pct status 129: Configuration file 'nodes/pve/lxc/129.conf' does not exist"
    assert node["conf"].read_text() == written, "a failed status read changes nothing"


def pct_running(tmp_path, state="running"):
    """A pct on PATH for open_if_unchanged: `pct status` answers as PVE's does, and `pct exec <vmid> -- argv` runs
    argv (here on this machine's device nodes, where PVE runs it inside the CT: the same argv and the same open()
    answers - ENXIO for a node of a driver that is not loaded, ENOENT for a missing one). Every call is recorded."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    script = bin_dir / "pct"
    script.write_text('#!/bin/sh\necho "$*" >> %s\ncase "$1" in\n  status) echo "status: %s" ;;\n'
                      '  exec) [ "$3" = "--" ] || exit 2; shift 3; exec "$@" ;;\n  *) exit 2 ;;\nesac\n'
                      % (tmp_path / "pct.argv", state))
    script.chmod(0o755)
    return {"PATH": "%s:%s" % (bin_dir, os.environ["PATH"])}


def test_open_if_unchanged_opens_the_nodes_in_the_same_call_only_when_nothing_changes_in_a_running_ct(node, tmp_path):
    """The role's verify open (`pct exec <vmid> -- head -q -c 0 -- nodes`) rides on the config call of a no-op
    re-run; after a change (the CT must restart first) or in a stopped CT it is not done and not reported."""
    nodes = [os.path.join(node["dev"], n) for n in ("nvidia0", "nvidiactl")]
    want = args(node, devices=devs(node, "nvidia0", "nvidiactl", mode="0666"), status=True, open_if_unchanged=nodes)
    changed = run_module(M, want, env=pct_running(tmp_path / "a"))
    assert changed["changed"] is True and "opened" not in changed, changed.get("msg")
    assert (tmp_path / "a" / "pct.argv").read_text() == "status 129\n"
    stopped = run_module(M, want, env=pct_running(tmp_path / "b", "stopped"))
    assert stopped["changed"] is False and stopped["status"] == "stopped" and "opened" not in stopped
    same = run_module(M, dict(want, open_if_unchanged=nodes + [os.path.join(node["dev"], "nvidia7")]),
                      env=pct_running(tmp_path / "c"), check=True)
    assert same["changed"] is False and same["status"] == "running", same.get("msg")
    assert (tmp_path / "c" / "pct.argv").read_text() == "status 129\nexec 129 -- head -q -c 0 -- %s\n" % " ".join(
        nodes + [os.path.join(node["dev"], "nvidia7")])
    said = same["opened"]
    assert said["rc"] == 1 and said["stderr_lines"] == said["stderr"].splitlines()
    assert any("nvidia0" in line and "No such device or address" in line for line in said["stderr_lines"])
    assert any("nvidia7" in line and "No such file" in line for line in said["stderr_lines"])
    bad = run_module(M, dict(want, status=False), env=pct_running(tmp_path / "d"))
    assert bad["failed"] is True and bad["msg"].startswith("open_if_unchanged needs status=true")
    assert not (tmp_path / "d" / "pct.argv").exists()


def locked(text, lock):
    """The config with Proxmox's guest lock in its main section, where pct and vzdump write it."""
    main, sep, rest = text.partition("\n[")
    return main.rstrip("\n") + "\nlock: %s\n" % lock + ("\n[" + rest if sep else "")


@pytest.mark.parametrize("lock, undo", [("backup", "pct unlock 129"), ("mounted", "pct unmount 129")])
def test_a_locked_ct_is_not_changed_in_check_mode_either_and_its_lock_is_named(node, lock, undo):
    """pve-container changes nothing in a locked CT (PVE::AbstractConfig::check_lock: 'CT is locked (backup)');
    neither does this module: the lock, what it means and how to clear it, the file untouched, no backup."""
    node["conf"].write_text(locked(CT129, lock))
    before = node["conf"].read_text()
    want = args(node, devices=devs(node, "nvidia0", "nvidiactl", mode="0666"))
    for check in (True, False):
        r = run_module(M, want, check=check)
        assert r["failed"] is True and r["lock"] == lock, r
        assert r["msg"].startswith("CT 129 is locked (%s) in %s/129.conf: " % (lock, node["conf_dir"])), r["msg"]
        assert "`%s` first. Nothing was changed." % undo in r["msg"]
        assert node["conf"].read_text() == before and not os.path.exists(node["backup_dir"])
    # a config already as asked is no change, locked or not: a re-run during a nightly backup passes
    node["conf"].write_text(CT129)
    assert run_module(M, want)["changed"] is True
    node["conf"].write_text(locked(node["conf"].read_text(), lock))
    again = run_module(M, want)
    assert again["changed"] is False and "failed" not in again, again.get("msg")


def hold_lock(node, secs):
    """Proxmox's config lock of CT 129 held by another process, as pct set or vzdump holds it: flock(1) takes the
    same flock(2) lock PVE::Tools::lock_file_full takes. Returns the holder once it has the lock."""
    os.makedirs(node["lock_dir"], exist_ok=True)
    path = os.path.join(node["lock_dir"], "pve-config-129.lock")
    holder = subprocess.Popen(["flock", "-x", path, "sh", "-c", "echo held; exec sleep %s" % secs],
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert holder.stdout.readline() == "held\n"
    return holder


def test_the_write_waits_for_proxmoxs_config_lock_and_gives_up_naming_it(node):
    want = args(node, devices=devs(node, "nvidia0", "nvidiactl", mode="0666"), lock_timeout=1)
    holder = hold_lock(node, 30)
    try:
        r = run_module(M, want)
    finally:
        os.killpg(holder.pid, signal.SIGKILL)   # flock and the command holding its lock
        holder.wait()
    assert r["failed"] is True, r
    assert r["msg"].startswith("can't lock file '%s/pve-config-129.lock' - got timeout: a Proxmox operation on CT "
                               "129" % node["lock_dir"]), r["msg"]
    assert node["conf"].read_text() == CT129 and not os.path.exists(node["backup_dir"])
    # held for a moment (a pct set): the module waits for it, then writes
    holder = hold_lock(node, 2)
    t0 = time.time()
    try:
        r = run_module(M, dict(want, lock_timeout=20))
    finally:
        holder.wait()
    assert r["changed"] is True, r.get("msg")
    assert time.time() - t0 >= 1.5 and "dev0: " in node["conf"].read_text()
    # check mode reads only: it takes no lock, so a held one does not stop it
    holder = hold_lock(node, 30)
    try:
        look = run_module(M, dict(want, devices=devs(node, "nvidia1", mode="0666")), check=True)
    finally:
        os.killpg(holder.pid, signal.SIGKILL)   # flock and the command holding its lock
        holder.wait()
    assert look["changed"] is True and "failed" not in look, look.get("msg")


def test_a_write_the_file_system_refuses_is_named_with_the_quorum_hint_and_the_config_unchanged(node):
    """/etc/pve (pmxcfs) is read-only while the node has no quorum: its writes fail ('Permission denied'). Here the
    config's directory is a read-only bind mount in a mount namespace of the module's own (EROFS): the message
    does not depend on which errno it is."""
    want = args(node, devices=devs(node, "nvidia0", "nvidiactl", mode="0666"))
    wrap = ["unshare", "-m", "sh", "-c", 'mount --bind -o ro "$0" "$0" && exec "$@"', node["conf_dir"]]
    r = run_module(M, want, prefix=wrap)
    assert r["failed"] is True, r
    assert r["msg"].startswith("cannot write %s/129.conf: Read-only file system. /etc/pve is read-only while this "
                               "node is not part of a quorate cluster (`pvecm status`" % node["conf_dir"]), r["msg"]
    assert "The config is unchanged (a copy is in %s/129.conf." % node["backup_dir"] in r["msg"]
    assert node["conf"].read_text() == CT129


def test_pending_devn_that_would_overwrite_the_passthrough_at_the_next_start_is_refused(node):
    """A `pct set 129 --dev0 ...` while the CT ran on PVE 8 left dev0 in [pve:pending], which Proxmox applies at the
    next start - after this module's write and its restart, over its line. Refused every run (changed or not, check
    mode too) with the ways out; nothing written."""
    text = CT129 + "\n[pve:pending]\ndev0: %s/nvidia1,mode=0600\n" % node["dev"]
    node["conf"].write_text(text)
    want = args(node, devices=devs(node, "nvidia0", "nvidiactl", mode="0666"))
    for check in (True, False):
        r = run_module(M, want, check=check)
        assert r["failed"] is True and r["pending"] == ["dev0: %s/nvidia1,mode=0600" % node["dev"]], r
        assert "Apply them (restart the CT) and run again, or drop them with `pct set 129 --revert dev0`" in r["msg"]
        assert node["conf"].read_text() == text and not os.path.exists(node["backup_dir"])


def test_a_write_that_fails_partway_says_how_to_put_the_previous_config_back(node, tmp_path):
    """Opened, then refused mid-write (ENOSPC: here the config lives on a full 16 KiB tmpfs in a mount namespace
    of the module's own): the file may be half written, so the message gives the backup and the command that puts it
    back, instead of calling the config unchanged."""
    want = args(node, devices=devs(node, "nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", mode="0666", gid=44))
    # description lines bring the file to just under one 4 KiB page: the devN lines need a new one, which is not there
    text = "".join("# the operator's notes, line %03d ............................................\n" % i
                   for i in range((4096 - 64 - len(CT129)) // 76)) + CT129
    assert 3900 < len(text) < 4096
    src = str(tmp_path / "ct129.conf")
    with open(src, "w") as fh:
        fh.write(text)
    setup = ('mount -t tmpfs -o size=16k tmpfs "$0" && cp "$1" "$0/129.conf" && '
             '(dd if=/dev/zero of="$0/filler" bs=1k count=64 2>/dev/null; true) && shift && exec "$@"')
    r = run_module(M, want, prefix=["unshare", "-m", "sh", "-c", setup, node["conf_dir"], src])
    assert r["failed"] is True, r
    assert r["msg"].startswith("writing %s/129.conf failed partway: No space left on device. Put the previous config "
                               "back with `cp %s/129.conf." % (node["conf_dir"], node["backup_dir"])), r["msg"]
    with open(r["backup_file"]) as fh:
        assert fh.read() == text                                   # the copy it points at is the previous config
