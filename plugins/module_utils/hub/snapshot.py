# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A verified, resumable snapshot of a Hugging Face Hub model repo in a local directory. Stdlib only.

Speaks the Hub's HTTP API (what huggingface_hub itself calls): /api/models/<repo>/revision/<rev> for the
commit, /api/models/<repo>/tree/<sha>/<dir> for paths, sizes and hashes (LFS sha256, git blob sha1), and
/<repo>/resolve/<sha>/<path> for content. A file is written to <path>.incomplete, continued with a Range
request after an interruption (from byte 0 when the server ignores Range), hashed while it streams, and
renamed into place only when size and hash match. A manifest written last marks the snapshot complete, so
a re-run at a pinned commit checks sizes on disk and sends nothing over the network.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import shutil
import stat
import threading
import time

from ..host import read_json, write_json
from .files import (MANIFEST, PROGRESS, HubError, Progress, acquire_lock, check_relpath, disk_shortfall, file_hash_ok,
                    files_to_fetch, is_commit, manifest_matches, selected, unique_listing)


class NotYet(Exception):
    """Check mode on a fresh host: the source cannot be read before the same run writes what it needs (the message
    says what would happen)."""


def read_token(token, token_file):
    """The token, from token_file when one is given (HubError "input" naming the file when it cannot be read)."""
    if not token_file:
        return token
    try:
        with open(token_file) as f:
            return f.read().strip()
    except (IOError, OSError) as e:
        raise HubError("input", "token_file=%s cannot be read (%s)" % (token_file, e.strerror))


def repair_owner(top, uid, gid, check_mode=False):
    """Give everything under top (links themselves, not their targets) to uid:gid; whether anything was (check
    mode: would be) changed.

    The owner account can write in the directory while this runs as root, so nothing is changed by a path it could
    swap: the tree is walked with directory file descriptors (``os.fwalk``, links not followed, each directory checked
    to be the one listed) and each entry is changed relative to its directory's descriptor with
    ``follow_symlinks=False`` - a subdirectory swapped for a link between the listing and the change moves the link's
    own owner, never a file outside the model directory (with ``os.walk`` and a chown by path it did)."""
    changed = False
    st = os.stat(top, follow_symlinks=False)
    if stat.S_ISLNK(st.st_mode):
        raise HubError("input", "%s is a link: the model directory must be a directory, not a link to one" % top)
    if (st.st_uid, st.st_gid) != (uid, gid):
        if not check_mode:
            os.chown(top, uid, gid, follow_symlinks=False)
        changed = True
    for _root, dirs, files, dirfd in os.fwalk(top, follow_symlinks=False):
        for name in dirs + files:
            st = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
            if (st.st_uid, st.st_gid) != (uid, gid):
                if not check_mode:
                    os.chown(name, uid, gid, dir_fd=dirfd, follow_symlinks=False)
                changed = True
    return changed


def snapshot(hub, repo_id, revision, local_dir, allow_patterns=(), ignore_patterns=(), verify="quick", workers=4,
             margin_bytes=0, check_mode=False, free_bytes=None, retries=5, retry_backoff=2.0):
    """Make local_dir a complete, verified copy of repo_id at revision (under an exclusive lock, see
    acquire_lock, unless check_mode). Returns a result dict."""
    policy = {"count": int(retries), "backoff": float(retry_backoff)}
    lock = None if check_mode else acquire_lock(local_dir, "%s@%s" % (repo_id, revision))
    try:
        live = read_json(os.path.join(local_dir, MANIFEST))
        if not check_mode and live and live.get("complete") is True and live.get("repo_id") == repo_id \
                and live.get("revision") != revision:
            sha = revision if is_commit(revision) else with_retries(
                lambda: hub.commit(repo_id, revision), "commit of %s" % revision, policy)
            if sha != live.get("revision"):
                return _staged(hub, repo_id, sha, local_dir, live, allow_patterns, ignore_patterns, verify, workers,
                               margin_bytes, free_bytes, policy)
            revision = sha           # resolved once
        return _snapshot(hub, repo_id, revision, local_dir, allow_patterns, ignore_patterns, verify, workers,
                         margin_bytes, check_mode, free_bytes, policy)
    finally:
        if lock is not None:
            os.close(lock)


