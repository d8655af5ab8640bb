"""layout: a role's groups, accounts, directories, files and enabled units in one call - on a real temporary tree,
with the account database and systemctl replaced by a recording stand-in (they act on the machine itself)."""
import collections
import os
import stat

import pytest

from unit_helpers import CONTROLLER, load_module_util, load_plugin

L = load_module_util("host.layout")

Pw = collections.namedtuple("Pw", "pw_name pw_uid pw_gid pw_dir pw_shell")
Gr = collections.namedtuple("Gr", "gr_name gr_gid gr_mem")


class FakeSystem(L.System):
    """Accounts from dicts; every command recorded; systemctl is-enabled answered from ``enabled``."""

    def __init__(self, users=None, groups=None, enabled=None):
        super().__init__(self.record)
        self.users = dict(users or {})
        self.groups = dict(groups or {"root": Gr("root", 0, [])})
        self.unit_states = dict(enabled or {})
        self.argv = []

    def record(self, argv):
        self.argv.append(list(argv))
        if argv[:2] == ["systemctl", "is-enabled"]:
            known = [u for u in argv[3:] if u in self.unit_states]
            out = "".join(self.unit_states[u] + "\n" for u in known)
            return (0 if all(self.unit_states[u] == "enabled" for u in known) and len(known) == len(argv[3:]) else 1,
                    out, "")
        return 0, "", ""

    def group(self, name):
        return self.groups.get(name)

    def user(self, name):
        return self.users.get(name)

    def member_of(self, name):
        return set(g.gr_name for g in self.groups.values() if name in g.gr_mem)


def root_system(**kw):
    return FakeSystem(users={"root": Pw("root", 0, 0, "/root", "/bin/bash")}, **kw)


def mode_of(path):
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_directories_created_with_parents_then_a_rerun_changes_nothing(tmp_path):
    top = tmp_path / "opt" / "gpuserve"
    spec = {"paths": [{"path": str(top / "locks"), "owner": "root", "group": "root", "mode": "0755"},
                      {"path": str(tmp_path / "log"), "mode": "0750"}]}
    first = L.run(spec, system=root_system())
    assert first["changed"] and first["changed_paths"] == [str(top / "locks"), str(tmp_path / "log")]
    assert mode_of(top / "locks") == 0o755 and mode_of(tmp_path / "log") == 0o750 and (top / "locks").is_dir()
    again = L.run(spec, system=root_system())
    assert again == {"changed": False, "changed_paths": [], "enabled": [], "present": {}, "actions": [], "diff": []}


def test_check_mode_reports_and_changes_nothing(tmp_path):
    (tmp_path / "log").mkdir(mode=0o755)
    os.chmod(tmp_path / "log", 0o755)
    spec = {"paths": [{"path": str(tmp_path / "log"), "mode": "0750"},
                      {"path": str(tmp_path / "new"), "mode": "0700"},
                      {"path": str(tmp_path / "unit"), "content": "[Unit]\n", "mode": "0644"}]}
    result = L.run(spec, check=True, system=root_system())
    assert result["changed"] and result["changed_paths"] == [str(tmp_path / p) for p in ("log", "new", "unit")]
    assert "path %s: directory mode 0755->0750" % (tmp_path / "log") in result["actions"]
    assert mode_of(tmp_path / "log") == 0o755 and sorted(os.listdir(tmp_path)) == ["log"]


def test_an_existing_directory_keeps_what_is_not_given(tmp_path):
    d = tmp_path / "token-dir"
    d.mkdir()
    os.chmod(d, 0o711)
    os.chown(d, 65534, 65534)
    result = L.run({"paths": [{"path": str(d), "mode": "0750"}]}, system=root_system())
    st = os.stat(d)
    assert result["changed_paths"] == [str(d)] and stat.S_IMODE(st.st_mode) == 0o750
    assert (st.st_uid, st.st_gid) == (65534, 65534)


def test_a_link_to_a_directory_is_followed_not_replaced(tmp_path):
    real = tmp_path / "data-logs"
    real.mkdir()
    os.chmod(real, 0o755)
    (tmp_path / "log").symlink_to(real)
    L.run({"paths": [{"path": str(tmp_path / "log"), "mode": "0750"}]}, system=root_system())
    assert (tmp_path / "log").is_symlink() and mode_of(real) == 0o750


