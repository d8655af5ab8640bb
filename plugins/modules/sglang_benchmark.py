#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: sglang_benchmark
short_description: Run SGLang's own serving benchmark against a server and keep its result beside the launch record
version_added: 0.18.0
description:
  - Runs C(python -m sglang.bench_serving) from the server's own venv (O(python)) against the server (or the router
    in front of it, O(url)) - SGLang's native C(/generate), a C(random-ids) dataset drawn from the model's own
    tokenizer (no download), bounded by O(num_prompts), O(max_concurrency) and O(timeout) - and records request
    throughput, output tokens per second, TTFT and inter-token latency p50 and p99 in
    C(<state_dir>/<name>.bench.json), the last run per O(target) with the one before it, so a later run shows the
    change. Every request must complete, or the module fails naming how many did.
  - The key (O(api_key)) reaches bench_serving in its environment (C(OPENAI_API_KEY), sent as a bearer token), never
    on its command line.
  - O(state=read) returns the record and one line per target, running nothing (C(playbooks/status.yml) shows it).
  - The logic is plain Python in C(plugins/module_utils/server/bench.py).
author:
  - gpuserve.sglang contributors (@gpuserve)
options:
  name:
    description: The server's name (C(sglang_server_name)); the record is C(<state_dir>/<name>.bench.json).
    type: str
    required: true
  state_dir:
    description: The server's state directory, where its launch record is.
    type: path
    default: /var/lib/gpuserve-sglang
  state:
    description: C(run) the benchmark and record it, or C(read) the record.
    type: str
    choices: [run, read]
    default: run
  python:
    description: The server venv's interpreter (required with O(state=run)).
    type: path
  model_path:
    description: The model directory the server serves; its tokenizer makes the prompts (required with O(state=run)).
    type: path
  url:
    description: The URL to benchmark (the router's); default the server's own, from O(host) and O(port).
    type: str
  host:
    description: The address the server binds (a wildcard bind is reached on loopback).
    type: str
    default: 127.0.0.1
  port:
    description: The server's port.
    type: int
    default: 30000
  target:
    description: What is measured, the record's key (C(server), C(router)).
    type: str
    default: server
  api_key:
    description: The server's (or the router's) API key.
    type: str
  num_prompts:
    description: Requests sent.
    type: int
    default: 32
  input_len:
    description: Prompt tokens per request.
    type: int
    default: 128
  output_len:
    description: Tokens generated per request.
    type: int
    default: 32
  max_concurrency:
    description: Requests in flight at most.
    type: int
    default: 4
  timeout:
    description: Seconds the benchmark may run before it is stopped (a failure).
    type: int
    default: 600
attributes:
  check_mode:
    support: full
    description: Nothing is run or written; O(state=run) reports a change.
  diff_mode:
    support: none
    description: The record is a measurement, not a configuration.
extends_documentation_fragment:
  - gpuserve.sglang.attributes
"""

EXAMPLES = r"""
- name: SGLang's own benchmark against the server, recorded
  gpuserve.sglang.sglang_benchmark:
    name: qwen
    python: /opt/sglang/venv/bin/python
    model_path: /srv/models/Qwen3.6-27B
    port: 30000
    api_key: "{{ sglang_server_api_key }}"
  register: bench

- name: The last results (status.yml)
  gpuserve.sglang.sglang_benchmark:
    name: qwen
    state: read
  register: last_bench
"""

RETURN = r"""
record:
  description: The record's path.
  returned: always
  type: str
  sample: /var/lib/gpuserve-sglang/qwen.bench.json
url:
  description: The URL measured.
  returned: state is run
  type: str
  sample: http://127.0.0.1:30000
run:
  description: This run - C(completed), C(num_prompts), C(max_concurrency), C(random_input_len), C(random_output_len),
    C(request_throughput) (req/s), C(output_tokens_per_s), C(ttft_p50_ms), C(ttft_p99_ms), C(itl_p50_ms),
    C(itl_p99_ms), C(duration_s), C(wall_s), C(at) (epoch seconds), C(url).
  returned: state is run and not check mode
  type: dict
  sample: {"completed": 8, "num_prompts": 8, "max_concurrency": 2, "random_input_len": 32,
          "random_output_len": 8, "request_throughput": 3.1, "output_tokens_per_s": 24.8, "ttft_p50_ms": 41.2,
          "ttft_p99_ms": 88.5, "itl_p50_ms": 12.3, "itl_p99_ms": 30.1, "duration_s": 2.6, "wall_s": 9.8,
          "at": 1796591932}
previous:
  description: The run before it for the same O(target), or null.
  returned: state is run and not check mode
  type: dict
  sample: null
line:
  description: This run in one line, each metric with its change from the run before.
  returned: state is run and not check mode
  type: str
  sample: "server: 32 of 32 requests, 6.10 req/s, 195.2 output tok/s (+3 %), TTFT p50 85.0 ms, ..."
runs:
  description: O(state=read) - the record, per target C(last) and C(previous).
  returned: state is read
  type: dict
  sample: {"server": {"last": {"completed": 8, "request_throughput": 3.1}, "previous": null}}
lines:
  description: O(state=read) - one line per target, as RV(line).
  returned: state is read
  type: list
  sample: ["server: 8 of 8 requests, 3.10 req/s, 24.8 output tok/s, TTFT p50 41.2 ms"]
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuserve.sglang.plugins.module_utils.server import BENCH_ARGUMENT_SPEC, BenchFailed, BenchRun


def main():
    module = AnsibleModule(argument_spec=BENCH_ARGUMENT_SPEC, supports_check_mode=True)
    try:
        result = BenchRun(module.params, module.run_command, module.check_mode).ensure()
    except BenchFailed as exc:
        module.fail_json(msg=exc.msg, **exc.result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
