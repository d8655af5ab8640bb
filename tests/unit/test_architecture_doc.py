"""docs/architecture.md says what the code is (#61 item 5): each package's imports and files, the module -> manager
map, every role's entry points, and each name a change recipe points at - compared with the code, so the page a
newcomer reads first cannot drift from it again (five of its claims had)."""
import ast
import glob
import os
import re

import yaml

from unit_helpers import ROOT

DOC = os.path.join(ROOT, "docs", "architecture.md")
MU = os.path.join(ROOT, "plugins", "module_utils")


def _doc():
    with open(DOC) as fh:
        return fh.read()


def _packages_block():
    """{package: (its paragraph's text, the packages it says it imports)} from the fenced block of packages."""
    block = re.search(r"```\n(host .*?)```", _doc(), re.S).group(1)
    out = {}
    for para in re.split(r"\n(?=[a-z]+ {2,})", block):
        name = para.split()[0]
        m = re.search(r"imports: (.*)$", para.strip())
        claimed = set() if m.group(1).strip() == "nothing" else set(x.strip() for x in m.group(1).split(","))
        out[name] = (para, claimed)
    return out


def _actual_imports(pkg):
    found = set()
    for path in glob.glob(os.path.join(MU, pkg, "*.py")):
        with open(path) as fh:
            found |= set(re.findall(r"^from \.\.([a-z_]+)", fh.read(), re.M))
    return found


def test_each_package_imports_what_the_page_says_and_lists_every_file():
    block = _packages_block()
    packages = sorted(d for d in os.listdir(MU) if os.path.isfile(os.path.join(MU, d, "__init__.py")))
    assert sorted(block) == packages
    for pkg, (para, claimed) in block.items():
        assert claimed == _actual_imports(pkg), "%s: the page says it imports %s" % (pkg, sorted(claimed))
        words = set(re.findall(r"[a-z_0-9]+", para))
        files = sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(MU, pkg, "*.py"))
                       if not p.endswith("__init__.py"))
        assert [f for f in files if f not in words] == [], "%s: files the page does not name" % pkg


def _public(pkg):
    with open(os.path.join(MU, pkg, "__init__.py")) as fh:
        tree = ast.parse(fh.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "__all__":
            return set(ast.literal_eval(node.value))
    return set()


def test_each_module_is_mapped_to_a_name_its_package_exports():
    row = next(line for line in _doc().splitlines() if line.startswith("| modules |"))
    pairs = re.findall(r"`([a-z_]+)` -> `([a-z]+)\.([A-Za-z_/]+)`", row)
    modules = sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(ROOT, "plugins", "modules", "*.py")))
    named = set(re.findall(r"`([a-z_]+)`", row))
    assert [m for m in modules if m not in named] == [], "modules the page does not name"
    for module, pkg, names in pairs:
        assert module in modules, module
        for name in names.split("/"):
            assert name in _public(pkg), "%s -> %s.%s: not in the package's public surface" % (module, pkg, name)


def test_every_roles_entry_points_are_the_ones_its_argument_specs_declare():
    rows = re.findall(r"^\| `([a-z_]+)` \| [^|]+ \| ([^|]+) \|$", _doc(), re.M)
    said = dict((role, sorted(re.findall(r"`([a-z_]+)`", points))) for role, points in rows)
    roles = sorted(os.path.basename(os.path.dirname(os.path.dirname(p)))
                   for p in glob.glob(os.path.join(ROOT, "roles", "*", "meta", "argument_specs.yml")))
    assert sorted(said) == roles
    for role in roles:
        with open(os.path.join(ROOT, "roles", role, "meta", "argument_specs.yml")) as fh:
            declared = sorted(yaml.safe_load(fh)["argument_specs"])
        assert said[role] == declared, role


def test_each_name_a_change_recipe_points_at_is_in_the_file_it_names():
    section = _doc().split("## Where each kind of change goes", 1)[1].split("\n## ", 1)[0]
    checked = 0
    for path, names in re.findall(r"`([a-z_/]+\.py)` \(([^)]*)\)", section):
        full = next((p for p in (os.path.join(ROOT, path), os.path.join(MU, path)) if os.path.isfile(p)), None)
        assert full, "%s: no such file" % path
        with open(full) as fh:
            text = fh.read()
        for name in re.findall(r"`([A-Za-z_][A-Za-z_0-9.]*)`", names):
            if "/" in name or name.endswith(".py"):
                continue
            assert re.search(r"\b%s\b" % re.escape(name.split(".")[-1]), text), "%s names %s" % (path, name)
            checked += 1
    assert checked >= 15
