"""Benchmark (not a test): deploy.yml on the lab - a first deploy, then a re-run that changes nothing - with the
time of every role, so the no-op re-run can be held to its target (issue: <= 25 % of a first deploy without the
downloads and the venv build, and <= 20 s on the lab).

    python3 tests/bench/bench_deploy.py [--keep] [--runs N]   # brings the lab up (tests/lab/lab.py), and down unless --keep

The no-op re-run is run N times (default 3; this 2-core lab varies by a few seconds from run to run) and its
median is reported, with the per-role times of the median run.

Per-role times come from ansible.posix.profile_roles, per-task times from callback_plugins/bench_tasks.py. The issue's
base is "a first deploy excluding downloads and the venv build": every task that downloads or builds (HEAVY_TASKS:
the model's download and its progress wait, python3-venv from the apt mirror, uv's own environment and its pip
install, the venv build) is taken out of the first deploy, and printed with its time; every other task of those
roles (accounts, directories, the lock, the quick looks, the import check) stays in it. The
whole-role figure (sglang_venv and hf_model left out entirely) is printed as well, and where each run's time went by
kind of task (callback_plugins/bench_tasks.py: tasks that ran a module on a target, tasks the controller ran alone,
skipped tasks, and ansible-playbook's own start). Prints one table and a last line:
    deploy bench: first N s (downloads and venv build D s), no-op R s = P % of the first without them
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(ROOT, ".venv", "bin")
INV = ["-i", os.path.join(ROOT, "inventory", "lab"), "-i", os.path.join(ROOT, "build", "lab", "inventory.yml")]
ROLE_LINE = re.compile(r"^\s*(\S+)\s+-+\s+(\d+\.\d+)s\s*$")
# The tasks that download or build: what the target leaves out of the first deploy.
HEAVY_TASKS = (
    ("hf_model", "The model, downloading in the background"),
    ("hf_model", "Progress until the download is done"),
    ("sglang_venv", "Python venv support for uv's own environment"),   # apt: python3-venv from the mirror
    ("sglang_venv", "Environment for uv (from the index)"),            # python3 -m venv (ensurepip) for uv
    ("sglang_venv", "Pip-install uv"),
    ("sglang_venv", "The venv (built beside the one in service"),
    ("sglang_venv", "The venv, built with the pinned uv just installed"),
    ("sglang_venv", "The venv with flash-attn built from source"),
    ("sglang_venv", "Build progress until the venv is switched in"),
)


def run(argv, env=None):
    t0 = time.time()
    p = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if p.returncode != 0:
        sys.stderr.write(p.stdout[-4000:] + p.stderr[-2000:])
        raise SystemExit("bench: %s failed (rc %d)" % (" ".join(argv[:3]), p.returncode))
    return time.time() - t0, p.stdout


def is_heavy(task_name):
    role, dummy_sep, name = task_name.rpartition(" : ")
    return any(role.rsplit(".", maxsplit=1)[-1] == r and name.startswith(n) for r, n in HEAVY_TASKS)


def kinds(tasks_file, wall, first):
    """Where the run's time went (callback_plugins/bench_tasks.py): ({kind: [tasks, seconds]}, heavy). In a first
    deploy the downloads and builds that ran are apart, as kind "download/build" and in heavy [(task, seconds)] (a
    skipped one downloaded nothing; a re-run downloads and builds nothing: its venv task is a check). The rest of
    the wall time (ansible-playbook's start, loading the plays) is "start"."""
    with open(tasks_file) as f:
        tasks = json.load(f)["tasks"]
    out = {}
    heavy = []
    for t in tasks:
        kind = t["kind"]
        if first and kind != "skipped" and is_heavy(t["name"]):
            kind = "download/build"
            heavy.append((t["name"].rpartition(" : ")[2], t["secs"]))
        out.setdefault(kind, [0, 0.0])
        out[kind][0] += 1
        out[kind][1] += t["secs"]
    out["start"] = [0, max(wall - sum(t["secs"] for t in tasks), 0.0)]
    return out, heavy


def deploy(first=False):
    fd, tasks_file = tempfile.mkstemp(prefix="bench-tasks-", suffix=".json")
    os.close(fd)
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, "build", "collections"),
               ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"),
               ANSIBLE_CALLBACK_PLUGINS=os.path.join(ROOT, "tests", "bench", "callback_plugins"),
               ANSIBLE_CALLBACKS_ENABLED="ansible.posix.profile_roles,bench_tasks",
               BENCH_TASKS_FILE=tasks_file, ANSIBLE_NOCOLOR="1")
    try:
        secs, out = run([os.path.join(BIN, "ansible-playbook")] + INV + [os.path.join(ROOT, "playbooks", "deploy.yml")],
                        env)
        spent, heavy = kinds(tasks_file, secs, first)
    finally:
        os.unlink(tasks_file)
    roles = {}
    for line in out.splitlines():
        m = ROLE_LINE.match(line)
        if m:
            roles[m.group(1)] = float(m.group(2))
    changed = sum(int(n) for n in re.findall(r"changed=(\d+)", out))
    return secs, roles, changed, heavy, spent


