"""tests/ci/molecule-all.sh: every scenario once, and a failing scenario fails the run (#16 item 8:
no re-run in CI). Run for real with bash in a copy of the script's tree and a recording molecule."""
import glob
import os
import shutil
import stat
import subprocess

from unit_helpers import ROOT

FAKE_MOLECULE = """#!/bin/sh
echo "$(basename "$PWD") slot=$GPUSERVE_LAB_SLOT $*" >> "$CALLS"
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


def _run(tmp_path, fail, *args, lane_b="roles/alpha:apt tests/lab:smoke", with_slot=False):
    if not (tmp_path / "bin").exists():
        _tree(tmp_path)
    calls = tmp_path / "calls"
    if calls.exists():
        calls.unlink()
    env = dict(os.environ, PATH=f"{tmp_path / 'bin'}:{os.environ['PATH']}", CALLS=str(calls), FAIL=fail, LAB_FULL="0",
               MOLECULE_LANE_B=lane_b)
    env.pop("GPUSERVE_LAB_SLOT", None)
    proc = subprocess.run(["bash", str(tmp_path / "tests" / "ci" / "molecule-all.sh"), *args], env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    ran = calls.read_text().splitlines() if calls.exists() else []
    return proc, [(line.split()[0], line.split()[1], line.split()[-1]) if with_slot else (line.split()[0], line.split()[-1])
                  for line in ran]


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


def test_the_two_lanes_run_every_scenario_once_between_them_each_in_a_lab_of_its_own(tmp_path):
    proc, a = _run(tmp_path, "none", "a", with_slot=True)
    assert proc.returncode == 0, proc.stderr
    assert a == [("alpha", "slot=0", "default"), ("beta", "slot=0", "default")]
    proc, b = _run(tmp_path, "none", "b", with_slot=True)
    assert proc.returncode == 0, proc.stderr
    assert b == [("lab", "slot=1", "smoke"), ("alpha", "slot=1", "apt")]
    proc, everything = _run(tmp_path, "none", with_slot=True)
    assert sorted(everything) == sorted(a + [(d, "slot=0", s) for d, _slot, s in b])


def test_a_lane_b_naming_no_scenario_is_refused_and_an_unknown_lane_too(tmp_path):
    proc, ran = _run(tmp_path, "none", "b", lane_b="roles/alpha:apt roles/alpha:gone")
    assert proc.returncode == 2 and "LANE_B names roles/alpha:gone: no such scenario" in proc.stderr and ran == []
    proc, ran = _run(tmp_path, "none", "c")
    assert proc.returncode == 2 and "lane 'c': give all, a or b" in proc.stderr and ran == []


def test_lane_b_of_the_real_tree_names_real_scenarios_and_lane_a_has_the_rest(tmp_path):
    """The script's own LANE_B against the repository's scenarios (their molecule.yml copied into a tree of the
    script's shape: the real tree's .venv/bin would put the real molecule first on PATH)."""
    found = glob.glob(os.path.join(ROOT, "roles", "*", "molecule", "*", "molecule.yml")) \
        + glob.glob(os.path.join(ROOT, "tests", "lab", "molecule", "*", "molecule.yml"))
    for p in found:
        dest = tmp_path / os.path.relpath(p, ROOT)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text("---\n")
    (tmp_path / "tests" / "ci").mkdir(parents=True)
    shutil.copy(os.path.join(ROOT, "tests", "ci", "molecule-all.sh"), tmp_path / "tests" / "ci")
    shutil.copy(os.path.join(ROOT, "tests", "lab", "lab.py"), tmp_path / "tests" / "lab")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "molecule").write_text(FAKE_MOLECULE)
    (bindir / "molecule").chmod(0o755)
    ran = {}
    for lane in ("a", "b"):
        calls = tmp_path / ("calls-" + lane)
        env = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}", CALLS=str(calls), FAIL="none", LAB_FULL="0")
        env.pop("MOLECULE_LANE_B", None)
        proc = subprocess.run(["bash", str(tmp_path / "tests" / "ci" / "molecule-all.sh"), lane], env=env,
                              capture_output=True, text=True, timeout=60, check=False)
        assert proc.returncode == 0, proc.stderr
        ran[lane] = [(line.split()[0], line.split()[-1]) for line in calls.read_text().splitlines()]
    scenarios = sorted((os.path.basename(os.path.dirname(os.path.dirname(os.path.dirname(p)))),
                        os.path.basename(os.path.dirname(p))) for p in found if os.path.basename(os.path.dirname(p)) != "full")
    assert ran["b"] and ran["a"] and not set(ran["a"]) & set(ran["b"])
    assert sorted(ran["a"] + ran["b"]) == scenarios
