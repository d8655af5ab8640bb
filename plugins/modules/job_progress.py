#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: job_progress
short_description: Wait for an async job in one flat loop, printing its progress on the controller
version_added: 0.4.0
description:
  - Polls an async job started with C(async) and C(poll=0) until it ends, however long it runs; each poll is one
    low-level command on the target (no module upload), so thousands of polls cost seconds, not a recursion limit.
  - While it runs, prints a line on the controller whenever O(progress_file) says something new (bytes done of
    total with the rate, or a C(message)).
  - When the job ends, returns the job's own result, as M(ansible.builtin.async_status) would, and removes the
    job's results file. A job that failed fails this task with the job's message and structured facts.
  - This is an action plugin; the module file only documents it.
author:
  - gpuserve.sglang contributors (@gpuserve)
options:
  jid:
    description: The job id (C(ansible_job_id) of the registered async task).
    type: str
    required: true
  progress_file:
    description:
      - JSON file the job rewrites as it goes, on the target. Keys C(bytes_done), C(bytes_total),
        C(rate_bytes_per_s) (and C(eta_s)), or C(message).
    type: str
  interval:
    description: Seconds between polls (the first ones come sooner - 0.25, 0.5, 1 s, ... - so a job that ends at
      once is not waited for a whole interval).
    type: float
    default: 10
  timeout:
    description: Give up waiting after this many seconds (the job goes on); 0 waits until the job's own C(async) limit.
    type: float
    default: 0
  label:
    description: Prefix of the progress lines.
    type: str
    default: job
  group:
    description:
      - Name of a group of hosts whose jobs must succeed together (the ranks of one multi-node SGLang server). Each
        member writes its outcome to a file on the controller, in a directory of this ansible-playbook run, and
        reads the others'.
      - When another member has failed, this one is stopped with O(group_stop) at once, also if it was already
        ready, and the task fails with the failed member's message, rank and facts (RV(group_failure)).
      - When this member failed by itself with only the echo of another's failure (SGLang 0.5.9's "other ranks that
        didn't finish loading", or a Gloo/NCCL peer gone), it waits up to 30 s for a member's own failure and names
        that one first in its message (RV(group_failure)).
      - All members must wait in the same task of the same run (no C(serial) batches that split them).
    type: str
  group_members:
    description: Inventory names of every member of O(group), this host included.
    type: list
    elements: str
    default: []
  group_rank:
    description: This member's rank, named in the others' messages.
    type: int
  group_stop:
    description: Argv run on this host to stop it when another member failed (for example C([systemctl, stop, sglang-qwen.service])).
    type: list
    elements: str
    default: []
  group_timeout:
    description: Seconds a member that is ready waits for the word of the others; a member silent that long
      (unreachable, never started) stops it too.
    type: float
    default: 600
  group_dir:
    description:
      - Controller directory for the outcomes (a subdirectory per group). Default - inside this run's own local
        temporary directory (C(DEFAULT_LOCAL_TMP), made private, 0700, by ansible-playbook and removed when the run
        ends), which no other local user can plant or read.
      - A directory given here must be this user's and writable by no one else (it is made 0700 when missing); another
        one is refused. Outcome files are created anew relative to the directory's descriptor, never through a link.
    type: path
attributes:
  action:
    description: Runs as an action plugin on the controller; each poll is a low-level command on the target.
    support: full
  async:
    description: It waits for an async job; it is not itself run asynchronously.
    support: none
  check_mode:
    description: There is no job to wait for in check mode.
    support: none
  diff_mode:
    description: Nothing is changed, so there is no diff.
    support: none
  platform:
    description: The target needs a POSIX shell with C(cat).
    support: full
    platforms: posix
extends_documentation_fragment:
  - gpuserve.sglang.attributes
"""

EXAMPLES = r"""
- name: The model, downloading in the background
  gpuserve.sglang.hf_snapshot:
    repo_id: Qwen/Qwen3.6-27B
    local_dir: /srv/models/Qwen3.6-27B
  async: 21600
  poll: 0
  register: download

- name: Progress until the download is done
  gpuserve.sglang.job_progress:
    jid: "{{ download.ansible_job_id }}"
    progress_file: /srv/models/Qwen3.6-27B/.gpuserve-progress.json
    interval: 10
    label: Qwen/Qwen3.6-27B
  register: model

- name: Each rank of a multi-node server, ready together or stopped together
  gpuserve.sglang.job_progress:
    jid: "{{ start.ansible_job_id }}"
    group: qwen
    group_members: [ct129, ct130]
    group_rank: "{{ 0 if inventory_hostname == 'ct129' else 1 }}"
    group_stop: [systemctl, stop, sglang-qwen.service]
"""

RETURN = r"""
polls:
  description: How many times the job was polled.
  returned: always
  type: int
  sample: 42
waited_s:
  description: Seconds spent waiting.
  returned: always
  type: float
  sample: 84.3
group:
  description: With O(group), the group's name and each member's state as this one saw it (C(ready), C(failed),
    C(stopped), C(no word)).
  returned: when group is set
  type: dict
  sample: {"name": "qwen", "members": {"ct100": "stopped", "ct101": "failed"}}
group_failure:
  description: The member whose failure stopped this one, or whose failure this one's echoes - C(member), C(rank),
    C(msg), C(failure) (the parser's kind, message, hint), C(phase), C(facts), C(launch_id).
  returned: when this member was stopped because another failed, or failed with the echo of another's failure
  type: dict
  sample: {"member": "ct130", "rank": 1, "msg": "SGLang failed to start: kv_pool_oom in phase memory_pool",
          "failure": {"kind": "kv_pool_oom",
          "message": "Not enough memory. Please try to increase --mem-fraction-static."}}
stopped_for:
  description: The member this one was stopped for (null when the others went silent).
  returned: when this member was stopped
  type: str
  sample: ct130
"""
