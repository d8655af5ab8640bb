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

import fcntl
import fnmatch
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time

from http.client import HTTPConnection, HTTPException, HTTPSConnection
from urllib.parse import quote, urlsplit

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
    integrity, disk, unsafe_path, locked."""

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
            any(c in r for c in " ~^:?*[\\") or any(ord(c) < 32 or ord(c) == 127 for c in r):
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
    elif any(ord(c) < 32 or ord(c) == 127 for c in name):
        why = "a NUL or control character"
    elif any(part in ("", ".", "..") for part in name.split("/")):
        why = "an empty, '.' or '..' component"
    if why is None:
        base = os.path.realpath(local_dir)
        resolved = os.path.realpath(os.path.join(base, name))
        if not resolved.startswith(base.rstrip("/") + "/"):
            why = "a path that resolves outside the model directory (%s)" % resolved
    if why is not None:
        raise HubError("unsafe_path", "the file list names %r, %s: refused before anything was written or removed in "
                                      "%s; the repo or the source manifest is broken or hostile" % (name, why, local_dir))
    return os.path.join(local_dir, name)


def _open_nofollow(path, flags, mode=0o644):
    """Open a file we write or read back, never through a symlink planted in its place."""
    return os.fdopen(os.open(path, flags | os.O_NOFOLLOW, mode), "rb" if flags == os.O_RDONLY else "ab")


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
        with _open_nofollow(part, os.O_RDONLY) as f:
            for c in iter(lambda: f.read(CHUNK), b""):
                h.update(c)
    parent = os.path.dirname(dest)
    if parent and not os.path.isdir(parent):
        os.makedirs(parent)
    moved = 0
    with _open_nofollow(part, os.O_WRONLY | os.O_CREAT | (os.O_APPEND if have else os.O_TRUNC)) as out:
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
    if read is not None and size < entry["size"]:
        # the stream ended early (a reset that http.client reports as EOF, not IncompleteRead): a broken transfer,
        # not a bad file - the partial copy is kept and the next attempt continues it with Range
        raise read_error(EOFError("the connection closed after %d of %d bytes" % (size, entry["size"])), size)
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


# Run by LibraryHub with the interpreter of a venv that has huggingface_hub (the SGLang venv has 0.36): downloads
# the files of the job (in GPUSERVE_HF_JOB) with hf_hub_download into local_dir, which resumes a partial file with a
# Range request and uses hf_xet for Xet-backed repos (hf_transfer only when the job enables it: it does not resume).
# Prints one JSON document: the library's versions, and either the files done or the error.
LIBRARY_HELPER = r"""
import json, os, sys
job = json.loads(os.environ["GPUSERVE_HF_JOB"])
out = {"versions": {}}
try:
    import huggingface_hub
    from huggingface_hub import hf_hub_download
except ImportError as e:
    out.update(error="ImportError", status=None, message=str(e))
    print(json.dumps(out))
    sys.exit(3)
out["versions"]["huggingface_hub"] = huggingface_hub.__version__
from importlib.metadata import PackageNotFoundError, version
for name in ("hf_xet", "hf_transfer"):
    try:
        out["versions"][name] = version(name.replace("_", "-"))
    except PackageNotFoundError:
        pass
if job.get("probe"):
    print(json.dumps(out))
    sys.exit(0)
from concurrent.futures import ThreadPoolExecutor

def one(path):
    hf_hub_download(job["repo_id"], path, revision=job["revision"], local_dir=job["local_dir"])
    return path

try:
    with ThreadPoolExecutor(max_workers=job["workers"]) as pool:
        out["done"] = list(pool.map(one, job["files"]))
except Exception as e:
    cause = e  # huggingface_hub wraps an HTTP error of its HEAD call in LocalEntryNotFoundError: find the answer
    while cause is not None and getattr(cause, "response", None) is None:
        cause = cause.__cause__
    text = str(cause or e).strip().splitlines()
    status = getattr(getattr(cause, "response", None), "status_code", None)
    out.update(error=type(cause or e).__name__, status=status, message=text[0] if text else "")
    print(json.dumps(out))
    sys.exit(1)
