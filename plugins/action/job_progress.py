# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Wait for an async job in one flat loop, printing its progress file on the controller (see modules/job_progress.py).

One poll is one low-level command on the target (no module upload): it prints the job's results file and the
progress file. When the job is finished, that file is its result (the JSON async_status would return) and one more
low-level command removes it.

With ``group``, the hosts waiting in the same task are the members of one thing that must start together (the
ranks of a multi-node SGLang server): each member writes its outcome to a file on the controller (a directory of
this ansible-playbook run), reads the others', and stops itself (``group_stop``, an argv run on its target) as soon
as another member has failed - also after it became ready itself, since a rank left running without its peers
only hangs. Its task then fails with the failed member's message and facts.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
import time

from ansible import constants as C
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


def fresh_line(label, text, fresh):
    """(fresh, the line to print or None) for one poll's progress file text. A server launch's progress says
    "starting" until it ends ("ready" or "ended"): an ended document before this job's first live one is an earlier
    job's last line ("phase ready after 35 s" of the launch being replaced), never printed; ``fresh`` says a live one
    was seen. A file being rewritten (no JSON yet) says nothing: next poll."""
    try:
        doc = json.loads(text) if text.strip() else None
    except ValueError:
        doc = None
    fresh = fresh or (isinstance(doc, dict) and doc.get("state") not in ("ready", "ended"))
    return fresh, (progress_line(label, doc) if fresh else None)


def last_word(label, text, fresh, last):
    """The line to print when the job is seen finished, from the same poll's progress file: its last document (a
    download's 100 %), when this job's live lines were seen and it says something new; else None. Without it the
    last line printed was whatever the previous poll caught (87.5 % of a download that then completed, on a loaded
    machine)."""
    if not fresh:
        return None
    line = fresh_line(label, text, fresh)[1]
    return line if line and line != last else None


def job_state(text):
    """'running' or 'finished' from the async results file's text (absent or half-written means running)."""
    try:
        data = json.loads(text)
    except ValueError:
        return "running"
    if isinstance(data, dict) and data.get("started") and not data.get("finished"):
        return "running"
    return "finished"


def message_texts(items):
    """A finished job's warnings (or deprecations) as text. The job's results file is the module's raw JSON: with
    ansible-core 2.19 each entry is a serialized WarningSummary ({"event": {"msg": ..., "chain": ...}, "__ansible_type":
    ...}), which printed as a Python dict when handed back as it is; before 2.19, a string."""
    texts = []
    for item in items or []:
        if isinstance(item, dict):
            event = item.get("event") if isinstance(item.get("event"), dict) else item
            parts = []
            while isinstance(event, dict):
                if event.get("msg"):
                    parts.append(str(event["msg"]))
                chain = event.get("chain")
                event = chain.get("event") if isinstance(chain, dict) else None
            texts.append(": ".join(parts) if parts else json.dumps(item, sort_keys=True))
        else:
            texts.append(str(item))
    return texts


_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


def run_dir(base=None):
    """This ansible-playbook run's directory for group outcomes: inside the run's own local temporary directory
    (``C.DEFAULT_LOCAL_TMP``: made with mkdtemp, 0700, by the playbook process before it forks the workers that run
    the tasks, and removed when the run ends), so no other local user can plant, read or forge it, and two runs never
    share one. ``base``: another directory of this user's (``group_dir``), checked the same way."""
    return os.path.join(base or C.DEFAULT_LOCAL_TMP, "gpuserve-groups")


def _private_dir(path, make=True):
    """A descriptor of directory ``path`` (made 0700 when missing and ``make``; None when missing otherwise), opened
    without following a link and checked on the descriptor: a directory this user owns that no one else may write.
    A tree another local user planted is refused (AnsibleActionFail naming it)."""
    if make:
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise AnsibleActionFail("%s: not a directory of this user's to keep group outcomes in (%s)" % (path, e.strerror))
    st = os.fstat(fd)
    if st.st_uid != os.geteuid() or st.st_mode & 0o022:
        os.close(fd)
        raise AnsibleActionFail("%s belongs to uid %d with mode %o: group outcomes are kept only in a directory of "
                                "this user's (uid %d) that no one else may write; remove it or give another group_dir"
                                % (path, st.st_uid, st.st_mode & 0o7777, os.geteuid()))
    return fd


def write_outcome(directory, member, outcome):
    """One member's outcome, written beside and renamed (a reader never sees half a file), relative to the checked
    directory's descriptor: the file is created anew (O_EXCL), never through a link."""
    parent = _private_dir(os.path.dirname(directory))
    os.close(parent)
    dfd = _private_dir(directory)
    try:
        tmp = "%s.json.tmp%d" % (member, os.getpid())
        try:
            os.unlink(tmp, dir_fd=dfd)
        except FileNotFoundError:
            pass
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=dfd)
        with os.fdopen(fd, "w") as fh:
            json.dump(outcome, fh)
        os.rename(tmp, member + ".json", src_dir_fd=dfd, dst_dir_fd=dfd)
    finally:
        os.close(dfd)


