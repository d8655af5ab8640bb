"""Callback for tests/bench/bench_deploy.py (not part of the collection's plugins): where a deploy's time goes, by
kind of task. Written when the run ends, as JSON, to the file named by BENCH_TASKS_FILE:

    {"tasks": [{"name", "action", "kind", "secs"}, ...]}

A task's time is from its start to the next task's start (as ansible.posix.profile_tasks counts it). Its kind:
  module      at least one host ran it on a target (a module, or an action plugin that runs modules there);
  controller  it ran on the controller only (set_fact, assert, debug, meta, includes, argument validation);
  skipped     every host skipped it (its `when` was false).
What is not in any task (ansible-playbook's start, loading the plays) is the run's wall time less their sum.
"""
import json
import os
import time

from ansible.plugins.callback import CallbackBase

# Actions that never reach a target: Ansible runs them in the controller's worker (or in the strategy itself).
CONTROLLER = frozenset(
    pre + name for pre in ("", "ansible.builtin.", "ansible.legacy.")
    for name in ("set_fact", "assert", "debug", "fail", "meta", "include_tasks", "import_tasks", "include_role",
                 "import_role", "validate_argument_spec", "add_host", "group_by", "include_vars", "set_stats"))


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "bench_tasks"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super(CallbackModule, self).__init__()
        self._tasks = []
        self._current = None

    def _close(self):
        if self._current is not None:
            self._current["secs"] = round(time.time() - self._current.pop("t0"), 4)
            statuses = self._current.pop("statuses")
            if statuses and all(s == "skipped" for s in statuses):
                self._current["kind"] = "skipped"
            elif self._current["action"] in CONTROLLER:
                self._current["kind"] = "controller"
            else:
                self._current["kind"] = "module" if statuses else "controller"
            self._tasks.append(self._current)
            self._current = None

    def _start(self, task):
        self._close()
        self._current = {"name": task.get_name(), "action": task.action, "t0": time.time(), "statuses": []}

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._start(task)

    def v2_playbook_on_handler_task_start(self, task):
        self._start(task)

    def _result(self, status):
        if self._current is not None:
            self._current["statuses"].append(status)

    def v2_runner_on_ok(self, result):
        self._result("ok")

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._result("failed")

    def v2_runner_on_unreachable(self, result):
        self._result("unreachable")

    def v2_runner_on_skipped(self, result):
        self._result("skipped")

    def v2_playbook_on_stats(self, stats):
        self._close()
        path = os.environ.get("BENCH_TASKS_FILE")
        if path:
            with open(path, "w") as f:
                json.dump({"tasks": self._tasks}, f)
