"""The collection's version tells the truth: galaxy.yml names the newest release of the generated changelog, and
every plugin's version_added is a release of it, not newer than galaxy.yml (#20)."""
import ast
import glob
import os

import yaml

from unit_helpers import ROOT


def _v(text):
    return tuple(int(x) for x in str(text).split("."))


def _load(*parts):
    with open(os.path.join(ROOT, *parts)) as fh:
        return yaml.safe_load(fh)


def _doc(path):
    with open(path) as fh:
        tree = ast.parse(fh.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "DOCUMENTATION":
            return yaml.safe_load(node.value.value)
    return None


def _own_version_added(doc):
    """version_added values of this collection in a DOCUMENTATION tree (the pct connection's copied
    ansible.builtin.ssh options carry ansible-core's, marked version_added_collection: ansible.builtin)."""
    out = []
    if isinstance(doc, dict):
        if "version_added" in doc and doc.get("version_added_collection", "gpuserve.sglang") == "gpuserve.sglang":
            out.append(str(doc["version_added"]))
        for value in doc.values():
            out.extend(_own_version_added(value))
    elif isinstance(doc, list):
        for value in doc:
            out.extend(_own_version_added(value))
    return out


def test_galaxy_version_is_the_newest_release_of_the_changelog():
    galaxy = _load("galaxy.yml")["version"]
    releases = _load("changelogs", "changelog.yaml")["releases"]
    assert releases, "changelogs/changelog.yaml has no release: run antsibull-changelog release"
    assert max(releases, key=_v) == galaxy
    with open(os.path.join(ROOT, "CHANGELOG.rst")) as fh:
        rst = fh.read()
    for version in releases:
        assert "\nv%s\n" % version in rst, "CHANGELOG.rst was not regenerated for %s" % version


def test_every_plugins_version_added_is_a_release_not_newer_than_galaxy():
    galaxy = _v(_load("galaxy.yml")["version"])
    releases = set(_load("changelogs", "changelog.yaml")["releases"])
    seen = 0
    for path in sorted(glob.glob(os.path.join(ROOT, "plugins", "*", "*.py"))):
        doc = _doc(path)
        if not doc:
            continue
        for added in _own_version_added(doc):
            seen += 1
            assert added in releases, "%s: version_added %s is not a release in changelogs/changelog.yaml" % (path, added)
            assert _v(added) <= galaxy, "%s: version_added %s is newer than galaxy.yml" % (path, added)
    assert seen >= 9   # every module has one