def main():
    keep = "--keep" in sys.argv
    run([sys.executable, os.path.join(ROOT, "tests", "lab", "lab.py"), "up"])
    try:
        env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, "build", "collections"),
                   ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"))
        stage = os.path.join(ROOT, "tests", "lab", "playbooks", "stage-standin.yml")
        run([os.path.join(BIN, "ansible-playbook")] + INV + [stage], env)
        first, first_roles, dummy, heavy, first_spent = deploy(first=True)
        runs = int(sys.argv[sys.argv.index("--runs") + 1]) if "--runs" in sys.argv else 3
        noops = sorted((deploy() for dummy_run in range(max(runs, 1))), key=lambda r: r[0])
        again, again_roles, dummy, dummy_heavy, again_spent = noops[len(noops) // 2]
        changed = sum(r[2] for r in noops)
    finally:
        if not keep:
            run([sys.executable, os.path.join(ROOT, "tests", "lab", "lab.py"), "down"])
    whole_roles = sum(v for k, v in first_roles.items() if k.endswith(("sglang_venv", "hf_model")))
    print("%-40s %10s %10s" % ("role", "first s", "no-op s"))
    for name in sorted(set(first_roles) | set(again_roles)):
        print("%-40s %10.1f %10.1f" % (name, first_roles.get(name, 0.0), again_roles.get(name, 0.0)))
    for name, secs in heavy:
        print("left out of the first deploy: %5.1f s  %s" % (secs, name[:90]))
    heavy = sum(secs for dummy_name, secs in heavy)
    base = max(first - heavy, 1e-9)
    for label, spent in (("first deploy", first_spent), ("no-op (median)", again_spent)):
        print("%s: %s" % (label, ", ".join(
            ("%s %.1f s" % (kind, spent[kind][1])) if kind == "start" else
            ("%d %s tasks %.1f s" % (spent[kind][0], kind, spent[kind][1]))
            for kind in ("module", "controller", "skipped", "download/build", "start") if kind in spent)))
    floor = again_spent.get("module", [0, 0.0])[1] + again_spent["start"][1]
    print("the no-op's %d module calls and ansible-playbook's start alone: %.1f s = %.0f %% of the first without "
          "downloads and venv build" % (again_spent.get("module", [0])[0], floor, 100.0 * floor / base))
    print("no-op runs: %s s" % ", ".join("%.1f" % r[0] for r in noops))
    print("whole roles sglang_venv + hf_model on the first deploy: %.1f s; the no-op is %.0f %% of the first without "
          "them" % (whole_roles, 100.0 * again / max(first - whole_roles, 1e-9)))
    print("deploy bench: first %.1f s (downloads and venv build %.1f s), no-op %.1f s (median of %d) = %.0f %% of the "
          "first, %.0f %% of the first without downloads and venv build; the no-op runs changed %d" % (
              first, heavy, again, len(noops), 100.0 * again / first, 100.0 * again / base, changed))


if __name__ == "__main__":
    main()
