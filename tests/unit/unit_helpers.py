"""Shared test helpers: module_utils are plain files, imported by path (no Ansible needed)."""
import importlib.util
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "tests", "fixtures")


def load_module_util(name):
    """Import plugins/module_utils/<name>.py by file path, as the architecture promises."""
    key = "gpuserve_mu_" + name
    if key in sys.modules:
        return sys.modules[key]
    path = os.path.join(ROOT, "plugins", "module_utils", name + ".py")
    spec = importlib.util.spec_from_file_location(key, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[key] = mod
    spec.loader.exec_module(mod)
    return mod


def fixture_text(*parts):
    """A fixture file's text without its first-line '# shape:' provenance comment."""
    with open(os.path.join(FIXTURES, *parts), encoding="utf-8", newline="") as fh:
        text = fh.read()
    if text.startswith("# shape:"):
        text = text.split("\n", 1)[1]
    return text
