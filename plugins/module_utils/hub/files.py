# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A model directory's files, stdlib only: names checked before anything is written (check_relpath), files
received through <path>.incomplete and hashed while they stream (receive), verified against the stated size and
hash (file_hash_ok), the progress file a poller reads, the lock that keeps two runs out of one directory, and the
error every source raises (HubError)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import fcntl
import fnmatch
import hashlib
import json
import os
import re
import socket
import stat
import threading
import time

from http.client import HTTPException

from ..host import has_control, read_json, write_json

MANIFEST = ".gpuserve-snapshot.json"
PROGRESS = ".gpuserve-progress.json"
CHUNK = 1024 * 1024
_SHA1_RE = "0123456789abcdef"


class HubError(Exception):
    """A Hub answer the operator must act on; `kind` is one of unauthorized, forbidden, not_found, http, network,
    integrity, disk, unsafe_path, locked. ``permanent``: a failure no retry can mend (ssh's host key refused, its
    key not authorized), said at once instead of after the retries' waits."""

    def __init__(self, kind, message, status=None, permanent=False):
        Exception.__init__(self, message)
        self.kind = kind
        self.status = status
        self.permanent = permanent


_REPO_PART = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?$")


def repo_id_problem(repo_id):
    """Why ``repo_id`` is not a Hub model id (<org>/<name>: letters, digits, '.', '_', '-', no '..' or '--', 96
    characters at most, as the Hub's own validation), or None."""
    parts = str(repo_id or "").split("/")
    if len(parts) != 2 or not all(_REPO_PART.match(x) for x in parts) or ".." in repo_id or "--" in repo_id \
            or len(repo_id) > 96:
        return ("repo_id=%r: expected <org>/<name> of letters, digits, '.', '_' and '-' (no spaces, no '..', no "
                "leading or trailing '/'), e.g. Qwen/Qwen3.6-27B" % (repo_id,))
    return None


def revision_problem(revision):
    """Why ``revision`` cannot be a commit, branch or tag name (git's check-ref-format rules that matter in a URL)."""
    r = str(revision or "")
    if not r or r.startswith(("/", "-")) or r.endswith(("/", ".", ".lock")) or ".." in r or "//" in r or \
            any(c in r for c in " ~^:?*[\\") or has_control(r):
        return ("revision=%r: not a commit sha, branch or tag name (no spaces, '..', '~^:?*[\\', control characters, "
                "or a leading '/' or '-'); pin the 40-character commit you validated" % (revision,))
    return None


def is_commit(revision):
    return len(revision) == 40 and all(c in _SHA1_RE for c in revision)


def _hasher(entry):
    """The hash the Hub states for a file: sha256 for LFS files, else the git blob sha1 (size-prefixed)."""
    if entry.get("sha256"):
        return hashlib.sha256()
    return hashlib.sha1(("blob %d\0" % entry["size"]).encode())


NAME_MAX = 255              # bytes in one file name (Linux file systems)
PART_SUFFIX = ".incomplete"  # a file is written under its name + this, then renamed


def unique_listing(listed, where):
    """The file list without repeats: an entry listed twice the same is taken once; a name listed twice with another
    size or hash is refused (HubError unsafe_path) - which one would be served?"""
    seen, out = {}, []
    for f in listed:
        key = (f["path"], f.get("size"), f.get("sha256") or f.get("oid"))
        if f["path"] in seen:
            if seen[f["path"]] != key:
                raise HubError("unsafe_path", "the file list of %s names %r twice, with different sizes or hashes: "
                                              "refused before anything was written or removed; the repo or the source "
                                              "manifest is broken or hostile" % (where, f["path"]))
            continue
        seen[f["path"]] = key
        out.append(f)
    return out


def check_relpath(local_dir, name):
    """Refuse a file name from a listing (the Hub's tree, a source manifest) that could leave local_dir: absolute,
    ``..`` / ``.`` / empty components, backslashes, NUL or other control characters, or a path that resolves
    outside local_dir through a link already there. Returns the joined path."""
    why = None
    if not isinstance(name, str) or not name:
        why = "an empty name"
    elif name.startswith("/"):
        why = "an absolute path"
    elif "\\" in name:
        why = "a backslash"
    elif has_control(name):
        why = "a NUL or control character"
    elif any(part in ("", ".", "..") for part in name.split("/")):
        why = "an empty, '.' or '..' component"
    elif any(len(part.encode("utf-8")) > NAME_MAX for part in name.split("/")[:-1]) \
            or len(name.split("/")[-1].encode("utf-8")) > NAME_MAX - len(PART_SUFFIX):
        why = ("a component longer than a file name can be (%d bytes; the file's own name at most %d, as it is "
               "written as <name>%s first)" % (NAME_MAX, NAME_MAX - len(PART_SUFFIX), PART_SUFFIX))
    if why is None:
        base = os.path.realpath(local_dir)
        resolved = os.path.realpath(os.path.join(base, name))
        if not resolved.startswith(base.rstrip("/") + "/"):
            why = "a path that resolves outside the model directory (%s)" % resolved
    if why is not None:
        raise HubError("unsafe_path", "the file list names %r, %s: refused before anything was written or removed in "
                                      "%s; the repo or the source manifest is broken or hostile" % (name, why, local_dir))
    return os.path.join(local_dir, name)


