"""pve_lxc through Ansible against a schema-validating Proxmox API fake (real HTTPS, PVE 8.4 and 9.1 schemas)."""
import json
import os
import ssl
import urllib.request

import pytest

from ansible_helpers import run_module
from pve_fake import PASSWORD, TOKEN, FakePve

M = "gpuserve.sglang.pve_lxc"
CT129 = {"ostemplate": "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst", "hostname": "sglang",
         "rootfs": "local-lvm:200", "cores": 16, "memory": 65536, "swap": 0,
         "net": {"0": "name=eth0,bridge=vmbr0,ip=dhcp"}, "unprivileged": True, "features": "nesting=1", "onboot": True}


@pytest.fixture(params=[8, 9], ids=["pve8", "pve9"])
def pve(request, tmp_path):
    fake = FakePve(version=request.param).serve(str(tmp_path))
    yield fake
    fake.stop()
    assert fake.violations == [], "a request did not match the real PVE %d schema" % request.param


def args(pve, **kw):
    base = {"api_host": "127.0.0.1", "api_port": pve.port, "api_user": "root@pam", "api_password": PASSWORD,
            "validate_certs": False, "node": "pve1", "vmid": 129}
    base.update(kw)
    return base


def test_create_started_then_idempotent(pve):
    r = run_module(M, args(pve, state="started", **CT129))
    assert r.get("failed") is not True, r.get("msg")
    assert r["changed"] is True and r["created"] is True and r["status"] == "running"
    posted = [p for m, path, p in pve.writes() if path == "/nodes/pve1/lxc"]
    assert posted[0]["vmid"] == "129" and posted[0]["start"] == "1" and posted[0]["unprivileged"] == "1"
    assert posted[0]["net0"] == "name=eth0,bridge=vmbr0,ip=dhcp" and "net" not in posted[0]
    n = len(pve.writes())
    again = run_module(M, args(pve, state="started", **CT129))
    assert again["changed"] is False and again["changes"] == {} and len(pve.writes()) == n


def test_check_mode_creates_nothing_and_says_what_it_would_do(pve):
    r = run_module(M, args(pve, **CT129), check=True)
    assert r["changed"] is True and r["created"] is True and pve.writes() == [] and pve.cts == {}


def test_adopting_the_operators_ct_changes_only_what_differs_with_the_digest(pve):
    pve.cts[129] = {"node": "pve1", "status": "running", "config": {
        "hostname": "sglang", "cores": "8", "memory": "65536", "swap": "0", "unprivileged": "1",
        "rootfs": "local-zfs:subvol-129-disk-0,size=200G", "features": "nesting=1",
        "net0": "name=eth0,bridge=vmbr0,firewall=1,hwaddr=BC:24:11:AA:BB:CC,ip=dhcp,type=veth",
        "description": "operator's notes", "lxc": [["lxc.cgroup2.devices.allow", "c 226:* rwm"]]}}
    wanted = dict(CT129)
    wanted.pop("ostemplate")
    r = run_module(M, args(pve, state="started", **wanted))
    assert r.get("failed") is not True, r.get("msg")
    assert r["created"] is False and r["changes"] == {"cores": "16", "onboot": "1"}
    put = [p for m, path, p in pve.writes() if m == "PUT"]
    assert len(put) == 1 and put[0]["digest"] and set(put[0]) == {"cores", "onboot", "digest"}
    assert pve.cts[129]["config"]["description"] == "operator's notes"


def test_a_create_only_option_that_differs_is_refused_and_nothing_changes(pve):
    pve.cts[129] = {"node": "pve1", "status": "stopped", "config": {"hostname": "sglang", "unprivileged": "0",
                                                                    "rootfs": "local-lvm:vm-129-disk-0,size=200G"}}
    r = run_module(M, args(pve, unprivileged=True, memory=4096))
    assert r["failed"] is True and "unprivileged: is '0', asked '1'" in r["msg"] and pve.writes() == []