def test_a_file_is_written_whole_with_its_mode_and_a_diff_and_only_when_it_differs(tmp_path):
    unit = tmp_path / "etc" / "sglang-main.service"
    spec = {"paths": [{"path": str(unit), "content": "[Service]\nExecStart=/a\n", "owner": "root", "mode": "0644"}]}
    first = L.run(spec, system=root_system())
    assert unit.read_text() == "[Service]\nExecStart=/a\n" and mode_of(unit) == 0o644
    assert first["diff"] == [{"before_header": str(unit), "after_header": str(unit), "before": "",
                              "after": "[Service]\nExecStart=/a\n"}]
    inode = os.stat(unit).st_ino
    assert L.run(spec, system=root_system())["changed"] is False and os.stat(unit).st_ino == inode
    spec["paths"][0]["content"] = "[Service]\nExecStart=/b\n"
    third = L.run(spec, system=root_system())
    assert third["diff"][0]["before"] == "[Service]\nExecStart=/a\n" and unit.read_text().endswith("/b\n")
    assert os.stat(unit).st_ino != inode, "written to a new file and renamed over, never in place"
    assert [n for n in os.listdir(unit.parent) if n.startswith(".")] == [], "no temporary file left"


def test_right_content_with_the_wrong_mode_only_gets_its_mode(tmp_path):
    f = tmp_path / "lock"
    f.write_text("pins\n")
    os.chmod(f, 0o666)
    inode = os.stat(f).st_ino
    result = L.run({"paths": [{"path": str(f), "content": "pins\n", "mode": "0644"}]}, system=root_system())
    assert result["actions"] == ["path %s: file mode 0666->0644" % f]
    assert mode_of(f) == 0o644 and os.stat(f).st_ino == inode


