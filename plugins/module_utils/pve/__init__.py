# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Proxmox VE: CT config files and property strings, passthrough (``conf``); the API's options and tasks (``lxc``).

The package's public surface: import from here (``from ..pve import X``), not from its files."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from .conf import (CONFIG_LOCK_DIR, LOCK_MEANING, PveConfError, backup_config, devices, line_owner, locked_problem,
                   open_nodes_argv, parse, parse_property_string, passthrough_access, passthrough_check,
                   pending_changes, pending_over_devices, pending_problem, plan_devices, raw_device_lines, set_options,
                   set_raw_lines, take_config_lock, vmid_problem)
from .lxc import (API_ARGUMENT_SPEC, API_ENV, PveLxcError, config_changes, create_params, parse_prop, pve_value,
                  reconcile, same, wait_task, wanted_options)
from .manager import CONF_ARGUMENT_SPEC, CT_ARGUMENT_SPEC, ConfFailed, ConfManager, api_auth, ensure_ct

__all__ = (
    "API_ARGUMENT_SPEC", "API_ENV", "CONFIG_LOCK_DIR", "CONF_ARGUMENT_SPEC", "CT_ARGUMENT_SPEC", "ConfFailed",
    "ConfManager", "LOCK_MEANING", "PveConfError", "PveLxcError", "api_auth", "backup_config", "config_changes",
    "create_params", "devices", "ensure_ct", "line_owner", "locked_problem", "open_nodes_argv", "parse", "parse_prop",
    "parse_property_string", "passthrough_access", "passthrough_check", "pending_changes", "pending_over_devices",
    "pending_problem", "plan_devices", "pve_value", "raw_device_lines", "reconcile", "same", "set_options",
    "set_raw_lines", "take_config_lock", "vmid_problem", "wait_task", "wanted_options",
)
