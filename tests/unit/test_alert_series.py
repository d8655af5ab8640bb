"""#48 item 3: every series the alert rules read is one that is really served - SGLang's families as the real 0.5.9
serves them (the `real` lab scenario reads them from its /metrics: its FAMILIES), ours as the collection's own
writers render them (the plan's textfile, nvidia_gpu_facts' textfile). A rule on a misspelt name would never fire."""
import ast
import os
import re

import pytest
import yaml

from unit_helpers import ROOT, load_module_util

RULES = os.path.join(ROOT, "roles", "sglang_monitoring", "files", "gpuserve-sglang.rules.yml")


def served_sglang_families():
    path = os.path.join(ROOT, "tests", "lab", "molecule", "real", "tests", "test_real.py")
    with open(path) as fh:
        tree = ast.parse(fh.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "FAMILIES":
            return set(ast.literal_eval(node.value))
    raise AssertionError("test_real.py has no FAMILIES")


def our_families():
    host = load_module_util("host")
    server = load_module_util("server")
    gpus = host.gpu_metrics("pve1", {
        "state": "ok", "gpu_count": 1, "driver_version": "570.153.02", "kernel_module_version": "570.153.02",
        "gpus": [{"index": 0, "uuid": "GPU-1", "name": "RTX A6000", "memory_total_mib": 49140, "memory_used_mib": 0}],
        "lost_gpus": [{"pci_bus_id": "00000000:41:00.0"}]})
    plan = server.plan_metrics("llama", {"predicted_max_total_num_tokens": 10, "actual_max_total_num_tokens": 10,
                                         "ratio": 1.0, "tolerance": 0.1, "within_tolerance": True}, 0.85)
    return set(re.findall(r"^# TYPE (\S+) gauge$", gpus + plan, re.M))


def rule_exprs():
    with open(RULES) as fh:
        return " ".join(r["expr"] for g in yaml.safe_load(fh)["groups"] for r in g["rules"])


@pytest.mark.parametrize("prefix", ["sglang:", "gpuserve_"])
def test_every_series_the_rules_read_is_served(prefix):
    exprs = rule_exprs()
    # SGLang's families are matched in either spelling, sglang[:_]<name> (the rules file says why): the colon one served
    used = set(re.findall(r"(%s[a-z_:]+)" % re.escape(prefix), exprs)) | set(
        "sglang:" + n for n in re.findall(r"sglang\[:_\]([a-z_]+)", exprs) if prefix == "sglang:")
    served = served_sglang_families() if prefix == "sglang:" else our_families()
    assert len(used) >= 3, "the rules read too few %s series: %s" % (prefix, used)
    assert used <= served, "read but not served: %s" % sorted(used - served)


def test_the_served_names_are_known_here():
    """The check above is real: our writers render the names the rules use, and more."""
    ours = our_families()
    assert {"gpuserve_nvidia_gpus_lost", "gpuserve_nvidia_driver_mismatch", "gpuserve_sglang_plan_within_tolerance"} <= ours
    assert "sglang:token_usage" in served_sglang_families()
