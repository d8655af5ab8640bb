# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The host: its GPUs and driver as nvidia-smi and /proc say (``nvidia``), what a role lays out on it (``layout``),
and the collection's own small files, written one way (``files``).

The package's public surface: import from here (``from ..host import X``), not from its files."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from .files import has_control, read_json, secret_problem, write_json, write_private
from .nvidia import (LIB_DIRS, SMI_ARGV, dkms_has_module, gpu_facts, gpus_problem, headers_packages, parse_os_release,
                     parse_proc_devices, parse_smi_csv, policy_versions, read_node, select_gpus, userspace_versions)
from .layout import LayoutError, System, run
from .gpus import GpuReadError, gpu_metrics, read_gpus, read_node_facts
from .outcome import Failed
from .exposition import TextfileDirError, label_value, remove_textfile, render, write_textfile

__all__ = (
    "Failed", "GpuReadError", "LIB_DIRS", "LayoutError", "SMI_ARGV", "System", "TextfileDirError", "dkms_has_module",
    "gpu_facts",
    "gpu_metrics", "gpus_problem", "has_control", "headers_packages", "label_value", "parse_os_release",
    "parse_proc_devices", "parse_smi_csv", "policy_versions", "read_gpus", "read_json", "read_node", "read_node_facts",
    "remove_textfile", "render", "run", "secret_problem", "select_gpus", "userspace_versions", "write_json", "write_private",
    "write_textfile",
)
