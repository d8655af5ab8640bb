# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A finished build made root's before it is switched in, and what must hold of it first (module uv_venv). Stdlib
only.

The account that built it may still run something in it, so: nothing is changed by a path it could swap (``seal``
walks with directory descriptors, never following a link); a regular file with more than one hard link is refused
before it is re-owned (a link to a file outside the build would be re-owned with it); no link may point outside the
build but the venv's own interpreter links (``links_leaving``); no process may hold a file of it open for writing
(``open_writers``: a descriptor opened before the seal keeps writing after it); and every installed file must be
what its package's dist-info RECORD says (``record_mismatches``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import csv
import errno
import hashlib
import os
import stat


class SealError(Exception):
    """A build holds what sealing cannot make safe (a device, a FIFO, a socket): named, the build not used."""


_OPEN_ENTRY = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


def seal(path):
    """Make a finished build root's and read-only to everyone else; return the paths that carried a set-user-id,
    set-group-id or sticky bit (all cleared).

    The service account built it and may still be running something in it, so nothing here goes by a path it could
    swap: the tree is walked with directory file descriptors (``os.fwalk``, links not followed, each directory
    checked to be the one listed), every entry is opened relative to its directory with ``O_NOFOLLOW`` and changed
    through that descriptor (``fchown``, ``fchmod``); a link is re-owned itself (``follow_symlinks=False``), never
    its target. Modes lose group/other write and 07000: ``chown`` clears the set-id bits but a ``chmod`` with the
    old mode put them back, so a file the service made 06777 became a set-id root program."""
    cleared = []
    top = os.open(path, _OPEN_ENTRY | os.O_DIRECTORY)
    try:
        _seal_fd(top, path, cleared)
    finally:
        os.close(top)
    for root, dirs, files, dirfd in os.fwalk(path, follow_symlinks=False):
        for name in dirs + files:
            try:
                fd = os.open(name, _OPEN_ENTRY, dir_fd=dirfd)
            except OSError as e:
                if e.errno != errno.ELOOP:
                    raise
                os.chown(name, 0, 0, dir_fd=dirfd, follow_symlinks=False)   # a link: itself, never its target
                continue
            try:
                _seal_fd(fd, os.path.join(root, name), cleared)
            finally:
                os.close(fd)
    return cleared


def _seal_fd(fd, name, cleared):
    st = os.fstat(fd)
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
        raise SealError("%s: the build made a %s, which a venv never holds; remove the build directory and build again"
                        % (name, "FIFO" if stat.S_ISFIFO(st.st_mode) else "special file"))
    if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
        # checked before anything is changed: re-owning a hard link re-owns the file outside the build it names
        # (the router's key became root's 0600: the router could not start)
        raise SealError("%s has %d hard links: a venv's file has one (uv copies into it); a link to a file outside the "
                        "build would be re-owned by the seal. Nothing of it was changed; remove the build directory and "
                        "build again" % (name, st.st_nlink))
    if (st.st_uid, st.st_gid) != (0, 0):
        os.fchown(fd, 0, 0)
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o7000:
        cleared.append(name)
    if mode & 0o7022 or (st.st_uid, st.st_gid) != (0, 0):
        os.fchmod(fd, mode & ~0o7022)


def links_leaving(path):
    """The symbolic links in build ``path`` that point outside it (as "link -> target"), but the venv's own
    interpreter links (bin/python*, which point to the base interpreter of pyvenv.cfg's ``home``)."""
    real = os.path.realpath(path)
    home = None
    cfg = os.path.join(path, "pyvenv.cfg")
    if os.path.isfile(cfg):
        with open(cfg) as fh:
            for line in fh:
                key, sep, value = line.partition("=")
                if sep and key.strip() == "home":
                    home = os.path.realpath(value.strip())
    found = []
    for root, dirs, files, dirfd in os.fwalk(path, follow_symlinks=False):
        for name in dirs + files:
            try:
                target = os.readlink(name, dir_fd=dirfd)
            except OSError:
                continue                                   # not a link
            where = os.path.realpath(os.path.join(root, target))
            if where == real or where.startswith(real + os.sep):
                continue
            if (os.path.relpath(root, path) == "bin" and name.startswith("python") and home
                    and os.path.dirname(where) == home):
                continue
            found.append("%s -> %s" % (os.path.join(root, name), target))
    return found


def open_writers(path, own_pid=None):
    """The processes (other than ``own_pid``) that hold a descriptor open for writing on a file in build ``path``
    (as "pid <n> (<comm>): <file>"), read from /proc: a descriptor opened before the seal keeps writing after it."""
    real = os.path.realpath(path)
    found = []
    try:
        pids = [d for d in os.listdir("/proc") if d.isdigit()]
    except OSError:
        return found
    for pid in pids:
        if own_pid is not None and int(pid) == own_pid:
            continue
        fd_dir = "/proc/%s/fd" % pid
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(os.path.join(fd_dir, fd))
                if not (target == real or target.startswith(real + os.sep)):
                    continue
                with open("/proc/%s/fdinfo/%s" % (pid, fd)) as fh:
                    flags = int(next(ln for ln in fh if ln.startswith("flags:")).split()[1], 8)
                if flags & os.O_ACCMODE == os.O_RDONLY:
                    continue
                with open("/proc/%s/comm" % pid) as fh:
                    comm = fh.read().strip()
            except (OSError, StopIteration, ValueError):
                continue
            found.append("pid %s (%s): %s" % (pid, comm, target))
    return found


def record_mismatches(path, limit=20):
    """The installed files of build ``path`` whose content is none of what the dist-info RECORDs list for them
    (sha256, as ``name: recorded ..., found ...``), at most ``limit``. A RECORD is CSV (a name holding a comma is
    quoted); bytecode (.pyc) is compiled again at install and not compared. Two packages may ship the same path
    (the later install's file stands: it matches one of them); a file a RECORD lists that the installer left out is
    not there to run, and not reported."""
    wanted = {}
    for record in sorted(_records(path)):
        site = os.path.dirname(os.path.dirname(record))
        with open(record, newline="") as fh:
            for row in csv.reader(fh):
                # bytecode is compiled again at install (uv --compile-bytecode): a wheel's own .pyc is replaced
                if len(row) == 3 and row[1].startswith("sha256=") and not row[0].endswith(".pyc"):
                    name = os.path.normpath(os.path.join(site, row[0]))
                    wanted.setdefault(name, set()).add(row[1][len("sha256="):])
    found = []
    for name in sorted(wanted):
        try:
            got = _urlsafe_sha256(name)
        except FileNotFoundError:
            continue
        except OSError as e:
            got = "unreadable (%s)" % e.strerror
        if got not in wanted[name]:
            recorded = " or ".join(sorted(wanted[name]))
            found.append("%s: recorded sha256=%s, found %s" % (os.path.relpath(name, path), recorded, got))
            if len(found) >= limit:
                break
    return found


def _records(path):
    for root, dirs, files, _dirfd in os.fwalk(path, follow_symlinks=False):
        if root.endswith(".dist-info") and "RECORD" in files:
            yield os.path.join(root, "RECORD")


def _urlsafe_sha256(name):
    digest = hashlib.sha256()
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode("ascii")
