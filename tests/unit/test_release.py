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


CONTENT = ("plugins", "roles", "playbooks", "meta")


def _git(*args):
    import subprocess  # pylint: disable=import-outside-toplevel
    return subprocess.run(["git"] + list(args), cwd=ROOT, capture_output=True, text=True, check=True).stdout


def test_a_change_to_the_content_since_the_last_release_carries_a_changelog_fragment():
    """#45 item 2: when plugins/, roles/, playbooks/ or meta/ changed since the last release (the last commit that
    wrote changelogs/changelog.yaml), changelogs/fragments/ holds at least one fragment saying so - a ``trivial:`` one
    for a change no user sees. Each fragment is one antsibull-changelog can read."""
    released = _git("log", "-1", "--format=%H", "--", "changelogs/changelog.yaml").strip()
    assert released, "no release commit (changelogs/changelog.yaml was never committed)"
    changed = [f for f in _git("diff", "--name-only", released, "--", *CONTENT).splitlines() if f]
    changed += [f for f in _git("ls-files", "--others", "--exclude-standard", "--", *CONTENT).splitlines() if f]
    fragments = sorted(glob.glob(os.path.join(ROOT, "changelogs", "fragments", "*.y*ml")))
    if changed:
        assert fragments, ("%d file(s) of the content changed since the release %s (%s, ...) and "
                           "changelogs/fragments/ is empty: add a fragment (a 'trivial:' one for a change no user sees)"
                           % (len(changed), released[:12], ", ".join(changed[:3])))
    config = _load("changelogs", "config.yaml")
    sections = {s[0] for s in config.get("sections", [])}
    sections |= {config.get("trivial_section_name", "trivial"), "release_summary"}
    for path in fragments:
        with open(path) as fh:
            frag = yaml.safe_load(fh)
        assert isinstance(frag, dict) and frag, path
        for section, entries in frag.items():
            assert section in sections, "%s: unknown section %s" % (path, section)
            assert section == "release_summary" or (isinstance(entries, list) and all(
                isinstance(e, str) and e for e in entries)), path


# Hosts that are never a project's address: RFC 2606/6761 reserved names and the loopback
_PLACEHOLDER = (".invalid", ".example", ".test", ".localhost", "example.com", "example.org", "example.net", "localhost")


def test_galaxy_yml_invents_no_address():
    """#62 item 4: the repository/documentation/homepage/issues URLs were example.invalid placeholders, which Galaxy
    shows as dead links. Each is left out until there is a real one; one that is set is https and no reserved name;
    README tells users how to report a problem."""
    import urllib.parse
    galaxy = _load("galaxy.yml")
    for key in ("repository", "documentation", "homepage", "issues"):
        url = galaxy.get(key)
        if url is None:
            continue
        host = urllib.parse.urlsplit(url).hostname or ""
        assert url.startswith("https://") and not any(host == p.lstrip(".") or host.endswith(p) for p in _PLACEHOLDER), \
            "%s: %s is a placeholder, not the project's address" % (key, url)
    with open(os.path.join(ROOT, "README.md")) as fh:
        assert "\n## Support\n" in fh.read()
