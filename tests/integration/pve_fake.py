"""A Proxmox VE API fake over real HTTPS that validates every request against the real PVE schema.

Not a mock that accepts anything: each request's path must match a schema path, its method must exist
there, every parameter must be a schema property (indexed ones like net0/dev3 match `net[n]`), with the
schema's type, enum, minimum, maxLength, pattern and property-string keys, and non-optional ones present.
A violation is answered the way pveproxy answers (400 with an `errors` object) and recorded in
`violations`, so tests can assert there were none. Auth is real too: ticket login (cookie + CSRF token
on writes) or an API token header.

State: containers per node, tasks that finish at once with exitstatus OK - or, with `task_warnings` set,
with `WARNINGS: <n>` and those lines in the task log, as pveproxy reports a task that succeeded with warnings
(PVE's RESTEnvironment counts `warn()` lines and sets that exit status). The certificate carries the loopback
address and name as subject alt names, as the node certificates pve-root-ca signs carry the node's.
"""
import json
import os
import re
import ssl
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, unquote, urlsplit

FIXTURES = os.environ.get("GPUSERVE_PVE_SCHEMA_DIR") or os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "pve_api")
PASSWORD = "lab-root-password"
TOKEN = ("root@pam!ansible", "0a1b2c3d-lab-token")


def load_schema(version):
    with open(os.path.join(FIXTURES, "pve%d-lxc.json" % version)) as fh:
        return json.load(fh)["paths"]


def _perl_re(pattern):
    return re.compile("^(?:%s)$" % pattern.replace("(?^:", "(?:").replace("(?^i:", "(?i:"))


def check_value(name, spec, value):
    """An error text or None."""
    typ = spec.get("type", "string")
    text = str(value)
    if typ == "integer":
        if not re.match(r"^-?\d+$", text):
            return "type check ('integer') failed - got '%s'" % text
        if "minimum" in spec and int(text) < int(spec["minimum"]):
            return "value must have a minimum value of %s" % spec["minimum"]
        if "maximum" in spec and int(text) > int(spec["maximum"]):
            return "value must have a maximum value of %s" % spec["maximum"]
    elif typ == "number":
        try:
            float(text)
        except ValueError:
            return "type check ('number') failed - got '%s'" % text
    elif typ == "boolean":
        if text not in ("0", "1", "true", "false", "yes", "no", "on", "off"):
            return "type check ('boolean') failed - got '%s'" % text
    elif typ == "string":
        if "enum" in spec and text not in spec["enum"]:
            return "value '%s' does not have a value in the enumeration '%s'" % (text, ", ".join(spec["enum"]))
        if "maxLength" in spec and len(text) > int(spec["maxLength"]):
            return "value may only be %s characters long" % spec["maxLength"]
        if "pattern" in spec and not _perl_re(spec["pattern"]).match(text):
            return "value does not match the regex pattern"
        fmt = spec.get("format")
        if isinstance(fmt, dict):
            default_key = [k for k, s in fmt.items() if s.get("default_key")]
            for part in [p for p in text.split(",") if p]:
                if "=" in part:
                    k, v = part.split("=", 1)
                elif default_key:
                    k, v = default_key[0], part
                else:
                    return "invalid format - missing key in comma-separated list property"
                if k not in fmt:
                    # features-like formats list flags as keys
                    return "invalid format - unknown key '%s'" % k
                err = check_value(k, fmt[k], v)
                if err:
                    return "invalid format - %s: %s" % (k, err)
    return None


