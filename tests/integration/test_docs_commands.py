"""Every command README.md, docs/ and the roles' READMEs tell an operator to run names what exists: the playbook, each
tag of --tags (as ansible-playbook --list-tags lists them), each -e variable (read by a playbook or a role), each
--limit host (in the inventory the command names, inventory/example standing for an operator's own copy, except
where the text says the hosts are the operator's), and for an ad-hoc `ansible -m gpuserve.sglang.<module> -a ...`
the module and each of its options (ansible-doc). A runbook that drifted from the code fails here, not at 3 a.m."""
import functools
import glob
import json
import os
import re
import shlex
import subprocess

import pytest
import yaml

from ansible_helpers import ROOT, VENV_BIN, ansible_env
from test_deploy_playbook import ansible_playbook

DOCS = ["README.md"] + sorted(glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True)) + sorted(
    glob.glob(os.path.join(ROOT, "roles", "*", "README.md"))) + sorted(
    glob.glob(os.path.join(ROOT, "docs", "docsite", "rst", "*.rst")))      # the runbooks (the docsite's extra docs)
# hosts an example names as the operator's own (a second rank, a second replica); inventory/example has one CT
OPERATORS_HOSTS = {"ct130"}
ENV = ansible_env(ANSIBLE_NOCOLOR="1")


def rst_blocks(text):
    """The bodies of an RST page's code blocks (``.. code-block::`` and ``::``), their indentation taken off."""
    bodies = []
    for m in re.finditer(r"^( *)(?:\.\. code-block::.*|.*::)\n\n((?:\1 +\S.*\n|\n)+)", text, re.M):
        lines = m.group(2).rstrip("\n").splitlines()
        cut = min(len(line) - len(line.lstrip()) for line in lines if line.strip())
        bodies.append("\n".join(line[cut:] for line in lines) + "\n")
    return bodies


def commands(text, rst=False):
    """The ansible-playbook and ansible commands of a markdown (or RST) text: fenced (code-block) blocks
    (continuation lines joined, comments cut) and inline code spans (literals)."""
    found = []
    for block in rst_blocks(text) if rst else re.findall(r"```[a-z]*\n(.*?)```", text, re.S):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            line = line.split(" #", 1)[0].strip()
            if re.match(r"^(\S*/)?ansible(-playbook)? ", line):
                found.append(line)
    for span in re.findall(r"``([^`]+)``" if rst else r"`([^`\n]+)`", text):
        span = " ".join(span.split())
        if re.match(r"^(\S*/)?ansible(-playbook)? ", span.strip()):
            found.append(span.strip())
    return found


def parse(cmd):
    argv = shlex.split(cmd)
    out = {"tool": os.path.basename(argv[0]), "inventories": [], "tags": [], "extra": [], "limit": [],
           "positional": [], "module": None, "module_args": None}
    i = 1
    while i < len(argv):
        a = argv[i]
        val = argv[i + 1] if i + 1 < len(argv) else ""
        if a in ("-i", "--inventory"):
            out["inventories"].append(val)
        elif a in ("-t", "--tags"):
            out["tags"] += val.split(",")
        elif a in ("-e", "--extra-vars"):
            out["extra"].append(val)
        elif a in ("-l", "--limit"):
            out["limit"] += val.split(",")
        elif a in ("-m", "--module-name"):
            out["module"] = val
        elif a in ("-a", "--args"):
            out["module_args"] = val
        elif a.startswith("-"):
            i += 1
            continue
        else:
            out["positional"].append(a)
            i += 1
            continue
        i += 2
    return out


def extra_var_names(value):
    """The variable names of one -e value: k=v pairs or a JSON/YAML mapping (None when it is a placeholder)."""
    if value.lstrip().startswith("{"):
        try:
            data = yaml.safe_load(value)
        except yaml.YAMLError:
            return None                           # e.g. '{"plan_args": {...}}': the text's own placeholder
        return sorted(data)
    return [kv.split("=", 1)[0] for kv in shlex.split(value)]


@functools.lru_cache(maxsize=None)
def listed_tags(playbook):
    p = ansible_playbook("-i", os.path.join(ROOT, "inventory", "example"), os.path.join(ROOT, playbook), "--list-tags")
    assert p.returncode == 0, p.stderr
    tags = {"all", "always", "never", "tagged", "untagged"}
    for m in re.finditer(r"TAGS: \[([^\]]*)\]", p.stdout):
        tags.update(t.strip() for t in m.group(1).split(",") if t.strip())
    return frozenset(tags)


@functools.lru_cache(maxsize=None)
def read_variables():
    """Every name the playbooks and roles read or define (YAML, Jinja and their Python filters)."""
    words = set()
    for path in glob.glob(os.path.join(ROOT, "playbooks", "**", "*.yml"), recursive=True) + glob.glob(
            os.path.join(ROOT, "roles", "**", "*.yml"), recursive=True):
        with open(path, encoding="utf-8") as fh:
            words.update(re.findall(r"\b[a-z][a-z0-9_]*\b", fh.read()))
    return frozenset(words)


