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

import fnmatch
import hashlib
import json
import os
import threading
import time

try:  # Python 3
    from http.client import HTTPConnection, HTTPException, HTTPSConnection
    from urllib.parse import quote, urlsplit
except ImportError:  # pragma: no cover  (Python 2 is not a target; keeps the sanity import test quiet)
    HTTPConnection = HTTPSConnection = quote = urlsplit = None

    class HTTPException(Exception):
        pass

MANIFEST = ".gpuserve-snapshot.json"
PROGRESS = ".gpuserve-progress.json"
CHUNK = 1024 * 1024
_SHA1_RE = "0123456789abcdef"


class HTTPStatusError(Exception):
    def __init__(self, code):
        Exception.__init__(self, "HTTP %s" % code)
        self.code = code


def _proxy_for(scheme, host):
    """The proxy from HTTPS_PROXY/HTTP_PROXY (either case) unless NO_PROXY covers the host."""
    no_proxy = os.environ.get("NO_PROXY", os.environ.get("no_proxy", ""))
    for entry in (e.strip() for e in no_proxy.split(",") if e.strip()):
        if entry == "*" or host == entry.lstrip(".") or host.endswith("." + entry.lstrip(".")):
            return None
    name = "HTTPS_PROXY" if scheme == "https" else "HTTP_PROXY"
    return os.environ.get(name) or os.environ.get(name.lower()) or None


def http_get(url, headers, timeout, max_redirects=5):
    """GET with http.client (stdlib): redirects followed (the Authorization header is dropped when the host
    changes, as the Hub's CDN redirects need), proxies from the environment. Returns the open response
    (status 2xx); raises HTTPStatusError for any other final status."""
    headers = dict(headers)
    for dummy in range(max_redirects + 1):
        u = urlsplit(url)
        port = u.port or (443 if u.scheme == "https" else 80)
        proxy = _proxy_for(u.scheme, u.hostname)
        path = (u.path or "/") + ("?" + u.query if u.query else "")
        if proxy:
            p = urlsplit(proxy if "://" in proxy else "http://" + proxy)
            if u.scheme == "https":
                conn = HTTPSConnection(p.hostname, p.port or 3128, timeout=timeout)
                conn.set_tunnel(u.hostname, port)
            else:
                conn = HTTPConnection(p.hostname, p.port or 3128, timeout=timeout)
                path = url
        else:
            cls = HTTPSConnection if u.scheme == "https" else HTTPConnection
            conn = cls(u.hostname, port, timeout=timeout)
        conn.request("GET", path, headers=headers)
        resp = conn.getresponse()
        if resp.status in (301, 302, 303, 307, 308) and resp.getheader("Location"):
            location = resp.getheader("Location")
            resp.read()
            conn.close()
            nxt = location if "://" in location else "%s://%s%s" % (u.scheme, u.netloc, location)
            if urlsplit(nxt).hostname != u.hostname:
                headers.pop("Authorization", None)
            url = nxt
            continue
        if not 200 <= resp.status < 300:
            resp.read()
            conn.close()
            raise HTTPStatusError(resp.status)
        return resp
    raise HTTPStatusError(310)


class HubError(Exception):
    """A Hub answer the operator must act on; `kind` is one of unauthorized, forbidden, not_found, http, network,
    integrity, disk."""

    def __init__(self, kind, message, status=None):
        Exception.__init__(self, message)
        self.kind = kind
        self.status = status


def explain_http(status, what, repo_id, revision):
    if status == 401:
        return HubError("unauthorized", "401 Unauthorized for %s of %s@%s: the repo is private, gated or does not exist; "
                        "give a token that can read it (hf_model_token / hf_model_token_file) and check the repo id"
                        % (what, repo_id, revision), 401)
    if status == 403:
        return HubError("forbidden", "403 Forbidden for %s of %s@%s: the token is valid but may not read this repo (a gated "
                        "model: accept its terms on the Hub with the token's account, or use a token with read access)"
                        % (what, repo_id, revision), 403)
    if status == 404:
        return HubError("not_found", "404 Not Found for %s of %s@%s: no such repo or revision; check hf_model_repo_id and "
                        "hf_model_revision (a branch, tag or full commit sha)" % (what, repo_id, revision), 404)
    return HubError("http", "HTTP %s for %s of %s@%s" % (status, what, repo_id, revision), status)


