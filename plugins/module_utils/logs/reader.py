# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Whole logs and log files: the contract dict of a text, the launch a log file's marker names, and a
file read from an offset up to a launch.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import gzip
import io
import os
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


# logrotate's copytruncate copies the log to <log>.1 and truncates it in place (SGLang's file stays open for
# appending, so it writes on at the new end); older copies move on to <log>.2, ... (compressed: <log>.2.gz with
# delaycompress). A launch whose start was copied away is read from the copy that holds its marker, then the newer
# copies, then the log; a copy is read only up to the launch's "ready" (the rest of it is what the server logged
# while it served: with rotations going on, up to sglang_server_log_keep x the size), the log itself whole.
ROTATED = ".1"
COPIES = 20         # <log>.1 ... <log>.20 (or .gz) looked at, newest first


def rotated_copies(path):
    """The copies logrotate made of ``path`` that exist, newest first (<log>.1, <log>.2 or <log>.2.gz, ...)."""
    out = []
    for n in range(1, COPIES + 1):
        for name in ("%s.%d" % (path, n), "%s.%d.gz" % (path, n)):
            if os.path.isfile(name):
                out.append(name)
                break
    return out


def open_copy(name):
    """A log or one of its copies, for reading bytes (a compressed copy decompressed as it is read)."""
    return gzip.open(name, "rb") if name.endswith(".gz") else open(name, "rb")


def _marker_ends_at(path, offset):
    """Whether the line that ends at byte ``offset`` of ``path`` is one of this collection's launch markers."""
    if offset <= 0:
        return False
    start = max(0, offset - 256)
    try:
        with open_copy(path) as fh:
            fh.seek(start)
            chunk = fh.read(offset - start)
    except (IOError, OSError, EOFError):
        return False
    if len(chunk) != offset - start or not chunk.endswith(b"\n"):
        return False
    return bool(_MARKER.match(chunk[:-1].rsplit(b"\n", 1)[-1].decode("utf-8", "replace")))


def launch_segments(path, offset, until=None):
    """Where the launch that starts at byte ``offset`` of ``path`` (after its marker) is now, as [(file, start, end)]
    and how: "here" (the log holds it), "rotated" (logrotate copied its start away: read from the copy that holds its
    marker, then the newer copies and the log from their first byte - unless ``until`` ends it inside the copy), "truncated" (shorter
    than the offset and no copy holds it: what is left, from the start) or "offset" (no marker there: read from the
    offset, as asked)."""
    here = bool(offset) and _marker_ends_at(path, offset)
    if offset and not here:
        copies = rotated_copies(path)
        for k, copy in enumerate(copies):
            if _marker_ends_at(copy, offset):
                if until is not None:
                    return [(copy, offset, until)], "rotated"
                newer = [(c, 0, None) for c in reversed(copies[:k])]
                return [(copy, offset, None)] + newer + [(path, 0, None)], "rotated"
    size = os.path.getsize(path)
    if offset and size < offset:
        return [(path, 0, None)], "truncated"
    return [(path, offset, until)], "here" if not offset or here else "offset"


def _last_marker(path):
    found = {"offset": 0, "id": None, "at": None, "by": "start"}
    starts = 0
    pos = 0
    with open_copy(path) as fh:
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


def last_launch(path):
    """Where the last launch in a log file starts: {"offset", "id", "at", "by"} - after the last launch marker this
    collection writes (by="marker"), or at a later ``server_args=`` line when SGLang started again without one (a
    systemd restart after a crash: by="server_args"), else the start of the file (by="start"). A log rotated while
    its launch served holds neither: then the launch is the last one of the newest copy that holds a marker
    (by="marker", rotated=True, copy=its name; parse_file with that offset reads it there and on in the log). Streams
    the file."""
    found = _last_marker(path)
    if found["by"] == "start":
        for copy in rotated_copies(path):
            before = _last_marker(copy)
            if before["by"] == "marker":
                return dict(before, rotated=True, copy=copy)
    return found


def parse_file(path, offset=0, encoding="utf-8", until=None):
    """Stream a log file from byte ``offset`` (to byte ``until``: one launch of several); memory does not depend on
    the file's length. A launch whose start logrotate copied away is read from the copy and on in the log
    (``log_rotated``); a log shorter than the offset that no copy explains is read from its start
    (``log_truncated``)."""
    parser = LogParser()
    segments, how = launch_segments(path, offset, until)
    for name, start, end in segments:
        copy = name != path
        with open_copy(name) as fh:
            fh.seek(start)
            pos = start
            for raw in fh:
                if (end is not None and pos >= end) or (copy and parser.ready):
                    break
                pos += len(raw)
                parser.feed(raw.decode(encoding, "replace"))
    res = parser.result()
    res["stale"] = parser.lines == 0
    res["log_truncated"] = how == "truncated"
    res["log_rotated"] = how == "rotated"
    res["end_offset"] = os.path.getsize(path)
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