print(json.dumps(out))
"""

LIBRARY_CACHE = os.path.join(".cache", "huggingface")
RSYNC_PARTIAL = ".gpuserve-rsync-partial"
SSH_FAILURES = ("Host key verification failed", "Permission denied", "Connection refused", "Could not resolve hostname",
                "Connection timed out", "No route to host", "Connection closed by", "REMOTE HOST IDENTIFICATION HAS CHANGED")


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


def run_polled(argv, env, stdin_bytes, local_dir, progress=None):
    """Run a downloader (argv list, no shell) and, while it runs, report what it has written under local_dir as
    progress. Returns (process, stdout, stderr)."""
    proc = subprocess.Popen(argv, env=env, cwd="/", stdin=subprocess.PIPE if stdin_bytes is not None else subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    readers = {}

    def drain(name, stream):
        readers[name] = stream.read()

    threads = [threading.Thread(target=drain, args=(n, st)) for n, st in (("out", proc.stdout), ("err", proc.stderr))]
    for t in threads:
        t.start()
    if stdin_bytes is not None:
        try:
            proc.stdin.write(stdin_bytes)
            proc.stdin.close()
        except (IOError, OSError):
            pass  # it ended before reading its input: its exit code and stderr say why
    if progress is not None:
        base, start = progress.done, bytes_under(local_dir)
        while proc.poll() is None:
            progress.set(base + max(0, bytes_under(local_dir) - start))
            time.sleep(0.5)
    proc.wait()
    for t in threads:
        t.join()
    return proc, readers.get("out", b""), readers.get("err", b"")


class LibraryHub(Hub):
    """The Hub through huggingface_hub (resumable HTTP, hf_xet for Xet-backed repos, hf_transfer when asked), run
    with another interpreter (`python`, e.g. the SGLang venv's). File lists and hashes still come from the Hub API
    (Hub.commit/tree), and snapshot() verifies every file the library wrote against them before the manifest. The
    token reaches the library through the environment (HF_TOKEN_PATH for a file), never argv."""

    name = "huggingface_hub"

    def __init__(self, endpoint, python, token=None, token_file=None, timeout=60, hf_transfer=False):
        Hub.__init__(self, endpoint, token=token, timeout=timeout)
        self.python = python
        self.token_file = token_file
        self.hf_transfer = hf_transfer
        self.versions = None

    def _env(self, local_dir, job):
        env = dict((k, v) for k, v in os.environ.items() if not k.startswith("HF_"))
        env.update(HF_ENDPOINT=self.endpoint, HF_HOME=os.path.join(local_dir, LIBRARY_CACHE, "home"),
                   HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_DISABLE_PROGRESS_BARS="1",
                   HF_HUB_ENABLE_HF_TRANSFER="1" if self.hf_transfer else "0",
                   HF_HUB_DOWNLOAD_TIMEOUT=str(self.timeout), HF_HUB_ETAG_TIMEOUT=str(self.timeout),
                   GPUSERVE_HF_JOB=json.dumps(job))
        if self.token_file:
            env["HF_TOKEN_PATH"] = self.token_file
        elif self.token:
            env["HF_TOKEN"] = self.token
        else:
            env["HF_HUB_DISABLE_IMPLICIT_TOKEN"] = "1"
        return env

    def _run(self, local_dir, job, progress=None):
        try:
            proc, out, err = run_polled([self.python, "-c", LIBRARY_HELPER], self._env(local_dir, job), None,
                                        local_dir, progress)
        except OSError as e:
            raise HubError("downloader", "python=%s cannot run (%s): point hf_model_python at the interpreter of a venv "
                           "with huggingface_hub (the SGLang venv's bin/python), or use hf_model_downloader=builtin"
                           % (self.python, e.strerror))
        try:
            doc = json.loads(out.decode("utf-8", "replace").strip().splitlines()[-1])
        except (ValueError, IndexError):
            tail = err.decode("utf-8", "replace").strip().splitlines()[-3:]
            raise HubError("downloader", "the huggingface_hub download with %s ended with code %s and no result: %s"
                           % (self.python, proc.returncode, " | ".join(tail)))
        self.versions = doc.get("versions")
        return doc

    def prepare(self, local_dir):
        """The library is there (before any byte is written); its versions."""
        if self.versions is None:
            doc = self._run(local_dir, {"probe": True})
            if doc.get("error"):
                raise HubError("downloader", "python=%s has no huggingface_hub (%s): build the SGLang venv first (role "
                               "sglang_venv) or use hf_model_downloader=builtin" % (self.python, doc.get("message")))
        return self.versions

    def fetch_all(self, repo_id, sha, entries, local_dir, workers, progress):
        """Download these files with huggingface_hub; returns bytes transferred. The caller verifies them."""
        self.prepare(local_dir)
        before = bytes_under(os.path.join(local_dir, LIBRARY_CACHE), lambda n: n.endswith(".incomplete"))
        job = {"repo_id": repo_id, "revision": sha, "local_dir": local_dir, "workers": max(1, int(workers)),
               "files": [e["path"] for e in entries]}
        doc = self._run(local_dir, job, progress)
        if doc.get("error"):
            status = doc.get("status")
            what = "%s (huggingface_hub %s)" % (doc.get("error"), doc.get("message"))
            if status in (401, 403, 404):
                raise explain_http(status, what, repo_id, sha)
            raise HubError("network" if not status else "http", "the download of %s@%s with huggingface_hub failed: %s"
                           ": %s; run again to resume" % (repo_id, sha[:12], doc.get("error"), doc.get("message")),
                           status)
        return max(0, sum(e["size"] for e in entries) - before)

    def finish(self, local_dir):
        """The library's own bookkeeping (metadata, locks, xet cache) is not part of the snapshot."""
        shutil.rmtree(os.path.join(local_dir, LIBRARY_CACHE), ignore_errors=True)
        try:
            os.rmdir(os.path.dirname(os.path.join(local_dir, LIBRARY_CACHE)))
        except OSError:
            pass


class ManifestSource(object):
    """A snapshot hf_snapshot made elsewhere, described by its manifest (files, sizes, hashes, commit): commit()
    and tree() from it, no Hub. `where` names it in messages (source_dir=..., source_host=...)."""

    where = ""
    manifest = None

    def _manifest(self, repo_id):
        m = self.manifest
        if not isinstance(m, dict) or m.get("complete") is not True:
            raise HubError("not_found", "%s has no complete %s (a snapshot made by hf_model/hf_snapshot); "
                           "copy the whole directory, manifest included, or download from the Hub" % (self.where, MANIFEST))
        if m.get("repo_id") != repo_id:
            raise HubError("not_found", "%s holds %s, not %s" % (self.where, m.get("repo_id"), repo_id))
        return m

    def commit(self, repo_id, revision):
        m = self._manifest(repo_id)
        if revision != m["revision"] and (is_commit(revision) or revision not in ("main", "")):
            raise HubError("not_found", "%s holds %s@%s, not the requested revision %s"
                           % (self.where, repo_id, m["revision"], revision))
        return m["revision"]

    def tree(self, repo_id, sha, directory=""):
        m = self._manifest(repo_id)
        if sha != m["revision"]:
            raise HubError("not_found", "%s holds %s@%s, not the requested revision %s"
                           % (self.where, repo_id, m["revision"], sha))
        return [dict(f) for f in m["files"]]


class LocalSource(ManifestSource):
    """A snapshot already on this machine (an NFS export, or the copy from the node a deployment moves off),
    described by the manifest hf_model wrote there: the same interface as Hub, no network."""

    def __init__(self, source_dir):
        self.source_dir = source_dir
        self.endpoint = source_dir
        self.where = "source_dir=%s" % source_dir
        self.manifest = read_json(os.path.join(source_dir, MANIFEST))

    def fetch(self, repo_id, sha, entry, dest, progress=None):
        """Copy one file (continuing a partial copy), verified like a download."""
        src = check_relpath(self.source_dir, entry["path"])     # nothing read from outside the source either
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


class RsyncSource(ManifestSource):
    """A verified snapshot on another host - the node (or the CT) a deployment moves off - fetched with rsync over
    ssh (argv lists; BatchMode, so a missing key fails instead of prompting). The source's manifest gives the file
    list, sizes and hashes; rsync continues an interrupted file from its partial copy (--partial-dir), and
    snapshot() verifies every file against the manifest before writing its own."""

    name = "rsync"

    def __init__(self, host, remote_dir, port=22, key_file=None, known_hosts_file=None, host_key_checking="yes",
                 timeout=60, bwlimit_kib=0, rsync="rsync"):
        self.host = host
        self.bwlimit_kib = int(bwlimit_kib)
        self.remote_dir = remote_dir.rstrip("/") or "/"
        self.rsync = rsync
        self.where = "source_host=%s:%s" % (host, self.remote_dir)
        self.endpoint = "%s:%s" % (host, self.remote_dir)
        ssh = ["ssh", "-p", str(int(port)), "-o", "BatchMode=yes", "-o", "ConnectTimeout=%d" % int(timeout),
               "-o", "ServerAliveInterval=15", "-o", "ServerAliveCountMax=4", "-o", "StrictHostKeyChecking=%s" % host_key_checking]
        if known_hosts_file:
            ssh += ["-o", "UserKnownHostsFile=%s" % known_hosts_file]
        if key_file:
            ssh += ["-i", key_file, "-o", "IdentitiesOnly=yes"]
        self.ssh = ssh
        self._manifest_doc = None

    @property
    def manifest(self):
        if self._manifest_doc is None:
            self._manifest_doc = self._remote_manifest()
        return self._manifest_doc

    def argv(self, *args):
        """rsync's argv: the ssh command is one argument that rsync splits on blanks (paths with blanks are refused
        by the module), never a shell string."""
        return [self.rsync, "-e", " ".join(self.ssh)] + list(args)

    def _fail(self, proc, err, what):
        text = err.decode("utf-8", "replace")
        tail = " | ".join(text.strip().splitlines()[-3:])
        # ssh's own failure: exit 255, or 12 when rsync reads the dead stream first - its message tells either way
        if proc.returncode == 255 or any(m in text for m in SSH_FAILURES):
            ssh_says = [ln for ln in text.splitlines() if any(m in ln for m in SSH_FAILURES)]
            tail = " | ".join(ssh_says[:1] + [tail]) if ssh_says and ssh_says[0] not in tail else tail
            return HubError("network", "%s: ssh to %s failed while %s (%s); check that the host is reachable from this "
                            "machine, that hf_model_source_ssh_key is authorized there and its host key is known "
                            "(hf_model_source_known_hosts)" % (self.where, self.host, what, tail))
        if proc.returncode == 23:
            return HubError("not_found", "%s: files missing on the source while %s (%s); is hf_model_source_host_dir "
                            "the directory hf_model wrote there?" % (self.where, what, tail))
        return HubError("network", "%s: rsync ended with code %d while %s (%s); run again to resume"
                        % (self.where, proc.returncode, what, tail))

    def _remote_manifest(self):
        tmp = tempfile.mkdtemp(prefix="gpuserve-manifest-")
        try:
            try:
                proc, _out, err = run_polled(self.argv("--times", "%s:%s/%s" % (self.host, self.remote_dir, MANIFEST),
                                                       tmp + "/"), None, None, tmp)
            except OSError as e:
                raise HubError("downloader", "rsync cannot run on this machine (%s): install rsync and openssh-client "
                               "(role hf_model does)" % e.strerror)
            if proc.returncode == 23:
                return None  # no manifest there: _manifest() says so
            if proc.returncode != 0:
                raise self._fail(proc, err, "reading its manifest")
            return read_json(os.path.join(tmp, MANIFEST))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def prepare(self, local_dir):
        return {"rsync": self.rsync}

    def fetch_all(self, repo_id, sha, entries, local_dir, workers, progress):
        """rsync these files from the source into local_dir (continuing partial ones). Returns bytes received."""
        listing = "".join(e["path"] + "\n" for e in entries).encode("utf-8")
        opts = ["--times", "--partial", "--partial-dir=%s" % RSYNC_PARTIAL, "--stats", "--files-from=-"]
        if self.bwlimit_kib > 0:
            opts.append("--bwlimit=%d" % self.bwlimit_kib)
        proc, out, err = run_polled(self.argv(*(opts + ["%s:%s/" % (self.host, self.remote_dir), local_dir + "/"])),
                                    None, listing, local_dir, progress)
        if proc.returncode != 0:
            raise self._fail(proc, err, "copying %d files" % len(entries))
        received = [ln for ln in out.decode("utf-8", "replace").splitlines() if ln.startswith("Total bytes received:")]
        try:
            return int(received[0].split(":", 1)[1].strip().replace(",", "").replace(".", ""))
        except (IndexError, ValueError):
            return sum(e["size"] for e in entries)

    def finish(self, local_dir):
        """Partial copies (kept by rsync for a resume) and the temporary files of a receiver that was killed
        outright (.<name>.XXXXXX, which rsync never reuses) are not part of the snapshot."""
        for root, dirs, names in os.walk(local_dir):
            if RSYNC_PARTIAL in dirs:
                shutil.rmtree(os.path.join(root, RSYNC_PARTIAL), ignore_errors=True)
                dirs.remove(RSYNC_PARTIAL)
            wanted = set(n for n in names if not n.startswith("."))
            for n in names:
                stem = n[1:].rsplit(".", 1)[0] if n.startswith(".") and n.count(".") >= 2 else None
                if stem in wanted and len(n.rsplit(".", 1)[1]) == 6:
                    os.remove(os.path.join(root, n))


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


def lock_path(local_dir):
    """The lock of a model directory: beside it (never inside what SGLang loads), one per directory."""
    local_dir = os.path.abspath(local_dir).rstrip("/")
    return os.path.join(os.path.dirname(local_dir), ".%s.gpuserve-lock" % os.path.basename(local_dir))


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
    for f in with_retries(lambda: hub.tree(repo_id, sha), "file list of %s" % repo_id, policy):
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
    listed = with_retries(lambda: hub.tree(repo_id, sha), "file list of %s" % repo_id, policy)
    for f in listed:
        check_relpath(local_dir, f["path"])      # every name, before anything is written, removed or fetched
    files = [f for f in listed if selected(f["path"], allow_patterns, ignore_patterns)]
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
    downloader = hub.prepare(local_dir) if fetch and hasattr(hub, "prepare") else None
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
    if hasattr(hub, "fetch_all"):
        result["bytes_transferred"] = _fetch_batch(hub, repo_id, sha, fetch, local_dir, workers, prog)
    else:
        result["bytes_transferred"] = _fetch_threaded(hub, repo_id, sha, fetch, local_dir, workers, prog, policy,
                                                      result["retries"])
    with open(manifest_path + ".tmp", "w") as out:
        json.dump(dict(complete=True, repo_id=repo_id, revision=sha, patterns=patterns, files=files,
                       verified=time.time(), source=hub.endpoint, downloader=downloader), out, indent=1, sort_keys=True)
    os.rename(manifest_path + ".tmp", manifest_path)
    prog.write("complete")
    if hasattr(hub, "finish"):
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
                               "the source's manifest" if isinstance(hub, ManifestSource) else "the Hub",
                               " (the source is damaged: repair it there, or download from the Hub)"
                               if isinstance(hub, ManifestSource) else "; run again"))
        if os.path.exists(p + ".incomplete"):
            os.remove(p + ".incomplete")  # a partial of the builtin downloader, superseded
    return moved


def transient(exc):
    """A HubError worth retrying: the network broke, or the server said 429 / 5xx."""
    return exc.kind == "network" or (exc.kind == "http" and exc.status in (429, 500, 502, 503, 504))


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
