"""Role pve_container (as deploy.yml runs it for each CT of a node) against the
schema-validating Proxmox API fake: create, adopt with changed=0 on the second run, check mode, bad options."""
import pytest

from ansible_helpers import recap, run_playbook
from pve_fake import PASSWORD, FakePve

CT = {"ostemplate": "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst", "hostname": "sglang", "rootfs": "local-lvm:200",
      "cores": 16, "memory": 65536, "swap": 0, "net": {"0": "name=eth0,bridge=vmbr0,ip=dhcp"}, "unprivileged": True,
      "features": "nesting=1", "onboot": True, "state": "started"}


@pytest.fixture
def pve(tmp_path):
    fake = FakePve(version=9).serve(str(tmp_path))
    yield fake
    fake.stop()
    assert fake.violations == [], "a request did not match the real PVE 9 schema"


def play(pve, tmp_path, container, check=False):
    v = {"pve_container_vmid": 129, "pve_container_options": container,
         "pve_container_api_host": "127.0.0.1", "pve_container_api_port": pve.port, "pve_container_api_user": "root@pam",
         "pve_container_api_password": PASSWORD, "pve_container_api_validate_certs": False,
         "pve_container_node": "pve1"}
    return run_playbook([{"hosts": "localhost", "connection": "local", "gather_facts": False, "tasks": [
        {"name": "CT", "ansible.builtin.include_role": {"name": "gpuserve.sglang.pve_container"},
         "vars": v}]}], tmp_path, check)


def changed(out):
    return recap(out)["changed"]


def test_the_ct_is_created_then_adopted_unchanged(pve, tmp_path):
    first = play(pve, tmp_path, CT)
    assert first.returncode == 0, first.stdout[-3000:]
    assert changed(first.stdout) == 1 and pve.cts[129]["status"] == "running"
    assert pve.cts[129]["config"]["hostname"] == "sglang"
    writes = len(pve.writes())
    again = play(pve, tmp_path, CT)
    assert again.returncode == 0 and changed(again.stdout) == 0 and len(pve.writes()) == writes
    assert PASSWORD not in first.stdout + again.stdout


def test_check_mode_creates_nothing(pve, tmp_path):
    r = play(pve, tmp_path, CT, check=True)
    assert r.returncode == 0 and changed(r.stdout) == 1 and pve.cts == {} and pve.writes() == []


def test_an_unknown_option_is_named_before_any_call(pve, tmp_path):
    r = play(pve, tmp_path, dict(CT, mem=1024))
    assert r.returncode != 0 and "unknown: mem" in r.stdout and pve.writes() == []


def test_no_container_options_means_the_ct_is_not_managed(pve, tmp_path):
    r = play(pve, tmp_path, {})
    assert r.returncode == 0 and changed(r.stdout) == 0 and pve.requests == []


def test_module_defaults_of_the_proxmox_group_reach_the_role(pve, tmp_path):
    """#62 item 8: the API options given once, in the play's module_defaults of group/gpuserve.sglang.proxmox, reach
    the role's call (it passes none of its own when they are unset); a half-given token is still refused first."""
    api = {"api_host": "127.0.0.1", "api_port": pve.port, "api_user": "root@pam", "api_password": PASSWORD,
           "validate_certs": False}
    role = {"name": "CT", "ansible.builtin.include_role": {"name": "gpuserve.sglang.pve_container"},
            "vars": {"pve_container_vmid": 129, "pve_container_options": CT, "pve_container_node": "pve1"}}
    r = run_playbook([{"hosts": "localhost", "connection": "local", "gather_facts": False,
                       "module_defaults": {"group/gpuserve.sglang.proxmox": api}, "tasks": [role]}], tmp_path)
    assert r.returncode == 0, r.stdout[-3000:]
    assert changed(r.stdout) == 1 and pve.cts[129]["status"] == "running" and PASSWORD not in r.stdout
    half = dict(role, vars=dict(role["vars"], pve_container_api_token_id="ansible"))
    r = run_playbook([{"hosts": "localhost", "connection": "local", "gather_facts": False,
                       "module_defaults": {"group/gpuserve.sglang.proxmox": api}, "tasks": [half]}], tmp_path)
    assert r.returncode != 0
    assert "an API token needs both pve_container_api_token_id and pve_container_api_token_secret" in " ".join(r.stdout.split())
