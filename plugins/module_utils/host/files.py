# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The one way this collection writes and reads its own small files (launch records, progress files, build markers,
manifests, secrets). Standard library only.

The modules run as root in directories another account may own (a model directory given to the service account,
a venv's build directory): a write must never go through a link planted there. So a file is written to a new
temporary name beside it - created exclusively and never through a link (O_CREAT|O_EXCL|O_NOFOLLOW) - then renamed
over the file: a link at the file's own name is replaced, never followed, and a reader sees the old content or the
new, never a torn file.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import uuid


# The shortest key or token taken. A shorter one is guessable, and Ansible masks every occurrence of a no_log value
# in every result: with the key "k", a real failure came back as kind "********v_pool_oom" (#42 item 8).
MIN_SECRET_LENGTH = 16


def has_control(text):
    """Whether ``text`` holds a control character (C0 or DEL): a line break, a tab, an escape, a NUL."""
    return any(ord(c) < 32 or ord(c) == 127 for c in text)


def secret_problem(name, value):
    """Why ``value`` cannot be the secret ``name`` (an API key, a Hub token), or None when it is unset or usable."""
    if value is None or value == "":
        return None
    value = str(value)
    if len(value) < MIN_SECRET_LENGTH:
        return ("%s is %d characters long: use at least %d (e.g. the output of `openssl rand -hex 24`) - a short one "
                "is guessable, and Ansible masks every occurrence of it in every result, garbling the facts (a key "
                "'k' turns kv_pool_oom into ********v_pool_oom)" % (name, len(value), MIN_SECRET_LENGTH))
    if has_control(value):
        return "%s holds a control character (line break, tab, ...): use printable characters only" % name
    return None


def write_private(path, data, mode=0o600, gid=None, dir_fd=None):
    """Write ``data`` (bytes or str) to ``path`` atomically, never through a link, with ``mode`` (and group ``gid``);
    with ``dir_fd``, ``path`` is a name in that directory and every step is taken relative to its descriptor.
    On a failure the temporary file is removed and the error raised."""
    if not isinstance(data, bytes):
        data = data.encode("utf-8")
    tmp = "%s.%s.tmp" % (path, uuid.uuid4().hex[:8])
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode, dir_fd=dir_fd)
    try:
        try:
            os.fchmod(fd, mode)
            if gid is not None:
                os.fchown(fd, -1, gid)
            os.write(fd, data)
        finally:
            os.close(fd)
        os.rename(tmp, path, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except (IOError, OSError):
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except OSError:
            pass
        raise


def write_json(path, data, mode=0o644, indent=None):
    """A JSON document written as write_private does (keys sorted)."""
    write_private(path, json.dumps(data, sort_keys=True, indent=indent), mode)


def read_json(path):
    """A JSON file's content, or None when it is missing, unreadable or torn."""
    try:
        with open(path) as f:
            return json.load(f)
    except (IOError, OSError, ValueError):
        return None
