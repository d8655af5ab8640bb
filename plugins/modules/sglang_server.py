#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: sglang_server
short_description: Start SGLang, watch this launch, fail fast and report structured facts
version_added: 0.1.0
description:
  - Starts C(python -m sglang.launch_server) from an argv list built from O(args) (never a shell string),
    detached from Ansible, its output appended to O(log_path).
  - Before launching it appends a marker with a launch id to the log and reads only what this launch
    writes after it, so an older launch's error is never reported (C(stale=true) when nothing was written).
  - Returns as soon as the outcome is known, when the process exits or logs a fatal error, or when the
    ready line is logged and the health endpoint answers 200, not at the timeout.
  - Failures carry the same facts as M(gpuserve.sglang.sglang_log_facts) (C(failure.kind), C(hint), numbers).
  - Idempotent, the hash of argv, environment and model revision is recorded; the same configuration running
    and healthy is left alone, a different one is restarted.
  - A rank other than 0 of a multi-node server (O(args) with C(nnodes) > 1 and C(node_rank) >= 1) logs no
    readiness and serves no API in SGLang 0.5.9, only a health server once its schedulers are ready; it is
    watched by that health server. Starting and stopping the ranks together is the caller's (the role waits
    with M(gpuserve.sglang.job_progress) and O(gpuserve.sglang.job_progress#module:group)).
author:
  - gpuserve.sglang contributors (@gpuserve)
options:
  name:
    description: Name of the served model; names the state, pid and log files.
    type: str
    required: true
  state:
    description: V(started) ensures it runs with this configuration, V(restarted) always relaunches,
      V(stopped) stops it.
    type: str
    choices: [started, stopped, restarted]
    default: started
  python:
    description: Interpreter of the SGLang venv.
    type: path
  model_path:
    description: Model directory passed as C(--model-path).
    type: str
  args:
    description: SGLang server args in ServerArgs snake_case (C(tp_size), C(mem_fraction_static), ...);
      C(true) becomes a bare flag, C(false)/null are omitted. Secrets are refused here, use O(env) or O(api_key).
    type: dict
    default: {}
  env:
    description:
      - Extra environment of the server process, for secrets such as C(HF_TOKEN). Values are not logged
        and not returned.
      - Ansible masks every occurrence of each value in the whole result, so a short value such as C(1)
        would garble pids and numbers in the output; put non-secret variables in O(public_env).
    type: dict
    default: {}
  public_env:
    description: Extra environment that is not secret (C(CUDA_VISIBLE_DEVICES), C(NCCL_*), C(PYTHONPATH));
      shown in output. O(env) wins on a name given in both.
    type: dict
    default: {}
  api_key:
    description:
      - API key SGLang requires on every endpoint but C(/health*) and C(/metrics). At least 16 characters.
      - Written to O(config_file), which SGLang reads with C(--config) (SGLang 0.5.9 takes the key only from
        C(--api-key) or that file, and no environment variable); never in argv, never returned.
    type: str
  config_file:
    description:
      - SGLang's C(--config) YAML holding the API key, written with mode 0640 (0600 without O(config_group)),
        never through a symlink. Removed again when O(api_key) is unset.
      - Defaults to C(<directory of env_file>/<name>.yaml) with O(manager=systemd), else C(<state_dir>/<name>.yaml).
    type: path
  config_group:
    description: Group that may read O(config_file) (the service account's group, as SGLang reads it after dropping
      root). Root only when unset.
    type: str
  allow_public_without_api_key:
    description: Launch on a non-loopback O(host) without O(api_key). Anyone who reaches the port then uses the GPUs.
    type: bool
    default: false
  host:
    description: Address SGLang binds and the health probe uses.
    type: str
    default: 127.0.0.1
  port:
    description: HTTP port.
    type: int
    default: 30000
  manager:
    description:
      - V(process) runs a detached process (own session) with a state file holding its pid.
      - V(systemd) (re)starts O(unit), which the C(gpuserve.sglang.sglang_server) role installs with the same argv
        (filter C(gpuserve.sglang.sglang_systemd_exec)) and C(StandardOutput=append:<log_path>); this module writes
        the unit's O(env_file) (mode 0600). A failed or timed-out launch stops the unit, so a deterministic failure
        such as the memory-pool error never crash-loops.
      - The default is V(systemd), what every role and playbook of this collection uses; V(process) is for hosts
        without systemd (tests, a shell in a container).
    type: str
    choices: [process, systemd]
    default: systemd
  unit:
    description: systemd unit for O(manager=systemd). Defaults to C(sglang-<name>.service).
    type: str
  env_file:
    description: EnvironmentFile the unit reads (O(manager=systemd)); holds O(env), O(public_env) and the API key, mode 0600.
    type: path
  log_path:
    description: Log file (appended). Defaults to C(<state_dir>/<name>.log).
    type: path
  state_dir:
    description: Directory for the state (hash, pid, launch id) and default log files.
    type: path
    default: /var/lib/gpuserve-sglang
  ready_timeout:
    description: Seconds to wait for the server to become ready.
    type: float
    default: 1800
  health:
    description: Readiness probe path. C(/health_generate) runs a real 1-token generation; C(/model_info) is cheaper.
    type: str
    default: /health_generate
  revision:
    description: Model revision (commit sha); part of the configuration hash so a new snapshot restarts the server.
    type: str
  progress_file:
    description:
      - While waiting for the server, write the phase it reached and the numbers it logged (weights, free memory,
        KV tokens) to this JSON file as they appear; run the module with C(async) and follow it with
        M(gpuserve.sglang.job_progress) to print them during a start-up of many minutes.
    type: path
  plan_max_total_num_tokens:
    description: Token capacity predicted by M(gpuserve.sglang.sglang_memory_plan), compared with C(/server_info).
    type: int
  plan_tolerance:
    description: Relative difference between planned and actual KV tokens above which a warning names both numbers
      and the likely cause.
    type: float
    default: 0.1
  user:
    description:
      - The account the server runs as (the unit's C(User=); the service account, which built the venv). The argument
        check (O(check_args)) runs as it, never as root on its behalf; as C(nobody) when the account does not exist
        yet. Unset, the check runs as this module's own account, which launches the server itself with
        O(manager=process).
    type: str
    version_added: 0.8.0
  check_args:
    description:
      - Before anything is written or stopped (in check mode too), parse the launch's arguments with the installed
        release's own parser (C(ServerArgs.add_cli_args) of the venv's C(sglang.srt.server_args), without launching) -
        a misspelt flag or an invalid value is refused with argparse's words (C(failure.kind=bad_argument), as the
        launch's own log would say) and a running
        server keeps serving. When the venv's sglang has no such parser the launch goes on, with a warning.
    type: bool
    default: true
    version_added: 0.8.0
  unit_file:
    description: The file of O(unit) (O(manager=systemd)), kept with its EnvironmentFile and O(config_file) each time a
      launch is ready, for O(restore). Defaults to C(/etc/systemd/system/<unit>).
    type: path
    version_added: 0.8.0
  restore:
    description:
      - With O(manager=systemd) on one node, when a launch fails or times out, put back the unit file, EnvironmentFile and
        config file of the last launch that was ready (kept under O(state_dir)), start it and watch it; RV(restored)
        says how it went. The task still fails - the change did not work.
    type: bool
    default: true
    version_added: 0.8.0
extends_documentation_fragment:
  - gpuserve.sglang.attributes
seealso:
  - module: gpuserve.sglang.sglang_log_facts
  - module: gpuserve.sglang.sglang_memory_plan
"""

EXAMPLES = r"""
- name: SGLang serves Qwen3.6-27B on both GPUs (the sglang-qwen unit the sglang_server role installs)
  gpuserve.sglang.sglang_server:
    name: qwen
    python: /opt/sglang/venv/bin/python
    model_path: /srv/models/Qwen3.6-27B
    args:
      tp_size: 2
      mem_fraction_static: 0.88
      context_length: 131072
    ready_timeout: 1800
  register: sglang

- name: Stop it
  gpuserve.sglang.sglang_server:
    name: qwen
    state: stopped

- name: On a host without systemd (a plain container, a test machine) - a detached process with a state file
  gpuserve.sglang.sglang_server:
    name: qwen
    manager: process
    python: /opt/sglang/venv/bin/python
    model_path: /srv/models/Qwen3.6-27B
"""

RETURN = r"""
status:
  description: C(ready), C(failed), C(timeout) or C(stopped).
  returned: always
  type: str
  sample: ready
pid:
  description: Process id of the server (of this launch, or the running one when unchanged).
  returned: when a process ran
  type: int
launch_id:
  description: Id of the marker written to the log before this launch.
  returned: when launched
  type: str
phase:
  description: Last start-up phase reached (see M(gpuserve.sglang.sglang_log_facts)).
  returned: when launched
  type: str
failure:
  description: The decisive failure (kind, message, rank, phase, traceback, hint, exit_code) or null.
  returned: always
  type: dict
facts:
  description: Numbers this launch logged (see M(gpuserve.sglang.sglang_log_facts)).
  returned: when launched
  type: dict
stale:
  description: True when the launch wrote nothing after its marker.
  returned: always
  type: bool
elapsed_s:
  description: Seconds from launch to the outcome.
  returned: when launched
  type: float
detected_after_exit_s:
  description: Seconds between the process exit and this module noticing it.
  returned: when the process exited
  type: float
server_info:
  description: From C(/server_info) when ready, C(max_total_num_tokens), C(memory_usage) and the args as SGLang resolved them
    (C(context_length) and C(max_running_requests) are the resolved values, not null when left unset).
  returned: when ready
  type: dict
plan_vs_actual:
  description: Predicted and real KV token capacity when O(plan_max_total_num_tokens) was given, their ratio, the
    tolerance and whether the ratio is within it (a warning says so when it is not).
  returned: when ready and a plan was given
  type: dict
log_tail:
  description: Last lines of this launch's output (bounded).
  returned: when launched
  type: list
  elements: str
argv:
  description: The argv that was (or would be) launched.
  returned: always
  type: list
  elements: str
config_hash:
  description: Hash of argv, the non-secret environment, revision, and a salted digest of the secrets (never
    their values; the salt stays on the target).
  returned: always
  type: str
restored:
  description: After a failed launch (O(restore)), the last good configuration put back, with C(status) (C(ready) when
    it serves again), C(argv), C(config_hash), the C(launch_id) of its new start and C(from_launch_id), the launch it was
    kept from.
  returned: when a launch failed and a last good configuration was put back
  type: dict
unit:
  description: The systemd unit (O(manager=systemd)).
  returned: manager is systemd
  type: str
  sample: sglang-qwen.service
"""

import grp
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuserve.sglang.plugins.module_utils.sglang_argv import (
    SECRET_ARGS, ArgvError, config_text, helper_rank, is_loopback, local_url, server_argv,
)
from ansible_collections.gpuserve.sglang.plugins.module_utils.sglang_process import (
    NAMESPACING, config_hash, environment_file, exec_failure, failure_message, http_get, keep_running, launch,
    launch_facts, load_salt, owned_by, pid_alive, plan_vs_actual, port_conflict, port_in_use_failure, port_owner,
    secret_digest, server_info, stop, systemctl, systemd_start, unit_journal, unit_show, watch, write_secret_config, write_state,
)
from ansible_collections.gpuserve.sglang.plugins.module_utils.sglang_change import LastGood, check_args
from ansible_collections.gpuserve.sglang.plugins.module_utils.files import read_json, secret_problem, write_private


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            state=dict(type="str", default="started", choices=["started", "stopped", "restarted"]),
            python=dict(type="path"),
            model_path=dict(type="str"),
            args=dict(type="dict", default={}),
            env=dict(type="dict", default={}, no_log=True),
            public_env=dict(type="dict", default={}),
            api_key=dict(type="str", no_log=True),
            config_file=dict(type="path"),
            config_group=dict(type="str"),
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
        ),
        required_if=[("state", "started", ("python", "model_path")),
                     ("state", "restarted", ("python", "model_path"))],
        supports_check_mode=True,
    )
    p = module.params
    name = p["name"]
    if not name.replace("-", "").replace("_", "").isalnum():
        module.fail_json(msg="name=%r: use letters, digits, '-' and '_' only (it names files)" % name)
    state_dir = p["state_dir"]
    state_path = os.path.join(state_dir, name + ".state.json")
    log_path = p["log_path"] or os.path.join(state_dir, name + ".log")
    base_url = local_url(p["host"], p["port"])
    prev = read_json(state_path) or {}
    systemd = p["manager"] == "systemd"
    unit = p["unit"] or "sglang-%s.service" % name
    env_file = p["env_file"] or os.path.join("/etc/sglang", name + ".env")
    if systemd:
        info = unit_show(unit)
        if info["_rc"] != 0 and "System has not been booted with systemd" in info["_err"]:
            module.fail_json(msg="manager=systemd: this host does not run systemd (%s); use manager=process" % info["_err"])
        cur_pid = int(info.get("MainPID") or 0)
        running = info.get("ActiveState") in ("active", "activating", "reloading") and cur_pid > 0
    else:
        cur_pid = prev.get("pid")
        running = pid_alive(cur_pid)
    result = dict(changed=False, failure=None, stale=False, argv=[], config_hash="")
    if systemd:
        result["unit"] = unit

    def halt(pid):
        if systemd:
            systemctl("stop", unit)
        else:
            stop(pid)

    if p["state"] == "stopped":
        if running:
            result["changed"] = True
            if not module.check_mode:
                halt(cur_pid)
        result["status"] = "stopped"
        module.exit_json(**result)

    args = dict(p["args"])
    for key in SECRET_ARGS:
        if args.get(key):
            module.no_log_values.add(str(args[key]))   # refused below; never echo it back
    for key in ("host", "port"):
        if key in args and str(args[key]) != str(p[key]):
            module.fail_json(msg="args.%s=%s differs from %s=%s: give the bind address only through %s= (the role: "
                                 "sglang_server_%s), so the API-key guard and the health probe see what is launched"
                                 % (key, args[key], key, p[key], key, key), **result)
    args["host"] = p["host"]
    args["port"] = p["port"]
    if not is_loopback(p["host"]) and not p["api_key"] and not p["allow_public_without_api_key"]:
        module.fail_json(msg="host=%s exposes the server beyond this machine without an API key: set api_key (role: "
                             "sglang_server_api_key) or, knowingly, allow_public_without_api_key (role: "
                             "sglang_server_public_without_api_key); nothing was launched" % p["host"], **result)
    short = secret_problem("api_key", p["api_key"])
    if short:
        module.fail_json(msg=short + "; nothing was launched", **result)
    config_file = p["config_file"] or os.path.join(os.path.dirname(env_file) if systemd else state_dir, name + ".yaml")
    last_good = LastGood(state_dir, name)
    good_paths = {"unit": p["unit_file"] or os.path.join("/etc/systemd/system", unit), "env": env_file,
                  "config": config_file if p["api_key"] else None}
    try:
        argv = server_argv(p["python"], p["model_path"], args, config_file=config_file if p["api_key"] else None)
        secret_config = config_text({"api_key": p["api_key"]}) if p["api_key"] else None
    except ArgvError as exc:
        module.fail_json(msg=str(exc), **result)
    config_gid = None
    if p["config_group"]:
        try:
            config_gid = grp.getgrnam(p["config_group"]).gr_gid
        except KeyError:
            if not module.check_mode:   # a look before the role creates the group writes nothing
                module.fail_json(msg="config_group=%s: no such group on the target (create the service group first)"
                                     % p["config_group"], **result)
    public = dict((str(k), str(v)) for k, v in p["public_env"].items())
    secret_env = dict((str(k), str(v)) for k, v in p["env"].items())
    env = dict(public)
    env.update(secret_env)
    for k in secret_env:
        public.pop(k, None)
    env_text = None
    if systemd:
        try:
            env_text = environment_file(env)
        except ValueError as exc:
            module.fail_json(msg=str(exc), **result)
    secrets = dict(("env:" + k, v) for k, v in secret_env.items())
    if p["api_key"]:
        secrets["api_key"] = p["api_key"]
    digest = ""
    if secrets:
        if not os.path.isdir(state_dir) and not module.check_mode:
            os.makedirs(state_dir, 0o750)
        salt_path = os.path.join(state_dir, ".secret-salt")
        digest = secret_digest(secrets, load_salt(salt_path) if not module.check_mode or os.path.exists(salt_path)
                               else b"check-mode")
    chash = config_hash(argv, public, p["revision"], digest)
    result.update(argv=argv, config_hash=chash)

    if keep_running(p["state"], running, prev.get("config_hash"), chash):
        code, _body = http_get(base_url + p["health"], timeout=20.0, api_key=p["api_key"])
        if code == 200:
            # also in check mode (a read-only GET): a role's quick look in check mode is then the whole answer
            info = server_info(base_url, p["api_key"], launch_facts(prev))
            result.update(status="ready", pid=cur_pid, launch_id=prev.get("launch_id"), server_info=info)
            if systemd and not module.check_mode:
                last_good.save(chash, argv, prev.get("launch_id"), good_paths)
            compare_with_plan(module, result, p, info)
            module.exit_json(**result)

    # Before anything is written or stopped - in check mode too, so the role's look before it writes the unit refuses
    # what would fail: the port (only our own running server may hold it), then the launch's arguments, parsed by
    # the installed release's own parser. A refusal leaves a running server serving.
    owner = port_conflict(port_owner(p["host"], p["port"]), running, cur_pid, prev, p["port"], owned_by)
    if owner is not None:
        result.update(changed=False, status="failed", failure=port_in_use_failure(p["host"], p["port"], owner, running))
        module.fail_json(msg=result["failure"]["message"], **result)
    if p["check_args"]:
        refused, note = check_args(argv, env, p["user"])
        if refused is not None:
            result.update(changed=False, status="failed", failure=refused)
            module.fail_json(msg="SGLang's parser refuses this launch: %s. %s" % (refused["message"], refused["hint"]),
                             **result)
        if note:
            module.warn(note)

    result["changed"] = True
    if module.check_mode:
        result["status"] = "would_restart" if running else "would_start"
        module.exit_json(**result)
    if running and not systemd:
        stop(cur_pid)
    if not os.path.isdir(state_dir):
        os.makedirs(state_dir, 0o750)
    if systemd:
        d = os.path.dirname(env_file)
        if d and not os.path.isdir(d):
            os.makedirs(d, 0o750)
        write_private(env_file, env_text)
    write_secret_config(config_file, secret_config, config_gid)
    if systemd:
        pid, launch_id, offset, err = systemd_start(unit, log_path, restart=running)
        proc = pid
    else:
        proc, launch_id, offset, err = launch(argv, env, log_path)
        pid = proc.pid if proc is not None else None
    if err:
        if systemd:
            systemctl("stop", unit)
        result.update(status="failed", launch_id=launch_id, stale=True, failure={
            "kind": "other", "rank": None, "phase": "args", "traceback": "", "message": err,
            "hint": "The interpreter could not be executed: check python= (the SGLang venv) exists."})
        module.fail_json(msg=err, **result)
    write_state(state_path, {"pid": pid, "config_hash": chash, "launch_id": launch_id, "log_path": log_path,
                             "log_offset": offset, "argv": argv, "manager": p["manager"]})
    out = watch(proc, log_path, offset, base_url, health=p["health"], timeout=p["ready_timeout"],
                api_key=p["api_key"], progress_file=p["progress_file"], log_ready=not helper_rank(args))
    result.update(out)
    result["launch_id"] = launch_id
    if out["status"] == "ready":
        if systemd:
            last_good.save(chash, argv, launch_id, good_paths)
        info = server_info(base_url, p["api_key"], out.get("facts"))
        result["server_info"] = info
        compare_with_plan(module, result, p, info)
        module.exit_json(**result)
    if systemd and out["status"] == "failed":
        status = unit_show(unit).get("ExecMainStatus")
        result.update(exec_failure(out, status, argv[0], unit_journal(unit, want=NAMESPACING) if status == "226" else ""))
    halt(pid)   # failed or timed out: stopped, so nothing restarts it in a loop
    write_state(state_path, {"pid": None, "config_hash": "", "launch_id": launch_id, "log_path": log_path,
                             "log_offset": offset, "argv": argv, "manager": p["manager"]})
    msg = failure_message(out, launch_id, p["ready_timeout"])
    if systemd and p["restore"] and int(args.get("nnodes") or 1) == 1:
        failed = {"launch_id": launch_id, "log_offset": offset, "argv": argv, "config_hash": chash,
                  "kind": (out.get("failure") or {}).get("kind")}
        restored = restore_last_good(last_good, failed, unit, log_path, state_path, base_url, p)
        if restored is not None:
            result["restored"] = restored
            msg += ("\nThe last good configuration (launch %s) was put back: %s" % (
                restored["launch_id"], "it is ready again and serving" if restored["status"] == "ready"
                else "it did not become ready either (%s): %s" % (restored["status"], restored.get("message"))))
    module.fail_json(msg=msg, **result)


def compare_with_plan(module, result, p, info):
    """plan_vs_actual in the result whenever the server is ready and a plan was given (a re-run that changes nothing
    too: a plan that no longer matches the server is said every run), its warning as text."""
    record, warning = plan_vs_actual(p["plan_max_total_num_tokens"], info, p["plan_tolerance"])
    if record is not None:
        result["plan_vs_actual"] = record
    if warning:
        module.warn(warning)


def restore_last_good(last_good, failed, unit, log_path, state_path, base_url, p):
    """Put back the unit, env and config files of the last launch that was ready, start it and watch it; the record of
    what came back (its status, argv, launch id), or None when there is no other last good configuration. The launch
    record then names the failed launch too (``restored_after``: its id, argv and log offsets), so status and diagnose
    still read why it failed."""
    rec = last_good.record()
    if not rec or rec.get("config_hash") in (None, "", failed["config_hash"]):
        return None
    last_good.put_back()
    pid, launch_id, offset, err = systemd_start(unit, log_path, restart=False)
    back = {"config_hash": rec["config_hash"], "argv": rec.get("argv"), "from_launch_id": rec.get("launch_id"),
            "launch_id": launch_id, "pid": pid}
    if err:
        back.update(status="failed", message=err)
        return back
    out = watch(pid, log_path, offset, base_url, health=p["health"], timeout=p["ready_timeout"],
                progress_file=p["progress_file"])     # the health endpoints need no key
    back["status"] = out["status"]
    if out["status"] == "ready":
        write_state(state_path, {"pid": pid, "config_hash": rec["config_hash"], "launch_id": launch_id,
                                 "log_path": log_path, "log_offset": offset, "argv": rec.get("argv"),
                                 "manager": p["manager"], "restored_after": dict(failed, log_end=offset)})
    else:
        back["message"] = (out.get("failure") or {}).get("message")
        systemctl("stop", unit)
    return back


if __name__ == "__main__":
    main()
