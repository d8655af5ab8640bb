#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: sglang_memory_plan
short_description: Predict whether SGLang 0.5.9 can build its memory pools, before launching it
version_added: 0.1.0
description:
  - Mirrors SGLang 0.5.9's own arithmetic (auto C(--mem-fraction-static), weights per rank, KV cell size,
    hybrid Gated DeltaNet state pools, the speculative verify-state reservation, draft model headroom)
    to predict the KV pool's token capacity and whether the launch will stop with
    C(Not enough memory. Please try to increase --mem-fraction-static).
  - Returns the budget per GPU, the fixes that work (least disruptive first, each with its token count),
    the changes operators try that do not help, and lines a person reads.
  - With O(measured) it replays a real launch from the numbers SGLang logged instead of estimating.
  - Read-only.
author:
  - gpuserve.sglang contributors (@gpuserve)
options:
  model_path:
    description:
      - Directory of the model snapshot. C(config.json) is read, and the safetensors headers give the exact
        weight bytes (split into sharded, replicated, vision and MTP/draft tensors).
      - Mutually exclusive with O(model_config).
    type: path
  model_config:
    description:
      - The model's C(config.json) as a mapping, when the snapshot is not at hand.
    type: dict
  require:
    description:
      - Paths the launch needs, each with the words that say where it comes from (for example the venv's
        interpreter, V(sglang_server_python, from role sglang_venv)). One that is missing (or a dangling link)
        fails the task before anything is planned, naming every missing path and its words, so a role needs no
        separate look at them.
    type: dict
    default: {}
  gpus:
    description:
      - GPUs used, in order, each with C(name), C(memory_total_mib) and optionally C(memory_free_mib) and C(index)
        (the C(gpus) list returned by M(gpuserve.sglang.nvidia_gpu_facts) fits as is).
      - Mutually exclusive with O(gpu_profile).
    type: list
    elements: dict
  gpu_profile:
    description:
      - Plan for a GPU model without the hardware, for example C(rtx-a6000), C(h100-80gb), C(h200).
    type: str
  gpu_count:
    description:
      - Number of GPUs of O(gpu_profile).
    type: int
    default: 1
  args:
    description:
      - SGLang server arguments in ServerArgs snake_case (C(tp_size), C(mem_fraction_static), C(context_length),
        C(speculative_algorithm), C(max_running_requests), C(mamba_ssm_dtype), ...). Absent keys take the
        SGLang 0.5.9 default.
    type: dict
    default: {}
  measured:
    description:
      - Numbers from a real launch, in GiB as SGLang logs them, C(avail_mem_before_load_gb), C(weights_gb),
        C(avail_mem_after_load_gb) (the C(facts) of M(gpuserve.sglang.sglang_log_facts) fit as is).
    type: dict
  weights_bytes:
    description:
      - Exact checkpoint size in bytes, when O(model_path) is not readable here.
    type: int
  fail_on:
    description:
      - Outcomes that fail the task, with the fixes in the message.
      - V(marginal) fails a plan that works but is within the free-memory readings' noise (RV(marginal), O(noise_mib)).
    type: list
    elements: str
    choices: [kv_pool_oom, headroom_oom, context_truncated, marginal]
    default: [kv_pool_oom, marginal]
  noise_mib:
    description:
      - MiB by which SGLang's two free-memory readings (before and after loading the weights) may differ; it sizes the
        pool with both, so what the second misses goes off the pool budget. A plan that works but dies with the second
        reading this much lower is marginal (RV(marginal)). The default covers the 20-55 MiB seen on the CPU engine;
        V(0) turns the check off.
    type: float
    default: 64
    version_added: 0.19.0
  goal:
    description:
      - Let the planner choose the server args for this goal instead of judging O(args) as written
        (C(plugins/module_utils/plan/tune.py)). V(fit) - the fewest, smallest changes that make SGLang start;
        V(context) - the longest served context with O(min_requests) requests of it resident; V(concurrency) - the
        most requests resident, each holding O(min_context) tokens; V(tokens) - the largest KV pool.
      - Keys of O(args) are kept as given (except for V(fit), which exists to change them). The result is the plan
        of the chosen args, plus RV(chosen_args), RV(changes) and RV(candidates).
    type: str
    choices: [fit, context, concurrency, tokens]
  allow:
    description: Quality-changing moves the search may make; without them it never makes them.
    type: list
    elements: str
    choices: [no_speculation, fp8_kv_cache, bf16_mamba_state]
    default: []
  margin:
    description: Headroom kept spare over its estimated need by every chosen configuration (0.05 = 5 %).
    type: float
    default: 0.05
  min_context:
    description: O(goal=concurrency) - the tokens each request must be able to hold (default the operator's C(context_length)
      in O(args), else the model's context; the explanation says which).
    type: int
  min_requests:
    description: O(goal=context) - how many requests of the chosen context must fit at once.
    type: int
    default: 1
  keep:
    description:
      - Keys of O(args) the search never changes (the role passes the operator's own keys). Default - every key of
        O(args), except for O(goal=fit).
    type: list
    elements: str
  launch_failure:
    description:
      - The failure kind the replayed launch died of (C(failure.kind) of M(gpuserve.sglang.sglang_log_facts)), when
        O(measured) are its logged numbers. A replay that fits for a launch that died of C(kv_pool_oom) then says that
        its inputs differ from that launch's, and which (RV(replay_mismatch)); the plan returned is then the launch
        as SGLang saw it - planned again with the free memory SGLang sized the pool with (from its own logged profile,
        else just below the floor where no pool fits) - so its outcome is what happened and its fixes work from there,
        and the replay of the logged numbers is RV(replay). RV(explain) and the picture lead with the death.
    type: str
  release:
    description:
      - The SGLang release the launch runs. The planner's arithmetic is per release, each proved against that
        release's own code (C(make oracle)); a release it was not proved for is refused by name (nothing is planned),
        never planned with another release's rules. Releases known - V(0.5.9), V(0.5.23) (a 0.5.23 launch with a separate draft model needs its
        C(config.json) at C(speculative_draft_model_path); pipeline stages on 0.5.23 are refused).
      - When O(python) has sglang installed, that release is the plan's, and a different O(release) is refused.
      - Unset, and nothing installed beside O(python), V(0.5.9).
    type: str
    version_added: 0.14.0
  python:
    description:
      - The launch's interpreter (the venv's C(bin/python)); the release installed in its environment is read from its
        C(sglang-<version>.dist-info) (no process is started) and planned.
    type: path
    version_added: 0.14.0
  chart:
    description:
      - Also return the plan as a picture, RV(chart_svg) - an SVG with one stacked bar per GPU (weights, the state pools,
        the KV cache, the headroom) on one GiB scale, the static budget as a line across the bars, what is over budget
        marked under its bar, and the outcome and the fixes beneath. Also when the plan refuses the launch.
    type: bool
    default: false
    version_added: 0.15.0