@functools.lru_cache(maxsize=None)
def inventory_hosts(inventory):
    p = subprocess.run([os.path.join(VENV_BIN, "ansible-inventory"), "-i", os.path.join(ROOT, inventory), "--list"],
                       capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=120, check=False)
    assert p.returncode == 0, p.stderr
    return frozenset(json.loads(p.stdout)["_meta"]["hostvars"])


@functools.lru_cache(maxsize=None)
def module_options(module):
    p = subprocess.run([os.path.join(VENV_BIN, "ansible-doc"), "-j", module], capture_output=True, text=True, env=ENV,
                       cwd=ROOT, timeout=120, check=False)
    if p.returncode != 0 or not json.loads(p.stdout or "{}"):
        return None
    return frozenset(json.loads(p.stdout)[module]["doc"]["options"])


def problems(cmd):
    """What in one documented command does not exist (empty when all of it does)."""
    c = parse(cmd)
    bad = []
    inventory = next((i for i in c["inventories"] if i.startswith("inventory/")), None)
    if inventory == "inventory/mysite":                # README: cp -r inventory/example inventory/mysite
        inventory = "inventory/example"
    if c["tool"] == "ansible-playbook":
        playbook = next((a for a in c["positional"] if a.endswith(".yml")), None)
        # a playbook of the installed collection by its name (ansible-playbook gpuserve.sglang.plan)
        fqcn = next((a for a in c["positional"] if re.match(r"^gpuserve\.sglang\.\w+$", a)), None)
        if playbook is None and fqcn:
            playbook = "playbooks/%s.yml" % fqcn.rsplit(".", 1)[1]
        if not playbook or not os.path.isfile(os.path.join(ROOT, playbook)):
            return ["no such playbook: %s" % (playbook or fqcn)]
        bad += ["--tags %s: no such tag in %s" % (t, playbook) for t in c["tags"] if t not in listed_tags(playbook)]
        for value in c["extra"]:
            names = extra_var_names(value) or []
            bad += ["-e %s: no playbook or role reads it" % n for n in names if n not in read_variables()]
    else:
        opts = module_options(c["module"]) if c["module"] else None
        if opts is None:
            return ["no such module: %s" % c["module"]]
        keys = [kv.split("=", 1)[0] for kv in shlex.split(c["module_args"] or "")]
        bad += ["-a %s: no such option of %s" % (k, c["module"]) for k in keys if k not in opts]
    if inventory and os.path.isdir(os.path.join(ROOT, inventory)):
        hosts = inventory_hosts(inventory)
        bad += ["--limit %s: no such host in %s" % (h, inventory) for h in c["limit"]
                if h not in hosts and h not in OPERATORS_HOSTS]
    return bad


def documented():
    for path in DOCS:
        with open(os.path.join(ROOT, path), encoding="utf-8") as fh:
            for cmd in commands(fh.read(), rst=path.endswith(".rst")):
                yield pytest.param(cmd, id="%s: %s" % (os.path.relpath(os.path.join(ROOT, path), ROOT), cmd[:70]))


def test_the_docs_give_commands_to_check():
    cmds = [p.values[0] for p in documented()]
    assert len(cmds) >= 20, cmds
    assert any("--tags" in c for c in cmds) and any(" -m gpuserve.sglang." in c for c in cmds)


@pytest.mark.parametrize("cmd", list(documented()))
def test_a_documented_command_names_what_exists(cmd):
    assert problems(cmd) == []


@pytest.mark.parametrize("cmd, said", [
    ("ansible-playbook -i inventory/example playbooks/deploy.yml --tags server,drivers",
     "--tags drivers: no such tag in playbooks/deploy.yml"),
    ("ansible-playbook -i inventory/example playbooks/restart.yml -e restart_batches=2",
     "-e restart_batches: no playbook or role reads it"),
    ("ansible-playbook -i inventory/example playbooks/restart.yml --limit ct192",
     "--limit ct192: no such host in inventory/example"),
    ("ansible-playbook playbooks/reboot.yml", "no such playbook: playbooks/reboot.yml"),
    ("ansible-playbook gpuserve.sglang.reboot", "no such playbook: playbooks/reboot.yml"),
    ("ansible localhost -m gpuserve.sglang.sglang_log_facts -a 'path=/var/log/x.log since_launch=1'",
     "-a since_launch: no such option of gpuserve.sglang.sglang_log_facts"),
    ("ansible localhost -m gpuserve.sglang.sglang_logfacts -a path=/x", "no such module: gpuserve.sglang.sglang_logfacts"),
])
def test_a_command_naming_what_does_not_exist_is_caught(cmd, said):
    assert said in problems(cmd)
