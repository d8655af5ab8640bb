"""Nothing `make test` installs is outside a lock: the distributions in each venv it makes, against the pins.

    python3 tests/ci/locked.py venv VENV LOCK [LOCK...]   one venv against its lock(s)
    python3 tests/ci/locked.py all                         every venv `make test` makes that exists on this machine

A venv may hold exactly what its locks pin (same name, same version) and the packages its interpreter brings itself
(the pip and setuptools wheels that CPython's ensurepip, or Debian's python3-venv, installs into every new venv: pinned
by the interpreter). Anything else, or another version, is named and the exit status is 1.

ansible-test's own venvs (~/.ansible/test/venv/sanity.*) are held to ansible-test's own frozen requirement files
(ansible_test/_data/requirements/sanity.<test>.txt of the locked ansible-core) and the pip, setuptools and wheel
versions it bootstraps (its get_venv_packages). Standard library only: bootstrap runs it before any venv is usable.
"""
import glob
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LOCKS = os.path.join(ROOT, "tests", "ci", "locks")
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;\\]+)")

# the venvs `make test` makes (relative to the repository) and the locks each is installed from
VENVS = {
    ".venv": ["dev.lock"],
    ".venv-hub": ["hub.lock"],
    ".venv-hflib": ["hflib.lock"],
    ".venv-docs": ["docs.lock"],
    ".venv-core-floor": ["core-floor.lock"],
    ".venv-router": [os.path.join(ROOT, "roles", "sglang_router", "files", "locks", "sglang-router-0.3.2.lock")],
}
TARGETS = os.path.join(ROOT, "build", "ci", "targets")   # tests/ci/targets.sh: py3.10, py3.12, py3.13


def canonical(name):
    """PEP 503's normalized name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(path):
    """{name: {versions}} of a lock or a frozen requirements file (a universal lock may pin a name twice)."""
    found = {}
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            m = PIN.match(line)
            if m:
                found.setdefault(canonical(m.group(1)), set()).add(m.group(2))
    return found


def _ask(python, code):
    out = subprocess.run([python, "-I", "-c", code], capture_output=True, text=True, check=True, timeout=120)
    return json.loads(out.stdout)


def installed(python):
    """{name: version} of every distribution ``python`` (a venv's interpreter) sees."""
    code = ("import importlib.metadata as m, json; "
            "print(json.dumps({d.metadata['Name']: d.version for d in m.distributions()}))")
    return {canonical(name): version for name, version in _ask(python, code).items()}


def own_packages(python):
    """{name: {version}} of the wheels the interpreter puts in a new venv itself (ensurepip's, or Debian's)."""
    code = ("import ensurepip, glob, json, os, sysconfig; "
            "dirs = [os.path.join(os.path.dirname(ensurepip.__file__), '_bundled'), "
            "sysconfig.get_config_var('WHEEL_PKG_DIR') or '', '/usr/share/python-wheels']; "
            "print(json.dumps([os.path.basename(w) for d in dirs if d for w in glob.glob(os.path.join(d, '*.whl'))]))")
    own = {}
    for wheel in _ask(python, code):
        name, version = wheel.split("-")[:2]
        own.setdefault(canonical(name), set()).add(version)
    return own


def problems(have, allowed):
    """What ``have`` ({name: version}) holds that ``allowed`` ({name: {versions}}) does not: a line each."""
    out = []
    for name, version in sorted(have.items()):
        if name not in allowed:
            out.append("%s==%s is in no lock" % (name, version))
        elif version not in allowed[name]:
            out.append("%s==%s, but the lock pins %s" % (name, version, " or ".join(sorted(allowed[name]))))
    return out


def merge(*maps):
    total = {}
    for one in maps:
        for name, versions in one.items():
            total.setdefault(name, set()).update(versions)
    return total


def check_venv(venv, locks, extra=None):
    """The problems of ``venv`` against ``locks`` (paths) and ``extra`` ({name: {versions}} also allowed)."""
    python = os.path.join(venv, "bin", "python")
    allowed = merge(own_packages(python), extra or {}, *[pins(lock) for lock in locks])
    return problems(installed(python), allowed)


def ansible_test_allowed(dev_python, test, version):
    """What ansible-test (of the locked ansible-core, in .venv) may install in its venv for sanity test ``test``
    on Python ``version``: its frozen requirements of that test and the pip it bootstraps (later uninstalled)."""
    code = ("import json, os, ansible_test; from ansible_test._internal.python_requirements import get_venv_packages; "
            "print(json.dumps([os.path.dirname(ansible_test.__file__), "
            "get_venv_packages(type('Python', (), {'version': %r})())]))" % version)
    where, boot = _ask(dev_python, code)
    frozen = os.path.join(where, "_data", "requirements", "sanity.%s.txt" % test)
    allowed = pins(frozen) if test and os.path.exists(frozen) else {}
    return merge(allowed, {canonical(name): {v} for name, v in boot.items()})


def known_venvs():
    """[(venv, locks, extra)] of every venv `make test` makes that exists here."""
    found = []
    for rel, locks in VENVS.items():
        venv = os.path.join(ROOT, rel)
        if os.path.exists(os.path.join(venv, "bin", "python")):
            found.append((venv, [lock if os.path.isabs(lock) else os.path.join(LOCKS, lock) for lock in locks], None))
    for venv in sorted(glob.glob(os.path.join(TARGETS, "py*"))):
        found.append((venv, [os.path.join(LOCKS, "targets.lock")], None))
    dev_python = os.path.join(ROOT, ".venv", "bin", "python")
    # ~/.ansible/test/venv/sanity[.<test>]/<python version>/<hash>/
    for python in sorted(glob.glob(os.path.expanduser("~/.ansible/test/venv/sanity*/*/*/bin/python"))):
        venv = os.path.dirname(os.path.dirname(python))
        version = os.path.basename(os.path.dirname(venv))
        test = os.path.basename(os.path.dirname(os.path.dirname(venv))).partition(".")[2]
        found.append((venv, [], ansible_test_allowed(dev_python, test, version)))
    return found


def main(argv):
    if len(argv) >= 3 and argv[0] == "venv":
        todo = [(argv[1], argv[2:], None)]
    elif argv == ["all"]:
        todo = known_venvs()
    else:
        sys.exit(__doc__)
    failed = False
    for venv, locks, extra in todo:
        found = check_venv(venv, locks, extra)
        what = ", ".join(os.path.relpath(lock, ROOT) for lock in locks) or "ansible-test's own frozen requirements"
        if found:
            failed = True
            print("locked: %s holds what %s does not pin:" % (venv, what))
            print("\n".join("  " + line for line in found))
        else:
            print("locked: %s holds only what %s pins" % (venv.replace(ROOT + os.sep, ""), what))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
