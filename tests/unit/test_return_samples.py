"""Every value a module returns has a sample in its RETURN (#62 item 8): the docsite and Galaxy show it beside the
description, and an operator writing a `when:` on a registered result reads its shape there."""
import ast
import glob
import os

import yaml

from unit_helpers import ROOT


def _return(path):
    with open(path) as fh:
        tree = ast.parse(fh.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "RETURN":
            return yaml.safe_load(node.value.value) or {}
    return None


def test_every_return_value_of_every_module_has_a_sample():
    missing = []
    modules = sorted(glob.glob(os.path.join(ROOT, "plugins", "modules", "*.py")))
    assert len(modules) >= 14
    for path in modules:
        ret = _return(path)
        assert ret is not None, "%s has no RETURN" % path
        missing += ["%s: %s" % (os.path.basename(path), key) for key, doc in ret.items() if "sample" not in doc]
    assert missing == []
