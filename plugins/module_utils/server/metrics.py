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


def _host_port(url_or_addr, default_port):
    """``http://10.0.3.101:30000/`` -> ``10.0.3.101:30000``; ``10.0.3.5`` -> ``10.0.3.5:<default_port>``."""
    rest = str(url_or_addr).split("://", 1)[-1].split("/", 1)[0]
    if rest.startswith("["):                                  # [v6]:port
        return rest if "]:" in rest else "%s:%d" % (rest, default_port)
    return rest if ":" in rest else "%s:%d" % (rest, default_port)


def scrape_targets(containers, layout, routers=(), nodes=(), exporter_port=9100):
    """Prometheus file_sd target groups ({job: [{"targets": [...], "labels": {...}}]}) for what the inventory deploys.

    ``containers``: records of playbooks/vars/containers.yml (name, node, url, metrics, server, address - none: the
    host of its url); ``layout``:
    group_layout's result (the ranks of each multi-node group); ``routers``: [{name, host, port}] (the router's
    Prometheus endpoint); ``nodes``: [{name, address}]. Jobs: ``gpuserve-sglang`` each serving server with metrics on
    (a group's rank 0 only: SGLang serves no API, so no /metrics, on the other ranks), at its URL; ``gpuserve-ct`` the
    node exporter of each container (the plan's textfile, whose samples carry their server), with its group and rank; ``gpuserve-router``;
    ``gpuserve-node`` the node exporter of each Proxmox node (nvidia_gpu_facts' textfile)."""
    ranks = dict((r["name"], (group, r["rank"])) for group, g in layout.items() for r in g["ranks"])
    out = {"gpuserve-sglang": [], "gpuserve-ct": [], "gpuserve-router": [], "gpuserve-node": []}
    for c in containers:
        labels = {"ct": c["name"], "server": str(c.get("server") or "sglang")}
        if c.get("node"):
            labels["node"] = str(c["node"])
        group, rank = ranks.get(c["name"], (None, None))
        if c.get("metrics") and (group is None or rank == 0):
            out["gpuserve-sglang"].append({"targets": [_host_port(c["url"], 30000)], "labels": labels})
        # the exporter's own samples say which server (the plan's textfile: label server; a CT may serve several)
        ct_labels = dict((k, v) for k, v in labels.items() if k != "server")
        if group is not None:
            ct_labels.update(group=group, rank=str(rank))
        address = c.get("address") or _host_port(c["url"], 30000).rsplit(":", 1)[0]     # default: where it serves
        out["gpuserve-ct"].append({"targets": [_host_port(address, exporter_port)], "labels": ct_labels})
    for r in routers:
        out["gpuserve-router"].append({"targets": [_host_port("%s:%s" % (r["host"], r["port"]), 29000)],
                                       "labels": {"router": str(r["name"])}})
    for n in nodes:
        out["gpuserve-node"].append({"targets": [_host_port(n["address"], exporter_port)], "labels": {"node": n["name"]}})
    return out
