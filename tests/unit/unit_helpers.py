"""Shared test helpers: module_utils are plain files, imported by path (no Ansible needed)."""
import importlib
import os
import sys
import types

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
PACKAGE = "gpuserve_module_utils"
# A test that needs ansible-core (a plugin, ansible-playbook): it runs on the controller's Python only. Every other
# unit test tests module_utils, which run on the nodes and containers too: tests/ci/targets.sh runs those again
# under the targets' Pythons (`-m "not controller"`).
CONTROLLER = pytest.mark.controller


def load_module_util(name):
    """Import plugins/module_utils/<name>.py by file path, as the architecture promises: the directory is made a
    package of its own (no Ansible, no collection path), so a file's relative imports of its siblings resolve."""
    if PACKAGE not in sys.modules:
        pkg = types.ModuleType(PACKAGE)
        pkg.__path__ = [os.path.join(ROOT, "plugins", "module_utils")]
        sys.modules[PACKAGE] = pkg
    return importlib.import_module("%s.%s" % (PACKAGE, name))


def collection_by_path():
    """Make ``ansible_collections.gpuserve.sglang`` this checkout (no collection tree needed), unless a real
    ``ansible_collections`` is importable: a plugin's own imports of the collection's module_utils then resolve."""
    if "ansible_collections.gpuserve.sglang" in sys.modules:
        return
    try:
        importlib.import_module("ansible_collections.gpuserve.sglang.plugins.module_utils")
        return
    except ImportError:
        pass
    for name, path in (("ansible_collections", None), ("ansible_collections.gpuserve", None),
                       ("ansible_collections.gpuserve.sglang", ROOT),
                       ("ansible_collections.gpuserve.sglang.plugins", os.path.join(ROOT, "plugins"))):
        mod = sys.modules.get(name) or types.ModuleType(name)
        mod.__path__ = [path] if path else []
        sys.modules[name] = mod


def load_plugin(kind, name, as_name):
    """Import plugins/<kind>/<name>.py by file path as a fresh module named ``as_name`` (each caller its own copy, so
    one test's patches never reach another's); the collection's module_utils it imports come from this checkout."""
    import importlib.util  # pylint: disable=import-outside-toplevel
    collection_by_path()
    spec = importlib.util.spec_from_file_location(as_name, os.path.join(ROOT, "plugins", kind, name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def fixture_text(*parts):
    """A fixture file's text without its first-line '# shape:' provenance comment."""
    with open(os.path.join(FIXTURES, *parts), encoding="utf-8", newline="") as fh:
        text = fh.read()
    if text.startswith("# shape:"):
        text = text.split("\n", 1)[1]
    return text
