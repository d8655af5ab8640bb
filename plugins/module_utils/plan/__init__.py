# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The memory planner of SGLang 0.5.9: the model and args it reads (``model``), SGLang's sizing rules (``sizes``),
the plan (``memory``), its chart and replay (``chart``) and the search for args that fit a goal (``tune``).

The package's public surface: import from here (``from ..plan import X``), not from its files."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from .model import (CONTEXT_LENGTH_KEYS, GIB, HYBRID_SWA_ARCHS, KNOWN_ARCHITECTURES, MULTIMODAL_ARCHS,
                    MULTIMODAL_OFF_BY_DEFAULT, Model, PlanError, ServerArgs, bucket_defaults, gpus_from_profile)
from .sizes import (auto_mem_fraction_static, cell_size, checkpoint_bytes, kv_layers, mamba_per_request,
                    outside_static_gb, piecewise_capture_sizes, pp_layer_range, static_rest_gb)
from .chart import explain, free_when_sized_gb, replay_mismatch
from .memory import plan
from .tune import GOALS, GRID, TuneError, choose
from .picture import chart_svg, layout
from .release import DEFAULT_RELEASE, KNOWN_RELEASES, installed_release, resolve_release
from .request import PLAN_ARGUMENT_SPEC, PlanRefused, plan_request

__all__ = (
    "CONTEXT_LENGTH_KEYS", "DEFAULT_RELEASE", "GIB", "GOALS", "GRID", "HYBRID_SWA_ARCHS", "KNOWN_ARCHITECTURES",
    "KNOWN_RELEASES", "MULTIMODAL_ARCHS", "MULTIMODAL_OFF_BY_DEFAULT", "Model", "PLAN_ARGUMENT_SPEC", "PlanError",
    "PlanRefused", "ServerArgs", "TuneError", "auto_mem_fraction_static", "bucket_defaults", "cell_size",
    "chart_svg", "checkpoint_bytes", "choose", "explain", "free_when_sized_gb", "gpus_from_profile", "installed_release", "kv_layers",
    "layout", "mamba_per_request", "outside_static_gb", "piecewise_capture_sizes", "plan", "plan_request", "pp_layer_range",
    "replay_mismatch", "resolve_release", "static_rest_gb",
)
