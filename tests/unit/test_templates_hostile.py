"""Security round 3 (#58 item 5): the three templates that skipped the control-character guard, rendered with hostile
values - the GPU metrics unit (root, on the node: a line break in nvidia_driver_metrics_node rendered an
ExecStartPre= line), the router's unit, and the /etc/default/prometheus line of sglang_monitoring (its ^...$ pattern
took a trailing line break; quotes and $ reached a shell-style ARGS="..."). Each is refused or renders exactly the
settings of the ordinary file; and no role or playbook validates with a ^...$ pattern any more (\\A...\\Z)."""
import glob
import os
import random
import re

import pytest

from test_unit_template import directives as settings  # (section, key) of every setting line, as systemd reads it
from unit_helpers import CONTROLLER, ROOT, load_plugin

pytestmark = CONTROLLER
INJECTED = "x\nExecStartPre=+/usr/bin/touch /root/pwned\n#"

TEMPLATES = {
    "metrics": (os.path.join(ROOT, "roles", "nvidia_driver", "templates", "gpuserve-gpu-metrics.service.j2"), {
        "ansible_managed": "Ansible managed", "inventory_hostname": "pve1", "nvidia_driver_metrics_node": "pve1",
        "__nvidia_driver_metrics_file": "/var/lib/prometheus/node-exporter/gpuserve_nvidia.prom",
        "__nvidia_driver_metrics_lib": "/usr/local/lib/gpuserve-sglang"}),
    "router": (os.path.join(ROOT, "roles", "sglang_router", "templates", "sglang-router.service.j2"), {
        "ansible_managed": "Ansible managed", "sglang_router_name": "main", "sglang_router_version": "0.3.2",
        "sglang_router_user": "sglang-router", "sglang_router_unix_group": "sglang-router",
        "sglang_router_path": "/opt/sglang-router/venv", "__sglang_router_launcher": "/opt/sglang-router/gpuserve-sglang-router",
        "__sglang_router_files": "/etc/sglang-router/main", "sglang_router_api_key": "k" * 20}),
    "prometheus": (os.path.join(ROOT, "roles", "sglang_monitoring", "templates", "prometheus.default.j2"), {
        "sglang_monitoring_listen": "127.0.0.1:9090"}),
}
_COMPILED = {}


def render(which, values):
    if which not in _COMPILED:
        import jinja2  # pylint: disable=import-outside-toplevel
        filters = load_plugin("filter", "sglang", "gpuserve_filters_templates").FilterModule().filters()
        env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
        env.filters.update(("gpuserve.sglang." + k, v) for k, v in filters.items())
        with open(TEMPLATES[which][0], encoding="utf-8") as fh:
            _COMPILED[which] = env.from_string(fh.read())
    return _COMPILED[which].render(**values)


def exec_words(text):
    """ExecStart's words as systemd splits them (double-quoted words, C escapes)."""
    line = next(ln for ln in text.splitlines() if ln.startswith("ExecStart="))[len("ExecStart="):]
    return [bytes(w, "utf-8").decode("unicode_escape").replace("%%", "%").replace("$$", "$")
            for w in re.findall(r'"((?:[^"\\]|\\.)*)"', line)]


def refused_or_inert(which, values):
    try:
        text = render(which, values)
    except Exception as exc:  # AnsibleFilterError from the collection's filters  pylint: disable=broad-except
        assert "control character" in str(exc), exc
        return None
    assert settings(text) == settings(render(which, TEMPLATES[which][1])), text
    return text


@pytest.mark.parametrize("which, name", [(w, n) for w, (_p, base) in sorted(TEMPLATES.items()) for n in sorted(base)
                                         if n not in ("ansible_managed", "sglang_router_api_key")])
def test_a_line_break_in_any_templated_value_never_becomes_a_setting(which, name):
    values = dict(TEMPLATES[which][1], **{name: INJECTED})
    text = refused_or_inert(which, values)
    if text is not None:      # an ExecStart word (or unused): the line break is an escape inside that one word
        assert "\nExecStartPre" not in text
        assert "pwned" not in text or "pwned" in text.split("ExecStart=", 1)[1].split("\n", 1)[0]


