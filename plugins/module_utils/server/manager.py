# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the sglang_server module does, as one class: ``ServerManager(params, check_mode).ensure()`` returns the
module's result, or raises ``ServerFailed`` with the message and the same result (a failure carries its facts);
``warnings`` holds the texts to warn with, either way.

The order, a running server's safety first: read what runs; stop when asked; refuse bad input (the bind address,
the key, the argv) before anything is written; keep a server that is ready with this configuration; refuse a taken
port and what the installed release's parser refuses (in check mode too); then write, start, watch; after a failed
start, stop it and put the last good configuration back.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import grp
import os
import shutil

from ..host import Failed, read_json, secret_problem, write_private
from .argv import ArgvError, config_text, helper_rank, is_loopback, local_url, numeric_args, secret_names, server_argv
from .change import LastGood, check_args
from .process import (config_hash, failure_message, http_get, keep_running, launch, load_salt, owned_by, pid_alive,
                      plan_vs_actual, port_conflict, port_in_use_failure, port_owner, secret_digest, stop,
                      write_secret_config, write_state)
from .systemd import NAMESPACING, environment_file, exec_failure, systemctl, systemd_start, unit_journal, unit_show
from .metrics import write_plan_metrics
from .watch import launch_facts, server_info, watch, write_progress

ARGUMENT_SPEC = dict(
    name=dict(type="str", required=True),
    state=dict(type="str", default="started", choices=["started", "stopped", "restarted", "absent"]),
    python=dict(type="path"),
    model_path=dict(type="str"),
    args=dict(type="dict", default={}),
    env=dict(type="dict", default={}, no_log=True),
    public_env=dict(type="dict", default={}),
    api_key=dict(type="str", no_log=True),
    config_file=dict(type="path"),
    config_unix_group=dict(type="str", aliases=["config_group"],
                           deprecated_aliases=[dict(name="config_group", version="1.0.0",
                                                    collection_name="gpuserve.sglang")]),
    allow_public_without_api_key=dict(type="bool", default=False),
    host=dict(type="str", default="127.0.0.1"),
    port=dict(type="int", default=30000),
    manager=dict(type="str", default="systemd", choices=["process", "systemd"]),
    unit=dict(type="str"),
    env_file=dict(type="path"),
    log_path=dict(type="path"),
    state_dir=dict(type="path", default="/var/lib/gpuserve-sglang"),
    ready_timeout=dict(type="float", default=1800),
    health=dict(type="str", default="/health_generate"),
    revision=dict(type="str"),
    plan_max_total_num_tokens=dict(type="int", no_log=False),
    progress_file=dict(type="path"),
    plan_tolerance=dict(type="float", default=0.1),
    user=dict(type="str"),
    check_args=dict(type="bool", default=True),
    unit_file=dict(type="path"),
    restore=dict(type="bool", default=True),
    metrics_file=dict(type="path"),
)
REQUIRED_IF = [("state", "started", ("python", "model_path")), ("state", "restarted", ("python", "model_path"))]


class ServerFailed(Failed):
    """A refusal or a failed launch: ``msg`` for the operator, ``result`` with the facts (failure, argv, ...)."""


def secret_values(args):
    """The values of keys in ``args`` that SGLang's parser takes as a secret, by the exact name or a prefix (``api_k``
    is ``--api-key``; refused later): the module hides them from its output."""
    return [str(args[key]) for key in secret_names(list(args or {})) if args.get(key) not in (None, "", False, True)]


def state_path(state_dir, name):
    """The launch record of server ``name``: one path, computed here only (the record's owner)."""
    return os.path.join(state_dir, name + ".state.json")


def read_launch_record(state_dir, name):
    """The launch record of server ``name`` (pid, config hash, launch id, log path and offset, argv, and after a
    restore ``restored_after``), or None: its one reader."""
    return read_json(state_path(state_dir, name))