def _open_nofollow(path, flags, mode=0o644, dir_fd=None):
    """Open a file we write or read back, never through a symlink planted in its place."""
    return os.fdopen(os.open(path, flags | os.O_NOFOLLOW, mode, dir_fd=dir_fd), "rb" if flags == os.O_RDONLY else "ab")


def dirs_beneath(base, parts, each=None, label=None):
    """The descriptor of ``base``/``parts``..., reached from ``base`` one directory at a time: each made when missing
    (0755) and opened relative to its parent's descriptor with O_NOFOLLOW, ``each(fd)`` called on it. A component
    that is a link or not a directory (one the model's owner swapped in while root works there) is HubError
    unsafe_path (naming ``label``, else ``base``), never followed. The caller closes the descriptor."""
    fd = os.open(base or "/", os.O_RDONLY | os.O_DIRECTORY)
    try:
        for comp in parts:
            try:
                os.mkdir(comp, 0o755, dir_fd=fd)
            except OSError as e:
                if e.errno != errno.EEXIST:
                    raise
            nfd = os.open(comp, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nfd
            if each is not None:
                each(fd)
    except OSError as e:
        os.close(fd)
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            raise HubError("unsafe_path", "%s: a directory on its way (%s) is now a link or not a directory - changed "
                                          "in the model directory while this run wrote it; refused, nothing written "
                                          "through it" % (label or base, "/".join(parts)))
        raise
    return fd


def open_parent_beneath(dest, relpath):
    """(descriptor, name): the directory ``dest`` (= <model directory>/``relpath``) is written in, reached from the
    model directory by ``dirs_beneath``. The names were checked before the run wrote anything (check_relpath), but
    the model's owner can write in the directory meanwhile: a link swapped into an intermediate directory is refused
    (HubError unsafe_path), never followed - with a path it sent root's write elsewhere."""
    parts = relpath.split("/")
    if not dest.endswith("/" + relpath):
        raise ValueError("%s is not <directory>/%s" % (dest, relpath))
    return dirs_beneath(dest[:len(dest) - len(relpath) - 1], parts[:-1], label=dest), parts[-1]


def partial_size(part, size):
    """Bytes of an earlier partial copy worth continuing (one longer than the file is removed: start over)."""
    try:
        st = os.lstat(part)
    except OSError:
        return 0
    have = st.st_size if stat.S_ISREG(st.st_mode) else 0
    if have > size or not stat.S_ISREG(st.st_mode):
        os.remove(part)
        return 0
    return have


def receive(part, dest, entry, read, have, progress, read_error, integrity_message):
    """Write a file through `part` (``dest`` + a suffix): keep its first `have` bytes (0: start over), append what
    read(n) yields (read None: nothing left to read), hash the whole file while writing, and rename it to dest only
    when size and hash match the entry. read_error(exc, bytes_done) and integrity_message(size, got, want) word the
    failures. Every operation is relative to the descriptor of dest's directory (open_parent_beneath). Returns the
    bytes read."""
    if not part.startswith(dest):
        raise ValueError("%s is not %s + a suffix" % (part, dest))
    h = _hasher(entry)
    pfd, name = open_parent_beneath(dest, entry["path"])
    part_name = name + part[len(dest):]
    try:
        if have:
            with _open_nofollow(part_name, os.O_RDONLY, dir_fd=pfd) as f:
                for c in iter(lambda: f.read(CHUNK), b""):
                    h.update(c)
        moved = 0
        with _open_nofollow(part_name, os.O_WRONLY | os.O_CREAT | (os.O_APPEND if have else os.O_TRUNC),
                            dir_fd=pfd) as out:
            if read is not None:
                try:
                    for c in iter(lambda: read(CHUNK), b""):
                        out.write(c)
                        h.update(c)
                        moved += len(c)
                        if progress:
                            progress(len(c))
                except (HTTPException, OSError) as e:
                    raise read_error(e, have + moved)
            out.flush()
            size = os.fstat(out.fileno()).st_size
        if read is not None and size < entry["size"]:
            # the stream ended early (a reset that http.client reports as EOF, not IncompleteRead): a broken transfer,
            # not a bad file - the partial copy is kept and the next attempt continues it with Range
            raise read_error(EOFError("the connection closed after %d of %d bytes" % (size, entry["size"])), size)
        want = entry.get("sha256") or entry.get("oid")
        got = h.hexdigest()
        if size != entry["size"] or (want and got != want):
            os.remove(part_name, dir_fd=pfd)
            raise HubError("integrity", integrity_message(size, got, want))
        os.rename(part_name, name, src_dir_fd=pfd, dst_dir_fd=pfd)
    finally:
        os.close(pfd)
    return moved


def selected(path, allow_patterns, ignore_patterns=()):
    if allow_patterns and not any(fnmatch.fnmatch(path, p) for p in allow_patterns):
        return False
    return not any(fnmatch.fnmatch(path, p) for p in ignore_patterns)


def files_to_fetch(files, local_sizes):
    """Paths whose local copy is missing or has the wrong size (complete files of the right size are kept)."""
    return [f["path"] for f in files if local_sizes.get(f["path"]) != f["size"]]


def disk_shortfall(needed_bytes, free_bytes, margin_bytes):
    """Bytes missing for the download plus margin (0: it fits)."""
    return max(0, int(needed_bytes) + int(margin_bytes) - int(free_bytes))


def read_manifest(model_dir):
    """The manifest of the snapshot in ``model_dir`` (revision, files, sizes, hashes), or None: its one reader."""
    return read_json(os.path.join(model_dir, MANIFEST))


def manifest_matches(manifest, repo_id, sha, patterns):
    return (isinstance(manifest, dict) and manifest.get("complete") is True and manifest.get("repo_id") == repo_id
            and manifest.get("revision") == sha and manifest.get("patterns") == patterns)


def bytes_under(top, keep=None):
    """Bytes of the files under a directory (those whose name `keep` accepts)."""
    total = 0
    for root, _dirs, names in os.walk(top):
        for n in names:
            if keep is None or keep(n):
                try:
                    total += os.path.getsize(os.path.join(root, n))
                except OSError:
                    pass  # renamed or removed while we looked
    return total


def file_hash_ok(path, entry):
    """Full check of a local file against the Hub's size and hash (sha256 for LFS files, git blob sha1 otherwise)."""
    try:
        size = os.path.getsize(path)
    except OSError:
        return False
    if size != entry["size"]:
        return False
    want = entry.get("sha256") or entry.get("oid")
    if not want:
        return True
    h = _hasher(entry)
    with open(path, "rb") as f:
        for c in iter(lambda: f.read(CHUNK), b""):
            h.update(c)
    return h.hexdigest() == want


class Progress(object):
    """Bytes done / total / rate, written to a JSON file a poller can read (at most once a second)."""

    def __init__(self, path, total, done=0):
        self.path = path
        self.total = total
        self.done = done
        self.t0 = time.time()
        self.start_done = done
        self.last = 0.0
        self.lock = threading.Lock()

    def add(self, n):
        with self.lock:
            self.done += n
            if time.time() - self.last >= 1.0:
                self.write()

    def set(self, done):
        with self.lock:
            self.done = done
            if time.time() - self.last >= 1.0:
                self.write()

    retries = 0
    last_retry = None

    def retry(self, note):
        """A transient error being retried: counted and said in the progress file (the poller prints it)."""
        with self.lock:
            self.retries += 1
            self.last_retry = note
            self.write()

    def write(self, state="downloading"):
        self.last = time.time()
        elapsed = max(self.last - self.t0, 1e-6)
        doc = {"state": state, "bytes_done": self.done, "bytes_total": self.total,
               "rate_bytes_per_s": int((self.done - self.start_done) / elapsed), "updated": self.last,
               "retries": self.retries, "last_retry": self.last_retry}
        if self.path:
            write_json(self.path, doc)   # never through a link planted in a directory the service account owns
        return doc


def lock_path(local_dir):
    """The lock of a model directory: beside it (never inside what SGLang loads), one per directory."""
    local_dir = os.path.abspath(local_dir).rstrip("/")
    return os.path.join(os.path.dirname(local_dir), ".%s.gpuserve-lock" % os.path.basename(local_dir))


def lock_holder(local_dir):
    """Who holds the lock of local_dir ({pid, host, what, since}), or None - read only, nothing written (check mode)."""
    path = lock_path(local_dir)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except (IOError, OSError):
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return None
    except (IOError, OSError):
        try:
            return json.loads(os.pread(fd, 4096, 0).decode("utf-8") or "{}")
        except ValueError:
            return {}
    finally:
        os.close(fd)


def acquire_lock(local_dir, what):
    """An exclusive, non-blocking lock on local_dir for this process (released when the file is closed or the
    process dies); a second run gets HubError("locked") naming who holds it since when."""
    path = lock_path(local_dir)
    parent = os.path.dirname(path)
    if not os.path.isdir(parent):
        os.makedirs(parent)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except (IOError, OSError):
        try:
            holder = json.loads(os.pread(fd, 4096, 0).decode("utf-8") or "{}")
        except ValueError:
            holder = {}
        os.close(fd)
        raise HubError("locked", "%s is being written by another run (pid %s on %s, %s since %s): wait for it to end, "
                                 "or stop it; nothing was changed" % (
                                     local_dir, holder.get("pid", "?"), holder.get("host", "?"),
                                     holder.get("what", "?"), holder.get("since", "?")))
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "what": what,
                              "since": time.strftime("%Y-%m-%d %H:%M:%S")}).encode("utf-8"), 0)
    return fd
