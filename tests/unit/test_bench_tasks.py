"""The deploy bench's accounting (tests/bench): the bench_tasks callback in a real ansible-playbook run sorts each
task by what it did, and bench_deploy turns that into the first deploy's base and the no-op's breakdown."""
import importlib.util
import json
import os
import subprocess
import sys

from unit_helpers import CONTROLLER, ROOT

BENCH = os.path.join(ROOT, "tests", "bench")
PLAY = """
- hosts: all
  gather_facts: false
  tasks:
    - name: A fact
      ansible.builtin.set_fact:
        x: 1
    - name: Never
      ansible.builtin.debug:
        msg: no
      when: false
    - name: A module on the target
      ansible.builtin.command:
        argv: [/bin/true]
      changed_when: false
    - name: Skipped in a loop
      ansible.builtin.command:
        argv: [/bin/true]
      loop: [1, 2]
      when: false
    - name: The check
      ansible.builtin.assert:
        that: x == 1
        quiet: true
"""


def load_bench():
    spec = importlib.util.spec_from_file_location("bench_deploy_under_test", os.path.join(BENCH, "bench_deploy.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@CONTROLLER
def test_callback_sorts_tasks_by_what_they_did(tmp_path):
    play = tmp_path / "play.yml"
    play.write_text(PLAY)
    out = tmp_path / "tasks.json"
    env = dict(os.environ, ANSIBLE_CALLBACK_PLUGINS=os.path.join(BENCH, "callback_plugins"),
               ANSIBLE_CALLBACKS_ENABLED="bench_tasks", BENCH_TASKS_FILE=str(out), ANSIBLE_NOCOLOR="1")
    subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,", "-c",
                    "local", "-e", "ansible_python_interpreter=" + sys.executable, str(play)],
                   env=env, check=True, capture_output=True)
    tasks = json.loads(out.read_text())["tasks"]
    assert [(t["name"], t["kind"]) for t in tasks] == [
        ("A fact", "controller"), ("Never", "skipped"), ("A module on the target", "module"),
        ("Skipped in a loop", "skipped"), ("The check", "controller")]
    assert all(t["secs"] >= 0 for t in tasks)
    assert [t["action"] for t in tasks][2] == "ansible.builtin.command"


def test_kinds_sets_downloads_that_ran_apart_only_in_a_first_deploy(tmp_path):
    bench = load_bench()
    tasks = tmp_path / "tasks.json"
    tasks.write_text(json.dumps({"tasks": [
        {"name": "gpuserve.sglang.sglang_venv : The venv (built beside the one in service, then switched in)",
         "action": "gpuserve.sglang.uv_venv", "kind": "module", "secs": 10.0},
        {"name": "gpuserve.sglang.sglang_venv : Python venv support for uv's own environment",
         "action": "ansible.builtin.apt", "kind": "skipped", "secs": 0.5},
        {"name": "gpuserve.sglang.hf_model : Facts of the model", "action": "ansible.builtin.set_fact",
         "kind": "controller", "secs": 1.0},
        {"name": "gpuserve.sglang.sglang_server : Result of the server", "action": "ansible.builtin.set_fact",
         "kind": "controller", "secs": 2.0}]}))
    # the skipped apt task downloaded nothing: it stays in the base
    first, heavy = bench.kinds(str(tasks), 20.0, first=True)
    assert first == {"download/build": [1, 10.0], "skipped": [1, 0.5], "controller": [2, 3.0], "start": [0, 6.5]}
    assert heavy == [("The venv (built beside the one in service, then switched in)", 10.0)]
    again, heavy = bench.kinds(str(tasks), 20.0, first=False)
    assert again == {"module": [1, 10.0], "skipped": [1, 0.5], "controller": [2, 3.0], "start": [0, 6.5]}
    assert heavy == []
    # a task of another role with a heavy task's name is not heavy
    assert not bench.is_heavy("gpuserve.sglang.hf_model : Pip-install uv, every file checked")
    assert bench.is_heavy("gpuserve.sglang.sglang_venv : Pip-install uv, every file checked against its sha256")