def test_the_inventory_name_stands_in_for_an_empty_node_and_is_one_word_too():
    base = dict(TEMPLATES["metrics"][1], nvidia_driver_metrics_node="", inventory_hostname=INJECTED)
    assert exec_words(render("metrics", base))[3:5] == ["--node", INJECTED]


def test_the_metrics_units_node_with_a_line_break_was_the_attack_and_is_one_word_now():
    base = TEMPLATES["metrics"][1]
    text = render("metrics", dict(base, nvidia_driver_metrics_node=INJECTED))
    assert [k for _s, k in settings(text)] == [k for _s, k in settings(render("metrics", base))]
    assert exec_words(text)[3:5] == ["--node", INJECTED]
    assert exec_words(render("metrics", base)) == ["/usr/bin/python3", "-m", "gpuserve_host.gpu_textfile", "--node",
                                                   "pve1", "--out", base["__nvidia_driver_metrics_file"]]


def test_the_routers_unit_runs_the_launcher_with_its_files_as_words():
    base = TEMPLATES["router"][1]
    assert exec_words(render("router", base)) == [
        "/opt/sglang-router/venv/bin/python", "/opt/sglang-router/gpuserve-sglang-router", "--args",
        "/etc/sglang-router/main.json", "--workers", "/etc/sglang-router/main.workers.json", "--key-file",
        "/etc/sglang-router/main.key"]
    assert "--key-file" not in render("router", dict(base, sglang_router_api_key=""))
    spaced = render("router", dict(base, __sglang_router_files="/etc/sglang router/m$x%h"))
    assert exec_words(spaced)[3] == "/etc/sglang router/m$x%h.json"


def test_fuzz_the_three_templates_with_hostile_text():
    rng = random.Random(58)
    alphabet = ["\n", "\r", "\t", "\x00", "\x1b", "=", "[Service]", "%", "%h", "\"", "'", " ", "\\", "$", "`",
                "ExecStartPre=+/bin/sh", "a", "/", "-", "#", ";"]
    refused = 0
    for _round in range(1500):
        which = rng.choice(sorted(TEMPLATES))
        name = rng.choice([n for n in TEMPLATES[which][1] if n not in ("ansible_managed", "sglang_router_api_key")])
        text = "".join(rng.choice(alphabet) for _n in range(rng.randint(1, 8)))
        if refused_or_inert(which, dict(TEMPLATES[which][1], **{name: text})) is None:
            refused += 1
    assert 0 < refused < 1500


def _monitoring_preflight_patterns():
    with open(os.path.join(ROOT, "roles", "sglang_monitoring", "tasks", "main.yml"), encoding="utf-8") as fh:
        text = fh.read()
    listen = re.search(r"sglang_monitoring_listen is match\('(.*?)'\)", text).group(1)
    return re.compile(listen)


@pytest.mark.parametrize("value, ok", [
    ("127.0.0.1:9090", True), (":9090", True), ("[::1]:9090", True), ("prom.lab:9090", True),
    ("127.0.0.1:9090\n", False), ('a:1" --web.enable-admin-api "', False), ("$(reboot):1", False),
    ("`id`:1", False), ("a b:1", False), ("a:123456", False),
])
def test_the_listen_address_pattern_takes_host_port_only(value, ok):
    assert bool(_monitoring_preflight_patterns().match(value)) is ok


def test_no_role_or_playbook_validates_with_a_pattern_that_takes_a_trailing_line_break():
    """Python's $ matches before a final line break: `"a:1\\n" is match('^[^\\s:]+:[0-9]+$')` is true."""
    found = []
    for path in glob.glob(os.path.join(ROOT, "roles", "*", "tasks", "*.yml")) + \
            glob.glob(os.path.join(ROOT, "roles", "*", "vars", "*.yml")) + glob.glob(os.path.join(ROOT, "playbooks", "*.yml")):
        with open(path, encoding="utf-8") as fh:
            for n, line in enumerate(fh, 1):
                if re.search(r"""match\(\s*'[^']*\$'\s*\)|'match',\s*'[^']*\$'""", line):
                    found.append("%s:%d: %s" % (os.path.relpath(path, ROOT), n, line.strip()))
    assert found == []