def test_vmid_on_another_node_and_missing_template_are_named(pve):
    pve.cts[129] = {"node": "pve2", "status": "running", "config": {"hostname": "other"}}
    r = run_module(M, args(pve, hostname="sglang"))
    assert r["failed"] is True and "vmid=129 exists on node pve2" in r["msg"]
    r = run_module(M, args(pve, vmid=130, hostname="sglang"))
    assert r["failed"] is True and r["msg"].startswith("ostemplate: CT 130 does not exist")
    assert pve.writes() == []


def test_api_token_login_and_stop(pve):
    pve.cts[129] = {"node": "pve1", "status": "running", "config": {"hostname": "sglang"}}
    user, _sep, name = TOKEN[0].partition("!")
    r = run_module(M, args(pve, api_password=None, api_user=user, api_token_id=name, api_token_secret=TOKEN[1],
                           state="stopped"))
    assert r.get("failed") is not True, r.get("msg")
    assert r["changed"] is True and r["status"] == "stopped" and pve.cts[129]["status"] == "stopped"
    assert TOKEN[1] not in r["_stdout"]


def test_a_ct_carrying_proxmoxs_guest_lock_is_not_changed_or_started_and_the_lock_is_named(pve):
    """A vzdump running on the operator's CT (lock: backup in its config, as the API's GET config shows it):
    no call that changes it is sent, in check mode either; the lock, its meaning and the fix are named. Already as
    asked, it is no change. The fake itself refuses such calls as pve-container does ('CT is locked (backup)')."""
    pve.cts[129] = {"node": "pve1", "status": "stopped", "config": {
        "hostname": "sglang", "cores": "8", "memory": "65536", "lock": "backup"}}
    for check in (True, False):
        r = run_module(M, args(pve, state="started", cores=16), check=check)
        assert r["failed"] is True, r
        assert r["msg"].startswith("CT 129 is locked (backup) in its config on node pve1: a backup (vzdump) of it "
                                   "is running"), r["msg"]
        assert "`pct unlock 129` first. Nothing was changed." in r["msg"]
    started = run_module(M, args(pve, state="started", cores=8))           # only the start left to do: refused too
    assert started["failed"] is True and "is locked (backup)" in started["msg"]
    assert pve.writes() == [] and pve.cts[129]["status"] == "stopped"
    same = run_module(M, args(pve, state="stopped", cores=8, memory=65536))
    assert same.get("failed") is not True and same["changed"] is False, same.get("msg")
    ctx = ssl._create_unverified_context()  # noqa: S323 (self-signed test server)
    auth = {"Authorization": "PVEAPIToken=%s=%s" % TOKEN}
    req = urllib.request.Request("https://127.0.0.1:%d/api2/json/nodes/pve1/lxc/129/status/start" % pve.port,
                                 data=b"", headers=auth, method="POST")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, context=ctx)
    assert (err.value.code, err.value.reason) == (500, "CT is locked (backup)") and pve.cts[129]["status"] == "stopped"


def test_the_fake_really_rejects_what_the_schema_rejects(tmp_path):
    fake = FakePve(version=9).serve(str(tmp_path))
    try:
        ctx = ssl._create_unverified_context()  # noqa: S323 (self-signed test server)
        auth = {"Authorization": "PVEAPIToken=%s=%s" % TOKEN}
        body = b"vmid=131&ostemplate=local:vztmpl/x.tar.zst&memory=8&bogus=1&net0=name=eth0,colour=blue"
        req = urllib.request.Request("https://127.0.0.1:%d/api2/json/nodes/pve1/lxc" % fake.port, data=body,
                                     headers=auth, method="POST")
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, context=ctx)
        errors = json.loads(err.value.read())["errors"]
        assert set(errors) == {"bogus", "memory", "net0"}
        assert "minimum value of 16" in errors["memory"] and "unknown key 'colour'" in errors["net0"]
        req = urllib.request.Request("https://127.0.0.1:%d/api2/json/nodes/pve1/lxc/131/config" % fake.port,
                                     data=b"memory=1024", headers=auth, method="POST")
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(req, context=ctx)
        assert fake.violations[-1][2] == {"method": "Method 'POST /nodes/{node}/lxc/{vmid}/config' not implemented"}
    finally:
        fake.stop()


