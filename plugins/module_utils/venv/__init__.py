# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The uv venv builds: the lock, build ids and decisions, the marker, the import check (``uv``).

The package's public surface: import from here (``from ..venv import X``), not from its files."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from .seal import SealError, links_leaving, open_writers, record_mismatches, seal
from .uv import (BuildProgress, IMPORTS_CACHE, MARKER, UV_MIN, UV_MIN_WHY, VERIFY_CODE, build_id, decide,
                 find_argv, flash_attn_mismatches, gpu_view, imports_fingerprint, install_steps, max_build_jobs,
                 parse_flash_attn_wheel, parse_lock, parse_verify, prune, read_imports_cache, read_marker,
                 run_streaming, source_args, tool_problem, uv_version_problem, venv_argv, write_imports_cache,
                 write_marker)
from .compat import MAJOR_MINIMUM, TOOLKIT_DRIVER, driver_check, lock_cuda, lock_requirements, needs, parse_tags
from .builder import ARGUMENT_SPEC, MIN_PYTHON, REQUIRED_IF, VenvFailed, VenvManager

__all__ = (
    "ARGUMENT_SPEC", "BuildProgress", "IMPORTS_CACHE", "MAJOR_MINIMUM", "MARKER", "MIN_PYTHON", "REQUIRED_IF",
    "SealError", "TOOLKIT_DRIVER", "UV_MIN", "UV_MIN_WHY", "VERIFY_CODE", "VenvFailed", "VenvManager", "build_id",
    "decide", "driver_check", "find_argv", "flash_attn_mismatches", "gpu_view", "imports_fingerprint",
    "install_steps", "links_leaving", "lock_cuda", "lock_requirements", "max_build_jobs", "needs", "open_writers",
    "parse_flash_attn_wheel", "parse_lock", "parse_tags", "parse_verify", "prune", "read_imports_cache",
    "read_marker", "record_mismatches", "run_streaming", "seal", "source_args", "tool_problem", "uv_version_problem",
    "venv_argv", "write_imports_cache", "write_marker",
)
