"""The test toolchain is locked: nothing `make test` installs is outside a lock (tests/ci/locked.py), every installer
in the tests takes a lock by hash, and the locks agree where they share a package."""
import glob
import os
import re
import subprocess
import sys

import pytest

from ansible_helpers import ROOT

sys.path.insert(0, os.path.join(ROOT, "tests", "ci"))
import locked  # noqa: E402  pylint: disable=wrong-import-position

LOCKS = os.path.join(ROOT, "tests", "ci", "locks")


def _bare_venv(tmp_path, *dists):
    """A venv with no pip, holding the distributions ``dists`` ((name, version)) as dist-info directories."""
    venv = str(tmp_path / "venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    site = glob.glob(os.path.join(venv, "lib", "python*", "site-packages"))[0]
    for name, version in dists:
        info = os.path.join(site, "%s-%s.dist-info" % (name.replace("-", "_"), version))
        os.makedirs(info)
        with open(os.path.join(info, "METADATA"), "w") as fh:
            fh.write("Metadata-Version: 2.1\nName: %s\nVersion: %s\n" % (name, version))
    return venv


def test_a_package_in_no_lock_fails_the_check_and_is_named(tmp_path):
    venv = _bare_venv(tmp_path, ("pytest", "9.0.3"), ("Stray_Pkg", "1.0"))
    lock = os.path.join(LOCKS, "targets.lock")
    assert locked.check_venv(venv, [lock]) == ["stray-pkg==1.0 is in no lock"]
    out = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "ci", "locked.py"), "venv", venv, lock],
                         capture_output=True, text=True, check=False)
    assert out.returncode == 1 and "stray-pkg==1.0 is in no lock" in out.stdout


def test_another_version_of_a_locked_package_fails_the_check(tmp_path):
    venv = _bare_venv(tmp_path, ("cryptography", "51.0.1"))
    assert locked.check_venv(venv, [os.path.join(LOCKS, "dev.lock")]) == [
        "cryptography==51.0.1, but the lock pins 50.0.2"]


def test_the_locked_packages_alone_pass(tmp_path):
    venv = _bare_venv(tmp_path, ("pytest", "9.0.3"), ("PyYAML", "6.0.4"), ("iniconfig", "2.3.1"))
    assert locked.check_venv(venv, [os.path.join(LOCKS, "targets.lock")]) == []


def test_every_venv_make_test_made_on_this_machine_holds_only_its_locks():
    """The venvs bootstrap made (this run's .venv among them), the targets' and ansible-test's, as they are now."""
    found = locked.known_venvs()
    assert any(venv.endswith(os.sep + ".venv") for venv, _l, _e in found), "no .venv: run tests/ci/bootstrap.sh"
    for venv, locks, extra in found:
        assert locked.check_venv(venv, locks, extra) == [], venv


@pytest.mark.parametrize("lock", sorted(glob.glob(os.path.join(LOCKS, "*.lock"))))
def test_every_toolchain_lock_pins_every_package_with_a_hash(lock):
    with open(lock, encoding="utf-8") as fh:
        entries = re.split(r"\n(?=[a-z0-9])", fh.read().split("\n", 2)[2], flags=re.I)
    pinned = [e for e in entries if locked.PIN.match(e)]
    assert pinned
    for entry in pinned:
        assert "--hash=sha256:" in entry, entry.splitlines()[0]


def test_each_lock_has_its_input_with_a_fixed_date():
    for lock in glob.glob(os.path.join(LOCKS, "*.lock")):
        with open(lock[:-len(".lock")] + ".in", encoding="utf-8") as fh:
            assert re.search(r"^# exclude-newer: \d{4}-\d\d-\d\dT", fh.read(), re.M), lock


def test_the_targets_run_the_toolchains_pytest_and_pyyaml():
    dev, targets = locked.pins(os.path.join(LOCKS, "dev.lock")), locked.pins(os.path.join(LOCKS, "targets.lock"))
    for name in ("pytest", "pyyaml"):
        assert targets[name] == dev[name], name


def test_the_floor_differs_from_the_toolchain_in_ansible_core_alone():
    """#62 item 5: tests/ci/core-floor.sh runs the unit tests with the oldest ansible-core claimed; every other package
    both venvs hold is at the toolchain's version, so what differs between the two runs is ansible-core."""
    dev, floor = locked.pins(os.path.join(LOCKS, "dev.lock")), locked.pins(os.path.join(LOCKS, "core-floor.lock"))
    with open(os.path.join(ROOT, "meta", "runtime.yml"), encoding="utf-8") as fh:
        claimed = re.search(r'^requires_ansible: ">=([0-9.]+)"', fh.read(), re.M).group(1)
    assert floor["ansible-core"] == {claimed} != dev["ansible-core"]
    assert {n: v for n, v in floor.items() if n != "ansible-core" and dev.get(n, v) != v} == {}


