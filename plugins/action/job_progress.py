# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Wait for an async job in one flat loop, printing its progress file on the controller (see modules/job_progress.py).

One poll is one low-level command on the target (no module upload): it prints the job's results file and the
progress file. When the job is finished, that file is its result (the JSON async_status would return) and one more
low-level command removes it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import time

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

display = Display()
_SEP = "--gpuserve-job-progress--"
_MIB = 1048576.0


def progress_line(label, progress):
    """One human line from a progress document (bytes done/total/rate, or a message); None if it says nothing."""
    if not isinstance(progress, dict):
        return None
    if "bytes_done" in progress and "bytes_total" in progress:
        done, total = float(progress["bytes_done"] or 0), float(progress["bytes_total"] or 0)
        line = "%s: %.1f of %.1f MiB (%.1f %%), %.1f MiB/s" % (
            label, done / _MIB, total / _MIB, 100.0 * done / max(total, 1.0),
            float(progress.get("rate_bytes_per_s") or 0) / _MIB)
        if progress.get("eta_s") is not None:
            line += ", about %d s left" % int(progress["eta_s"])
        if progress.get("last_retry"):
            line += "; %d retried, last: %s" % (int(progress.get("retries") or 0), progress["last_retry"])
        return line
    if progress.get("message"):
        return "%s: %s" % (label, progress["message"])
    return None


def job_state(text):
    """'running' or 'finished' from the async results file's text (absent or half-written means running)."""
    try:
        data = json.loads(text)
    except ValueError:
        return "running"
    if isinstance(data, dict) and data.get("started") and not data.get("finished"):
        return "running"
    return "finished"


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("jid", "progress_file", "interval", "timeout", "label"))

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        _valid, args = self.validate_argument_spec(argument_spec=dict(
            jid=dict(type="str", required=True),
            progress_file=dict(type="str"),
            interval=dict(type="float", default=10.0),
            timeout=dict(type="float", default=0.0),
            label=dict(type="str", default="job"),
        ))
        if args["interval"] < 0:
            raise AnsibleActionFail("interval=%s: give seconds between polls, 0 or more" % args["interval"])
        async_dir = self._remote_expand_user(self.get_shell_option("async_dir", default="~/.ansible_async"))
        shell = self._connection._shell
        jobfile = shell.join_path(async_dir, args["jid"])
        cmd = "cat -- %s 2>/dev/null; echo; echo %s" % (shell.quote(jobfile), _SEP)
        if args["progress_file"]:
            cmd += "; cat -- %s 2>/dev/null" % shell.quote(args["progress_file"])
        t0 = time.time()
        polls = 0
        last = None
        while True:
            polls += 1
            out = self._low_level_execute_command(cmd)
            stdout = out.get("stdout", "")
            job_text, _sep, progress_text = stdout.partition(_SEP)
            if job_state(job_text.strip()) == "finished":
                final = job_text.strip()
                break
            try:
                line = progress_line(args["label"], json.loads(progress_text)) if progress_text.strip() else None
            except ValueError:
                line = None                   # the progress file is being rewritten: next poll
            if line and line != last:
                display.display(line)
                last = line
            if args["timeout"] and time.time() - t0 > args["timeout"]:
                raise AnsibleActionFail("job %s is still running after %ss of polling (%d polls); it goes on in the "
                                        "background, %s" % (args["jid"], args["timeout"], polls,
                                                            last or "no progress reported"))
            # a job that ends quickly (a no-op re-run) is seen at once: 0.25, 0.5, 1 s, ... up to the interval
            time.sleep(min(args["interval"], 0.25 * 2 ** (polls - 1)))
        # the finished job's results file is the module's own JSON result (what async_status would return): read
        # from the last poll, then removed with one low-level command - no two module round trips on every wait
        status = json.loads(final)
        self._low_level_execute_command("rm -f -- %s" % shell.quote(jobfile))
        for key in ("started", "finished", "results_file", "ansible_job_id", "erased"):
            status.pop(key, None)
        result.update(status)
        result["polls"] = polls
        result["waited_s"] = round(time.time() - t0, 3)
        return result
