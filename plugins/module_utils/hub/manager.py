# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the hf_snapshot module does, as one class: ``SnapshotManager(params, check_mode, which).ensure()`` returns
the module's result, or raises ``SnapshotFailed`` with the message and the facts; ``warnings`` holds the texts to
warn with, and ``secrets`` the values the module must hide (a token read from a file)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import pwd
import re
import shutil

from ..host import Failed, secret_problem
from .files import (MANIFEST, PROGRESS, HubError, acquire_lock, is_commit, lock_holder, lock_path, repo_id_problem,
                    revision_problem)
from .snapshot import NotYet, read_token, repair_owner, snapshot
from .sources import AutoHub, Hub, LibraryHub, LocalSource, RsyncSource

ARGUMENT_SPEC = dict(
    repo_id=dict(type="str"),
    state=dict(type="str", choices=["present", "absent"], default="present"),
    revision=dict(type="str", default="main"),
    local_dir=dict(type="path", required=True),
    endpoint=dict(type="str", default="https://huggingface.co"),
    source_dir=dict(type="path"),
    source_host=dict(type="str"),
    source_host_dir=dict(type="path"),
    ssh_port=dict(type="int", default=22),
    bwlimit_kib=dict(type="int", default=0),
    ssh_key_file=dict(type="path"),
    ssh_known_hosts_file=dict(type="path"),
    ssh_host_key_checking=dict(type="str", choices=["yes", "accept-new"], default="yes"),
    downloader=dict(type="str", choices=["auto", "builtin", "huggingface_hub"], default="builtin"),
    python=dict(type="path"),
    hf_transfer=dict(type="bool", default=False),
    token=dict(type="str", no_log=True),
    token_file=dict(type="path"),
    allow_patterns=dict(type="list", elements="str", default=[]),
    ignore_patterns=dict(type="list", elements="str", default=[]),
    verify=dict(type="str", choices=["quick", "full"], default="quick"),
    workers=dict(type="int", default=4),
    retries=dict(type="int", default=5),
    retry_backoff=dict(type="float", default=2.0),
    disk_margin_mib=dict(type="int", default=1024),
    timeout=dict(type="int", default=60),
    owner=dict(type="str"),
)
HOST_RE = re.compile(r"^([A-Za-z0-9._-]+@)?([A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])$")
MUTUALLY_EXCLUSIVE = [["token", "token_file"], ["source_dir", "source_host"]]
REQUIRED_IF = [["downloader", "huggingface_hub", ["python"]], ["state", "present", ["repo_id"]]]


class SnapshotFailed(Failed):
    """hf_snapshot refused or failed: ``msg`` and ``result``."""


