# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Whole logs and log files: the contract dict of a text, the launch a log file's marker names, and a
file read from an offset up to a launch.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import io
import re
from .parser import LogParser
from .rules import _strip


def parse_log(text):
    """Parse a whole SGLang start-up log text and return the contract dict."""
    if text is None:
        text = ""
    if not isinstance(text, str):
        raise TypeError("parse_log(text): text must be a str, not %s" % type(text).__name__)
    parser = LogParser()
    parser.feed_text(text)
    return parser.result()


_TS = re.compile(r"^\s*(?:\S.*?: )?\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")


def parse_log_since(text, since):
    """Parse only what was logged at or after ``since`` ("YYYY-MM-DD HH:MM:SS", SGLang's clock).

    Lines without a timestamp belong to the last timestamped line before them.  Returns the
    contract plus ``stale`` (true when nothing at all was logged since the marker)."""
    if not re.match(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$", since or ""):
        raise ValueError("since=%r: expected 'YYYY-MM-DD HH:MM:SS' (the clock SGLang logs with)" % (since,))
    parser = LogParser()
    taking = False
    for line in io.StringIO(text or "", newline=None):
        m = _TS.match(_strip(line))
        if m:
            taking = m.group(1) >= since
        if taking:
            parser.feed(line)
    res = parser.result()
    res["stale"] = parser.lines == 0
    return res


_MARKER = re.compile(r"^# gpuserve launch ([0-9a-f]+) at (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")


def last_launch(path):
    """Where the last launch in a log file starts: {"offset", "id", "at", "by"} - after the last launch marker this
    collection writes (by="marker"), or at a later ``server_args=`` line when SGLang started again without one (a
    systemd restart after a crash: by="server_args"), else the start of the file (by="start"). Streams the file."""
    found = {"offset": 0, "id": None, "at": None, "by": "start"}
    starts = 0
    pos = 0
    with open(path, "rb") as fh:
        for raw in fh:
            if raw.startswith(b"# gpuserve launch "):
                m = _MARKER.match(raw.decode("utf-8", "replace"))
                if m:
                    found = {"offset": pos + len(raw), "id": m.group(1), "at": m.group(2), "by": "marker"}
                    starts = 0
            elif b"server_args=ServerArgs(" in raw:
                starts += 1
                if starts > 1:
                    found = dict(found, offset=pos, by="server_args")
            pos += len(raw)
    return found


def parse_file(path, offset=0, encoding="utf-8", until=None):
    """Stream a log file from byte ``offset`` (to byte ``until``: one launch of several); memory does not depend on
    the file's length."""
    parser = LogParser()
    with open(path, "rb") as fh:
        fh.seek(0, 2)
        size = fh.tell()
        truncated = bool(offset) and size < offset
        fh.seek(0 if truncated else offset)
        pos = 0 if truncated else offset
        for raw in fh:
            if until is not None and not truncated and pos >= until:
                break
            pos += len(raw)
            parser.feed(raw.decode(encoding, "replace"))
    res = parser.result()
    res["stale"] = parser.lines == 0
    res["log_truncated"] = truncated
    res["end_offset"] = size
    return res


class LogReadError(Exception):
    """The log cannot be read, or ``since`` is not a marker: the message names the input."""


def read_facts(path=None, content=None, since=None, until=None):
    """What the sglang_log_facts module returns for a log file (``path``) or text (``content``): the contract dict
    of the launch ``since`` names (a byte offset, a time, ``all``, or by default a file's last launch), with
    ``stale`` and, for a file read from its last launch, ``launch``."""
    launch = None
    if since == "all":
        since = None
    elif since is None and path is not None:
        try:
            launch = last_launch(path)      # by default only the last launch: never an older one's error
        except (IOError, OSError) as exc:
            raise LogReadError("path=%s: cannot read the log: %s" % (path, exc))
        since = str(launch["offset"]) if launch["offset"] else None
    try:
        res = _read(path, content, since, until)
    except (IOError, OSError) as exc:
        raise LogReadError("path=%s: cannot read the log: %s" % (path, exc))
    except ValueError as exc:
        raise LogReadError(str(exc))
    if not since:
        res["stale"] = False
    if launch is not None:
        res["launch"] = launch
        res["stale"] = bool(launch["id"]) and res.get("lines", 0) == 0
    if res["stale"]:
        res["msg"] = "no output from this launch: nothing was logged after the marker %s" % (
            "of launch %s at %s" % (launch["id"], launch["at"]) if launch else since)
    return res


def _read(path, content, since, until):
    if path is not None:
        if since and not since.isdigit():
            with open(path, "rb") as fh:
                return parse_log_since(fh.read().decode("utf-8", "replace"), since)
        return parse_file(path, offset=int(since) if since else 0, until=until)
    if since and since.isdigit():
        res = parse_log(content.encode("utf-8")[int(since):].decode("utf-8", "replace"))
        res["stale"] = res["lines"] == 0
        return res
    if since:
        return parse_log_since(content, since)
    res = parse_log(content)
    res["stale"] = False
    return res
