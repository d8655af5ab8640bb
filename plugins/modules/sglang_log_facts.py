#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: sglang_log_facts
short_description: Turn an SGLang start-up log into structured facts and a fix
version_added: 0.1.0
description:
  - Reads an SGLang start-up log (a file, or text given inline) and reports whether the server came up,
    the start-up phase it reached, the decisive failure with its kind and a hint carrying the log's
    numbers, and the memory numbers SGLang logged.
  - Understands SGLang 0.5.9 and 0.5.10 wording, rank prefixes (C(TP0), C(DP0 TP1)), millisecond
    timestamps, journald prefixes, ANSI colour, CRLF and truncated pastes.
  - A log file is read from its last launch only (the last launch marker this collection writes, or a later
    restart of SGLang without one), never mixing launches; RV(launch) says which. With O(since) only the output
    after that marker is considered, and O(since=all) reads the whole file. When nothing was written after the
    marker the result says C(stale=true) instead of re-reporting an older launch's error.
  - Read-only.
author:
  - gpuserve.sglang contributors (@gpuserve)
options:
  path:
    description:
      - Log file to read. Streamed, so its size does not matter.
      - Mutually exclusive with O(content).
    type: path
  content:
    description:
      - Log text, for example the output of C(journalctl -u <unit> -o cat) registered by an earlier task.
      - Mutually exclusive with O(path).
    type: str
  since:
    description:
      - Launch marker. A byte offset into O(path) (digits), or a time C(YYYY-MM-DD HH:MM:SS) in the clock
        SGLang logs with.
      - A log file shorter than the offset was truncated or replaced; it is then read from the start.
      - Unset, a log file is read from its last launch (RV(launch)); V(all) reads the whole file.
    type: str
  until:
    description:
      - With O(path) and O(since) a byte offset, stop at this byte offset (the start of the next launch), to read one
        launch of several in the same log - for instance the failed launch before the one that restored the last
        good configuration.
    type: int
  set_facts:
    description:
      - Also return the result as C(ansible_facts.sglang_start).
    type: bool
    default: false
extends_documentation_fragment:
  - gpuserve.sglang.attributes
  - ansible.builtin.action_common_attributes.facts
attributes:
  facts:
    support: partial
    details: Only with O(set_facts=true) (C(ansible_facts.sglang_start)).
notes:
  - The parser is plain Python in C(plugins/module_utils/logs/); the C(gpuserve.sglang.sglang_log)
    filter gives the same result inside templates and asserts.
seealso:
  - module: gpuserve.sglang.sglang_memory_plan
"""

EXAMPLES = r"""
- name: Read why the last SGLang launch failed
  gpuserve.sglang.sglang_log_facts:
    path: /var/log/sglang/qwen.log
  register: start

- name: Read only this launch's output (byte offset recorded before launching)
  gpuserve.sglang.sglang_log_facts:
    path: /var/log/sglang/qwen.log
    since: "{{ log_offset }}"
    set_facts: true

- name: Stop with the hint when the start-up failed
  ansible.builtin.assert:
    that: start.outcome != 'failed'
    fail_msg: "{{ start.failure.kind }}: {{ start.failure.hint }}"
"""

RETURN = r"""
launch:
  description: The launch that was read (O(path) without O(since)) - C(id) and C(at) of its marker, C(offset) where
    it starts, C(by) (C(marker), C(server_args) for a restart without a marker, or C(start)).
  returned: when O(path) is read without O(since)
  type: dict
  sample: {"id": "3f9a1c2b7d4e", "at": "2026-11-30 10:00:00", "offset": 18734, "by": "marker"}
outcome:
  description: C(ready) (SGLang logged its ready line), C(failed) (a fatal error or the process died) or
    C(starting) (neither yet).
  returned: always
  type: str
  sample: failed
stopped:
  description: SGLang was asked to stop (its C(SIGTERM received) line) and exited gracefully (C(Gracefully exiting)).
    SGLang 0.5.9 then ends itself with SIGKILL, so the exit status is 137 and systemd records C(Result=signal),
    status 9 - the same end as a failed start; this says it was a stop.
  returned: always
  type: bool
  sample: false
phase:
  description: Last start-up phase reached, one of C(args), C(dist_init), C(load_weights), C(memory_pool),
    C(cuda_graph), C(draft), C(http), C(warmup), C(ready).
  returned: always
  type: str
  sample: memory_pool
failure:
  description: The decisive failure, or null.
  returned: always
  type: dict
  sample: {"kind": "kv_pool_oom", "phase": "memory_pool",
          "message": "Not enough memory. Please try to increase --mem-fraction-static. Current value: self.server_args.mem_fraction_static=0.85"}
  contains:
    kind:
      description: One of C(kv_pool_oom), C(weight_load_oom), C(cuda_graph_oom), C(cuda_oom), C(port_in_use),
        C(import_error), C(nccl_error), C(model_not_found), C(unsupported_model), C(tp_mismatch),
        C(bad_argument), C(warmup_failed) (the server listened, its own warm-up request failed), C(other).
      type: str
      sample: kv_pool_oom
    message:
      description: The decisive log line.
      type: str
    rank:
      description: Rank prefix of the failing process (C(TP0)), or null.
      type: str
    phase:
      description: Phase in which the failure happened.
      type: str
    traceback:
      description: Tail of the failing traceback (bounded).
      type: str
    hint:
      description: What to do, with the log's numbers where it has them.
      type: str
    inferred:
      description: True when the traceback was cut before its exception line and the kind is an inference.
      type: bool
    evidence:
      description: What an inferred kind rests on (the frame, or the phase reached).
      type: str
facts:
  description: Numbers SGLang logged (rank 0's when several ranks logged one; the others in C(facts_by_rank));
    absent keys are omitted. Keys
    C(mem_fraction_static), C(avail_mem_before_load_gb), C(weights_gb), C(avail_mem_after_load_gb),
    C(kv_tokens), C(k_size_gb), C(v_size_gb), C(mamba_cache_gb), C(max_total_num_tokens),
    C(max_running_requests), C(context_len), C(tp_size), C(cuda_graph_mem_gb), C(sglang_version).
  returned: always
  type: dict
  sample: {"mem_fraction_static": 0.85, "weights_gb": 25.91, "avail_mem_before_load_gb": 46.62}
facts_by_rank:
  description: The same numbers per rank prefix (C(main) for lines without one).
  returned: always
  type: dict
  sample: {"TP0": {"avail_mem_before_load_gb": 46.62, "weights_gb": 25.91, "avail_mem_after_load_gb": 20.71}}
stale:
  description: True when O(since) was given and nothing was logged after it.
  returned: always
  type: bool
  sample: false
lines:
  description: Lines read.
  returned: always
  type: int
  sample: 1840
end_offset:
  description: Size of O(path) when read; pass it as O(since) to read only the next launch.
  returned: when O(path) is given
  type: int
  sample: 219834
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuserve.sglang.plugins.module_utils.logs import LogReadError, read_facts


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path"),
            content=dict(type="str"),
            since=dict(type="str"),
            until=dict(type="int"),
            set_facts=dict(type="bool", default=False),
        ),
        mutually_exclusive=[("path", "content")],
        required_one_of=[("path", "content")],
        supports_check_mode=True,
    )
    p = module.params
    try:
        res = read_facts(p["path"], p["content"], p["since"], p["until"])
    except LogReadError as exc:
        module.fail_json(msg=str(exc))
    if p["set_facts"]:
        res["ansible_facts"] = {"sglang_start": dict(res)}
    module.exit_json(changed=False, **res)


if __name__ == "__main__":
    main()
