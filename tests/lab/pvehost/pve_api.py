# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The lab host's Proxmox VE API stand-in (pveproxy's place: HTTPS on port 8006).

The request side is tests/integration/pve_fake.py's FakePve: every request checked against the real PVE 9
API schema (paths, methods, parameters, types, patterns, property strings), real ticket/CSRF and token auth,
pveproxy's 400 answer for a violation (kept in /run/gpuserve-lab/pve-api-violations.jsonl, so a test can
assert there were none). The state side is the lab host itself, as pveproxy's is the node: the containers
are /etc/pve/lxc/<vmid>.conf, their status is `pct status`, and create/config/start/shutdown/stop run the
pct stand-in (pct create unpacks the OS template and writes the config; PVE's API and its pct share
PVE::API2::LXC). Create, start, shutdown and stop are tasks, as pveproxy's: the UPID is answered at once and
pct runs in the background (a client polls the task's status; proxmoxer's 5 s read timeout would cut a
synchronous create). The certificate carries the host's addresses as subject alt names, as pve-root-ca's node
certificates do; /etc/gpuserve-lab/pve-api/cert.pem is what a controller pins (ca_file).

    python3 pve_api.py [--port 8006]       # run by gpuserve-lab-pveapi.service
"""
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, "/usr/lib/gpuserve-lab")
os.environ.setdefault("GPUSERVE_PVE_SCHEMA_DIR", "/usr/lib/gpuserve-lab")
import pve_conf  # noqa: E402  pylint: disable=wrong-import-position
from pve_fake import FakePve  # noqa: E402  pylint: disable=wrong-import-position

PVE_DIR = "/etc/pve/lxc"
CERTS = "/etc/gpuserve-lab/pve-api"
VIOLATIONS = "/run/gpuserve-lab/pve-api-violations.jsonl"
SKIP = ("vmid", "node", "ostemplate")


def pct(*argv):
    p = subprocess.run(["/usr/sbin/pct"] + [str(a) for a in argv], capture_output=True, text=True, check=False)
    return p.returncode, (p.stderr.strip() or p.stdout.strip())


class LabPve(FakePve):
    def __init__(self):
        FakePve.__init__(self, version=9, node=socket.gethostname(), other_nodes=())
        self.violations = Recorded()
        self.tasks = {}        # upid -> (status, exitstatus, log lines)
        self.serial = 0

    def ct_all(self):
        cts = {}
        for name in sorted(os.listdir(PVE_DIR)) if os.path.isdir(PVE_DIR) else []:
            if not name.endswith(".conf") or not name[:-5].isdigit():
                continue
            with open(os.path.join(PVE_DIR, name)) as fh:
                opts = pve_conf.parse(fh.read())
            config = dict((k, v) for k, v in opts.items() if k not in ("lxc", "snapshots", "description"))
            if opts.get("description"):
                config["description"] = opts["description"]
            rc, out = pct("status", name[:-5])
            cts[int(name[:-5])] = {"node": self.node, "config": config,
                                   "status": out.split(": ", 1)[-1] if rc == 0 else "unknown"}
        return cts

    def ct_create(self, node, vmid, params):
        argv = ["create", vmid, params["ostemplate"]]
        for key, value in sorted(params.items()):
            if key not in SKIP:
                argv += ["--" + key, value]
        return 200, self.worker("vzcreate", vmid, argv)

    def worker(self, kind, vmid, argv):
        """A task as pveproxy runs one: the UPID answered at once, pct run in the background; the task's status
        is "running" until pct ends, then "stopped" with exitstatus OK or pct's last error line (its log)."""
        self.serial += 1
        upid = "UPID:%s:%08X:%08X:%08X:%s:%s:root@pam:" % (self.node, os.getpid(), self.serial, int(time.time()), kind, vmid)
        self.tasks[upid] = ("running", None, ["starting task " + upid])

        def run():
            rc, out = pct(*argv)
            lines = out.splitlines() if rc else []
            with self.lock:
                self.tasks[upid] = ("stopped", "OK" if rc == 0 else (lines[-1] if lines else "exit code %d" % rc),
                                    ["starting task " + upid] + lines + ["TASK " + ("OK" if rc == 0 else "ERROR: " + (lines[-1] if lines else ""))])
        threading.Thread(target=run, daemon=True).start()
        return upid

    def task(self, upid):
        return self.tasks.get(upid, ("stopped", "no such task", ["no such task"]))

    def ct_set_config(self, vmid, changes, deletes):
        argv = ["set", vmid]
        for key, value in sorted(changes.items()):
            argv += ["--" + key, value]
        if deletes:
            argv += ["--delete", ",".join(deletes)]
        rc, out = pct(*argv)
        return (200, None) if rc == 0 else (500, out)

    def ct_action(self, vmid, action, params):
        argv = [action, vmid]
        if action == "shutdown":
            argv += ["--timeout", params.get("timeout", "60")] + (["--forceStop", "1"] if params.get("forceStop") else [])
        return 200, self.worker("vz" + action, vmid, argv)


class Recorded(list):
    """The violations, also appended to a file (the service's state is read by tests over ssh)."""

    def append(self, item):
        list.append(self, item)
        os.makedirs(os.path.dirname(VIOLATIONS), exist_ok=True)
        with open(VIOLATIONS, "a") as fh:
            fh.write(json.dumps(item, default=str) + "\n")


def addresses():
    out = subprocess.run(["hostname", "-I"], capture_output=True, text=True, check=False).stdout.split()
    return ["IP:127.0.0.1", "DNS:localhost", "DNS:" + socket.gethostname()] + ["IP:" + a for a in out if ":" not in a]


def main(argv):
    port = int(argv[argv.index("--port") + 1]) if "--port" in argv else 8006
    os.makedirs(CERTS, exist_ok=True)
    api = LabPve().serve(CERTS, bind="0.0.0.0", port=port, names=addresses(), days=30)
    sys.stderr.write("pve api stand-in: node %s, https://0.0.0.0:%d/api2/json\n" % (api.node, api.port))
    while True:
        signal.pause()


if __name__ == "__main__":
    main(sys.argv[1:])
