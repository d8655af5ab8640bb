"""tests/ci/molecule-all.sh: every scenario once, and a failing scenario fails the run (#16 item 8:
no re-run in CI). Run for real with bash in a copy of the script's tree and a recording molecule."""
import os
import shutil
import stat
import subprocess

from unit_helpers import ROOT

FAKE_MOLECULE = """#!/bin/sh
echo "$(basename "$PWD") $*" >> "$CALLS"
case " $* " in *" -s $FAIL "*) exit 2;; esac
exit 0
"""


def _tree(tmp_path):
    (tmp_path / "tests" / "ci").mkdir(parents=True)
    (tmp_path / "tests" / "lab" / "molecule" / "smoke").mkdir(parents=True)
    shutil.copy(os.path.join(ROOT, "tests", "ci", "molecule-all.sh"), tmp_path / "tests" / "ci")
    shutil.copy(os.path.join(ROOT, "tests", "lab", "lab.py"), tmp_path / "tests" / "lab")
    (tmp_path / "tests" / "lab" / "molecule" / "smoke" / "molecule.yml").write_text("---\n")
    for role, scenarios in (("alpha", ("default", "apt")), ("beta", ("default", "full"))):
        for s in scenarios:
            d = tmp_path / "roles" / role / "molecule" / s
            d.mkdir(parents=True)
            (d / "molecule.yml").write_text("---\n")
    (tmp_path / "roles" / "gamma" / "tasks").mkdir(parents=True)  # a role without scenarios
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "molecule"
    fake.write_text(FAKE_MOLECULE)
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    return bindir


def _run(tmp_path, fail):
    bindir = _tree(tmp_path)
    calls = tmp_path / "calls"
    env = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}", CALLS=str(calls), FAIL=fail, LAB_FULL="0")
    proc = subprocess.run(["bash", str(tmp_path / "tests" / "ci" / "molecule-all.sh")], env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    ran = calls.read_text().splitlines() if calls.exists() else []
    return proc, [(line.split()[0], line.split()[-1]) for line in ran]


def test_every_scenario_runs_once_in_order(tmp_path):
    proc, ran = _run(tmp_path, fail="none")
    assert proc.returncode == 0, proc.stderr
    assert ran == [("lab", "smoke"), ("alpha", "apt"), ("alpha", "default"), ("beta", "default")]
    assert "skipping molecule scenario full in roles/beta" in proc.stdout


def test_a_failing_scenario_fails_the_run_without_a_rerun(tmp_path):
    proc, ran = _run(tmp_path, fail="apt")
    assert proc.returncode != 0
    # run once, not again, and nothing after it
    assert ran == [("lab", "smoke"), ("alpha", "apt")]
    assert "FLAKY" not in proc.stdout + proc.stderr
