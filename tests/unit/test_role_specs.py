"""Every role's defaults/main.yml and meta/argument_specs.yml list the same knobs with the same defaults."""
import glob
import os

import pytest
import yaml

from unit_helpers import CONTROLLER, ROOT, load_plugin

ROLES = sorted(os.path.basename(os.path.dirname(p)) for p in glob.glob(os.path.join(ROOT, "roles", "*", "defaults")))


def load(role, *parts):
    with open(os.path.join(ROOT, "roles", role, *parts)) as fh:
        return yaml.safe_load(fh) or {}


def same_default(spec, default):
    """The spec's default is the defaults file's - or, for an int whose default is a template (the inventory's
    proxmox_vmid: no int the docsite can show, antsibull-docs renders such a role page as malformed), the spec has
    none and its description names the variable the template reads."""
    if spec.get("type") == "int" and str(default).startswith("{{") and "default" not in spec:
        return str(default).strip("{} ").split("|", maxsplit=1)[0].strip() in spec["description"]
    return spec.get("default") == default


@pytest.mark.parametrize("role", ROLES)
def test_defaults_and_argument_specs_do_not_drift(role):
    defaults = load(role, "defaults", "main.yml")
    options = load(role, "meta", "argument_specs.yml")["argument_specs"]["main"]["options"]
    assert sorted(defaults) == sorted(options), "a knob is documented in one file only"
    for name, spec in options.items():
        assert name.startswith(role + "_"), "%s: variables carry the role prefix" % name
        assert spec.get("description"), "%s: no description" % name
        if spec.get("required"):
            assert defaults[name] is None, "%s is required: its default must be empty" % name
        else:
            assert same_default(spec, defaults[name]), "%s: default differs between the two files" % name


def test_there_are_roles_to_check():
    assert "lxc_gpu_passthrough" in ROLES


def test_the_claimed_ansible_core_is_the_one_ci_installs():
    """requires_ansible and the roles' min_ansible_version claim only what CI runs (tests/ci/locks/dev.lock)."""
    import re  # pylint: disable=import-outside-toplevel
    with open(os.path.join(ROOT, "tests", "ci", "locks", "dev.lock")) as fh:
        pinned = re.search(r"^ansible-core==(\d+)\.(\d+)\.", fh.read(), re.M).groups()
    with open(os.path.join(ROOT, "meta", "runtime.yml")) as fh:
        claimed = re.search(r'requires_ansible: ">=(\d+)\.(\d+)\.', fh.read()).groups()
    assert claimed == pinned
    for role in os.listdir(os.path.join(ROOT, "roles")):
        with open(os.path.join(ROOT, "roles", role, "meta", "main.yml")) as fh:
            assert 'min_ansible_version: "%s.%s"' % pinned in fh.read(), role


def test_host_key_checking_is_left_on_for_real_nodes():
    """ansible.cfg serves the README's real-node commands too: only the lab's own inventory turns checking off."""
    import configparser  # pylint: disable=import-outside-toplevel
    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(ROOT, "ansible.cfg"))
    for section in cfg.sections():
        assert cfg[section].get("host_key_checking", "true").lower() not in ("false", "no", "0"), section


