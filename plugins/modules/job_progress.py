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
"""

RETURN = r"""
polls:
  description: How many times the job was polled.
  returned: always
  type: int
waited_s:
  description: Seconds spent waiting.
  returned: always
  type: float
"""
