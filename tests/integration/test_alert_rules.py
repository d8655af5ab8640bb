"""#48 item 3: the alert rules (roles/sglang_monitoring/files/gpuserve-sglang.rules.yml) are valid for Prometheus
(`promtool check rules`) and each fires in one case and stays silent in another (`promtool test rules`,
tests/prometheus/rules_test.yml), with Debian's promtool (tests/ci/bootstrap.sh installs it). That every series
they read is served: tests/unit/test_alert_series.py."""
import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import yaml

from ansible_helpers import ROOT
from test_deploy_playbook import ansible_playbook

RULES = os.path.join(ROOT, "roles", "sglang_monitoring", "files", "gpuserve-sglang.rules.yml")
TESTS = os.path.join(ROOT, "tests", "prometheus", "rules_test.yml")
PROMTOOL = shutil.which("promtool")


def promtool(*argv):
    assert PROMTOOL, "promtool is missing: tests/ci/bootstrap.sh installs Debian's prometheus package for it"
    return subprocess.run([PROMTOOL] + list(argv), capture_output=True, text=True, timeout=120, check=False)


def test_the_rules_are_valid_for_prometheus():
    p = promtool("check", "rules", RULES)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "SUCCESS: 8 rules found" in p.stdout


def test_each_alert_fires_in_one_case_and_not_in_another():
    p = promtool("test", "rules", TESTS)
    assert p.returncode == 0, p.stdout + p.stderr
    with open(TESTS) as fh:
        cases = yaml.safe_load(fh)["tests"]
    fired, silent = set(), set()
    for case in cases:
        for t in case["alert_rule_test"]:
            (fired if t["exp_alerts"] else silent).add(t["alertname"])
    with open(RULES) as fh:
        alerts = {r["alert"] for g in yaml.safe_load(fh)["groups"] for r in g["rules"]}
    assert fired == alerts, "an alert no case makes fire: %s" % (alerts - fired)
    assert silent == alerts, "an alert no case shows silent: %s" % (alerts - silent)


def test_a_broken_rule_is_caught(tmp_path):
    """The check is real: a rule reading a misspelt function fails it."""
    bad = tmp_path / "bad.rules.yml"
    bad.write_text(open(RULES).read().replace("deriv(", "derive("))
    p = promtool("check", "rules", str(bad))
    assert p.returncode != 0 and "derive" in p.stdout + p.stderr


class _Exposition(http.server.BaseHTTPRequestHandler):
    """A metrics endpoint on loopback: /metrics answers the text set on the server (``server.text``)."""

    def do_GET(self):  # noqa: N802 (http.server's name)
        body = self.server.text.encode() if self.path == "/metrics" else b""
        self.send_response(200 if body else 404)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def _serve(text):
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Exposition)
    srv.text = text
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _api(port, path):
    with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=10) as r:
        return json.loads(r.read())["data"]