def is_commit(revision):
    return len(revision) == 40 and all(c in _SHA1_RE for c in revision)


def _hasher(entry):
    """The hash the Hub states for a file: sha256 for LFS files, else the git blob sha1 (size-prefixed)."""
    if entry.get("sha256"):
        return hashlib.sha256()
    return hashlib.sha1(("blob %d\0" % entry["size"]).encode())


def _partial_size(part, size):
    """Bytes of an earlier partial copy worth continuing (one longer than the file is removed: start over)."""
    have = os.path.getsize(part) if os.path.exists(part) else 0
    if have > size:
        os.remove(part)
        return 0
    return have


def _receive(part, dest, entry, read, have, progress, read_error, integrity_message):
    """Write a file through `part`: keep its first `have` bytes (0: start over), append what read(n) yields (read
    None: nothing left to read), hash the whole file while writing, and rename it to dest only when size and hash
    match the entry. read_error(exc, bytes_done) and integrity_message(size, got, want) word the failures.
    Returns the bytes read."""
    h = _hasher(entry)
    if have:
        with open(part, "rb") as f:
            for c in iter(lambda: f.read(CHUNK), b""):
                h.update(c)
    parent = os.path.dirname(dest)
    if parent and not os.path.isdir(parent):
        os.makedirs(parent)
    moved = 0
    with open(part, "ab" if have else "wb") as out:
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
    size = os.path.getsize(part)
    want = entry.get("sha256") or entry.get("oid")
    got = h.hexdigest()
    if size != entry["size"] or (want and got != want):
        os.remove(part)
        raise HubError("integrity", integrity_message(size, got, want))
    os.rename(part, dest)
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


def manifest_matches(manifest, repo_id, sha, patterns):
    return (isinstance(manifest, dict) and manifest.get("complete") is True and manifest.get("repo_id") == repo_id
            and manifest.get("revision") == sha and manifest.get("patterns") == patterns)