def read_outcomes(directory, members):
    """{member: outcome} of the members that have written one (read relative to the checked directory, never
    through a link)."""
    found = {}
    dfd = _private_dir(directory, make=False)
    if dfd is None:
        return found
    try:
        for member in members:
            try:
                fd = os.open(member + ".json", os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dfd)
                with os.fdopen(fd) as fh:
                    found[member] = json.load(fh)
            except (OSError, ValueError):
                pass
    finally:
        os.close(dfd)
    return found


def outcome_of(member, rank, result):
    """What a member tells the others: its status and, when it failed, its message and the parser's facts."""
    failed = bool(result.get("failed")) or result.get("status") not in (None, "ready")
    out = {"member": member, "rank": rank, "status": "failed" if failed else "ready"}
    if failed:
        out.update(msg=result.get("msg") or "", failure=result.get("failure"), phase=result.get("phase"),
                   facts=result.get("facts"), launch_id=result.get("launch_id"), stopped_for=result.get("stopped_for"))
    return out


def first_failure(outcomes, me):
    """The failed member to name (one that failed by itself, not one stopped for another), else None."""
    failed = [o for name, o in sorted(outcomes.items()) if name != me and o.get("status") == "failed"]
    own = [o for o in failed if not o.get("stopped_for")]
    return (own or failed or [None])[0]


# A rank's failure that is only the echo of another's: 0.5.9 model_runner.py's words when a rank loaded its weights
# and another did not, and a collective whose peer is gone (Gloo/NCCL: kind nccl_error)
_ECHO_WORDS = ("other ranks that didn't finish loading",)


def is_echo(outcome):
    """True when a failed member's failure says another rank failed first (it names no cause of its own)."""
    failure = outcome.get("failure") or {}
    return failure.get("kind") == "nccl_error" or any(w in (failure.get("message") or "") for w in _ECHO_WORDS)