class FakePve(object):
    def __init__(self, version=9, node="pve1", other_nodes=("pve2",)):
        self.schema = load_schema(version)
        self.version = version
        self.node = node
        self.nodes = [node] + list(other_nodes)
        self.cts = {}           # vmid -> {"node", "config", "status"}
        self.requests = []      # (method, path, params)
        self.violations = []
        self.tickets = set()
        self.lock = threading.Lock()
        self.task_warnings = []   # e.g. ["WARN: ..."]: tasks end with "WARNINGS: n" and log these lines

    # --- schema ---
    def match(self, path):
        segs = path.strip("/").split("/")
        for entry in self.schema:
            tsegs = entry["path"].strip("/").split("/")
            if len(tsegs) != len(segs):
                continue
            params = {}
            for t, s in zip(tsegs, segs):
                if t.startswith("{"):
                    params[t[1:-1]] = unquote(s)
                elif t != s:
                    break
            else:
                return entry, params
        return None, {}

    def validate(self, method, entry, params):
        info = entry["info"].get(method)
        if info is None:
            return {"method": "Method '%s %s' not implemented" % (method, entry["path"])}
        props = info.get("parameters", {}).get("properties", {})
        errors = {}
        for name, value in params.items():
            spec = props.get(name)
            if spec is None:
                m = re.match(r"^([a-z]+)(\d+)$", name)
                spec = props.get("%s[n]" % m.group(1)) if m else None
            if spec is None:
                if info.get("parameters", {}).get("additionalProperties", 0) in (0, "0"):
                    errors[name] = "property is not defined in schema and the schema does not allow additional properties"
                continue
            err = check_value(name, spec, value)
            if err:
                errors[name] = err
        for name, spec in props.items():
            if not spec.get("optional") and "[n]" not in name and name not in params:
                errors[name] = "property is missing and it is not optional"
        return errors

    # --- behaviour ---
    def upid(self, kind, vmid):
        return "UPID:%s:0000ABCD:00000001:%08X:%s:%s:root@pam:" % (self.node, int(time.time()), kind, vmid)

    def handle(self, method, path, params):
        """(code, data) for a valid request."""
        if path == "/version":
            return 200, {"version": "%d.1" % self.version, "release": str(self.version), "repoid": "lab"}
        if path == "/access/ticket" and method == "POST":
            if params.get("username") != "root@pam" or params.get("password") != PASSWORD:
                return 401, None
            ticket = "PVE:root@pam:%08X::lab" % len(self.tickets)
            self.tickets.add(ticket)
            return 200, {"ticket": ticket, "CSRFPreventionToken": "csrf-" + ticket, "username": "root@pam"}
        cts = self.ct_all()
        if path == "/cluster/resources":
            return 200, [{"vmid": v, "node": c["node"], "type": "lxc", "name": c["config"].get("hostname", ""),
                          "status": c["status"], "id": "lxc/%d" % v} for v, c in sorted(cts.items())]
        m = re.match(r"^/nodes/([^/]+)/lxc$", path)
        if m:
            node = m.group(1)
            if method == "GET":
                return 200, [{"vmid": v, "name": c["config"].get("hostname", ""), "status": c["status"]}
                             for v, c in sorted(cts.items()) if c["node"] == node]
            vmid = int(params["vmid"])
            if vmid in cts:
                return 500, "CT %d already exists on node '%s'" % (vmid, cts[vmid]["node"])
            return self.ct_create(node, vmid, params)
        m = re.match(r"^/nodes/([^/]+)/lxc/(\d+)/(config|status/current|status/start|status/shutdown|status/stop)$", path)
        if m:
            vmid = int(m.group(2))
            ct = cts.get(vmid)
            if ct is None or ct["node"] != m.group(1):
                return 500, "Configuration file 'nodes/%s/lxc/%d.conf' does not exist" % (m.group(1), vmid)
            what = m.group(3)
            digest = "%040x" % (hash(json.dumps(ct["config"], sort_keys=True)) & (2 ** 160 - 1))
            if what == "config" and method == "GET":
                return 200, dict(ct["config"], digest=digest)
            # pve-container changes nothing in a CT carrying a guest lock: update_vm and vm_start/shutdown/stop call
            # PVE::AbstractConfig::check_lock before any worker forks, so the call itself fails with its words
            if method in ("PUT", "POST") and what != "status/current" and ct["config"].get("lock"):
                return 500, "CT is locked (%s)" % ct["config"]["lock"]
            if what == "config" and method == "PUT":
                if params.get("digest") and params["digest"] != digest:
                    return 500, "detected modified configuration - file changed by other user? Try again."
                return self.ct_set_config(vmid, dict((k, v) for k, v in params.items() if k not in ("node", "vmid", "digest", "delete")),
                                          [k for k in params.get("delete", "").split(",") if k])
            if what == "status/current":
                return 200, {"vmid": vmid, "status": ct["status"], "name": ct["config"].get("hostname", "")}
            return self.ct_action(vmid, what.split("/")[1], params)
        m = re.match(r"^/nodes/([^/]+)/tasks/([^/]+)/(status|log)$", path)
        if m:
            status, exitstatus, lines = self.task(unquote(m.group(2)))
            if m.group(3) == "status":
                return 200, dict({"status": status, "upid": unquote(m.group(2))},
                                 **({"exitstatus": exitstatus} if status == "stopped" else {}))
            return 200, [{"n": i + 1, "t": t} for i, t in enumerate(lines)]
        return 501, "not emulated by the fake: %s %s" % (method, path)

    # --- the containers (in memory here; the lab's API stand-in, tests/lab/pvehost/pve_api.py, keeps them in
    # /etc/pve/lxc and acts through pct, as pveproxy does) ---
    def ct_all(self):
        """{vmid: {"node", "config", "status"}}"""
        return self.cts

    def ct_create(self, node, vmid, params):
        config = dict((k, v) for k, v in params.items()
                      if k not in ("vmid", "node", "ostemplate", "storage", "password", "start", "ssh-public-keys"))
        if "rootfs" in config:
            store, _sep, size = config["rootfs"].partition(":")
            config["rootfs"] = "%s:vm-%d-disk-0,size=%sG" % (store, vmid, size)
        for k in [k for k in config if re.match(r"^net\d+$", k)]:
            if "hwaddr=" not in config[k]:
                config[k] += ",hwaddr=BC:24:11:00:00:%02X" % (vmid % 256)
        config.setdefault("arch", "amd64")
        config.setdefault("ostype", "debian")
        self.cts[vmid] = {"node": node, "config": config, "status": "running" if params.get("start") else "stopped"}
        return 200, self.upid("vzcreate", vmid)

    def ct_set_config(self, vmid, changes, deletes):
        config = self.cts[vmid]["config"]
        for k in deletes:
            config.pop(k, None)
        config.update(changes)
        return 200, None

    def ct_action(self, vmid, action, params):
        """start, shutdown or stop"""
        self.cts[vmid]["status"] = "running" if action == "start" else "stopped"
        return 200, self.upid("vz" + action, vmid)

    def task(self, upid):
        """(status, exitstatus, log lines) of a task: here every task has ended when its call returned."""
        status = "WARNINGS: %d" % len(self.task_warnings) if self.task_warnings else "OK"
        return "stopped", status, ["starting task"] + list(self.task_warnings) + ["TASK " + status]

    # --- server ---
    def serve(self, certdir, bind="127.0.0.1", port=0, names=("IP:127.0.0.1", "DNS:localhost"), days=1):
        fake = self
        cert, key = os.path.join(certdir, "cert.pem"), os.path.join(certdir, "key.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
                        "-days", str(days), "-subj", "/CN=localhost",
                        "-addext", "subjectAltName=" + ",".join(names)], check=True, capture_output=True)

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _reply(self, code, data=None, errors=None):
                body = json.dumps({"data": data} if errors is None else {"data": None, "errors": errors}).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json;charset=UTF-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _do(self, method):
                url = urlsplit(self.path)
                if not url.path.startswith("/api2/json/"):
                    return self._reply(404, None)
                path = url.path[len("/api2/json"):]
                params = dict(parse_qsl(url.query, keep_blank_values=True))
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    params.update(parse_qsl(self.rfile.read(length).decode(), keep_blank_values=True))
                with fake.lock:
                    fake.requests.append((method, path, dict(params)))
                    entry, path_params = fake.match(path)
                    if entry is None:
                        fake.violations.append((method, path, "no such path"))
                        return self._reply(501, None, {"path": "no such API path: %s" % path})
                    if path != "/access/ticket":
                        auth = self.headers.get("Authorization", "")
                        cookie = self.headers.get("Cookie", "")
                        ticket = next((c.split("=", 1)[1] for c in cookie.split("; ") if c.startswith("PVEAuthCookie=")), None)
                        token_ok = auth == "PVEAPIToken=%s=%s" % TOKEN
                        ticket_ok = unquote(ticket or "") in fake.tickets
                        if not (token_ok or ticket_ok):
                            return self._reply(401, None, {"auth": "authentication failure"})
                        if ticket_ok and method != "GET" and self.headers.get("CSRFPreventionToken") != "csrf-" + unquote(ticket):
                            return self._reply(401, None, {"csrf": "Permission check failed (invalid csrf token)"})
                    errors = fake.validate(method, entry, dict(params, **path_params))
                    if errors:
                        fake.violations.append((method, path, errors))
                        return self._reply(400, None, errors)
                    code, data = fake.handle(method, path, dict(params, **path_params))
                if code == 200:
                    return self._reply(200, data)
                self.send_response(code, str(data or "error"))
                self.send_header("Content-Length", "0")
                self.end_headers()
                return None

            def do_GET(self):  # noqa: N802
                self._do("GET")

            def do_POST(self):  # noqa: N802
                self._do("POST")

            def do_PUT(self):  # noqa: N802
                self._do("PUT")

            def do_DELETE(self):  # noqa: N802
                self._do("DELETE")

        self.httpd = ThreadingHTTPServer((bind, port), Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def stop(self):
        self.httpd.shutdown()

    def writes(self):
        return [r for r in self.requests if r[0] != "GET" and r[1] != "/access/ticket"]
