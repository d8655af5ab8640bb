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
    description:
      - V(started) ensures it runs with this configuration, V(restarted) always relaunches, V(stopped) stops it.
      - V(absent) stops it and removes every file this module writes or keeps for it - the unit (O(unit_file),
        disabled first, with O(manager=systemd)), O(env_file) and O(config_file) (the secrets), the launch record, the
        last good copies, O(progress_file) and O(metrics_file). The log (O(log_path)) stays. Added in 0.13.0.
    type: str
    choices: [started, stopped, restarted, absent]
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
      - SGLang's C(--config) YAML holding the API key, written with mode 0640 (0600 without O(config_unix_group)),
        never through a symlink. Removed again when O(api_key) is unset.
      - Defaults to C(<directory of env_file>/<name>.yaml) with O(manager=systemd), else C(<state_dir>/<name>.yaml).
    type: path
  config_unix_group:
    description:
      - Unix group that may read O(config_file) (the service account's group, as SGLang reads it after dropping
        root). Root only when unset.
      - Named C(config_group) before 0.13.0 ("group" now means a multi-node group only); that name is still read,
        with a deprecation warning, until 1.0.0.
    type: str
    aliases: [config_group]
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
  metrics_file:
    description:
      - Write the plan next to reality for Prometheus to this file (the exposition format, for the node exporter's
        textfile collector, e.g. C(/var/lib/prometheus/node-exporter/gpuserve_sglang_<name>.prom)) whenever the
        server is ready - after a launch and at each look at a ready server - replaced atomically, mode 0644.
      - Families (label C(server)) C(gpuserve_sglang_planned_max_total_num_tokens),
        C(gpuserve_sglang_max_total_num_tokens), C(gpuserve_sglang_plan_ratio), C(gpuserve_sglang_plan_tolerance),
        C(gpuserve_sglang_plan_within_tolerance) (with O(plan_max_total_num_tokens)),
        C(gpuserve_sglang_mem_fraction_static) and C(gpuserve_sglang_plan_written_timestamp_seconds).
      - Not written in check mode. A write that fails is a warning; the server serves on.
    type: path
    version_added: 0.11.0
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
  description: C(ready), C(failed), C(timeout), C(stopped) or C(absent).
  returned: always
  type: str
  sample: ready
removed:
  description: With O(state=absent), the paths removed (in check mode, that would be removed); empty when none was there.
  returned: when O(state=absent)
  type: list
  sample: ["/etc/systemd/system/sglang-sglang.service", "/etc/sglang/sglang.yaml"]
  elements: str
  version_added: 0.13.0
pid:
  description: Process id of the server (of this launch, or the running one when unchanged).
  returned: when a process ran
  type: int
  sample: 4121
launch_id:
  description: Id of the marker written to the log before this launch.
  returned: when launched
  type: str
  sample: 41a706607eb6
phase:
  description: Last start-up phase reached (see M(gpuserve.sglang.sglang_log_facts)).
  returned: when launched
  type: str
  sample: ready
failure:
  description: The decisive failure (kind, message, rank, phase, traceback, hint, exit_code) or null.
  returned: always
  type: dict
  sample: null
facts:
  description: Numbers this launch logged (see M(gpuserve.sglang.sglang_log_facts)).
  returned: when launched
  type: dict
  sample: {"avail_mem_before_load_gb": 46.62, "weights_gb": 25.91, "avail_mem_after_load_gb": 20.71,
          "max_total_num_tokens": 91234}
stale:
  description: True when the launch wrote nothing after its marker.
  returned: always
  type: bool
  sample: false
elapsed_s:
  description: Seconds from launch to the outcome.
  returned: when launched
  type: float
  sample: 212.4
detected_after_exit_s:
  description: Seconds between the process exit and this module noticing it.
  returned: when the process exited
  type: float
  sample: null
server_info:
  description: From C(/server_info) when ready, C(max_total_num_tokens), C(memory_usage) and the args as SGLang resolved them
    (C(context_length) and C(max_running_requests) are the resolved values, not null when left unset).
  returned: when ready
  type: dict
  sample: {"max_total_num_tokens": 91234, "context_length": 262144, "max_running_requests": 32,
          "version": "0.5.9"}
plan_vs_actual:
  description: Predicted and real KV token capacity when O(plan_max_total_num_tokens) was given, their ratio, the
    tolerance and whether the ratio is within it (a warning says so when it is not).
  returned: when ready and a plan was given
  type: dict
  sample: {"predicted_max_total_num_tokens": 91234, "actual_max_total_num_tokens": 91234, "ratio": 1.0,
          "tolerance": 0.1, "within_tolerance": true}
log_tail:
  description: Last lines of this launch's output (bounded).
  returned: when launched
  type: list
  sample: ["[2026-12-06 21:30:14] The server is fired up and ready to roll!"]
  elements: str
argv:
  description: The argv that was (or would be) launched.
  returned: always
  type: list
  sample: ["/opt/sglang/venv/bin/python", "-m", "sglang.launch_server", "--tp-size", "2", "--host",
          "127.0.0.1", "--port", "30000", "--model-path", "/srv/models/Qwen3.6-27B", "--config",
          "/etc/sglang/sglang.yaml"]
  elements: str
config_hash:
  description: Hash of argv, the non-secret environment, revision, and a salted digest of the secrets (never
    their values; the salt stays on the target).
  returned: always
  type: str
  sample: 9c1d0e7a2b3f4c5d6e7f8a9b0c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d
restored:
  description: After a failed launch (O(restore)), the last good configuration put back, with C(status) (C(ready) when
    it serves again), C(argv), C(config_hash), the C(launch_id) of its new start and C(from_launch_id), the launch it was
    kept from.
  returned: when a launch failed and a last good configuration was put back
  type: dict
  sample: null
unit:
  description: The systemd unit (O(manager=systemd)).
  returned: manager is systemd
  type: str
  sample: sglang-qwen.service
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuserve.sglang.plugins.module_utils.server import (ARGUMENT_SPEC, REQUIRED_IF, ServerFailed,
                                                                             ServerManager, secret_values)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, required_if=REQUIRED_IF, supports_check_mode=True)
    for value in secret_values(module.params["args"]):
        module.no_log_values.add(value)     # refused by the manager; never echoed back
    manager = ServerManager(module.params, check_mode=module.check_mode)
    try:
        result, failed = manager.ensure(), None
    except ServerFailed as exc:
        result, failed = exc.result, exc.msg
    for warning in manager.warnings:
        module.warn(warning)
    if failed:
        module.fail_json(msg=failed, **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
