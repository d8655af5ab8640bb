# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Where a snapshot's files come from, stdlib only. Every source is a Source: commit() and tree() name the files
(path, size, hash), then either fetch() writes one file (a per-file source: the Hub's HTTP API, a local copy) or
fetch_all() writes a batch that snapshot() verifies afterwards (huggingface_hub in another interpreter, rsync over
ssh)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import shutil
import subprocess
import tempfile
import threading
import time

from http.client import HTTPException
from urllib.parse import quote

from ..host import read_json
from .files import MANIFEST, HubError, check_relpath, dirs_beneath, is_commit, partial_size, receive, bytes_under
from .transport import HTTPStatusError, http_get


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


class Source(object):
    """What snapshot() asks of a source. A per-file source implements fetch(); a batch source sets batch = True and
    implements fetch_all(), whose files snapshot() then verifies one by one (a bad one removed, never served)."""

    name = "builtin"                 # the downloader, in messages and in the manifest
    endpoint = ""                    # where the files come from, in messages and in the manifest
    batch = False
    hashes_from = "the Hub"          # whose sizes and hashes a file is checked against (integrity messages)

    def commit(self, repo_id, revision):
        """The commit sha that revision names."""
        raise NotImplementedError

    def tree(self, repo_id, sha, directory=""):
        """Every file at that commit: [{path, size, sha256 (LFS) or None, oid}]."""
        raise NotImplementedError

    def prepare(self, local_dir):
        """Called before any byte is written when there is something to fetch: the downloader is usable (else
        HubError), and its versions (a dict, or None)."""
        return None

    def fetch(self, repo_id, sha, entry, dest, progress=None):
        """Write one file to dest, verified; the bytes transferred."""
        raise NotImplementedError

    def fetch_all(self, repo_id, sha, entries, local_dir, workers, progress):
        """Write these files under local_dir (verified afterwards by the caller); the bytes transferred."""
        raise NotImplementedError

    def finish(self, local_dir):
        """After the manifest is written: remove the downloader's own bookkeeping from local_dir."""
        return None


class Hub(Source):
    """The Hub's HTTP API with our own client (a per-file source)."""

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
        have = partial_size(part, entry["size"])
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
            return receive(
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
ROOT_REFUSED = ("python=%s would run as root: that interpreter is the SGLang venv's, which the service account built, "
                "and root never runs it - set the model's owner (hf_model_owner, module option owner) to the service "
                "account, whose the files then are, or use downloader builtin")
RSYNC_PARTIAL = ".gpuserve-rsync-partial"
SSH_FAILURES = ("Host key verification failed", "Permission denied", "Connection refused", "Could not resolve hostname",
                "Connection timed out", "No route to host", "Connection closed by", "REMOTE HOST IDENTIFICATION HAS CHANGED")
# ssh's refusals that the same command meets again on every retry (OpenSSH's own words): failed at once, not after
# a minute of retries. Refused connections, timeouts and closed links may mend and stay retried.
SSH_PERMANENT = ("Host key verification failed", "REMOTE HOST IDENTIFICATION HAS CHANGED", "Permission denied",
                 "Name or service not known")


def run_polled(argv, env, stdin_bytes, local_dir, progress=None, account=None):
    """Run a downloader (argv list, no shell; as ``account``, a pwd entry, when given) and, while it runs, report what
    it has written under local_dir as progress. Returns (process, stdout, stderr)."""
    kw = dict(user=account.pw_uid, group=account.pw_gid, extra_groups=[]) if account is not None else {}
    proc = subprocess.Popen(argv, env=env, cwd="/", stdin=subprocess.PIPE if stdin_bytes is not None else subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)
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
    token reaches the library through the environment (HF_TOKEN_PATH for a file it can read), never argv.

    The interpreter is the SGLang venv's, which the service account built: root never runs it. It runs as ``account``
    (the model's owner, whose the files become anyway), which is given the model directory and the library's cache
    in it first; run by root without such an account it is refused (``ROOT_REFUSED``), and downloader auto takes the
    builtin client instead."""

    name = "huggingface_hub"
    batch = True

    def __init__(self, endpoint, python, token=None, token_file=None, timeout=60, hf_transfer=False, account=None):
        Hub.__init__(self, endpoint, token=token, timeout=timeout)
        self.python = python
        self.token_file = token_file
        self.hf_transfer = hf_transfer
        self.versions = None
        self.account = account

    def refused_as_root(self):
        """Why this process may not run the library (it is root and no other account is given), or None."""
        if os.geteuid() == 0 and (self.account is None or self.account.pw_uid == 0):
            return ROOT_REFUSED % self.python
        return None

    def _give(self, local_dir):
        """The model directory and the library's cache in it made the account's (what it writes there is its own
        anyway: repair_owner gives the model to it at the end), never through a link."""
        if self.account is None or os.geteuid() != 0:
            return
        if not os.path.isdir(local_dir):
            os.makedirs(local_dir, 0o755)
        uid, gid = self.account.pw_uid, self.account.pw_gid
        os.chown(local_dir, uid, gid, follow_symlinks=False)
        # the cache's directories one at a time by descriptor: the account owns local_dir, a link it plants there is
        # refused, never followed by root's chown
        os.close(dirs_beneath(local_dir, LIBRARY_CACHE.split(os.sep) + ["home"], lambda fd: os.fchown(fd, uid, gid)))

    def _env(self, local_dir, job):
        env = dict((k, v) for k, v in os.environ.items() if not k.startswith("HF_"))
        home = os.path.join(local_dir, LIBRARY_CACHE, "home")
        if self.account is not None:
            env["HOME"] = home
        env.update(HF_ENDPOINT=self.endpoint, HF_HOME=home,
                   HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_DISABLE_PROGRESS_BARS="1",
                   HF_HUB_ENABLE_HF_TRANSFER="1" if self.hf_transfer else "0",
                   HF_HUB_DOWNLOAD_TIMEOUT=str(self.timeout), HF_HUB_ETAG_TIMEOUT=str(self.timeout),
                   GPUSERVE_HF_JOB=json.dumps(job))
        if self.token_file and self.account is None:
            env["HF_TOKEN_PATH"] = self.token_file
        elif self.token:          # a token file is root's 0600: the account gets the token it holds
            env["HF_TOKEN"] = self.token
        else:
            env["HF_HUB_DISABLE_IMPLICIT_TOKEN"] = "1"
        return env

    def _run(self, local_dir, job, progress=None):
        refused = self.refused_as_root()
        if refused:
            raise HubError("downloader", refused)
        if not job.get("probe"):          # the probe (check mode too) writes nothing
            self._give(local_dir)
        try:
            proc, out, err = run_polled([self.python, "-c", LIBRARY_HELPER], self._env(local_dir, job), None,
                                        local_dir, progress, self.account)
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


class AutoHub(Hub):
    """downloader auto: the file list with our client; the files with huggingface_hub when `python` imports it (asked
    in prepare(), only when there is something to fetch: a run with nothing to do starts no interpreter), else with
    our client."""

    def __init__(self, endpoint, python, token=None, token_file=None, timeout=60, hf_transfer=False, account=None):
        Hub.__init__(self, endpoint, token=token, timeout=timeout)
        usable = bool(python) and os.path.isfile(python) and os.access(python, os.X_OK)
        self.library = LibraryHub(endpoint, python, token=token, token_file=token_file, timeout=timeout,
                                  hf_transfer=hf_transfer, account=account) if usable else None
        if self.library is not None and self.library.refused_as_root():
            self.library = None          # root runs no code the service account built: our client

    def prepare(self, local_dir):
        if self.library is None:
            return None
        try:
            versions = self.library.prepare(local_dir)
        except HubError:
            self.library = None          # an interpreter without huggingface_hub: our client
            return None
        self.batch, self.name = True, self.library.name
        return versions

    def fetch_all(self, repo_id, sha, entries, local_dir, workers, progress):
        return self.library.fetch_all(repo_id, sha, entries, local_dir, workers, progress)

    def finish(self, local_dir):
        if self.library is not None:
            self.library.finish(local_dir)


class ManifestSource(Source):
    """A snapshot hf_snapshot made elsewhere, described by its manifest (files, sizes, hashes, commit): commit()
    and tree() from it, no Hub. `where` names it in messages (source_dir=..., source_host=...)."""

    where = ""
    manifest = None
    hashes_from = "the source's manifest"

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
        have = partial_size(part, entry["size"])

        def cannot_copy(e, _done=None):
            return HubError("not_found", "%s: cannot copy from %s (%s)" % (entry["path"], self.source_dir, e))

        try:
            with open(src, "rb") as fin:
                fin.seek(have)
                return receive(
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
    batch = True

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
                            "(hf_model_source_known_hosts)" % (self.where, self.host, what, tail),
                            permanent=any(m in text for m in SSH_PERMANENT))
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