extends_documentation_fragment:
  - gpuserve.sglang.attributes
notes:
  - The planner is plain Python in C(plugins/module_utils/plan/) and can be used without Ansible.
  - Activations, CUDA graphs and draft memory in the headroom are estimates; the memory-pool check itself uses
    SGLang's exact formula.
seealso:
  - module: gpuserve.sglang.sglang_log_facts
"""

EXAMPLES = r"""
- name: Will Qwen3.6-27B start on 2x RTX A6000 with TP 2 and NEXTN?
  gpuserve.sglang.sglang_memory_plan:
    model_path: /srv/models/Qwen3.6-27B
    gpu_profile: rtx-a6000
    gpu_count: 2
    args:
      tp_size: 2
      mem_fraction_static: 0.85
      speculative_algorithm: NEXTN
  register: plan

- name: Replay a failed launch from its log facts
  gpuserve.sglang.sglang_memory_plan:
    model_config: "{{ lookup('ansible.builtin.file', 'config.json') | from_json }}"
    gpus: "{{ gpu_facts.gpus }}"
    args: "{{ sglang_server_args }}"
    measured: "{{ start.facts }}"
    fail_on: []
"""

RETURN = r"""
chart_svg:
  description: The plan as an SVG document (O(chart=true)); C(playbooks/plan.yml -e plan_chart=<file>) writes it.
  returned: when O(chart=true) and a plan was made (also with a refusal of the launch)
  type: str
  sample: "<svg xmlns='http://www.w3.org/2000/svg' width='960' height='520'>...</svg>"