class Hub(object):
    def __init__(self, endpoint, token=None, timeout=60, user_agent="gpuserve.sglang-hf_snapshot"):
        self.endpoint = endpoint.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.user_agent = user_agent

    def _open(self, url, headers=None):
        h = {"User-Agent": self.user_agent}
        if self.token:
            h["Authorization"] = "Bearer %s" % self.token
        h.update(headers or {})
        return http_get(url, h, self.timeout)

    def _json(self, url, what, repo_id, revision):
        try:
            r = self._open(url)
            try:
                return json.loads(r.read().decode("utf-8"))
            finally:
                r.close()
        except HTTPStatusError as e:
            raise explain_http(e.code, what, repo_id, revision)
        except (HTTPException, OSError, ValueError) as e:
            raise HubError("network", "cannot reach %s for %s of %s@%s: %s" % (self.endpoint, what, repo_id, revision, e))

    def commit(self, repo_id, revision):
        doc = self._json("%s/api/models/%s/revision/%s" % (self.endpoint, repo_id, quote(revision, safe="")),
                         "the revision", repo_id, revision)
        sha = doc.get("sha")
        if not sha:
            raise HubError("http", "the Hub answered no commit for %s@%s" % (repo_id, revision))
        return sha

    def tree(self, repo_id, sha, directory=""):
        """Every file under `directory` at commit `sha`: [{path, size, sha256 (LFS) or None, oid}]."""
        url = "%s/api/models/%s/tree/%s/%s" % (self.endpoint, repo_id, sha, quote(directory))
        out = []
        for e in self._json(url, "the file list", repo_id, sha):
            if e.get("type") == "directory":
                out.extend(self.tree(repo_id, sha, e["path"]))
            elif e.get("type") == "file":
                lfs = e.get("lfs") or {}
                out.append({"path": e["path"], "size": int(lfs.get("size", e.get("size", 0))),
                            "sha256": lfs.get("oid") or lfs.get("sha256"), "oid": e.get("oid")})
        return out

    def fetch(self, repo_id, sha, entry, dest, progress=None):
        """Download one file into dest (via dest.incomplete, resuming it), verified. Returns bytes transferred."""
        part = dest + ".incomplete"
        have = _partial_size(part, entry["size"])
        url = "%s/%s/resolve/%s/%s" % (self.endpoint, repo_id, sha, quote(entry["path"]))
        headers = {"Range": "bytes=%d-" % have} if have else {}
        try:
            resp = self._open(url, headers)
        except HTTPStatusError as e:
            if e.code == 416 and have == entry["size"]:
                resp = None
            else:
                raise explain_http(e.code, entry["path"], repo_id, sha)
        except (HTTPException, OSError, ValueError) as e:
            raise HubError("network", "cannot reach %s for %s: %s" % (self.endpoint, entry["path"], e))
        if resp is not None and resp.status != 206:
            have = 0  # the server ignored Range: start over
        try:
            return _receive(
                part, dest, entry, resp.read if resp is not None else None, have, progress,
                lambda e, done: HubError("network", "%s: the transfer broke after %d bytes (%s); run again to resume"
                                         % (entry["path"], done, e)),
                lambda size, got, want: "%s: got %d bytes with hash %s, the Hub says %d bytes and %s; the partial file "
                                        "was removed, run again" % (entry["path"], size, got, entry["size"], want))
        finally:
            if resp is not None:
                resp.close()


class LocalSource(object):
    """A snapshot already on this machine (an NFS export, or the copy from the node a deployment moves off),
    described by the manifest hf_model wrote there: the same interface as Hub, no network."""

    def __init__(self, source_dir):
        self.source_dir = source_dir
        self.endpoint = source_dir
        self.manifest = read_json(os.path.join(source_dir, MANIFEST))

    def _manifest(self, repo_id):
        m = self.manifest
        if not isinstance(m, dict) or m.get("complete") is not True:
            raise HubError("not_found", "source_dir=%s has no complete %s (a snapshot made by hf_model/hf_snapshot); "
                           "copy the whole directory, manifest included, or download from the Hub" % (self.source_dir, MANIFEST))
        if m.get("repo_id") != repo_id:
            raise HubError("not_found", "source_dir=%s holds %s, not %s" % (self.source_dir, m.get("repo_id"), repo_id))
        return m

    def commit(self, repo_id, revision):
        m = self._manifest(repo_id)
        if revision != m["revision"] and (is_commit(revision) or revision not in ("main", "")):
            raise HubError("not_found", "source_dir=%s holds %s@%s, not the requested revision %s"
                           % (self.source_dir, repo_id, m["revision"], revision))
        return m["revision"]

    def tree(self, repo_id, sha, directory=""):
        m = self._manifest(repo_id)
        if sha != m["revision"]:
            raise HubError("not_found", "source_dir=%s holds %s@%s, not the requested revision %s"
                           % (self.source_dir, repo_id, m["revision"], sha))
        return [dict(f) for f in m["files"]]

    def fetch(self, repo_id, sha, entry, dest, progress=None):
        """Copy one file (continuing a partial copy), verified like a download."""
        src = os.path.join(self.source_dir, entry["path"])
        part = dest + ".incomplete"
        have = _partial_size(part, entry["size"])

        def cannot_copy(e, _done=None):
            return HubError("not_found", "%s: cannot copy from %s (%s)" % (entry["path"], self.source_dir, e))

        try:
            with open(src, "rb") as fin:
                fin.seek(have)
                return _receive(
                    part, dest, entry, fin.read, have, progress, cannot_copy,
                    lambda size, got, want: "%s in %s: %d bytes with hash %s, the manifest says %d bytes and %s; the "
                                            "source is damaged, nothing was served"
                                            % (entry["path"], self.source_dir, size, got, entry["size"], want))
        except (IOError, OSError) as e:
            raise cannot_copy(e)


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

    def write(self, state="downloading"):
        self.last = time.time()
        elapsed = max(self.last - self.t0, 1e-6)
        doc = {"state": state, "bytes_done": self.done, "bytes_total": self.total,
               "rate_bytes_per_s": int((self.done - self.start_done) / elapsed), "updated": self.last}
        if self.path:
            tmp = self.path + ".tmp"
            with open(tmp, "w") as f:
                json.dump(doc, f)
            os.rename(tmp, self.path)
        return doc


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (IOError, OSError, ValueError):
        return None


