# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Prometheus' text exposition format (0.0.4), for the node exporter's textfile collector: gauges with labels, and
the file written atomically under a name the collector skips until it is complete (it reads *.prom only).

The textfile directory is the exporter's (on Debian /var/lib/prometheus/node-exporter, under /var/lib/prometheus,
which the prometheus account owns and could swap for a link): root reaches it from / one component at a time without
following a link, and writes, renames and unlinks relative to that directory's descriptor."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

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


class TextfileDirError(OSError):
    """The textfile directory cannot be reached safely: the message names the path and the component."""


def open_dir(path):
    """A descriptor of directory ``path``, reached from / one component at a time, each opened O_DIRECTORY|O_NOFOLLOW
    relative to its parent and checked on its descriptor: a link anywhere on the way, or a component anyone may write
    (unless root's and sticky, as /tmp: no one can swap another's entry there), is refused (TextfileDirError).
    FileNotFoundError when a component is missing."""
    if not os.path.isabs(path):
        raise TextfileDirError("%s: the textfile directory must be an absolute path" % path)
    fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY)
    walked = ""
    try:
        for part in [p for p in path.split("/") if p and p != "."]:
            if part == "..":
                raise TextfileDirError("%s: no '..' on the way to the textfile directory" % path)
            walked += "/" + part
            try:
                nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as e:
                if os.path.islink(walked):
                    raise TextfileDirError("%s: %s is a link; root does not follow a link to the textfile directory "
                                           "(its owner could point it anywhere)" % (path, walked))
                raise e
            os.close(fd)
            fd = nxt
            st = os.fstat(fd)
            if st.st_mode & 0o002 and not (st.st_mode & 0o1000 and st.st_uid == 0):
                raise TextfileDirError("%s: %s may be written by anyone (mode %o): a textfile directory and its "
                                       "parents may be written by their owner only (or be root's and sticky, as /tmp)"
                                       % (path, walked, st.st_mode & 0o7777))
        return fd
    except BaseException:
        os.close(fd)
        raise


def write_textfile(path, text):
    """Replace ``path`` atomically, readable by the exporter's account (0644): ``write_private`` relative to the
    directory reached by ``open_dir`` (a temporary name created anew, renamed over the file)."""
    directory, name = os.path.split(path)
    if directory == os.sep or not name:
        write_private(path, text, mode=0o644)
        return
    dfd = open_dir(directory)
    try:
        write_private(name, text, mode=0o644, dir_fd=dfd)
    finally:
        os.close(dfd)


def remove_textfile(path):
    """Unlink ``path`` relative to its directory reached by ``open_dir`` (a link there is removed, never followed).
    Returns whether a file was removed; a missing directory or file is nothing to do."""
    directory, name = os.path.split(path)
    try:
        dfd = open_dir(directory)
    except FileNotFoundError:
        return False
    try:
        os.unlink(name, dir_fd=dfd)
        return True
    except FileNotFoundError:
        return False
    finally:
        os.close(dfd)