release:
  description: The SGLang release planned (its arithmetic is the one the plan used).
  returned: when planned
  type: str
  sample: 0.5.9
release_source:
  description: Where RV(release) was read - C(installed (<dist-info path>)), C(asked for (release)) or C(the default).
  returned: when planned
  type: str
  sample: the default
replay_mismatch:
  description: O(launch_failure=kv_pool_oom) and a plan that fits - the replay's inputs differ from that launch's; which
    (the free memory SGLang profiled with, from its own profile when the log has it), in numbers. RV(explain) begins
    with the launch's death (C(Launch:)) and the replay named as a replay (C(Replay:)).
  returned: when the replay contradicts the launch
  type: str
  sample: null
replay:
  description: The replay of the launch's logged numbers that contradicted it (C(outcome), C(max_total_num_tokens),
    C(avail_mem_after_load_gb) as logged); the plan itself is the launch as SGLang saw it.
  returned: when the replay contradicts the launch and the plan with what SGLang saw dies as the launch did
  type: dict
  sample: {outcome: fits, max_total_num_tokens: 4450, avail_mem_after_load_gb: 21.22}
launch_failure:
  description: O(launch_failure), when the replay contradicted the launch.
  returned: when the replay contradicts the launch
  type: str
  sample: kv_pool_oom