class SnapshotManager(object):
    """One model directory at the wanted revision, verified (see hub.snapshot for how)."""

    def __init__(self, params, check_mode=False, which=shutil.which):
        self.p = params
        self.check_mode = check_mode
        self.which = which
        self.warnings = []
        self.secrets = []

    def fail(self, e, **facts):
        raise SnapshotFailed(str(e), dict(facts, changed=False))

    def ensure(self):
        p = self.p
        if p["state"] == "absent":
            return self.remove()
        problem = repo_id_problem(p["repo_id"]) or revision_problem(p["revision"])
        if problem:
            raise SnapshotFailed(problem + "; nothing was changed", dict(changed=False))
        try:
            self.user, hub = self.open()
        except NotYet as e:
            # the play that would write what the source needs has not (check mode): say what would happen
            return dict(changed=True, up_to_date=False, path=p["local_dir"], fetched=[], repaired=[],
                        bytes_transferred=0, network=False, msg=str(e))
        except HubError as e:
            self.fail(e, error_kind=e.kind, path=p["local_dir"])
        try:
            r = snapshot(hub, p["repo_id"], p["revision"], p["local_dir"], p["allow_patterns"], p["ignore_patterns"],
                         p["verify"], p["workers"], p["disk_margin_mib"] * 1024 * 1024, self.check_mode,
                         retries=p["retries"], retry_backoff=p["retry_backoff"])
        except HubError as e:
            self.fail(e, error_kind=e.kind, status=e.status, path=p["local_dir"])
        return self.result_of(r)

    def remove(self):
        """state=absent: the model this module put at ``local_dir`` removed - the directory (when it holds this
        module's manifest), the revision kept beside it (<local_dir>.previous) and any staging directory
        (<local_dir>.staging-<sha>). A directory without the manifest is not this module's: left, and named."""
        local_dir = self.p["local_dir"].rstrip("/")
        parent, base = os.path.split(local_dir)
        removed = []
        for path in [local_dir, local_dir + ".previous"]:
            if os.path.isdir(path) and not os.path.islink(path):
                if os.path.isfile(os.path.join(path, MANIFEST)):
                    removed.append(path)
                else:
                    self.warnings.append("%s holds no %s: not this module's model, left in place" % (path, MANIFEST))
        if os.path.isdir(parent):
            removed += sorted(os.path.join(parent, n) for n in os.listdir(parent) if n.startswith(base + ".staging-")
                              and os.path.isdir(os.path.join(parent, n)))
        lock = lock_path(local_dir)
        if os.path.exists(lock):            # a run writing into it holds it: refused, nothing removed
            holder = lock_holder(local_dir)
            if holder is not None:
                self.fail(HubError("locked", "%s is being written by another run (pid %s, %s since %s): wait for it to "
                                             "end, or stop it; nothing was removed" % (
                                                 local_dir, holder.get("pid", "?"), holder.get("what", "?"),
                                                 holder.get("since", "?"))), error_kind="locked", path=local_dir)
            removed.append(lock)
        if not self.check_mode:
            try:
                fd = acquire_lock(local_dir, "removal") if lock in removed else None
            except HubError as e:
                self.fail(e, error_kind=e.kind, path=local_dir)
            try:
                for path in removed:
                    if path != lock:
                        shutil.rmtree(path)
                if fd is not None:
                    os.remove(lock)
            finally:
                if fd is not None:
                    os.close(fd)
        return dict(changed=bool(removed), removed=removed, path=local_dir)

    def open(self):
        """The account that owns the model (or None) and the source to fetch from; HubError names a bad input."""
        p = self.p
        token = read_token(p["token"], p["token_file"])
        if token and p["token_file"]:
            self.secrets.append(token)
        short = secret_problem("the token in token_file=%s" % p["token_file"] if p["token_file"] else "token", token)
        if short:
            raise HubError("input", short)
        user = None
        if p["owner"]:
            try:
                user = pwd.getpwnam(p["owner"])
            except KeyError:
                raise HubError("input", "owner=%s: no such user on the target; create the service account first"
                               % p["owner"])
        hub, warnings = self.source(token, account=user)
        self.warnings.extend(warnings)
        return user, hub

    def rsync_source(self):
        """source_host: refuse what cannot go into rsync's ssh command (blanks) before anything runs."""
        p = self.p
        if not HOST_RE.match(p["source_host"]):
            raise HubError("input", "source_host=%s: expected [user@]host (a name, an IPv4 address or [IPv6])"
                           % p["source_host"])
        for key in ("source_host_dir", "ssh_key_file", "ssh_known_hosts_file"):
            if p[key] and re.search(r"\s", p[key]):
                raise HubError("input", "%s=%s: blanks are not supported in this path; use a path without them" % (key, p[key]))
        missing = [f for f in (p["ssh_key_file"], p["ssh_known_hosts_file"] if p["ssh_host_key_checking"] == "yes" else None)
                   if f and not os.path.isfile(f)] + [b for b in ("rsync", "ssh") if not self.which(b)]
        if missing and self.check_mode:
            raise NotYet("would copy from %s:%s; the file list cannot be read in check mode before %s is there"
                         % (p["source_host"], p["source_host_dir"] or p["local_dir"], ", ".join(missing)))
        if p["ssh_key_file"] and not os.path.isfile(p["ssh_key_file"]):
            raise HubError("input", "ssh_key_file=%s does not exist on the target; write the key there first "
                           "(hf_model_source_ssh_key)" % p["ssh_key_file"])
        if re.search(r"\s", p["local_dir"]):
            raise HubError("input", "local_dir=%s: blanks are not supported with source_host" % p["local_dir"])
        return RsyncSource(p["source_host"], p["source_host_dir"] or p["local_dir"], port=p["ssh_port"],
                           key_file=p["ssh_key_file"], known_hosts_file=p["ssh_known_hosts_file"],
                           host_key_checking=p["ssh_host_key_checking"], timeout=p["timeout"], bwlimit_kib=p["bwlimit_kib"])

    def source(self, token, account=None):
        """The source hf_snapshot's parameters ask for: (source, warnings). HubError("input") for a refusal (nothing
        was changed), NotYet in check mode when the source cannot be read yet. ``account``: the model's owner (a pwd
        entry), the account the huggingface_hub library runs as - never root."""
        p = self.p
        if p["source_host"]:
            return self.rsync_source(), []
        if p["source_dir"]:
            if os.path.realpath(p["source_dir"]) == os.path.realpath(p["local_dir"]):
                raise HubError("input", "source_dir and local_dir are the same directory (%s): point local_dir elsewhere, or "
                               "drop source_dir to verify that copy in place against the Hub" % p["local_dir"])
            return LocalSource(p["source_dir"]), []
        if p["downloader"] == "auto":
            return AutoHub(p["endpoint"], p["python"], token=token, token_file=p["token_file"], timeout=p["timeout"],
                           hf_transfer=p["hf_transfer"], account=account), []
        if p["downloader"] == "huggingface_hub" and self.check_mode and not os.path.exists(p["python"]):
            # a fresh host in check mode: the venv that would download is built by this same run; list with our client
            return Hub(p["endpoint"], token=token, timeout=p["timeout"]), [
                "python=%s is not there yet (built by the same run): check mode lists the files with the builtin client"
                % p["python"]]
        if p["downloader"] == "huggingface_hub":
            lib = LibraryHub(p["endpoint"], p["python"], token=token, token_file=p["token_file"], timeout=p["timeout"],
                             hf_transfer=p["hf_transfer"], account=account)
            refused = lib.refused_as_root()
            if refused:
                raise HubError("input", refused + "; nothing was changed")
            return lib, []
        return Hub(p["endpoint"], token=token, timeout=p["timeout"]), []

    def result_of(self, r):
        p, local_dir = self.p, self.p["local_dir"]
        result = dict(changed=r["changed"], path=local_dir, revision=r["revision"], file_count=len(r["files"]),
                      bytes=sum(f["size"] for f in r["files"]), fetched=r["fetched"], repaired=r["repaired"],
                      bytes_transferred=r["bytes_transferred"], network=r["network"], retries=r.get("retries", []))
        if r.get("staged"):
            result.update(staged=True, switched_from=r["switched_from"], previous_path=r["previous_path"])
        if r.get("downloader"):
            result["downloader"] = r["downloader"]
        if self.user is not None and os.path.isdir(local_dir):
            # check mode says so too (a role's quick look in check mode must see an owner to repair)
            if repair_owner(local_dir, self.user.pw_uid, self.user.pw_gid, self.check_mode):
                result["changed"] = True
        cfg = os.path.join(local_dir, "config.json")
        if os.path.isfile(cfg) and not (self.check_mode and "config.json" in r["fetched"]):
            try:
                with open(cfg) as f:
                    result["config"] = json.load(f)
            except ValueError:
                self.warnings.append("%s is not valid JSON" % cfg)
        if not is_commit(p["revision"]) and p["source_dir"] is None and p["source_host"] is None:
            self.warnings.append(
                "revision=%s is not a commit: it is resolved at every run (now %s), and a new commit on the Hub "
                "changes the model under the server; pin the commit sha (hf_model_revision: %s) for reproducible "
                "deployments" % (p["revision"], r["revision"], r["revision"]))
        result["manifest"] = os.path.join(local_dir, MANIFEST)
        result["progress_file"] = os.path.join(local_dir, PROGRESS)
        result["up_to_date"] = not result["changed"]
        return result