def test_a_task_that_ends_with_warnings_succeeds_and_returns_them(pve):
    """PVE ends many successful tasks with 'WARNINGS: n' (e.g. a storage that cannot trim): not a failure."""
    pve.task_warnings = ["WARN: unable to trim rootfs: fstrim not supported"]
    r = run_module(M, args(pve, state="started", **CT129))
    assert r.get("failed") is not True, r.get("msg")
    assert r["created"] is True and r["status"] == "running"
    assert r["task_warnings"][0]["exitstatus"] == "WARNINGS: 1"
    assert r["task_warnings"][0]["lines"] == ["WARN: unable to trim rootfs: fstrim not supported"]
    assert "unable to trim rootfs" in " ".join(r.get("warnings", []))


def test_the_clusters_own_ca_verifies_the_api_and_an_untrusted_certificate_names_the_fix(pve, tmp_path):
    token = {"api_user": "root@pam", "api_password": None, "api_token_id": TOKEN[0].split("!")[1],
             "api_token_secret": TOKEN[1]}
    untrusted = run_module(M, dict(args(pve, validate_certs=True, **CT129), **token))
    assert untrusted["failed"] is True and "pve-root-ca.pem" in untrusted["msg"], untrusted["msg"]
    assert pve.writes() == []
    ca = os.path.join(str(tmp_path), "cert.pem")           # the fake's self-signed certificate is its own CA
    trusted = run_module(M, dict(args(pve, validate_certs=True, ca_file=ca, **CT129), **token))
    assert trusted.get("failed") is not True, trusted.get("msg")
    assert trusted["created"] is True
    assert TOKEN[1] not in trusted["_stdout"]


def test_the_api_options_come_once_from_module_defaults_or_from_the_environment(pve, tmp_path):
    """#45 item 6: group/gpuserve.sglang.proxmox in module_defaults sets the API options for every call; without them,
    community.proxmox's environment variables do (PROXMOX_HOST, PROXMOX_PORT, PROXMOX_USER, PROXMOX_PASSWORD, ...)."""
    from ansible_helpers import run_playbook  # pylint: disable=import-outside-toplevel
    api = {k: v for k, v in args(pve).items() if k.startswith("api_") or k == "validate_certs"}
    create = {"name": "create", "register": "r",
              "gpuserve.sglang.pve_lxc": dict({"node": "pve1", "vmid": 129, "state": "started"}, **CT129)}
    said = {"name": "said", "ansible.builtin.assert": {"that": ["r.created"]}}
    p = run_playbook([{"hosts": "localhost", "connection": "local", "gather_facts": False,
                       "module_defaults": {"group/gpuserve.sglang.proxmox": api}, "tasks": [create, said]}], tmp_path)
    assert p.returncode == 0, p.stdout[-3000:]
    assert pve.cts[129]["status"] == "running"
    env = {"PROXMOX_HOST": "127.0.0.1", "PROXMOX_PORT": str(pve.port), "PROXMOX_USER": "root@pam",
           "PROXMOX_PASSWORD": PASSWORD, "PROXMOX_VALIDATE_CERTS": "false"}
    r = run_module(M, {"node": "pve1", "vmid": 129, "state": "stopped"}, env=env)
    assert r.get("failed") is not True, r.get("msg")
    assert r["changed"] is True and pve.cts[129]["status"] == "stopped"
    # the password from the environment stays out of the result, as the option's own would
    assert PASSWORD not in json.dumps(r)