def _doc_options(path):
    import ast  # pylint: disable=import-outside-toplevel
    with open(path) as fh:
        tree = ast.parse(fh.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "DOCUMENTATION":
            return yaml.safe_load(node.value.value)["options"]
    raise AssertionError("no DOCUMENTATION in %s" % path)


@CONTROLLER
def test_the_pct_connection_documents_every_option_of_ansible_builtin_ssh_it_extends():
    """Its code is ansible.builtin.ssh's and reads each of those options: the copied documentation must not drift;
    it adds only the container (vmid) and how a non-root node user runs pct."""
    from ansible.plugins.connection import ssh
    ours = _doc_options(os.path.join(ROOT, "plugins", "connection", "pct.py"))
    theirs = _doc_options(ssh.__file__)
    assert set(ours) - {"vmid", "proxmox_become_method"} == set(theirs)

    def core(doc):   # our copy says whose version each version_added is (ansible-core's, not this collection's)
        if isinstance(doc, dict):
            return dict((k, core(v)) for k, v in doc.items() if k != "version_added_collection")
        if isinstance(doc, list):
            return [core(v) for v in doc]
        return doc
    for name, spec in theirs.items():
        assert core(ours[name]) == spec, name
    assert ours["vmid"]["vars"] == [{"name": "proxmox_vmid"}] and ours["vmid"]["required"] is True


@CONTROLLER
def test_the_pct_connection_wraps_every_command_in_pct_exec_and_never_asks_for_a_tty():
    """The command line the node's shell runs: pct exec <vmid> -- <what Ansible built>, with sudo only for a
    non-root node user; exec_command passes sudoable=False so ssh never adds -tt around lxc-attach."""
    mod = load_plugin("connection", "pct", "pct_conn")
    opts = {"vmid": 129, "remote_user": "root", "proxmox_become_method": "sudo"}
    conn = mod.Connection.__new__(mod.Connection)
    conn.get_option = opts.get
    assert conn._pct("/bin/sh -c 'echo ok'") == "/usr/sbin/pct exec 129 -- /bin/sh -c 'echo ok'"
    opts["remote_user"] = "admin"
    assert conn._pct("/bin/sh -c 'x'") == "sudo /usr/sbin/pct exec 129 -- /bin/sh -c 'x'"
    seen = {}
    base = mod.SshConnection.exec_command
    try:
        mod.SshConnection.exec_command = lambda self, cmd, in_data=None, sudoable=True: seen.update(
            cmd=cmd, sudoable=sudoable) or (0, b"", b"")
        opts["remote_user"] = "root"
        conn.exec_command("/bin/sh -c 'true'", sudoable=True)
    finally:
        mod.SshConnection.exec_command = base
    assert seen == {"cmd": "/usr/sbin/pct exec 129 -- /bin/sh -c 'true'", "sudoable": False}


SECRET = ("_token", "_password", "_secret", "_ssh_key", "_api_key", "_environment", "_env")


@pytest.mark.parametrize("role", ROLES)
def test_every_secret_variable_is_no_log_in_the_argument_spec(role):
    with open(os.path.join(ROOT, "roles", role, "meta", "argument_specs.yml")) as fh:
        specs = yaml.safe_load(fh)["argument_specs"]
    for entry, spec in specs.items():
        for name, opt in spec.get("options", {}).items():
            if name.endswith(SECRET) and not name.endswith(("_token_id", "_token_file", "public_env", "_without_api_key",
                                                            "public_environment")):
                assert opt.get("no_log") is True, "%s (%s): a secret must be no_log" % (name, entry)


def role_entries(doc):
    """(role, tasks_from) of every include_role/import_role in a parsed playbook or task file."""
    if isinstance(doc, list):
        for item in doc:
            yield from role_entries(item)
    elif isinstance(doc, dict):
        for key, value in doc.items():
            if key.rsplit(".", 1)[-1] in ("include_role", "import_role") and isinstance(value, dict) \
                    and value.get("tasks_from"):
                yield str(value.get("name", "")).rsplit(".", 1)[-1], value["tasks_from"]
            else:
                yield from role_entries(value)


@pytest.mark.parametrize("role", ROLES)
def test_every_entry_point_is_specified_and_agrees_with_the_defaults(role):
    """Not only main: each entry point (tasks_from) has its spec, each spec its tasks file, and an option a spec
    shares with defaults/main.yml has the same default there."""
    specs = load(role, "meta", "argument_specs.yml")["argument_specs"]
    defaults = load(role, "defaults", "main.yml")
    for entry, spec in specs.items():
        assert os.path.exists(os.path.join(ROOT, "roles", role, "tasks", entry + ".yml")), "%s: no tasks/%s.yml" % (
            role, entry)
        assert spec.get("short_description"), "%s %s: no short_description" % (role, entry)
        for name, opt in (spec.get("options") or {}).items():
            assert opt.get("description"), "%s %s: %s has no description" % (role, entry, name)
            if name in defaults and not opt.get("required"):
                assert same_default(opt, defaults[name]), "%s %s: %s's default differs from defaults/main.yml" % (
                    role, entry, name)
    used = set()
    paths = (glob.glob(os.path.join(ROOT, "roles", "*", "tasks", "*.yml")) + glob.glob(os.path.join(ROOT, "playbooks", "*.yml"))
             + glob.glob(os.path.join(ROOT, "playbooks", "tasks", "*.yml"))
             + glob.glob(os.path.join(ROOT, "roles", "*", "molecule", "*", "*.yml"))
             + glob.glob(os.path.join(ROOT, "tests", "lab", "molecule", "*", "*.yml")))
    for path in paths:
        with open(path) as fh:
            used.update(entry for name, entry in role_entries(yaml.safe_load(fh)) if name == role)
    tasks = glob.glob(os.path.join(ROOT, "roles", role, "tasks", "*.yml"))
    own = set(os.path.splitext(os.path.basename(p))[0] for p in tasks)
    for entry in used & own:
        assert entry in specs, "%s: tasks_from %s has no argument spec" % (role, entry)


@CONTROLLER
def test_the_pct_connection_puts_an_empty_file_without_waiting_on_stdin(tmp_path):
    """ansible.builtin.ssh sends no stdin for empty data, so `cat > file` would wait for ever (copy content: "" hung
    in the lab): an empty file is created with `: >` instead, and a non-empty one goes through cat on stdin."""
    mod = load_plugin("connection", "pct", "pct_conn2")
    conn = mod.Connection.__new__(mod.Connection)
    conn.get_option = {"vmid": 100, "remote_user": "root", "host": "node"}.get
    calls = []
    conn.exec_command = lambda cmd, in_data=None, sudoable=True: calls.append((cmd, in_data)) or (0, b"", b"")
    empty, full = tmp_path / "empty", tmp_path / "full"
    empty.write_bytes(b"")
    full.write_bytes(b"x\n")
    conn.put_file(str(empty), "/etc/it's here")
    conn.put_file(str(full), "/etc/f")
    import shlex
    argv, data = shlex.split(calls[0][0]), calls[0][1]
    assert argv[:2] == ["/bin/sh", "-c"] and shlex.split(argv[2]) == [":", ">", "/etc/it's here"] and data is None
    argv, data = shlex.split(calls[1][0]), calls[1][1]
    assert shlex.split(argv[2]) == ["cat", ">", "/etc/f"] and data == b"x\n"


@CONTROLLER
def test_the_pct_connection_runs_again_only_when_lxc_attach_failed_to_re_execute_itself(monkeypatch):
    """lxc-attach's memfd re-exec (LXC's CVE-2019-5736 fix) failing under load, then aborting, before the command
    started (seen in CI as 'Device or resource busy - Failed to rexec as memfd / munmap_chunk(): invalid pointer',
    ssh status 255): retried, bounded, each retry said; any other failure is not retried."""
    from ansible.errors import AnsibleConnectionFailure
    mod = load_plugin("connection", "pct", "pct_conn3")
    conn = mod.Connection.__new__(mod.Connection)
    conn.get_option = {"vmid": 100, "remote_user": "root", "host": "node"}.get
    monkeypatch.setattr(mod.time, "sleep", lambda s: None)
    warnings = []
    monkeypatch.setattr(mod.display, "warning", warnings.append)
    rexec = AnsibleConnectionFailure("Failed to connect to the host via ssh: Device or resource busy - Failed to "
                                     "rexec as memfd\nmunmap_chunk(): invalid pointer")
    outcomes = []

    def fake(self, cmd, in_data=None, sudoable=True):
        calls.append((cmd, in_data))
        what = outcomes.pop(0)
        if isinstance(what, Exception):
            raise what
        return what
    monkeypatch.setattr(mod.SshConnection, "exec_command", fake)

    calls, outcomes[:] = [], [rexec, rexec, (0, b"ok", b"")]
    assert conn.exec_command("/bin/sh -c 'true'", in_data=b"payload") == (0, b"ok", b"")
    assert len(calls) == 3 and all(c == ("/usr/sbin/pct exec 100 -- /bin/sh -c 'true'", b"payload") for c in calls)
    assert len(warnings) == 2 and "nothing ran, running it again (attempt 2 of 4)" in warnings[0]
    # the same failure as a status (a pct that does not exec lxc-attach) is retried too
    calls, outcomes[:] = [], [(134, b"", b"Device or resource busy - Failed to rexec as memfd\n"), (0, b"", b"")]
    assert conn.exec_command("true")[0] == 0 and len(calls) == 2
    # bounded: the fourth failure is raised as it came
    calls, outcomes[:] = [], [rexec] * 4
    with pytest.raises(AnsibleConnectionFailure, match="Failed to rexec as memfd"):
        conn.exec_command("true")
    assert len(calls) == 4
    # any other failure: not run again
    calls, outcomes[:] = [], [AnsibleConnectionFailure("Failed to connect to the host via ssh: Connection refused")]
    with pytest.raises(AnsibleConnectionFailure, match="Connection refused"):
        conn.exec_command("true")
    calls, outcomes[:] = [], [(1, b"", b"grep: no match")]
    assert conn.exec_command("true") == (1, b"", b"grep: no match") and len(calls) == 1


_PCT_OPTIONS_SCRIPT = r"""
import json, sys
from ansible import constants as C
from ansible.playbook.play_context import PlayContext
import ansible.plugins.loader as loader
loader.init_plugin_loader()
if sys.argv[1] == "playbook":
    # what ansible-playbook's executor does before its first task
    for plugins in (loader.connection_loader, loader.shell_loader, loader.become_loader):
        list(plugins.all(class_only=True))
parsed = []
real_load = loader.yaml.load
loader.yaml.load = lambda text, *a, **kw: parsed.append("pct exec <vmid>" in str(text)) or real_load(text, *a, **kw)
conn = loader.connection_loader.get("gpuserve.sglang.pct", PlayContext(), None)
loader.yaml.load = real_load
conn.set_options(var_options={"proxmox_vmid": 129, "ansible_host": "pve1.example.internal"})
mod = sys.modules[type(conn).__module__]
doc = real_load(mod.DOCUMENTATION, Loader=loader.AnsibleLoader)
loader.add_fragments(doc, mod.__file__, fragment_loader=loader.fragment_loader, is_module=False)
def core(d):
    if isinstance(d, dict):
        return {str(k): core(v) for k, v in d.items() if k != "version_added_collection"}
    if isinstance(d, list):
        return [core(v) for v in d]
    return d
print(json.dumps({
    "documentation_parsed": sum(parsed),
    "registered": core(C.config.get_configuration_definitions("connection", conn._load_name)),
    "documented": core(doc["options"]),
    "vmid": conn.get_option("vmid"), "host": conn.get_option("host"), "ssh_args": conn.get_option("ssh_args"),
    "become": conn.get_option("proxmox_become_method"), "pipelining": conn.get_option("pipelining"),
}))
"""


@CONTROLLER
@pytest.mark.parametrize("entry", ["playbook", "bare"])
def test_the_pct_connection_options_are_its_documentation_whether_or_not_the_parse_is_skipped(entry):
    """Every container task loads the connection plugin again in a fresh worker; after ansible-playbook has preloaded
    ansible.builtin.ssh, the plugin registers ssh's parsed definitions plus its own two instead of having its 18 kB
    DOCUMENTATION parsed again (about 40 ms a task). The options it then answers must be exactly those DOCUMENTATION
    declares; without the preload (another entry point) the loader parses DOCUMENTATION as before."""
    import json  # pylint: disable=import-outside-toplevel
    import subprocess  # pylint: disable=import-outside-toplevel
    import sys  # pylint: disable=import-outside-toplevel
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, "build", "collections"),
               ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"))
    out = subprocess.run([sys.executable, "-c", _PCT_OPTIONS_SCRIPT, entry], env=env, cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    got = json.loads(out)
    assert got["registered"] == got["documented"]
    assert got["documentation_parsed"] == (0 if entry == "playbook" else 1)
    # pipelining from ansible.cfg's [connection] section: ini settings reach the registered definitions too
    assert (got["vmid"], got["host"], got["become"], got["pipelining"]) == (129, "pve1.example.internal", "sudo", True)
    assert got["ssh_args"] == "-C -o ControlMaster=auto -o ControlPersist=60s"


class _FakeConfig(object):
    """The three methods of ansible-core's config manager the pct hook calls, recording what it registers."""

    def __init__(self, with_ssh=True):
        self.defs = {("connection", "ssh"): {"host": {"type": "str"}}} if with_ssh else {}

    def has_configuration_definition(self, kind, name):
        return (kind, name) in self.defs

    def get_configuration_definitions(self, kind, name):
        return self.defs[(kind, name)]

    def initialize_plugin_configuration_definitions(self, kind, name, defs):
        self.defs[(kind, name)] = defs


@CONTROLLER
def test_the_pct_config_hook_runs_only_on_a_tested_ansible_core_with_the_methods_it_needs():
    """The hook writes into ansible-core's config manager, which is no public API: on the release CI runs (every
    release CI runs must be in TESTED_CORE) it registers ssh's options plus the plugin's two under both names the
    loader may use; on another release, or a manager without those methods, or before ssh's options are loaded, it
    registers nothing and the loader parses DOCUMENTATION (the test above checks that path gives the same options)."""
    mod = load_plugin("connection", "pct", "pct_conn_hook")
    hook = load_plugin("plugin_utils", "connection_options", "pct_conn_hook_options")
    assert hook.core_version() in hook.TESTED_CORE, "ansible-core %s.%s: test the hook on it, then add it" % (
        hook.core_version())
    fake = _FakeConfig()
    assert mod.register_options(fake, version=hook.TESTED_CORE[0]) is True
    for name in ("pct_conn_hook", mod.NAME):
        assert set(fake.defs[("connection", name)]) == {"host", "vmid", "proxmox_become_method"}
    refused = ((_FakeConfig(), (2, 99)), (_FakeConfig(), (2, 18)), (_FakeConfig(with_ssh=False), hook.TESTED_CORE[0]))
    for config, version in refused:
        assert mod.register_options(config, version=version) is False
        assert set(config.defs) <= {("connection", "ssh")}

    class NoInit(object):
        has_configuration_definition = _FakeConfig.has_configuration_definition
        get_configuration_definitions = _FakeConfig.get_configuration_definitions
        defs = {("connection", "ssh"): {}}
    assert mod.register_options(NoInit(), version=hook.TESTED_CORE[0]) is False
