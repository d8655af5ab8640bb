# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Prometheus' text exposition format (0.0.4), for the node exporter's textfile collector: gauges with labels, and
the file written atomically under a name the collector skips until it is complete (it reads *.prom only)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from .files import write_private

_LABEL_ESCAPES = (("\\", "\\\\"), ("\n", "\\n"), ('"', '\\"'))


def label_value(text):
    for old, new in _LABEL_ESCAPES:
        text = text.replace(old, new)
    return text


def number(value):
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    return repr(float(value))


def render(families):
    """[(name, help, [(labels, value), ...]), ...] as gauges; a family without samples is left out, a sample whose
    value is None too."""
    lines = []
    for name, help_text, samples in families:
        samples = [(labels, value) for labels, value in samples if value is not None]
        if not samples:
            continue
        lines.append("# HELP %s %s" % (name, help_text))
        lines.append("# TYPE %s gauge" % name)
        for labels, value in samples:
            text = ",".join('%s="%s"' % (k, label_value(str(v))) for k, v in sorted(labels.items()))
            lines.append("%s{%s} %s" % (name, text, number(value)))
    return "\n".join(lines) + "\n"


def write_textfile(path, text):
    """Replace ``path`` atomically (never through a link), readable by the exporter's account."""
    write_private(path, text, mode=0o644)
