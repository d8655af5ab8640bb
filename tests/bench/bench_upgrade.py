"""Benchmark (not a test): the upgrade figure of #47 item 3 - rollout.yml -e rollout_venv=true on the lab's rollout
scenario (two replicas on their venvs behind the real router), under load through the router: requests, failures,
latency and the time per replica, for an upgrade and for an upgrade that does not start and is rolled back by itself.

    python3 tests/bench/bench_upgrade.py      # runs `molecule test -s rollout` in a lab slot of its own (3)

The figures are the ones the scenario's verifier measures (tests/lab/molecule/rollout/tests/test_rollout.py writes
them to build/bench/upgrade.json as it goes); this prints them, one line each, after the scenario has passed.
Prints a last line:
    upgrade bench: N/M ok, F failed, S s per replica; rolled back: N/M ok, F failed, S s
"""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "build", "bench", "upgrade.json")


def main():
    if os.path.exists(OUT):
        os.unlink(OUT)
    env = dict(os.environ, GPUSERVE_LAB_SLOT=os.environ.get("GPUSERVE_LAB_SLOT", "3"), GPUSERVE_ROOT=ROOT,
               ANSIBLE_NOCOLOR="1", NO_COLOR="1", ANSIBLE_FORCE_COLOR="0",
               PATH=os.path.join(ROOT, ".venv", "bin") + os.pathsep + os.environ.get("PATH", ""))
    lab = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "lab", "lab.py"), "env"], env=env,
                         capture_output=True, text=True, check=True).stdout
    for word in lab.replace("export ", " ").split():          # export NAME=value NAME=value ...
        name, sep, value = word.partition("=")
        if sep:
            env[name] = value.strip("'\"")
    subprocess.run([sys.executable, os.path.join(ROOT, "tests", "lab", "lab.py"), "images"], env=env, check=True)
    p = subprocess.run(["molecule", "-c", os.path.join(ROOT, "tests", "lab", "molecule", "base.yml"), "test", "-s",
                        "rollout"], cwd=os.path.join(ROOT, "tests", "lab"), env=env, check=False)
    if p.returncode != 0 or not os.path.exists(OUT):
        sys.exit("upgrade bench: the rollout scenario failed (rc %d); no figure" % p.returncode)
    with open(OUT) as fh:
        fig = json.load(fh)
    up, back = fig["upgrade"], fig["rolled_back"]
    for what, f in (("upgrade of 2 replicas", up), ("failed upgrade, rolled back", back)):
        print("%-28s %4d/%d ok  %d failed  p50 %s ms  p99 %s ms  max %s ms  rollout %.0f s" % (
            what, f["ok"], f["requests"], f["failed"], f["p50_ms"], f["p99_ms"], f["max_ms"], f["rollout_s"]))
    print("upgrade bench: %d/%d ok, %d failed, %.0f s per replica; rolled back: %d/%d ok, %d failed, %.0f s" % (
        up["ok"], up["requests"], up["failed"], up["rollout_s"] / 2, back["ok"], back["requests"], back["failed"],
        back["rollout_s"]))


if __name__ == "__main__":
    main()