def who(outcome):
    return "%s%s" % (outcome["member"], " (rank %s)" % outcome["rank"] if outcome.get("rank") is not None else "")


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("jid", "progress_file", "interval", "timeout", "label", "group", "group_members",
                             "group_rank", "group_stop", "group_timeout", "group_dir"))

    def _stop_self(self, args, why):
        """Say why, then run the member's own stop (group_stop, an argv list quoted for the target's shell by
        Ansible's shell plugin)."""
        display.display("%s: stopping this member of group %s: %s" % (args["label"], args["group"], why))
        shell = self._connection._shell
        return self._low_level_execute_command(" ".join(shell.quote(str(a)) for a in args["group_stop"]))

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        _valid, args = self.validate_argument_spec(argument_spec=dict(
            jid=dict(type="str", required=True),
            progress_file=dict(type="str"),
            interval=dict(type="float", default=10.0),
            timeout=dict(type="float", default=0.0),
            label=dict(type="str", default="job"),
            group=dict(type="str"),
            group_members=dict(type="list", elements="str", default=[]),
            group_rank=dict(type="int"),
            group_stop=dict(type="list", elements="str", default=[]),
            group_timeout=dict(type="float", default=600.0),
            group_dir=dict(type="path"),
        ))
        me = task_vars.get("inventory_hostname", "localhost")
        group = args["group"]
        if group and (me not in args["group_members"] or not args["group_stop"]):
            raise AnsibleActionFail("group=%s: group_members must list this host (%s) and group_stop must be the argv "
                                    "that stops it" % (group, me))
        names = [group] + list(args["group_members"]) if group else []
        bad_name = [n for n in names if not _NAME.match(str(n))]
        if bad_name:
            raise AnsibleActionFail("group=%s, group_members=%s: %r is not a name a file may take (letters, digits, "
                                    "'_', '.', '-'; not beginning with '.' or '-')"
                                    % (group, args["group_members"], bad_name[0]))
        gdir = os.path.join(run_dir(args["group_dir"]), group) if group else None
        peers = [m for m in args["group_members"] if m != me]
        stopped_for = None
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
        fresh = False
        while True:
            polls += 1
            out = self._low_level_execute_command(cmd)
            stdout = out.get("stdout", "")
            job_text, _sep, progress_text = stdout.partition(_SEP)
            if job_state(job_text.strip()) == "finished":
                final, line = job_text.strip(), last_word(args["label"], progress_text, fresh, last)
                if line:
                    display.display(line)
                break
            if gdir and stopped_for is None:
                bad = first_failure(read_outcomes(gdir, peers), me)
                if bad is not None:
                    stopped_for = bad
                    self._stop_self(args, "%s failed" % who(bad))
            fresh, line = fresh_line(args["label"], progress_text, fresh)
            if line and line != last:
                display.display(line)
                last = line
            if args["timeout"] and time.time() - t0 > args["timeout"]:
                raise AnsibleActionFail("job %s is still running after %ss of polling (%d polls); it goes on in the "
                                        "background, %s" % (args["jid"], args["timeout"], polls,
                                                            last or "no progress reported"))
            # a job that ends quickly (a no-op re-run) is seen at once: 0.25, 0.5, 1 s, ... up to the interval
            time.sleep(min(args["interval"], 0.25 * 2 ** min(polls - 1, 20)))   # capped: 2 ** 1024 is no float
        # the finished job's results file is the module's own JSON result (what async_status would return): read
        # from the last poll, then removed with one low-level command - no two module round trips on every wait
        status = json.loads(final)
        self._low_level_execute_command("rm -f -- %s" % shell.quote(jobfile))
        for key in ("started", "finished", "results_file", "ansible_job_id", "erased"):
            status.pop(key, None)
        for key, prefix in (("warnings", ""), ("deprecations", "deprecated: ")):
            result.setdefault("warnings", []).extend(prefix + text for text in message_texts(status.pop(key, None)))
        result.update(status)
        result["polls"] = polls
        if gdir:
            self._group_end(result, args, gdir, me, peers, stopped_for)
        result["waited_s"] = round(time.time() - t0, 3)
        return result

    @staticmethod
    def _name_the_cause(result, args, gdir, me, peers, wait=30.0):
        """This member failed with the echo of another rank's failure (its log names no cause): wait a little for a
        peer's own failure and name it first in the message - the operator reads the cause, not the echo."""
        deadline = time.time() + min(wait, args["group_timeout"])
        while True:
            outcomes = read_outcomes(gdir, peers)
            cause = [o for _name, o in sorted(outcomes.items()) if o.get("status") == "failed"
                     and not o.get("stopped_for") and not is_echo(o)]
            if cause or len(outcomes) == len(peers) or time.time() > deadline:
                break
            time.sleep(0.5)
        if cause:
            result["group_failure"] = cause[0]
            result["msg"] = "%s of group %s failed first: %s -- this rank's own end is its echo: %s" % (
                who(cause[0]), args["group"], cause[0].get("msg") or "", result.get("msg") or "")

    def _group_end(self, result, args, gdir, me, peers, stopped_for):
        """After this member's job ended: tell the others, wait for their word while this one is ready, and stop it
        (and fail) when another has failed - no member is left running without the rest."""
        group = args["group"]
        if stopped_for is not None:
            result["stopped_for"] = stopped_for["member"]
        write_outcome(gdir, me, outcome_of(me, args["group_rank"], result))
        if result.get("failed") and stopped_for is None:
            result["group"] = {"name": group, "members": {me: "failed"}}
            if is_echo(result):                       # the echo of another rank's failure: name that one (bounded)
                self._name_the_cause(result, args, gdir, me, peers)
            return                                    # its own failure, with its own facts: the others stop
        deadline = time.time() + args["group_timeout"]
        outcomes = read_outcomes(gdir, peers)
        while not result.get("failed") and stopped_for is None and len(outcomes) < len(peers):
            if first_failure(outcomes, me) is not None or time.time() > deadline:
                break
            time.sleep(0.5)
            outcomes = read_outcomes(gdir, peers)
        bad = stopped_for or first_failure(outcomes, me)
        silent = sorted(set(peers) - set(outcomes))
        if bad is None and not silent:
            result["group"] = {"name": group, "members": dict((m, "ready") for m in [me] + peers)}
            return
        if not result.get("failed"):                 # ready, but the others are not: stop, leave nothing hanging
            self._stop_self(args, "%s failed" % who(bad) if bad else "no word from " + ", ".join(silent))
            result["stopped_for"] = bad["member"] if bad else None
            write_outcome(gdir, me, dict(outcome_of(me, args["group_rank"], dict(result, failed=True)),
                                         stopped_for=result["stopped_for"] or "silence"))
        result["failed"] = True
        result["group"] = {"name": group, "members": dict(
            [(m, (outcomes.get(m) or {}).get("status", "no word")) for m in peers] + [(me, "stopped")])}
        if bad is not None:
            result["group_failure"] = bad
            result["msg"] = "stopped because %s of group %s failed: %s" % (who(bad), group, bad.get("msg") or "")
        else:
            result["msg"] = ("stopped: no word from %s of group %s within %ds (unreachable, or never started); a rank "
                             "cannot serve without the others" % (", ".join(silent), group, args["group_timeout"]))