def snapshot(hub, repo_id, revision, local_dir, allow_patterns=(), ignore_patterns=(), verify="quick", workers=4,
             margin_bytes=0, check_mode=False, free_bytes=None):
    """Make local_dir a complete, verified copy of repo_id at revision. Returns a result dict."""
    patterns = {"allow": list(allow_patterns), "ignore": list(ignore_patterns)}
    manifest_path = os.path.join(local_dir, MANIFEST)
    manifest = read_json(manifest_path)
    sha = revision if is_commit(revision) else None
    # Cheap path: a pinned commit whose manifest is complete and whose files all have their size: no network.
    if sha and manifest_matches(manifest, repo_id, sha, patterns) and verify == "quick":
        files = manifest["files"]
        if all(os.path.exists(os.path.join(local_dir, f["path"])) and
               os.path.getsize(os.path.join(local_dir, f["path"])) == f["size"] for f in files):
            return dict(changed=False, revision=sha, files=files, fetched=[], repaired=[], bytes_transferred=0, network=False)
    if sha is None:
        sha = hub.commit(repo_id, revision)
    files = [f for f in hub.tree(repo_id, sha) if selected(f["path"], allow_patterns, ignore_patterns)]
    if not files:
        raise HubError("not_found", "%s@%s has no file matching allow_patterns=%s ignore_patterns=%s"
                       % (repo_id, revision, list(allow_patterns), list(ignore_patterns)))
    local_sizes = {}
    for f in files:
        p = os.path.join(local_dir, f["path"])
        if os.path.isfile(p):
            local_sizes[f["path"]] = os.path.getsize(p)
    todo = set(files_to_fetch(files, local_sizes))
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
        probe = local_dir
        while not os.path.isdir(probe):
            probe = os.path.dirname(probe) or "/"
        st = os.statvfs(probe)
        free_bytes = st.f_bavail * st.f_frsize
    short = disk_shortfall(needed, free_bytes, margin_bytes)
    if fetch and short:
        raise HubError("disk", "not enough disk for %s@%s in %s: %d bytes to download + %d margin, %d free (%d short); "
                       "free space or choose another hf_model_dir. Nothing was written."
                       % (repo_id, sha[:12], local_dir, needed, margin_bytes, free_bytes, short))
    result = dict(changed=bool(fetch) or not manifest_matches(manifest, repo_id, sha, patterns), revision=sha,
                  files=files, fetched=[f["path"] for f in fetch], repaired=repaired, bytes_transferred=0, network=True,
                  bytes_needed=needed)
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
    prog = Progress(os.path.join(local_dir, PROGRESS), sum(f["size"] for f in files),
                    sum(f["size"] for f in files if f["path"] not in todo) + partial)
    prog.write()
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
                n = hub.fetch(repo_id, sha, f, os.path.join(local_dir, f["path"]), prog.add)
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
    with open(manifest_path + ".tmp", "w") as out:
        json.dump(dict(complete=True, repo_id=repo_id, revision=sha, patterns=patterns, files=files,
                       verified=time.time()), out, indent=1, sort_keys=True)
    os.rename(manifest_path + ".tmp", manifest_path)
    prog.write("complete")
    result["bytes_transferred"] = moved[0]
    result["changed"] = True
    return result