def test_a_link_where_a_file_belongs_is_replaced_and_its_target_untouched(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text("not yours\n")
    link = tmp_path / "token"
    link.symlink_to(target)
    L.run({"paths": [{"path": str(link), "secret": "hf_x\n", "mode": "0600"}]}, system=root_system())
    assert not link.is_symlink() and link.read_text() == "hf_x\n" and target.read_text() == "not yours\n"


def test_a_secret_is_never_in_the_result_and_its_mode_is_checked(tmp_path):
    token = "hf_" + "s3cr3t" * 6
    f = tmp_path / "hf-token"
    spec = {"paths": [{"path": str(f), "secret": token + "\n", "owner": "root", "group": "root", "mode": "0600"}]}
    first = L.run(spec, system=root_system())
    assert f.read_text() == token + "\n" and mode_of(f) == 0o600
    spec["paths"][0]["secret"] = token + "2\n"
    second = L.run(spec, system=root_system())
    assert second["changed"] and token not in repr(first) + repr(second)
    assert second["diff"][0]["after"] == "(secret, changed)\n"
    for bad in ("0644", "0604", None):
        spec["paths"][0]["mode"] = bad
        with pytest.raises(L.LayoutError) as err:
            L.run(spec, system=root_system())
        assert "give nothing to others" in str(err.value) and token not in str(err.value)
    assert f.read_text() == token + "2\n"


def test_absent_removes_a_file_and_is_quiet_when_nothing_is_there(tmp_path):
    f = tmp_path / "hf-token"
    f.write_text("x")
    spec = {"paths": [{"path": str(f), "state": "absent"}]}
    assert L.run(spec, check=True, system=root_system())["changed"] and f.exists()
    assert L.run(spec, system=root_system())["changed_paths"] == [str(f)] and not f.exists()
    assert L.run(spec, system=root_system())["changed"] is False


@pytest.mark.parametrize("entry, words", [
    ({"path": "var/log/sglang"}, "absolute, normalised"),
    ({"path": "/var/log/../sglang"}, "absolute, normalised"),
    ({"path": "/"}, "absolute, normalised"),
    ({"path": "/etc/x", "content": "a", "secret": "b", "mode": "0600"}, "exactly one of content and secret"),
    ({"path": "/etc/x", "state": "directory", "content": "a"}, "only for state=file"),
    ({"path": "/etc/x", "state": "fifo"}, "state 'fifo'"),
    ({"path": "/etc/x", "mode": "rwxr-x---"}, "mode 'rwxr-x---' is not octal"),
    ({"path": "/etc/x", "mode": "17777"}, "out of range"),
])
def test_bad_input_is_named_and_nothing_is_changed(tmp_path, entry, words):
    first = str(tmp_path / "made-first")
    with pytest.raises(L.LayoutError) as err:
        L.run({"paths": [{"path": first}, entry]}, system=root_system())
    assert words in str(err.value) and "paths[1]" in str(err.value)
    assert not os.path.exists(first), "the whole spec is checked before anything is changed"


def test_the_same_path_twice_is_set_once_or_refused_when_wanted_differently(tmp_path):
    same = {"path": str(tmp_path / "etc-sglang"), "owner": "root", "mode": "0750"}
    assert L.run({"paths": [same, dict(same)]}, system=root_system())["changed_paths"] == [same["path"]]
    with pytest.raises(L.LayoutError, match=r"paths\[1\] .*given twice, wanted differently .*set them apart"):
        L.run({"paths": [same, dict(same, mode="0700")]}, system=root_system())


def test_a_file_where_a_directory_belongs_is_refused_and_left(tmp_path):
    f = tmp_path / "log"
    f.write_text("keep")
    with pytest.raises(L.LayoutError, match="exists and is not a directory; move it away"):
        L.run({"paths": [{"path": str(f)}]}, system=root_system())
    assert f.read_text() == "keep"


def test_an_owner_that_does_not_exist_is_named(tmp_path):
    with pytest.raises(L.LayoutError, match="owner sglang does not exist"):
        L.run({"paths": [{"path": str(tmp_path / "home"), "owner": "sglang"}]}, system=root_system())


def test_missing_group_and_account_are_created_as_system_ones(tmp_path):
    system = root_system()
    spec = {"groups": [{"name": "sglang"}],
            "users": [{"name": "sglang", "group": "sglang", "groups": ["video"], "home": "/var/lib/sglang",
                       "create_home": False, "shell": "/usr/sbin/nologin"}]}
    result = L.run(spec, system=system)
    assert system.argv == [
        ["groupadd", "--system", "--", "sglang"],
        ["useradd", "--system", "--gid", "sglang", "--home-dir", "/var/lib/sglang", "--no-create-home",
         "--shell", "/usr/sbin/nologin", "--groups", "video", "--", "sglang"]]
    assert result["actions"] == ["group sglang: created", "user sglang: created"]


def test_check_mode_with_a_new_account_runs_no_command_and_reports_its_paths(tmp_path):
    system = root_system()
    spec = {"groups": [{"name": "sglang"}], "users": [{"name": "sglang", "group": "sglang"}],
            "paths": [{"path": str(tmp_path / "home"), "owner": "sglang", "group": "sglang", "mode": "0750"}]}
    tmp_path.joinpath("home").mkdir()
    result = L.run(spec, check=True, system=system)
    assert system.argv == [] and result["changed_paths"] == [str(tmp_path / "home")]
    assert "path %s: directory owner or group" % (tmp_path / "home") in result["actions"]


def test_an_existing_account_gets_its_group_shell_and_supplementary_groups_added(tmp_path):
    system = FakeSystem(users={"sglang": Pw("sglang", 990, 990, "/var/lib/sglang", "/bin/bash")},
                        groups={"sglang": Gr("sglang", 990, []), "video": Gr("video", 44, ["someone"]),
                                "render": Gr("render", 105, ["sglang"])})
    spec = {"groups": [{"name": "sglang"}], "users": [{"name": "sglang", "group": "sglang", "groups": ["render", "video"],
                                                      "home": "/var/lib/sglang", "shell": "/usr/sbin/nologin"}]}
    result = L.run(spec, system=system)
    assert system.argv == [["usermod", "--shell", "/usr/sbin/nologin", "--append", "--groups", "video", "--", "sglang"]]
    assert result["actions"] == ["user sglang: changed (--shell --append --groups)"]
    system.users["sglang"] = Pw("sglang", 990, 990, "/var/lib/sglang", "/usr/sbin/nologin")
    system.groups["video"] = Gr("video", 44, ["someone", "sglang"])
    system.argv = []
    assert L.run(spec, system=system)["changed"] is False and system.argv == []


def test_a_failing_account_command_is_named_with_its_words(tmp_path):
    system = root_system()
    system.run_command = lambda argv: (9, "", "useradd: group 'nogroup-x' does not exist\n")
    with pytest.raises(L.LayoutError, match=r"account sglang: useradd exited 9: useradd: group 'nogroup-x' does not"):
        L.run({"users": [{"name": "sglang", "group": "nogroup-x"}]}, system=system)


def test_units_only_those_not_enabled_are_enabled_after_a_reload_for_a_changed_unit_file(tmp_path):
    system = root_system(enabled={"nvidia-persistenced.service": "enabled", "gpuserve-nvidia-devices.service": "disabled"})
    unit = tmp_path / "gpuserve-nvidia-devices.service"
    spec = {"paths": [{"path": str(unit), "content": "[Unit]\n", "mode": "0644"}], "daemon_reload": True,
            "enabled": ["nvidia-persistenced.service", "gpuserve-nvidia-devices.service"]}
    result = L.run(spec, system=system)
    assert system.argv == [["systemctl", "daemon-reload"],
                           ["systemctl", "is-enabled", "--", "nvidia-persistenced.service", "gpuserve-nvidia-devices.service"],
                           ["systemctl", "enable", "--", "gpuserve-nvidia-devices.service"]]
    assert result["enabled"] == ["gpuserve-nvidia-devices.service"]
    system.unit_states["gpuserve-nvidia-devices.service"] = "enabled"
    system.argv = []
    again = L.run(spec, system=system)
    assert again["changed"] is False and system.argv == [
        ["systemctl", "is-enabled", "--", "nvidia-persistenced.service", "gpuserve-nvidia-devices.service"]]


def test_a_unit_systemd_does_not_know_yet_is_enabled_and_check_mode_only_asks(tmp_path):
    system = root_system(enabled={"a.service": "enabled"})
    spec = {"enabled": ["a.service", "new.service"]}
    assert L.run(spec, check=True, system=system)["enabled"] == ["a.service", "new.service"]
    assert [a[1] for a in system.argv] == ["is-enabled"]
    with pytest.raises(L.LayoutError, match="not a systemd unit name"):
        L.run({"enabled": ["--now"]}, system=system)


def test_probe_reports_existence_without_touching(tmp_path):
    there = tmp_path / "ca.crt"
    there.write_text("x")
    result = L.run({"probe": [str(there), str(tmp_path / "missing")]}, system=root_system())
    assert result["present"] == {str(there): True, str(tmp_path / "missing"): False} and result["changed"] is False


def test_an_error_names_the_entry_as_given_also_after_a_path_given_twice(tmp_path):
    same = {"path": str(tmp_path / "etc-sglang"), "mode": "0750"}
    with pytest.raises(L.LayoutError, match=r"^paths\[2\] .*owner sglang does not exist"):
        L.run({"paths": [same, dict(same), {"path": str(tmp_path / "home"), "owner": "sglang"}]}, system=root_system())


def _filter(name):
    return load_plugin("filter", "sglang", "gpuserve_filters").FilterModule().filters()[name]


@CONTROLLER
def test_path_entries_gives_layout_entries_that_the_layout_applies(tmp_path):
    """The roles' directories go through filter path_entries into layout's paths: the entries it makes are applied
    as written (parents first), from a list or from a lazy map of paths, and a re-run changes nothing."""
    path_entries = _filter("path_entries")
    dirs = [str(tmp_path / "opt" / "sglang"), str(tmp_path / "opt" / "sglang" / "tools")]
    entries = path_entries(iter(dirs), mode="0750")
    assert entries == [{"path": dirs[0], "mode": "0750"}, {"path": dirs[1], "mode": "0750"}]
    first = L.run({"paths": entries}, system=root_system())
    assert first["changed_paths"] == dirs and all(mode_of(d) == 0o750 for d in dirs)
    assert not L.run({"paths": path_entries(dirs, mode="0750")}, system=root_system())["changed"]


@CONTROLLER
@pytest.mark.parametrize("paths, attrs, words", [
    ("/opt/sglang", {}, "expected a list of paths, got str"),
    ({"path": "/x"}, {}, "expected a list of paths, got dict"),
    (["/opt", ""], {}, "non-empty string"),
    (["/opt", None], {}, "non-empty string"),
    (["/opt"], {"path": "/y"}, "'path' comes from the list"),
])
def test_path_entries_refuses_what_is_not_a_list_of_paths(paths, attrs, words):
    from ansible.errors import AnsibleFilterError  # pylint: disable=import-outside-toplevel
    with pytest.raises(AnsibleFilterError, match=words):
        _filter("path_entries")(paths, **attrs)