def test_a_real_prometheus_scrapes_the_targets_monitoring_yml_writes_and_loads_the_rules(tmp_path):
    """#48 item 2 (the part that runs without the lab): playbooks/monitoring.yml on a monitoring host writes one file_sd
    list per job from the inventory and the rules; the real Prometheus (Debian's) started with the scrape configs of
    the role's README reads them: the server with metrics is up with its labels, its container's node exporter too,
    the rank 1 of a group is not a server target, a server that does not answer is down and SGLangServerDown is
    pending for it, and all 8 rules are loaded and healthy."""
    prom = shutil.which("prometheus")
    assert prom, "prometheus is missing: tests/ci/bootstrap.sh installs Debian's package"
    server = _serve("# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{model_name=\"tiny\"} 0\n")
    exporter = _serve("# TYPE gpuserve_sglang_plan_within_tolerance gauge\n"
                      "gpuserve_sglang_plan_within_tolerance{server=\"llama\"} 1\n")
    dead = _free_port()
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inv = {"all": {"children": {
        "pve_nodes": {"hosts": {"pve1": dict(local, gpuserve_monitoring_address="127.0.0.1")}},
        "sglang_containers": {"vars": {"gpuserve_node": "pve1", "sglang_server_metrics": True,
                                       "gpuserve_monitoring_address": "127.0.0.1"},
                              "hosts": {"ct100": dict(local, sglang_server_name="llama",
                                                      sglang_server_url="http://127.0.0.1:%d/" % server.server_port),
                                        "ct101": dict(local, sglang_server_name="qwen", sglang_server_group="g",
                                                      sglang_server_url="http://127.0.0.1:%d" % dead,
                                                      sglang_server_group_addr="127.0.0.1"),
                                        "ct102": dict(local, sglang_server_name="qwen", sglang_server_group="g",
                                                      sglang_server_url="http://127.0.0.1:9")}},
        "sglang_monitoring": {"hosts": {"localhost": local}}}}}
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(inv))
    out = tmp_path / "gpuserve"
    p = ansible_playbook("-i", str(path), os.path.join(ROOT, "playbooks", "monitoring.yml"),
                         "-e", "sglang_monitoring_dir=%s gpuserve_monitoring_exporter_port=%d" % (out, exporter.server_port))
    assert p.returncode == 0, p.stdout[-3000:]
    again = ansible_playbook("-i", str(path), os.path.join(ROOT, "playbooks", "monitoring.yml"),
                             "-e", "sglang_monitoring_dir=%s gpuserve_monitoring_exporter_port=%d" % (out, exporter.server_port))
    assert "changed=0" in again.stdout and again.returncode == 0, again.stdout[-2000:]
    with open(os.path.join(ROOT, "roles", "sglang_monitoring", "files", "gpuserve-sglang-dashboard.json")) as fh:
        assert (out / "grafana" / "gpuserve-sglang.json").read_text() == fh.read()   # the dashboard, beside the rules
    jobs = ("gpuserve-sglang", "gpuserve-ct", "gpuserve-router", "gpuserve-node")
    servers = json.loads((out / "gpuserve-sglang.json").read_text())
    assert [(g["targets"], g["labels"]["ct"]) for g in servers] == [
        (["127.0.0.1:%d" % server.server_port], "ct100"), (["127.0.0.1:%d" % dead], "ct101")]   # not ct102: rank 1
    cts = json.loads((out / "gpuserve-ct.json").read_text())
    assert [g["labels"].get("rank") for g in cts] == [None, "0", "1"] and cts[1]["labels"]["group"] == "g"
    port = _free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(out / "gpuserve-sglang.rules.yml")],
        "scrape_configs": [{"job_name": j, "file_sd_configs": [{"files": [str(out / (j + ".json"))]}]} for j in jobs]}))
    proc = subprocess.Popen([prom, "--config.file=%s" % config, "--storage.tsdb.path=%s" % (tmp_path / "tsdb"),
                             "--web.listen-address=127.0.0.1:%d" % port], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 60
        while True:
            try:
                targets = _api(port, "/api/v1/targets")["activeTargets"]
                alerts = _api(port, "/api/v1/alerts")["alerts"]
                health = {(t["labels"]["job"], t["labels"]["ct"]): t["health"] for t in targets if "ct" in t["labels"]}
                if health.get(("gpuserve-sglang", "ct101")) == "down" and alerts and \
                        health.get(("gpuserve-sglang", "ct100")) == "up" and health.get(("gpuserve-ct", "ct100")) == "up":
                    break
            except (OSError, ValueError, KeyError):
                pass
            assert time.time() < deadline, "Prometheus did not see the targets within 60 s"
            time.sleep(0.5)
        assert health[("gpuserve-ct", "ct101")] == "up"     # the exporter answers for every container here
        assert [(a["labels"]["alertname"], a["labels"]["ct"], a["state"]) for a in alerts] == [
            ("SGLangServerDown", "ct101", "pending")]
        value = _api(port, "/api/v1/query?query=gpuserve_sglang_plan_within_tolerance%7Bct%3D%22ct100%22%7D")
        assert value["result"][0]["value"][1] == "1" and value["result"][0]["metric"]["node"] == "pve1"
        rules = [r for g in _api(port, "/api/v1/rules")["groups"] for r in g["rules"]]
        assert len(rules) == 8 and {r["health"] for r in rules} == {"ok"}
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        server.shutdown()
        exporter.shutdown()
