# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""SGLang's start-up log as facts: the line rules (``rules``), the streaming parser and its handlers (``parser``,
``handlers``), the hints (``hints``) and whole logs and files (``reader``).

The package's public surface: import from here (``from ..logs import X``), not from its files."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from .kinds import DECISIVE, KINDS, MEMORY
from .rules import REDACTED, TRACEBACK_TAIL, redact
from .parser import LogParser
from .reader import (ROTATED, LogReadError, last_launch, launch_segments, open_copy, parse_file, parse_log,
                     parse_log_since, read_facts, rotated_copies)

__all__ = (
    "DECISIVE", "KINDS", "LogParser", "LogReadError", "MEMORY", "REDACTED", "ROTATED", "TRACEBACK_TAIL", "last_launch",
    "launch_segments", "open_copy", "parse_file", "parse_log", "parse_log_since", "read_facts", "redact", "rotated_copies",
)