def _staged(hub, repo_id, sha, local_dir, live, allow_patterns, ignore_patterns, verify, workers, margin_bytes,
            free_bytes, policy):
    """A new revision of a model in service: built beside it in <local_dir>.staging-<sha>, files unchanged since
    the live revision hard-linked (verified files are never modified), the rest downloaded; only when it is
    complete and verified is it switched in (the live directory becomes <local_dir>.previous, one kept)."""
    local_dir = local_dir.rstrip("/")
    staging = "%s.staging-%s" % (local_dir, sha[:12])
    if not os.path.isdir(staging):
        os.makedirs(staging)
    same = set((f["path"], f["size"], f.get("sha256") or f.get("oid")) for f in live.get("files", []))
    listed = unique_listing(with_retries(lambda: hub.tree(repo_id, sha), "file list of %s" % repo_id, policy),
                            "%s@%s" % (repo_id, sha[:12]))
    for f in listed:
        check_relpath(local_dir, f["path"])
        check_relpath(staging, f["path"])
        src = os.path.join(local_dir, f["path"])
        dst = os.path.join(staging, f["path"])
        if (f["path"], f["size"], f.get("sha256") or f.get("oid")) in same and os.path.isfile(src) \
                and not os.path.islink(src) and not os.path.lexists(dst):
            parent = os.path.dirname(dst)
            if not os.path.isdir(parent):
                os.makedirs(parent)
            os.link(src, dst)
    # progress where the poller looks (the live directory), while the files land in the staging directory
    result = _snapshot(hub, repo_id, sha, staging, allow_patterns, ignore_patterns, verify, workers, margin_bytes,
                       False, free_bytes, policy, progress_path=os.path.join(local_dir, PROGRESS))
    previous = local_dir + ".previous"
    if os.path.lexists(previous):
        shutil.rmtree(previous)
    os.rename(local_dir, previous)
    os.rename(staging, local_dir)
    result.update(changed=True, staged=True, switched_from=live.get("revision"), previous_path=previous)
    return result


def _free_bytes(local_dir):
    """Free bytes on the file system that holds (or will hold) ``local_dir``."""
    probe = local_dir
    while not os.path.isdir(probe):
        probe = os.path.dirname(probe) or "/"
    st = os.statvfs(probe)
    return st.f_bavail * st.f_frsize


def _local_sizes(local_dir, files):
    """The size of each of ``files`` already on disk (path -> bytes)."""
    sizes = {}
    for f in files:
        p = os.path.join(local_dir, f["path"])
        if os.path.isfile(p):
            sizes[f["path"]] = os.path.getsize(p)
    return sizes


def _snapshot(hub, repo_id, revision, local_dir, allow_patterns, ignore_patterns, verify, workers, margin_bytes,
              check_mode, free_bytes, policy, progress_path=None):
    """Make local_dir a complete, verified copy of repo_id at revision. Returns a result dict. Transient network
    errors (a reset, a timeout, 429/5xx) are retried as ``policy`` says (count, backoff)."""
    patterns = {"allow": list(allow_patterns), "ignore": list(ignore_patterns)}
    manifest_path = os.path.join(local_dir, MANIFEST)
    manifest = read_json(manifest_path)
    sha = revision if is_commit(revision) else None
    # Cheap path: a pinned commit whose manifest is complete and whose files all have their size: no network.
    if sha and manifest_matches(manifest, repo_id, sha, patterns) and verify == "quick":
        files = manifest["files"]
        for f in files:
            check_relpath(local_dir, f["path"])
        if all(os.path.exists(os.path.join(local_dir, f["path"])) and
               os.path.getsize(os.path.join(local_dir, f["path"])) == f["size"] for f in files):
            return dict(changed=False, revision=sha, files=files, fetched=[], repaired=[], bytes_transferred=0, network=False)
    if sha is None:
        sha = with_retries(lambda: hub.commit(repo_id, revision), "commit of %s" % revision, policy)
    listed = unique_listing(with_retries(lambda: hub.tree(repo_id, sha), "file list of %s" % repo_id, policy),
                            "%s@%s" % (repo_id, sha[:12]))
    for f in listed:
        check_relpath(local_dir, f["path"])      # every name, before anything is written, removed or fetched
    files = [f for f in listed if selected(f["path"], allow_patterns, ignore_patterns)]
    if not files:
        raise HubError("not_found", "%s@%s has no file matching allow_patterns=%s ignore_patterns=%s"
                       % (repo_id, revision, list(allow_patterns), list(ignore_patterns)))
    todo = set(files_to_fetch(files, _local_sizes(local_dir, files)))
    repaired = []
    if verify == "full" or not manifest_matches(manifest, repo_id, sha, patterns):
        # a file of the right size but never verified (or a full re-check asked): hash it
        for f in files:
            if f["path"] not in todo and not file_hash_ok(os.path.join(local_dir, f["path"]), f):
                todo.add(f["path"])
                repaired.append(f["path"])
    fetch = [f for f in files if f["path"] in todo]
    partial = sum(os.path.getsize(os.path.join(local_dir, f["path"]) + ".incomplete") for f in fetch
                  if os.path.exists(os.path.join(local_dir, f["path"]) + ".incomplete"))
    needed = sum(f["size"] for f in fetch) - partial
    if free_bytes is None:
        free_bytes = _free_bytes(local_dir)
    short = disk_shortfall(needed, free_bytes, margin_bytes)
    downloader = hub.prepare(local_dir) if fetch else None
    if fetch and short:
        raise HubError("disk", "not enough disk for %s@%s in %s: %d bytes to download + %d margin, %d free (%d short); "
                       "free space or choose another hf_model_dir. Nothing was written."
                       % (repo_id, sha[:12], local_dir, needed, margin_bytes, free_bytes, short))
    result = dict(changed=bool(fetch) or not manifest_matches(manifest, repo_id, sha, patterns), revision=sha,
                  files=files, fetched=[f["path"] for f in fetch], repaired=repaired, bytes_transferred=0, network=True,
                  bytes_needed=needed, downloader=downloader)
    if check_mode:
        return result
    if not os.path.isdir(local_dir):
        os.makedirs(local_dir)
    if os.path.exists(manifest_path) and fetch:
        os.remove(manifest_path)  # never "complete" while files are being replaced
    for f in fetch:
        p = os.path.join(local_dir, f["path"])
        if os.path.exists(p):
            os.remove(p)  # a corrupted or wrong-size file is never served: removed before its refetch
    prog = Progress(progress_path or os.path.join(local_dir, PROGRESS), sum(f["size"] for f in files),
                    sum(f["size"] for f in files if f["path"] not in todo) + partial)
    prog.write()
    result["retries"] = []
    if hub.batch:
        result["bytes_transferred"] = _fetch_batch(hub, repo_id, sha, fetch, local_dir, workers, prog)
    else:
        result["bytes_transferred"] = _fetch_threaded(hub, repo_id, sha, fetch, local_dir, workers, prog, policy,
                                                      result["retries"])
    # written last, as write_json writes (never through a link planted in a directory the service account owns)
    write_json(manifest_path, dict(complete=True, repo_id=repo_id, revision=sha, patterns=patterns, files=files,
                                   verified=time.time(), source=hub.endpoint, downloader=downloader), indent=1)
    prog.write("complete")
    hub.finish(local_dir)
    result["changed"] = True
    return result


