"""The shape of the house (#46), kept: module_utils are packages by concern that import only the standard library and
each other's public surface, without cycles; modules are thin; no file or function grows past what a reader holds;
each on-disk contract is read through its owner, never by a path rebuilt in YAML."""
import ast
import glob
import os
import sys

import pytest

from unit_helpers import ROOT

MU = os.path.join(ROOT, "plugins", "module_utils")
PACKAGES = sorted(d for d in os.listdir(MU) if os.path.isdir(os.path.join(MU, d)) and not d.startswith("_"))
STDLIB = set(sys.stdlib_module_names)


def _tree(path):
    with open(path, encoding="utf-8") as fh:
        return ast.parse(fh.read(), path)


def _files(pattern):
    return sorted(glob.glob(os.path.join(ROOT, pattern)))


def _rel(path):
    return os.path.relpath(path, ROOT)


def test_module_utils_is_a_package_per_concern_and_nothing_else():
    assert PACKAGES == ["host", "hub", "logs", "plan", "pve", "server", "venv"]
    assert not glob.glob(os.path.join(MU, "*.py")), "a file beside the packages: put it in the package of its concern"
    for pkg in PACKAGES:
        assert os.path.isfile(os.path.join(MU, pkg, "__init__.py"))


def _package_imports(path):
    """(stdlib or foreign top-level names, {package: [names imported from it]}) of one module_utils file."""
    pkg = os.path.basename(os.path.dirname(path))
    foreign, edges = [], {}
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Import):
            foreign.extend(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                foreign.append(node.module.split(".")[0])
            elif node.level == 1:
                edges.setdefault(pkg, []).append(node.module)
            else:
                edges.setdefault(node.module.split(".")[0], []).append(node.module)
    return foreign, edges


@pytest.mark.parametrize("path", _files("plugins/module_utils/*/*.py"), ids=_rel)
def test_module_utils_import_the_standard_library_and_other_packages_public_surface_only(path):
    foreign, edges = _package_imports(path)
    own = os.path.basename(os.path.dirname(path))
    # the code that runs in another interpreter (uv_venv's import check, sglang's parser) is text, not an import
    assert set(foreign) - {"__future__"} <= STDLIB, "%s imports %s" % (_rel(path), set(foreign) - STDLIB)
    for pkg, modules in edges.items():
        if pkg != own:
            assert modules == [pkg] * len(modules), \
                "%s imports %s's files %s: import from the package (from ..%s import X)" % (_rel(path), pkg, modules, pkg)


def test_the_packages_depend_on_each_other_without_a_cycle():
    graph = dict((pkg, set()) for pkg in PACKAGES)
    for path in _files("plugins/module_utils/*/*.py"):
        own = os.path.basename(os.path.dirname(path))
        graph[own] |= set(_package_imports(path)[1]) - {own}
    done, stack = set(), []

    def visit(pkg):
        assert pkg not in stack, "import cycle: %s" % " -> ".join(stack + [pkg])
        if pkg in done:
            return
        stack.append(pkg)
        for dep in sorted(graph[pkg]):
            visit(dep)
        stack.pop()
        done.add(pkg)
    for pkg in PACKAGES:
        visit(pkg)
    assert graph["host"] == set(), "host is the bottom: the machine and the collection's own files"


@pytest.mark.parametrize("pkg", PACKAGES)
def test_each_package_names_its_public_surface_once(pkg):
    tree = _tree(os.path.join(MU, pkg, "__init__.py"))
    imported = [a.asname or a.name for n in tree.body if isinstance(n, ast.ImportFrom) and n.level == 1 for a in n.names]
    declared = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
                and n.value in imported]
    assert sorted(imported) == sorted(set(imported)), "a name imported twice in %s/__init__.py" % pkg
    assert sorted(declared) == sorted(imported), "%s/__init__.py: __all__ and the imports differ" % pkg
    assert not [n for n in imported if n.startswith("_")], "a private name in %s's surface" % pkg


@pytest.mark.parametrize("path", _files("plugins/modules/*.py") + _files("plugins/filter/*.py")
                         + _files("plugins/action/*.py"), ids=_rel)
