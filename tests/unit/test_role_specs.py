"""Every role's defaults/main.yml and meta/argument_specs.yml list the same knobs with the same defaults."""
import glob
import os

import pytest
import yaml

from unit_helpers import ROOT

ROLES = sorted(os.path.basename(os.path.dirname(p)) for p in glob.glob(os.path.join(ROOT, "roles", "*", "defaults")))


def load(role, *parts):
    with open(os.path.join(ROOT, "roles", role, *parts)) as fh:
        return yaml.safe_load(fh) or {}


@pytest.mark.parametrize("role", ROLES)
def test_defaults_and_argument_specs_do_not_drift(role):
    defaults = load(role, "defaults", "main.yml")
    options = load(role, "meta", "argument_specs.yml")["argument_specs"]["main"]["options"]
    assert sorted(defaults) == sorted(options), "a knob is documented in one file only"
    for name, spec in options.items():
        assert name.startswith(role + "_"), "%s: variables carry the role prefix" % name
        assert spec.get("description"), "%s: no description" % name
        if spec.get("required"):
            assert defaults[name] is None, "%s is required: its default must be empty" % name
        else:
            assert spec.get("default") == defaults[name], "%s: default differs between the two files" % name


def test_there_are_roles_to_check():
    assert "lxc_gpu_passthrough" in ROLES
