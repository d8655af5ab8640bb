# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The SGLang server: its argv and args (``argv``), its processes and launch record (``process``), the watch of a
launch (``watch``), the systemd unit (``systemd``), the last good configuration (``change``), multi-node groups
(``group``) and the router (``router``).

The package's public surface: import from here (``from ..server import X``), not from its files."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from .argv import (ArgvError, SECRET_ARGS, args_from_argv, config_text, control_problems, disaggregation_args,
                   disaggregation_problems, helper_rank, is_loopback, local_url, name_problems, numeric_args, secret_names,
                   server_argv, unit_name_problems, unit_value, validate_args)
from .process import (config_hash, failure_message, http_get, keep_running, launch, load_salt, owned_by, pid_alive,
                      plan_vs_actual, port_conflict, port_in_use_failure, port_owner, secret_digest, stop,
                      write_secret_config, write_state)
from .watch import launch_facts, server_info, watch, write_progress
from .systemd import (NAMESPACING, environment_file, exec_failure, systemctl, systemd_exec_line, systemd_start,
                      unit_journal, unit_show)
from .change import LastGood, check_args
from .manager import (ARGUMENT_SPEC, REQUIRED_IF, ServerFailed, ServerManager, read_launch_record, secret_values,
                      state_path)
from .group import (connect, dist_init_addr, group_layout, group_status, interface_to, listen, manifest_digest,
                    pd_mismatches, rank_mismatches, restart_command, serving, source_address)
from .router import (RouterClient, RouterError, normalize_url, pd_problems, reconcile, router_argv, router_problems,
                     worker_url_problem)
from .metrics import FAMILIES as PLAN_METRICS, plan_metrics, scrape_targets, write_plan_metrics
from .bench import BENCH_ARGUMENT_SPEC, BenchFailed, BenchRun, bench_argv, bench_record_path, bench_summary, parse_bench

__all__ = (
    "ARGUMENT_SPEC", "BENCH_ARGUMENT_SPEC", "BenchFailed", "BenchRun", "bench_argv", "bench_record_path", "bench_summary",
    "parse_bench", "ArgvError", "LastGood", "NAMESPACING", "PLAN_METRICS", "REQUIRED_IF", "RouterClient",
    "RouterError", "SECRET_ARGS", "ServerFailed", "ServerManager", "args_from_argv", "check_args", "config_hash",
    "config_text", "connect", "control_problems", "disaggregation_args", "disaggregation_problems", "dist_init_addr", "environment_file", "exec_failure",
    "failure_message", "group_layout", "group_status", "helper_rank", "http_get", "interface_to", "is_loopback",
    "keep_running", "launch", "launch_facts", "listen", "load_salt", "local_url", "manifest_digest", "name_problems", "normalize_url", "numeric_args",
    "owned_by", "pd_mismatches", "pd_problems", "pid_alive", "plan_metrics", "plan_vs_actual", "scrape_targets",
    "port_conflict", "port_in_use_failure", "port_owner",
    "rank_mismatches", "read_launch_record", "reconcile", "restart_command", "router_argv", "router_problems",
    "secret_digest", "secret_names", "secret_values", "server_argv", "server_info", "serving", "source_address", "state_path", "stop", "systemctl",
    "systemd_exec_line", "systemd_start", "unit_journal", "unit_name_problems", "unit_show", "unit_value",
    "validate_args", "watch", "worker_url_problem", "write_plan_metrics", "write_progress", "write_secret_config",
    "write_state",
)