def _fetch_batch(hub, repo_id, sha, fetch, local_dir, workers, prog):
    """A batch source (huggingface_hub, rsync) writes the files; each is then verified like our own downloads (a bad
    one removed, not served)."""
    try:
        moved = hub.fetch_all(repo_id, sha, fetch, local_dir, workers, prog) if fetch else 0
    except HubError:
        prog.write("failed")
        raise
    for f in fetch:
        p = os.path.join(local_dir, f["path"])
        if not file_hash_ok(p, f):
            size = os.path.getsize(p) if os.path.exists(p) else None
            if os.path.exists(p):
                os.remove(p)
            prog.write("failed")
            raise HubError("integrity", "%s: %s gave %s bytes that do not match the %d bytes and hash %s of %s; the "
                           "file was removed, nothing was served%s" % (
                               f["path"], hub.name, size, f["size"], f.get("sha256") or f.get("oid"),
                               hub.hashes_from,
                               " (the source is damaged: repair it there, or download from the Hub)"
                               if hub.hashes_from != "the Hub" else "; run again"))
        if os.path.exists(p + ".incomplete"):
            os.remove(p + ".incomplete")  # a partial of the builtin downloader, superseded
    return moved


def transient(exc):
    """A HubError worth retrying: the network broke (not a refusal no retry mends), or the server said 429 / 5xx."""
    return (exc.kind == "network" and not exc.permanent) or (exc.kind == "http" and exc.status in (429, 500, 502, 503, 504))


def with_retries(call, what, retries, prog=None, log=None):
    """call() with up to retries["count"] retries of transient errors, waiting retries["backoff"] * 2**n (at most
    a minute) between; each retry is noted in ``log`` (a list) and the progress file. A partial file is continued
    by the next attempt (Range), not restarted."""
    attempt = 0
    while True:
        try:
            return call()
        except HubError as e:
            if not transient(e) or attempt >= retries["count"]:
                if attempt:
                    e.args = ("%s (after %d retries)" % (e.args[0], attempt),)
                raise
            wait = min(retries["backoff"] * (2 ** attempt), 60.0)
            attempt += 1
            note = "%s: %s; retry %d of %d in %.1f s" % (what, e, attempt, retries["count"], wait)
            if log is not None:
                log.append({"what": what, "attempt": attempt, "error": str(e), "wait_s": wait})
            if prog is not None:
                prog.retry(note)
            time.sleep(wait)


def _fetch_threaded(hub, repo_id, sha, fetch, local_dir, workers, prog, retries, retries_log):
    errors = []
    moved = [0]
    lock = threading.Lock()
    queue = list(fetch)

    def worker():
        while True:
            with lock:
                if not queue or errors:
                    return
                f = queue.pop(0)
            try:
                n = with_retries(lambda: hub.fetch(repo_id, sha, f, os.path.join(local_dir, f["path"]), prog.add),
                                 f["path"], retries, prog, retries_log)
                with lock:
                    moved[0] += n
            except HubError as e:
                with lock:
                    errors.append(e)
                return

    threads = [threading.Thread(target=worker) for dummy in range(max(1, min(int(workers), len(fetch) or 1)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        prog.write("failed")
        raise errors[0]
    # every byte received, those of attempts that broke and were continued included (the progress counted them)
    return max(moved[0], prog.done - prog.start_done)