class ServerManager(object):
    """One server's wanted state, made so (see the module docstring)."""

    def __init__(self, params, check_mode=False):
        self.p = params
        self.check_mode = check_mode
        self.warnings = []
        name = params["name"]
        self.name = name
        self.state_dir = params["state_dir"]
        self.state_path = state_path(self.state_dir, name)
        self.log_path = params["log_path"] or os.path.join(self.state_dir, name + ".log")
        self.base_url = local_url(params["host"], params["port"])
        self.systemd = params["manager"] == "systemd"
        self.unit = params["unit"] or "sglang-%s.service" % name
        self.env_file = params["env_file"] or os.path.join("/etc/sglang", name + ".env")
        self.result = dict(changed=False, failure=None, stale=False, argv=[], config_hash="")
        if self.systemd:
            self.result["unit"] = self.unit

    # -- the outcome ---------------------------------------------------------------------------------------------
    def fail(self, msg):
        raise ServerFailed(msg, self.result)

    def done(self):
        return self.result

    # -- the steps -----------------------------------------------------------------------------------------------
    def ensure(self):
        if not self.name.replace("-", "").replace("_", "").isalnum():
            self.fail("name=%r: use letters, digits, '-' and '_' only (it names files)" % self.name)
        self.read_running()
        if self.p["state"] == "absent":
            return self.remove()
        if self.p["state"] == "stopped":
            if self.running:
                self.result["changed"] = True
                if not self.check_mode:
                    self.halt(self.cur_pid)
            self.result["status"] = "stopped"
            return self.done()
        self.say_preparing()
        self.check_bind()
        self.prepare()
        if keep_running(self.p["state"], self.running, self.prev.get("config_hash"), self.chash) and self.ready_now():
            return self.done()
        self.refuse_what_would_fail()
        self.result["changed"] = True
        if self.check_mode:
            self.result["status"] = "would_restart" if self.running else "would_start"
            return self.done()
        return self.start()

    def say_preparing(self):
        """A launch is being prepared: the progress file says so at once (job_progress prints nothing from it until
        it says "starting": what it held is an earlier launch's, read as it ended)."""
        pf = self.p["progress_file"]
        if pf and not self.check_mode and self.p["state"] == "started" and os.path.isdir(os.path.dirname(pf) or "."):
            write_progress(pf, "new launch: the configuration is checked (the server's own parser, the port)")

    def remove(self):
        """state=absent: stopped, then every file this module writes or keeps for the server removed - the unit
        (disabled first, systemd reloaded after), the env and --config files (the secrets), the launch record, the
        progress file, the last good copies (secrets too) and the metrics file. The log stays: it is the record of
        what ran (the role's purge removes it). ``removed`` lists what went, or would go in check mode."""
        p = self.p
        config_file = p["config_file"] or os.path.join(
            os.path.dirname(self.env_file) if self.systemd else self.state_dir, self.name + ".yaml")
        unit_file = (p["unit_file"] or os.path.join("/etc/systemd/system", self.unit)) if self.systemd else None
        files = [unit_file, self.env_file if self.systemd else None, config_file, self.state_path, p["progress_file"],
                 p["metrics_file"], LastGood(self.state_dir, self.name).dir]
        removed = [f for f in files if f and os.path.lexists(f)]
        self.result.update(changed=bool(removed) or self.running, removed=removed, status="absent")
        self.result["diff"] = {"before": {"running": self.running, "files": removed}, "after": {"running": False, "files": []}}
        if self.check_mode or not self.result["changed"]:
            return self.done()
        if self.running:
            self.halt(self.cur_pid)
        if unit_file in removed:
            rc, _out, err = systemctl("disable", "--quiet", self.unit)
            if rc != 0 and "does not exist" not in err and "not loaded" not in err:
                self.fail("systemctl disable %s: %s - the server is stopped, its files are kept" % (self.unit, err.strip()))
        for path in removed:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.remove(path)
        if unit_file in removed:
            systemctl("daemon-reload")
            systemctl("reset-failed", self.unit)
        return self.done()

    def read_running(self):
        self.prev = read_json(self.state_path) or {}
        if self.systemd:
            info = unit_show(self.unit)
            if info["_rc"] != 0 and "System has not been booted with systemd" in info["_err"]:
                self.fail("manager=systemd: this host does not run systemd (%s); use manager=process" % info["_err"])
            self.cur_pid = int(info.get("MainPID") or 0)
            self.running = info.get("ActiveState") in ("active", "activating", "reloading") and self.cur_pid > 0
        else:
            self.cur_pid = self.prev.get("pid")
            self.running = pid_alive(self.cur_pid)

    def halt(self, pid):
        if self.systemd:
            systemctl("stop", self.unit)
        else:
            stop(pid)

    def check_bind(self):
        p = self.p
        args = dict(p["args"])
        for key in ("host", "port"):
            if key in args and str(args[key]) != str(p[key]):
                self.fail("args.%s=%s differs from %s=%s: give the bind address only through %s= (the role: "
                          "sglang_server_%s), so the API-key guard and the health probe see what is launched"
                          % (key, args[key], key, p[key], key, key))
        args["host"] = p["host"]
        args["port"] = p["port"]
        self.args = numeric_args(args)      # -e sglang_server_args's numbers reach a play as text
        if not is_loopback(p["host"]) and not p["api_key"] and not p["allow_public_without_api_key"]:
            self.fail("host=%s exposes the server beyond this machine without an API key: set api_key (role: "
                      "sglang_server_api_key) or, knowingly, allow_public_without_api_key (role: "
                      "sglang_server_public_without_api_key); nothing was launched" % p["host"])
        short = secret_problem("api_key", p["api_key"])
        if short:
            self.fail(short + "; nothing was launched")

    def prepare(self):
        """The argv, the --config file's text and group, the environment and the configuration's hash."""
        p = self.p
        key = p["api_key"]
        self.config_file = p["config_file"] or os.path.join(
            os.path.dirname(self.env_file) if self.systemd else self.state_dir, self.name + ".yaml")
        self.last_good = LastGood(self.state_dir, self.name)
        self.good_paths = {"unit": p["unit_file"] or os.path.join("/etc/systemd/system", self.unit),
                           "env": self.env_file, "config": self.config_file if key else None}
        try:
            self.argv = server_argv(p["python"], p["model_path"], self.args, config_file=self.config_file if key else None)
            self.secret_config = config_text({"api_key": key}) if key else None
        except ArgvError as exc:
            self.fail(str(exc))
        self.config_gid = self.group_id(p["config_unix_group"])
        public = dict((str(k), str(v)) for k, v in p["public_env"].items())
        secret_env = dict((str(k), str(v)) for k, v in p["env"].items())
        self.env = dict(public)
        self.env.update(secret_env)
        for k in secret_env:
            public.pop(k, None)
        self.env_text = None
        if self.systemd:
            try:
                self.env_text = environment_file(self.env)
            except ValueError as exc:
                self.fail(str(exc))
        secrets = dict(("env:" + k, v) for k, v in secret_env.items())
        if key:
            secrets["api_key"] = key
        self.chash = config_hash(self.argv, public, p["revision"], self.secrets_digest(secrets))
        self.result.update(argv=self.argv, config_hash=self.chash)

    def group_id(self, group):
        if not group:
            return None
        try:
            return grp.getgrnam(group).gr_gid
        except KeyError:
            if not self.check_mode:   # a look before the role creates the group writes nothing
                self.fail("config_unix_group=%s: no such group on the target (create the service group first)" % group)
        return None

    def secrets_digest(self, secrets):
        if not secrets:
            return ""
        if not os.path.isdir(self.state_dir) and not self.check_mode:
            os.makedirs(self.state_dir, 0o750)
        salt_path = os.path.join(self.state_dir, ".secret-salt")
        return secret_digest(secrets, load_salt(salt_path) if not self.check_mode or os.path.exists(salt_path)
                             else b"check-mode")

    def ready_now(self):
        """The server runs this configuration and answers: ready, nothing to do (in check mode too: a read-only GET,
        so a role's quick look in check mode is the whole answer)."""
        code, _body = http_get(self.base_url + self.p["health"], timeout=20.0, api_key=self.p["api_key"])
        if code != 200:
            return False
        info = server_info(self.base_url, self.p["api_key"], launch_facts(self.prev))
        self.result.update(status="ready", pid=self.cur_pid, launch_id=self.prev.get("launch_id"), server_info=info)
        if self.systemd and not self.check_mode:
            self.last_good.save(self.chash, self.argv, self.prev.get("launch_id"), self.good_paths)
        self.compare_with_plan(info)
        return True

    def refuse_what_would_fail(self):
        """Before anything is written or stopped - in check mode too, so the role's look before it writes the unit
        refuses what would fail: the port (only our own running server may hold it), then the launch's arguments,
        parsed by the installed release's own parser. A refusal leaves a running server serving."""
        p = self.p
        owner = port_conflict(port_owner(p["host"], p["port"]), self.running, self.cur_pid, self.prev, p["port"],
                              owned_by)
        if owner is not None:
            self.result.update(changed=False, status="failed",
                               failure=port_in_use_failure(p["host"], p["port"], owner, self.running))
            self.fail(self.result["failure"]["message"])
        if p["check_args"]:
            refused, note = check_args(self.argv, self.env, p["user"])
            if refused is not None:
                self.result.update(changed=False, status="failed", failure=refused)
                self.fail("SGLang's parser refuses this launch: %s. %s" % (refused["message"], refused["hint"]))
            if note:
                self.warnings.append(note)

    def write_files(self):
        if self.running and not self.systemd:
            stop(self.cur_pid)
        if not os.path.isdir(self.state_dir):
            os.makedirs(self.state_dir, 0o750)
        if self.systemd:
            d = os.path.dirname(self.env_file)
            if d and not os.path.isdir(d):
                os.makedirs(d, 0o750)
            write_private(self.env_file, self.env_text)
        write_secret_config(self.config_file, self.secret_config, self.config_gid)

    def start(self):
        p = self.p
        self.write_files()
        if self.systemd:
            pid, launch_id, offset, err = systemd_start(self.unit, self.log_path, restart=self.running)
            proc = pid
        else:
            proc, launch_id, offset, err = launch(self.argv, self.env, self.log_path)
            pid = proc.pid if proc is not None else None
        if err:
            if self.systemd:
                systemctl("stop", self.unit)
            self.result.update(status="failed", launch_id=launch_id, stale=True, failure={
                "kind": "other", "rank": None, "phase": "args", "traceback": "", "message": err,
                "hint": "The interpreter could not be executed: check python= (the SGLang venv) exists."})
            self.fail(err)
        self.record(pid, self.chash, launch_id, offset)
        out = watch(proc, self.log_path, offset, self.base_url, health=p["health"], timeout=p["ready_timeout"],
                    api_key=p["api_key"], progress_file=p["progress_file"], log_ready=not helper_rank(self.args),
                    launch="new launch %s" % launch_id)
        self.result.update(out)
        self.result["launch_id"] = launch_id
        if out["status"] == "ready":
            if self.systemd:
                self.last_good.save(self.chash, self.argv, launch_id, self.good_paths)
            info = server_info(self.base_url, p["api_key"], out.get("facts"))
            self.result["server_info"] = info
            self.compare_with_plan(info)
            return self.done()
        return self.after_failure(out, pid, launch_id, offset)

    def record(self, pid, chash, launch_id, offset, **extra):
        write_state(self.state_path, dict({"pid": pid, "config_hash": chash, "launch_id": launch_id,
                                           "log_path": self.log_path, "log_offset": offset, "argv": self.argv,
                                           "manager": self.p["manager"]}, **extra))

    def after_failure(self, out, pid, launch_id, offset):
        """Failed or timed out: systemd's own words added, the server stopped (so nothing restarts it in a loop),
        the record kept, and the last good configuration put back when there is one."""
        if self.systemd and out["status"] == "failed":
            status = unit_show(self.unit).get("ExecMainStatus")
            self.result.update(exec_failure(out, status, self.argv[0], unit_journal(self.unit, want=NAMESPACING)
                                            if status == "226" else ""))
        self.halt(pid)
        self.record(None, "", launch_id, offset)
        msg = failure_message(out, launch_id, self.p["ready_timeout"])
        if self.systemd and self.p["restore"] and int(self.args.get("nnodes") or 1) == 1:
            failed = {"launch_id": launch_id, "log_offset": offset, "argv": self.argv, "config_hash": self.chash}
            # the failed launch's last phase, named in each progress line of the restored one (the poller may not
            # have seen that launch's own last line: the restore begins at once)
            ended = "new launch %s %s in phase %s%s" % (
                launch_id, "timed out" if out["status"] == "timeout" else "died", out.get("phase"),
                ": %s" % out["failure"]["kind"] if out.get("failure") else "")
            restored = self.restore_last_good(failed, ended)
            if restored is not None:
                self.result["restored"] = restored
                msg += ("\nThe last good configuration (launch %s) was put back: %s" % (
                    restored["launch_id"], "it is ready again and serving" if restored["status"] == "ready"
                    else "it did not become ready either (%s): %s" % (restored["status"], restored.get("message"))))
        self.fail(msg)

    def compare_with_plan(self, info):
        """plan_vs_actual in the result whenever the server is ready and a plan was given (a re-run that changes
        nothing too: a plan that no longer matches the server is said every run), its warning as text; with
        ``metrics_file`` the same numbers for Prometheus (not in check mode, which writes nothing)."""
        record, warning = plan_vs_actual(self.p["plan_max_total_num_tokens"], info, self.p["plan_tolerance"])
        if record is not None:
            self.result["plan_vs_actual"] = record
        if warning:
            self.warnings.append(warning)
        if self.p["metrics_file"] and not self.check_mode:
            try:
                write_plan_metrics(self.p["metrics_file"], self.name, record, (info or {}).get("mem_fraction_static"))
            except (IOError, OSError) as exc:
                self.warnings.append("metrics_file=%s could not be written: %s (the server serves; Prometheus does "
                                     "not see the plan)" % (self.p["metrics_file"], exc))

    def restore_last_good(self, failed, ended=None):
        """Put back the unit, env and config files of the last launch that was ready, start it and watch it; the
        record of what came back (its status, argv, launch id), or None when there is no other last good
        configuration. The launch record then names the failed launch too (``restored_after``: its id, argv and log
        offsets), so status and diagnose still read why it failed."""
        rec = self.last_good.record()
        if not rec or rec.get("config_hash") in (None, "", failed["config_hash"]):
            return None
        self.last_good.put_back()
        pid, launch_id, offset, err = systemd_start(self.unit, self.log_path, restart=False)
        back = {"config_hash": rec["config_hash"], "argv": rec.get("argv"), "from_launch_id": rec.get("launch_id"),
                "launch_id": launch_id, "pid": pid}
        if err:
            back.update(status="failed", message=err)
            return back
        label = "restored launch %s (the last good configuration; %s)" % (launch_id, ended or "the new launch failed")
        out = watch(pid, self.log_path, offset, self.base_url, health=self.p["health"],   # health needs no key
                    timeout=self.p["ready_timeout"], progress_file=self.p["progress_file"], launch=label)
        back["status"] = out["status"]
        if out["status"] == "ready":
            write_state(self.state_path, {"pid": pid, "config_hash": rec["config_hash"], "launch_id": launch_id,
                                          "log_path": self.log_path, "log_offset": offset, "argv": rec.get("argv"),
                                          "manager": self.p["manager"], "restored_after": dict(failed, log_end=offset)})
        else:
            back["message"] = (out.get("failure") or {}).get("message")
            systemctl("stop", self.unit)
        return back
