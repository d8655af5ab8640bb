# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The plan next to reality, for Prometheus: a text file that the node exporter's textfile collector serves, written
at each ready launch (and each look at a ready server), so the planned KV tokens sit beside SGLang's own
``sglang:max_total_num_tokens`` in one query."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time

from ..host import render, write_textfile

# (name, help, the key of the plan_vs_actual record it comes from)
FAMILIES = (
    ("gpuserve_sglang_planned_max_total_num_tokens", "KV tokens the planner predicted for this launch",
     "predicted_max_total_num_tokens"),
    ("gpuserve_sglang_max_total_num_tokens", "KV tokens SGLang reports for this launch (/server_info)",
     "actual_max_total_num_tokens"),
    ("gpuserve_sglang_plan_ratio", "SGLang's KV tokens over the planned ones", "ratio"),
    ("gpuserve_sglang_plan_tolerance", "The relative difference the plan is allowed", "tolerance"),
    ("gpuserve_sglang_plan_within_tolerance", "1 when SGLang's KV tokens are within the tolerance of the plan",
     "within_tolerance"),
    ("gpuserve_sglang_mem_fraction_static", "The fraction SGLang resolved for this launch", "mem_fraction_static"),
    ("gpuserve_sglang_plan_written_timestamp_seconds", "When this file was written (a ready launch, or a look at one)",
     "written_at"),
)


def plan_metrics(server, record, mem_fraction_static=None, now=None):
    """The exposition text for one server (label ``server``) from plan_vs_actual's record; families without a value
    are left out. ``record`` None (no plan was given) still says the fraction and the time."""
    values = dict(record or {})
    values["mem_fraction_static"] = mem_fraction_static
    values["written_at"] = int(time.time() if now is None else now)
    return render([(name, help_text, [({"server": server}, values.get(key))]) for name, help_text, key in FAMILIES])


def write_plan_metrics(path, server, record, mem_fraction_static=None):
    """The text file, replaced atomically (a temporary name beside it that the collector skips: it reads *.prom
    only), readable by the exporter's account."""
    write_textfile(path, plan_metrics(server, record, mem_fraction_static))