def test_the_toolchain_keeps_a_cryptography_that_does_not_warn_on_ansible_cores_import():
    """cryptography 51 warns (DSA deprecated) on an import ansible-core 2.19 makes: sanity's ansible-doc test fails."""
    assert locked.pins(os.path.join(LOCKS, "dev.lock"))["cryptography"] == {"50.0.2"}
    python = os.path.join(ROOT, ".venv", "bin", "python")
    out = subprocess.run([python, "-W", "default", "-c", "import ansible._internal._ssh._ssh_agent"],
                         capture_output=True, text=True, check=True)
    assert out.stderr == ""


# pip run as a program: in Python an argv with "-m", "pip" or a path ending in pip, then "install"/"download"; in a
# shell script a command word ending in pip (not uv's `uv pip`), then install/download
PY_INSTALLER = re.compile(r"""(?:["']-m["'],\s*["']pip["']|["']pip["']\)|\bpip)\s*,\s*["'](?:install|download)["']""")
SH_INSTALLER = re.compile(r"""^[^#\n]*?(?<!uv )(?:\S*/)?pip"?\s+(?:install|download)\b""", re.M)


def _make_test_files():
    """The scripts and Python files `make test` runs."""
    files = [os.path.join(ROOT, "Makefile")] + glob.glob(os.path.join(ROOT, "tests", "ci", "*.sh"))
    # tests/wording is `make wording`, on demand (it downloads nine releases to diff their wording), not `make test`
    files += [f for f in glob.glob(os.path.join(ROOT, "tests", "**", "*.py"), recursive=True)
              if os.sep + "fixtures" + os.sep not in f and os.sep + "wording" + os.sep not in f]
    return files


def _installers(files):
    """(file, line number, call) of every pip install/download in ``files``."""
    found = []
    for path in files:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        for m in (PY_INSTALLER if path.endswith(".py") else SH_INSTALLER).finditer(text):
            # the call: its line and the next four (an argv list spans a few lines; a shell command its continuations)
            start = text.rfind("\n", 0, m.start()) + 1
            found.append((os.path.relpath(path, ROOT), text.count("\n", 0, m.start()) + 1,
                          "\n".join(text[start:].split("\n")[:5])))
    return found


def test_every_installer_in_the_tests_takes_a_lock_by_hash_or_a_local_file():
    """A new `pip install x` in a test or a CI script would install what no lock pins: it fails here. Allowed:
    --require-hashes (a lock), --no-index (a wheel the test built), and ansible-test's pip bootstrap stand-in, which
    installs the versions ansible-test itself pins (checked at run time by tests/ci/locked.py all)."""
    found = _installers(_make_test_files())
    assert {f for f, _n, _t in found} >= {"tests/ci/bootstrap.sh", "tests/ci/targets.sh", "tests/oracle/fetch.py",
                                          "tests/integration/test_uv_floor.py", "tests/unit/test_plan_release.py"}
    for path, line, call in found:
        if path == "tests/ci/get_pip_substitute.py":
            continue
        assert "--require-hashes" in call or "--no-index" in call, "%s:%d: %s" % (path, line, call)


def test_the_installer_scan_finds_an_unlocked_install(tmp_path):
    """The scan itself: a plain `pip install` in a script or an argv is found and has no lock; uv's own pip
    subcommand and a message that quotes one are not installs by pip."""
    (tmp_path / "a.sh").write_text('# pip install in a comment\n  "$v/bin/pip" install -q requests\nuv pip install x\n')
    (tmp_path / "b.py").write_text('subprocess.run([sys.executable, "-m", "pip", "install",\n    "six"])\n'
                                   'argv = ["/t/uv", "pip", "install"]\nmsg = "uv pip install x failed"\n')
    found = _installers([str(tmp_path / "a.sh"), str(tmp_path / "b.py")])
    assert [(os.path.basename(f), n) for f, n, _c in found] == [("a.sh", 2), ("b.py", 1)]
    assert not any("--require-hashes" in c or "--no-index" in c for _f, _n, c in found)