def test_plugins_import_module_utils_through_the_packages_surface_by_name(path):
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    assert "importlib" not in text, "%s: import the package by name, visibly" % _rel(path)
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.ImportFrom) and node.module and ".plugins.module_utils" in node.module:
            rest = node.module.split(".plugins.module_utils")[1].strip(".")
            names = [a.name for a in node.names]
            ok = rest in PACKAGES or (rest == "" and set(names) <= set(PACKAGES))
            assert ok, "%s imports module_utils.%s: import from a package (module_utils.<package>)" % (_rel(path), rest)


@pytest.mark.parametrize("path", _files("plugins/module_utils/*/*.py"), ids=_rel)
def test_no_module_utils_file_is_over_600_lines(path):
    with open(path, encoding="utf-8") as fh:
        assert len(fh.read().splitlines()) <= 600, "%s: split it along its concern" % _rel(path)


@pytest.mark.parametrize("path", _files("plugins/*/*.py") + _files("plugins/module_utils/*/*.py"), ids=_rel)
def test_no_function_is_over_80_lines(path):
    long = ["%s (%d lines)" % (n.name, n.end_lineno - n.lineno + 1) for n in ast.walk(_tree(path))
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > 80]
    assert not long, "%s: %s" % (_rel(path), ", ".join(long))


@pytest.mark.parametrize("path", _files("plugins/modules/*.py"), ids=_rel)
def test_a_modules_main_is_spec_call_exit_in_40_lines_and_holds_no_class(path):
    tree = _tree(path)
    mains = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main"]
    if not mains:   # the documentation of an action plugin (job_progress): no code at all
        assert not [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))], _rel(path)
        return
    assert mains[0].end_lineno - mains[0].lineno + 1 <= 40, "%s: main() is over 40 lines" % _rel(path)
    assert not [n.name for n in tree.body if isinstance(n, ast.ClassDef)], "%s: a class belongs in module_utils" % (
        _rel(path))


CONTRACTS = (".gpuserve-build.json", ".gpuserve-snapshot.json", ".state.json")


@pytest.mark.parametrize("path", _files("roles/*/tasks/*.yml") + _files("roles/*/handlers/*.yml")
                         + _files("playbooks/*.yml"), ids=_rel)
def test_no_role_or_playbook_rebuilds_a_contracts_path(path):
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    found = [c for c in CONTRACTS if c in text]
    assert not found, "%s names %s: ask gpuserve.sglang.records_info, the records' owner" % (_rel(path), found)


def _fallbacks():
    """{inventory-wide name: {fallback as written: [files]}} for every ``gpuserve_<name> | default(<literal>)`` in the
    roles (defaults, argument specs, tasks) and playbooks."""
    import re
    found = {}
    paths = _files("roles/*/defaults/main.yml") + _files("roles/*/meta/argument_specs.yml") + _files("roles/*/tasks/*.yml") \
        + _files("playbooks/*.yml") + _files("playbooks/*/*.yml")
    for path in paths:
        with open(path, encoding="utf-8") as fh:
            text = fh.read().replace("''", "'")          # a single-quoted YAML scalar doubles its quotes
        for name, literal in re.findall(r"\b(gpuserve_(?:venv|service_user|service_unix_group|service_group|"
                                        r"service_home)) \| default\(('[^']*')\)", text):
            found.setdefault(name, {}).setdefault(literal, []).append(_rel(path))
    return found


def test_each_inventory_wide_name_falls_back_to_one_value_everywhere():
    """gpuserve_venv, gpuserve_service_user, _unix_group and _home are set once in the inventory and every role
    defaults from them; each role also works alone, so each writes the collection's fallback - the same one."""
    found = _fallbacks()
    assert {"gpuserve_venv", "gpuserve_service_user", "gpuserve_service_group", "gpuserve_service_home"} <= set(found)
    split = {name: sorted(values) for name, values in found.items() if len(values) != 1}
    assert not split, "a name falls back to different values: %s" % {n: found[n] for n in split}


def test_the_readme_is_at_most_250_lines():
    """#61 item 6: the page Galaxy shows stays a user's page; detail goes to docs/ (testing.md holds what is not
    exercised in full, the role READMEs the variables)."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as fh:
        lines = fh.read().splitlines()
    assert len(lines) <= 250, "README.md has %d lines: move detail to docs/" % len(lines)
