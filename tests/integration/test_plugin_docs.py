"""Every plugin of the collection documents itself (#45 item 7): ansible-doc lists none as UNDOCUMENTED, for every
plugin type the collection ships, and each filter of the filter plugin has its own documentation file."""
import json
import os
import subprocess

import pytest

from ansible_helpers import ROOT, VENV_BIN, ansible_env

# the action plugin (job_progress) is documented by its module of the same name; module_utils, plugin_utils and
# doc_fragments are code and documentation the plugins share, not plugins
TYPES = sorted(d for d in os.listdir(os.path.join(ROOT, "plugins"))
               if d not in ("module_utils", "plugin_utils", "doc_fragments", "action") and os.path.isdir(os.path.join(ROOT, "plugins", d)))
KIND = {"modules": "module", "filter": "filter", "connection": "connection"}


def listed(kind):
    p = subprocess.run([os.path.join(VENV_BIN, "ansible-doc"), "-t", kind, "-l", "gpuserve.sglang", "--json"],
                       capture_output=True, text=True, env=ansible_env(), cwd=ROOT, check=True)
    return json.loads(p.stdout)


@pytest.mark.parametrize("directory", TYPES)
def test_ansible_doc_lists_every_plugin_with_its_description(directory):
    kind = KIND[directory]
    docs = listed(kind)
    assert docs, "ansible-doc lists no %s plugin of gpuserve.sglang" % kind
    undocumented = sorted(name for name, desc in docs.items() if not desc or "UNDOCUMENTED" in str(desc))
    assert not undocumented, "%s plugins without documentation: %s" % (kind, undocumented)


def test_every_filter_has_its_documentation_file():
    import sys  # pylint: disable=import-outside-toplevel
    sys.path.insert(0, os.path.join(ROOT, "plugins", "filter"))
    try:
        from sglang import FilterModule  # pylint: disable=import-outside-toplevel
    finally:
        sys.path.pop(0)
    names = set(FilterModule().filters())
    docs = {f[:-4] for f in os.listdir(os.path.join(ROOT, "plugins", "filter")) if f.endswith(".yml")}
    assert names - docs == set(), "filters without plugins/filter/<name>.yml: %s" % sorted(names - docs)
    assert docs - names == set(), "documentation of filters that do not exist: %s" % sorted(docs - names)


def test_every_module_states_its_platform_check_and_diff_support():
    """#62 item 8: every module carries the attributes a Galaxy or Automation Hub reader expects - check_mode,
    diff_mode and platform (support full, POSIX targets) - as ansible-doc renders them (the shared doc fragment)."""
    names = sorted(listed("module"))
    p = subprocess.run([os.path.join(VENV_BIN, "ansible-doc"), "-t", "module", "--json"] + names, capture_output=True,
                       text=True, env=ansible_env(), cwd=ROOT, check=True)
    docs = json.loads(p.stdout)
    assert len(docs) == len(names) >= 14
    for name, doc in docs.items():
        attributes = doc["doc"].get("attributes") or {}
        assert {"check_mode", "diff_mode", "platform"} <= set(attributes), name
        assert attributes["platform"]["support"] == "full" and attributes["platform"]["platforms"] == "posix", name