chosen_args:
  description: O(goal) given - the complete server args the planner chose (O(args) with the search's changes).
  returned: when goal is given
  type: dict
  sample: {tp_size: 2, speculative_algorithm: NEXTN, max_running_requests: 32}
changes:
  description: O(goal) given - what the search changed from O(args), each C({key, from, to, why}).
  returned: when goal is given
  type: list
  sample: [{"key": "max_running_requests", "from": null, "to": 32,
          "why": "request slots: each holds its req_to_token row, mamba state and verify state"}]
  elements: dict
candidates:
  description: O(goal) given - the ranked table compared, best first, each C({changes, max_total_num_tokens,
    max_running_requests, context_length, headroom_left_gb, outcome, score}).
  returned: when goal is given
  type: list
  sample: [{"changes": {"max_running_requests": 32}, "max_total_num_tokens": 91234,
          "max_running_requests": 32, "context_length": 262144, "headroom_left_gb": 3.03,
          "outcome": "context_truncated", "score": -1}]
  elements: dict
checkpoint_contradicts_config:
  description: True when the checkpoint's weights are less than half of what config.json's parameters take - the
    checkpoint is not the model the config describes; also in C(notes) and as a warning.
  returned: when the checkpoint contradicts the config
  type: bool
  sample: false
missing:
  description: The paths of O(require) that do not exist (the task fails before planning).
  returned: when a path of O(require) is missing
  type: list
  elements: str
  sample: [/opt/sglang/venv/bin/python]
outcome:
  description: C(fits), C(kv_pool_oom) (the pool cannot be built), C(headroom_oom) (the pool fits but the draft,
    graphs and activations will not fit in the (1 - mem_fraction_static) headroom) or C(context_truncated)
    (fewer pool tokens than the context length). C(unknown) only when the model cannot be modelled (an
    architecture the planner does not know, a config missing a field) but O(measured) gives the free memory before
    and after the weights and the fraction is known - then rest <= 0 is C(kv_pool_oom) for any model, and more is
    C(unknown) (RV(rest_gb) says how much; RV(model_error) why the model was not modelled).
  returned: always
  type: str
  sample: kv_pool_oom
mem_fraction_static:
  description: Effective fraction (SGLang 0.5.9's auto value when not given).
  returned: always
  type: float
  sample: 0.85
max_total_num_tokens:
  description: KV pool tokens per SGLang 0.5.9's formula; zero or less when the pool cannot be built (RV(explain)
    says how many tokens it is short by); none when the model is not modelled (RV(outcome=unknown)).
  returned: always
  type: int
  sample: -114282
req_to_token_pool_size:
  description: Request slots SGLang allocates (its req_to_token pool), from the profiled token count.
  returned: when the model is modelled
  type: int
  sample: 48
rest_gb:
  description: GiB left for the pools (M1 - M0 x (1 - fraction)), when the model is not modelled.
  returned: when the model is not modelled
  type: float
  sample: -2.95
model_error:
  description: Why the model is not modelled (the planner's config error), when RV(outcome=unknown) or a verdict
    rests on the measured numbers alone.
  returned: when the model is not modelled
  type: str
  sample: null
per_gpu:
  description: Budget per GPU in GiB (C(avail_mem_before_load_gb), C(weights_gb), C(rest_gb), C(mamba_gb),
    C(spec_reserve_gb), C(kv_gb), C(headroom_gb), C(draft_gb), C(headroom_need_gb)).
  returned: always
  type: list
  sample: [{"avail_mem_before_load_gb": 46.69, "weights_gb": 25.43, "rest_gb": 14.25, "mamba_gb": 3.44,
          "spec_reserve_gb": 13.76, "kv_gb": -2.95, "headroom_gb": 7.0, "draft_gb": 2.89,
          "headroom_need_gb": 3.81, "index": 0, "name": "NVIDIA RTX A6000"}]
  elements: dict
fixes:
  description: Changes that make SGLang start (outcome C(fits) or C(context_truncated)), least disruptive first,
    each C({change, max_total_num_tokens, outcome, why}). A change that improves the outcome but still fails is
    listed under RV(ineffective), not here.
  returned: always
  type: list
  sample: [{"change": {"max_running_requests": 32}, "max_total_num_tokens": 91234,
          "outcome": "context_truncated",
          "why": "the verify-state reservation and the mamba slots scale with running requests"}]
  elements: dict
ineffective:
  description: Changes that do not make it start - better but still failing, and what operators often try that
    does not touch the budget (halving the context, dropping CUDA graphs, lowering the fraction) - each with
    its result.
  returned: always
  type: list
  sample: [{"change": {"mem_fraction_static": 0.92}, "max_total_num_tokens": 10406, "outcome": "headroom_oom",
          "why": "a larger static fraction gives the pools more of the free memory (and the headroom less); still headroom_oom"}]
  elements: dict
marginal:
  description:
    - Set when the plan works but a second free-memory reading O(noise_mib) lower makes the launch die. It holds the
      KV budget (C(kv_mib)), the margin (C(noise_mib)), the outcome within it (C(outcome_within_noise)) and C(fix), the
      smallest C(mem_fraction_static) that stays working with twice the margin (null when none up to 0.99 does).
    - Null otherwise, also for a plan that does not work (its fixes say what to change).
  returned: always
  type: dict
  version_added: 0.19.0
  sample: {"noise_mib": 64.0, "kv_mib": 41.0, "outcome_within_noise": "kv_pool_oom",
           "fix": {"change": {"mem_fraction_static": 0.007}, "max_total_num_tokens": 8192, "outcome": "fits",
                   "why": "the smallest fraction whose pool budget stays clear of twice the readings' margin"}}
explain:
  description: Lines a person reads, with a per-GPU bar chart of the budget.
  returned: always
  type: list
  sample: ["Qwen3_5ForConditionalGeneration, tp_size=2, mem_fraction_static=0.85 (args)",
          "Per GPU: 46.69 GiB free after CUDA/NCCL init (estimated); static budget 0.85 x 46.69 = 39.69 GiB; headroom 7.00 GiB",
          "GPU 0 NVIDIA RTX A6000"]
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuserve.sglang.plugins.module_utils.plan import PLAN_ARGUMENT_SPEC, PlanRefused, plan_request
from ansible_collections.gpuserve.sglang.plugins.module_utils.server import numeric_args, validate_args


def main():
    module = AnsibleModule(argument_spec=PLAN_ARGUMENT_SPEC, supports_check_mode=True,
                           mutually_exclusive=[("model_path", "model_config"), ("gpus", "gpu_profile")],
                           required_one_of=[("model_path", "model_config"), ("gpus", "gpu_profile")])
    problems = validate_args(module.params["args"], module.params.get("release"))
    if problems:
        module.fail_json(msg="; ".join(problems))
    module.params["args"] = numeric_args(module.params["args"])     # -e tp_size=2 reaches a play as text
    try:
        result, warnings = plan_request(**module.params)
    except PlanRefused as exc:
        module.fail_json(msg=exc.msg, **exc.result)
    for warning in warnings:
        module.warn(warning)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
