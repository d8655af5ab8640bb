"""The sglang_server role's unit template rendered with hostile values for every templated variable (#42 item 5).

A model path ``/srv/models/q\\nExecStartPre=+/usr/bin/touch /root/pwned\\n#`` once rendered a real ``ExecStartPre=+``
line, which systemd runs as root. The template passes every value through filter sglang_unit_value (behind the
role's preflight): a control character is refused, ``%`` is doubled. Rendered here with the role's own template and
the collection's own filters (jinja2, as Ansible's template lookup does), no Ansible run needed.
"""
import os
import random

import pytest

from unit_helpers import CONTROLLER, ROOT, load_plugin

TEMPLATE = os.path.join(ROOT, "roles", "sglang_server", "templates", "sglang.service.j2")
BASE = {
    "ansible_managed": "Ansible managed",
    "sglang_server_model_path": "/srv/models/Qwen3.6-27B", "sglang_server_name": "qwen",
    "sglang_server_unit_after": ["nvidia-persistenced.service"], "sglang_server_start_limit_interval_sec": 600,
    "sglang_server_start_limit_burst": 3, "sglang_server_user": "sglang", "sglang_server_unix_group": "sglang",
    "sglang_server_env_dir": "/etc/sglang", "sglang_server_python": "/opt/sglang/venv/bin/python",
    "__sglang_server_args": {"host": "127.0.0.1", "port": 30000, "tp_size": 2},
    "__sglang_server_config": "/etc/sglang/qwen.yaml", "sglang_server_home": "/var/lib/sglang",
    "__sglang_server_log": "/var/log/sglang/qwen.log", "sglang_server_group_members": ["ct129", "ct130"],
    "sglang_server_group": "qwen-group", "sglang_server_group_rank": 0, "sglang_server_restart_sec": 10,
    "sglang_server_limit_nofile": 65535, "sglang_server_unit_hardening": True,
}
INJECTED = "x\nExecStartPre=+/usr/bin/touch /root/pwned\n#"


_TEMPLATE = []


def render(values):
    if not _TEMPLATE:
        _TEMPLATE.append(_compile())
    return _TEMPLATE[0].render(**values)


def _compile():
    # the controller's jinja2 (a CONTROLLER test: the targets' Pythons have none)
    import jinja2  # pylint: disable=import-outside-toplevel
    plugin = load_plugin("filter", "sglang", "gpuserve_filters_unit")
    filters = plugin.FilterModule().filters()
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.filters.update(("gpuserve.sglang." + k, v) for k, v in filters.items())
    env.filters["basename"] = os.path.basename
    env.filters["bool"] = bool
    with open(TEMPLATE, encoding="utf-8") as fh:
        return env.from_string(fh.read())


def directives(text):
    """(section, key) of every setting line, as systemd reads the file (comments and blanks skipped)."""
    out, section = [], None
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip()
            continue
        out.append((section, line.split("=", 1)[0]))
    return out


def refused_or_inert(values):
    """Render ``values``: refused (the filters' error) or a unit with exactly the baseline's settings."""
    try:
        text = render(values)
    except Exception as exc:  # AnsibleFilterError from the collection's filters  pylint: disable=broad-except
        assert "control character" in str(exc) or "sglang_argv" in str(exc), exc
        return None
    assert directives(text) == directives(render(BASE)), text
    return text


HOSTILE_STRINGS = [k for k, v in BASE.items() if k != "ansible_managed" and isinstance(v, (str, int))
                   and not isinstance(v, bool)]


@CONTROLLER
@pytest.mark.parametrize("name", HOSTILE_STRINGS)
def test_a_line_break_in_any_templated_value_is_refused_never_a_directive(name):
    values = dict(BASE, **{name: INJECTED})
    with pytest.raises(Exception) as exc:
        render(values)
    assert "control character" in str(exc.value), exc.value
    # named: the variable, or the argv builder's own name for it (python, model_path, config_file)
    said = {"__sglang_server_config": "config_file", "sglang_server_python": "python",
            "sglang_server_model_path": "sglang_server_model_path"}.get(name, name)
    assert said in str(exc.value), exc.value


@CONTROLLER
def test_a_line_break_in_a_unit_it_waits_for_or_an_argument_is_refused():
    for values in (dict(BASE, sglang_server_unit_after=["a.service", INJECTED]),
                   dict(BASE, __sglang_server_args={"host": "127.0.0.1", "port": 30000, "served_model_name": INJECTED}),
                   dict(BASE, __sglang_server_args={"host": "127.0.0.1", "port": 30000, "log_level": ["info", "--host"]})):
        with pytest.raises(Exception, match="control character|beginning with '-'"):
            render(values)


@CONTROLLER
def test_specifiers_are_not_expanded_and_the_ordinary_unit_is_unchanged_by_the_filters():
    text = render(dict(BASE, sglang_server_model_path="/srv/models/a%h", sglang_server_name="q%n"))
    assert "Description=SGLang q%%n (a%%h)" in text
    assert '"--model-path" "/srv/models/a%%h"' in text
    base = render(BASE)
    assert "Description=SGLang qwen (Qwen3.6-27B)" in base and "Requires=nvidia-persistenced.service\n" in base
    assert "User=sglang\n" in base and "StandardOutput=append:/var/log/sglang/qwen.log\n" in base


@CONTROLLER
def test_fuzz_every_templated_value_with_hostile_text_never_adds_a_setting():
    """2,000 renders: random text from an alphabet of control characters, '=', '[', '%', quotes and blanks in one
    templated value (or list item) at a time - each is refused or renders exactly the baseline's settings."""
    rng = random.Random(42)
    alphabet = ["\n", "\r", "\t", "\x00", "\x1b", "\x7f", "=", "[Service]", "%", "%h", "\"", "'", " ", "\\", "$",
                "ExecStartPre=+/bin/sh", "a", "/", "-", "#", ";"]
    names = HOSTILE_STRINGS + ["sglang_server_unit_after"]
    refused = 0
    for _round in range(2000):
        name = rng.choice(names)
        text = "".join(rng.choice(alphabet) for _n in range(rng.randint(1, 8)))
        value = [text] if name == "sglang_server_unit_after" else text
        if refused_or_inert(dict(BASE, **{name: value})) is None:
            refused += 1
    assert 0 < refused < 2000
