"""pve_lxc.wait_task and reconcile (module_utils, no Ansible, no proxmoxer): a PVE task's end read as PVE reports it -
OK, "WARNINGS: n" (a success whose WARN lines are kept), an error status (the log tail in the message), a task still
running at the timeout - and the CT reconciled through an API of proxmoxer's call shape."""
import pytest

from unit_helpers import load_module_util

PL = load_module_util("pve.lxc")


class Node(object):
    """/nodes/{node}: tasks(upid).status/log, lxc (list/post), lxc(vmid).config/status - proxmoxer's call shape."""

    def __init__(self, api):
        self.api = api

    def tasks(self, upid):
        api = self.api

        class Task(object):
            class status(object):       # noqa: N801 - proxmoxer's attribute name
                @staticmethod
                def get():
                    return api.task_status.pop(0) if len(api.task_status) > 1 else api.task_status[0]

            class log(object):          # noqa: N801
                @staticmethod
                def get(limit=None):
                    return [{"t": t} for t in api.task_log]
        return Task()

    @property
    def lxc(self):
        api = self.api

        class Lxc(object):
            def __call__(self, vmid):
                class Ct(object):
                    class config(object):   # noqa: N801
                        @staticmethod
                        def get():
                            return dict(api.config)

                        @staticmethod
                        def put(**kw):
                            api.calls.append(("put", kw))

                    class status(object):   # noqa: N801
                        class current(object):  # noqa: N801
                            @staticmethod
                            def get():
                                return {"status": api.status}

                        class start(object):    # noqa: N801
                            @staticmethod
                            def post():
                                api.calls.append(("start", {}))
                                return "UPID:start"

                        class shutdown(object):  # noqa: N801
                            @staticmethod
                            def post(**kw):
                                api.calls.append(("shutdown", kw))
                                return "UPID:shutdown"
                return Ct()

            def get(self):
                return [{"vmid": v} for v in api.cts]

            def post(self, **kw):
                api.calls.append(("create", kw))
                return "UPID:create"
        return Lxc()


class Api(object):
    def __init__(self, cts=(), config=None, status="stopped", task_status=None, task_log=(), elsewhere=None):
        self.cts = list(cts)
        self.config = config or {}
        self.status = status
        self.task_status = list(task_status or [{"status": "stopped", "exitstatus": "OK"}])
        self.task_log = list(task_log)
        self.calls = []
        res = [{"vmid": v, "node": "pve1", "type": "lxc"} for v in self.cts] + ([elsewhere] if elsewhere else [])
        api = self

        class Resources(object):
            @staticmethod
            def get(type=None):        # pylint: disable=redefined-builtin
                return res

        class Cluster(object):
            resources = Resources

        self.cluster = Cluster
        self._node = Node(api)

    def nodes(self, name):
        return self._node


def test_ok_and_warnings_end_a_task_well_and_keep_the_warn_lines():
    warnings = []
    api = Api(task_status=[{"status": "running"}, {"status": "stopped", "exitstatus": "OK"}])
    PL.wait_task(api, "pve1", "UPID:x", "start CT 129", 30, warnings, sleep=lambda s: None)
    assert warnings == []
    api = Api(task_status=[{"status": "stopped", "exitstatus": "WARNINGS: 1"}],
              task_log=["extracting archive", "WARN: old systemd in CT", "TASK WARNINGS: 1"])
    PL.wait_task(api, "pve1", "UPID:y", "create CT 129", 30, warnings, sleep=lambda s: None)
    assert warnings == [{"task": "create CT 129", "upid": "UPID:y", "exitstatus": "WARNINGS: 1",
                         "lines": ["WARN: old systemd in CT"]}]


def test_an_error_status_names_the_task_and_its_log_tail_and_a_timeout_says_raise_timeout():
    api = Api(task_status=[{"status": "stopped", "exitstatus": "unable to create CT 129 - storage full"}],
              task_log=["line %d" % i for i in range(20)])
    with pytest.raises(PL.PveLxcError) as e:
        PL.wait_task(api, "pve1", "UPID:z", "create CT 129", 30, [], sleep=lambda s: None)
    assert "create CT 129 failed: task UPID:z ended with unable to create CT 129 - storage full" in str(e.value)
    assert str(e.value).endswith("line 12 | line 13 | line 14 | line 15 | line 16 | line 17 | line 18 | line 19")
    now = [0.0]

    def clock():
        now[0] += 1.0
        return now[0]
    with pytest.raises(PL.PveLxcError, match=r"still running after 5s \(raise timeout\)"):
        PL.wait_task(Api(task_status=[{"status": "running"}]), "pve1", "UPID:w", "start CT 129", 5, [],
                     sleep=lambda s: None, clock=clock)


def test_reconcile_creates_changes_starts_and_refuses_as_asked():
    wanted = PL.wanted_options(ostemplate="local:vztmpl/d.tar.zst", cores=8, onboot=True,
                               net={0: "name=eth0,bridge=vmbr0,ip=dhcp"}, memory=None)
    assert wanted == {"ostemplate": "local:vztmpl/d.tar.zst", "cores": "8", "onboot": "1",
                      "net0": "name=eth0,bridge=vmbr0,ip=dhcp"}
    api = Api()
    r = PL.reconcile(api, "pve1", 129, wanted, "started", 30)
    assert r["created"] is True and r["status"] == "running" and api.calls[0][0] == "create"
    assert api.calls[0][1]["start"] == 1 and api.calls[0][1]["vmid"] == 129
    # an existing CT: one option differs -> one PUT with the config's digest, then started
    api = Api(cts=[129], config={"cores": "4", "onboot": "1", "digest": "abc", "net0": "name=eth0,bridge=vmbr0,ip=dhcp"})
    r = PL.reconcile(api, "pve1", 129, dict(wanted), "started", 30)
    assert r["changes"] == {"cores": "8"} and r["before"] == {"cores": "4"}
    assert api.calls == [("put", {"digest": "abc", "cores": "8"}), ("start", {})]
    # check mode: the same answer, no call that writes
    api = Api(cts=[129], config={"cores": "4", "digest": "abc"})
    r = PL.reconcile(api, "pve1", 129, {"cores": "8"}, "started", 30, check_mode=True)
    assert r["changed"] is True and api.calls == []
    # create-only option that differs, and a vmid on another node: refused before any write
    api = Api(cts=[129], config={"unprivileged": "0"})
    with pytest.raises(PL.PveLxcError, match="unprivileged: is '0', asked '1'"):
        PL.reconcile(api, "pve1", 129, {"unprivileged": "1"}, "present", 30)
    api = Api(elsewhere={"vmid": 129, "node": "pve2", "type": "qemu"})
    with pytest.raises(PL.PveLxcError, match="vmid=129 exists on node pve2"):
        PL.reconcile(api, "pve1", 129, wanted, "present", 30)
    assert api.calls == []


def test_a_failed_create_task_still_says_what_was_done():
    api = Api(task_status=[{"status": "stopped", "exitstatus": "unable to create CT 129"}], task_log=["no space"])
    result = {}
    with pytest.raises(PL.PveLxcError, match="create CT 129 failed"):
        PL.reconcile(api, "pve1", 129, {"ostemplate": "local:vztmpl/d.tar.zst"}, "present", 30, result=result)
    assert result["created"] is True and result["changed"] is True and api.calls[0][0] == "create"
