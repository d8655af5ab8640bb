# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the uv_venv module does, as one class: ``VenvManager(params, run, which, check_mode, diff).ensure()`` (``run``
and ``which``: the module's run_command and get_bin_path) returns the
module's result, or raises ``VenvFailed`` with the message and the result so far; ``warnings`` holds the texts to
warn with, either way.

Preflight first (nothing on disk changes before every input was checked); then the decision (none, build, repair,
switch, seal); a build happens beside the venv in service, as the owner (a build account apart from run_as, the
account that serves it), is sealed (root's, read-only) and switched
in by one symlink rename; older builds are pruned. With verify_imports the venv's interpreter imports them in the
same call (cached while nothing they depend on changed).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import collections
import grp
import hashlib
import os
import pwd
import shutil
import time

from ..host import Failed, write_json
from .accounts import account_problems, uv_cache_dir
from .seal import SealError, links_leaving, open_writers, record_mismatches, seal
from .uv import (MARKER, VERIFY_CODE, BuildProgress, build_id, decide, find_argv, gpu_view, imports_fingerprint,
                 install_steps, parse_lock, parse_verify, prune, read_imports_cache, read_marker, run_streaming,
                 tool_problem, uv_version_problem, venv_argv, write_imports_cache, write_marker)

MIN_PYTHON = (3, 10)   # sglang 0.5.9's Requires-Python
_VERSION_CODE = "import sys; print('%d.%d.%d' % sys.version_info[:3])"

ARGUMENT_SPEC = dict(
    path=dict(type="path", required=True),
    state=dict(type="str", default="present", choices=["present", "absent"]),
    store=dict(type="path"),
    uv=dict(type="path"),
    python=dict(type="str", default="/usr/bin/python3"),
    python_downloads=dict(type="bool", default=False),
    lock=dict(type="path"),
    packages=dict(type="list", elements="str", default=[]),
    packages_no_deps=dict(type="list", elements="str", default=[]),
    extra=dict(type="list", elements="str", default=[]),
    extra_requirements=dict(type="list", elements="path", default=[]),
    no_build_isolation=dict(type="list", elements="str", default=[]),
    index_url=dict(type="str"),
    extra_index_urls=dict(type="list", elements="str", default=[]),
    find_links=dict(type="list", elements="str", default=[]),
    no_index=dict(type="bool", default=False),
    offline=dict(type="bool", default=False),
    environment=dict(type="dict", default={}, no_log=True),
    public_environment=dict(type="dict", default={}),
    owner=dict(type="str"),
    run_as=dict(type="str"),
    keep=dict(type="int", default=1),
    no_binary=dict(type="list", elements="str", default=[]),
    progress_file=dict(type="path"),
    verify_imports=dict(type="list", elements="str", default=[]),
    verify_cached=dict(type="bool", default=False),
    uv_version=dict(type="str"),
    activate=dict(type="bool", default=True),
    switch_to=dict(type="str"),
)


REQUIRED_IF = []                # uv and lock: needed with state=present unless switch_to (checked in preflight)


class VenvFailed(Failed):
    """uv_venv refused or failed: ``msg`` and the result so far."""


class _Done(Exception):
    """The result is complete before the end of ensure() (nothing to build, or uv must be installed first)."""

    def __init__(self, result):
        super(_Done, self).__init__("done")
        self.result = result


def _account(name, option, check_mode):
    """The pwd entry of an account a build names; None without a name, or in check mode when it does not exist yet."""
    if not name:
        return None
    try:
        return pwd.getpwnam(name)
    except KeyError:
        if check_mode:
            return None
        raise VenvFailed("%s=%s: no such user on the target; create the account first (role sglang_venv does)"
                         % (option, name), {})


def _groups_of(pw):
    """Every gid an account is in: its primary group and each group that lists it."""
    return {pw.pw_gid} | {g.gr_gid for g in grp.getgrall() if pw.pw_name in g.gr_mem}


class Runner(object):
    """Runs the build's commands as the owner, with the build's environment; ``last_out`` is the last output."""

    def __init__(self, p, run, which, check_mode=False):
        self.p = p
        self.run_command = run
        self.which = which
        self.env = dict((k, str(v)) for k, v in (p["public_environment"] or {}).items())
        self.env.update((k, str(v)) for k, v in (p["environment"] or {}).items())
        self.env["UV_PYTHON_DOWNLOADS"] = "automatic" if p["python_downloads"] else "never"
        self.env["UV_NO_PROGRESS"] = "1"
        # the build account's own uv.toml (~/.config/uv, or a uv.toml the build could find) is never read: a
        # link-mode = "symlink" there made root import from that account's cache; and every file is copied into the
        # build (one link each: the seal re-owns it, never a cache entry it shares an inode with)
        self.env["UV_NO_CONFIG"] = "1"
        self.env["UV_LINK_MODE"] = "copy"
        self.user = None
        self.elapsed = 0.0
        self.last_out = ""
        # check mode on a target the accounts are not made on yet (the role makes them first, which check mode does
        # not): the preview is asked as root, nothing is built
        self.user = _account(p["owner"], "owner", check_mode)
        if self.user is not None:
            self.env["HOME"] = self.user.pw_dir
            self.env["USER"] = self.user.pw_name
        # the account that runs the venv (run_as): the imports are checked as it
        self.serve = _account(p.get("run_as"), "run_as", check_mode)

    def separation_problems(self):
        """owner (the build account) against run_as (the serving account): no shared uid, group or home, and a uv
        cache the serving account cannot write (venv/accounts.py); nothing to check without both."""
        if self.user is None or self.serve is None:
            return []
        return account_problems(self.user, self.serve, _groups_of, uv_cache_dir(self.env, self.user.pw_dir))

    def run(self, argv, what, progress=None, serving=False):
        user = self.serve if serving and self.serve is not None else self.user
        if user is not None and os.geteuid() == 0 and user.pw_uid != 0:
            # by its path: the build's PATH (public_environment, e.g. CUDA's bin first) need not hold /usr/sbin
            argv = [self.which("runuser", required=True), "-u", user.pw_name, "--"] + argv
        if progress is not None:
            return self.run_reporting(argv, what, progress)
        rc, out, err = self.run_command(argv, environ_update=self.env, cwd="/")
        if rc != 0:
            return "%s failed (rc=%d): %s" % (what, rc, (err or out).strip()[-3000:])
        self.last_out = out
        return None

    def run_reporting(self, argv, what, progress):
        """Run one install step verbosely (uv -v streams a build backend's output), feeding each line to
        ``progress`` and writing its message to the progress file when it changes (at least every 10 s)."""
        env = dict(os.environ)
        env.update(self.env)
        env.update(LANG="C.UTF-8", LC_ALL="C.UTF-8")
        t0 = time.time()
        progress.start(what)
        self.write_progress(progress.doc(self.elapsed))
        state = {"written": time.time()}
        tail = collections.deque(maxlen=400)

        def on_line(line):
            tail.append(line)
            now = time.time()
            if progress.feed(line) or now - state["written"] >= 10.0:
                self.write_progress(progress.doc(now - t0 + self.elapsed))
                state["written"] = now
        rc = run_streaming(argv, env, on_line)
        self.elapsed += time.time() - t0
        self.last_out = "".join(tail)
        if rc != 0:
            said = "".join(line for line in tail if not line.startswith("DEBUG ")) or self.last_out
            return "%s failed (rc=%d): %s" % (what, rc, said.strip()[-3000:])
        return None

    def write_progress(self, doc):
        try:
            write_json(self.p["progress_file"], doc)
        except (IOError, OSError):
            pass            # progress is for the eyes only: a build never fails on it

    def clear_progress(self):
        if self.p["progress_file"]:
            try:
                os.unlink(self.p["progress_file"])
            except OSError:
                pass


class VenvManager(object):
    """One venv's wanted build, made so (see the module docstring)."""

    def __init__(self, params, run, which, check_mode=False, diff=False):
        self.p = params
        self.run = run              # the module's run_command (argv, environ_update=, cwd=) -> (rc, stdout, stderr)
        self.which = which          # the module's get_bin_path (name, required=)
        self.check_mode = check_mode
        self.diff = diff
        self.warnings = []
        self.path = params["path"].rstrip("/")
        self.store = (params["store"] or self.path + ".builds").rstrip("/")
        self.result = {}

    def fail(self, msg, result=None):
        raise VenvFailed(msg, self.result if result is None else result)

    def ensure(self):
        if self.p["state"] == "absent":
            return self.remove()
        try:
            self.b = Runner(self.p, self.run, self.which, self.check_mode)
            if self.p["switch_to"]:
                return self.switch_back()
            for name in ("uv", "lock"):
                if not self.p[name]:
                    self.fail("%s is required with state=present (unless switch_to names a build to put back)" % name, {})
            self.preflight()
            self.decide()
            if self.check_mode or self.action in ("none", "ready"):
                return self.finish()
            self.make()
            if (self.action == "seal" and self.active_id == self.wanted) or not self.p["activate"]:
                return self.finish()
            self.switch()
            return self.finish()
        except _Done as done:
            return done.result

    def _active(self):
        """(the target of the symlink at ``path`` or "", the id of the build in service - that target when it lies in
        ``store`` - or "")."""
        target = os.path.realpath(self.path) if os.path.islink(self.path) else ""
        return target, os.path.basename(target) if os.path.dirname(target) == os.path.realpath(self.store) else ""

    def _complete_builds(self):
        """The builds in ``store`` whose marker names them, as (id, marker)."""
        names = sorted(os.listdir(self.store)) if os.path.isdir(self.store) else []
        marked = [(n, read_marker(os.path.join(self.store, n))) for n in names]
        return [(n, m) for n, m in marked if m is not None and m.get("build") == n]

    def switch_back(self):
        """switch_to: an existing complete, sealed build put (back) in service with one rename - the rollback of an
        upgrade, no uv, no lock. Anything else named is refused with the builds there."""
        wanted = self.p["switch_to"]
        build_dir = os.path.join(self.store, wanted)
        marker = read_marker(build_dir) if os.path.isdir(build_dir) and not os.path.islink(build_dir) else None
        if marker is None or marker.get("build") != wanted or not marker.get("sealed") or os.lstat(build_dir).st_uid != 0:
            here = [n for n, _m in self._complete_builds()]
            self.fail("switch_to=%s: %s holds no complete sealed build of that id (it holds: %s); %s is unchanged" % (
                wanted, self.store, ", ".join(here) or "none", self.path), {})
        if os.path.lexists(self.path) and not os.path.islink(self.path):
            self.fail("path=%s exists and is not a symlink managed by this module; nothing was switched" % self.path, {})
        self.wanted, self.build_dir, self.marker = wanted, build_dir, marker
        active_target, self.active_id = self._active()
        action = "none" if self.active_id == wanted else "switch"
        self.action = action
        self.result = dict(changed=action != "none", decision=action, build=wanted, build_path=build_dir,
                           previous=self.active_id, active=self.active_id if action == "none" else wanted,
                           python=os.path.join(self.path, "bin", "python"), python_version=marker.get("python"),
                           lock_sha256=marker.get("lock_sha256"), pins=None, removed=[])
        if self.diff and action != "none":
            self.result["diff"] = dict(before="%s -> %s\n" % (self.path, active_target or "(none)"),
                                       after="%s -> %s\n" % (self.path, build_dir))
        if not self.check_mode and action == "switch":
            self.switch()
        return self.finish()

    def remove(self):
        """state=absent: the symlink at ``path`` and the builds this module made in ``store`` (each directory named
        by a build id, sealed with its marker or not) removed, then ``store`` when nothing else is left in it. A real directory at ``path`` (not
        this module's) or anything else in ``store`` is left where it is and named in a warning."""
        removed, kept = [], []
        if os.path.islink(self.path):
            removed.append(self.path)
        elif os.path.lexists(self.path):
            kept.append(self.path)
        builds = sorted(os.listdir(self.store)) if os.path.isdir(self.store) and not os.path.islink(self.store) else []
        for name in builds:
            d = os.path.join(self.store, name)
            ours = len(name) == 16 and all(c in "0123456789abcdef" for c in name)     # build_id()
            if os.path.isdir(d) and not os.path.islink(d) and (ours or os.path.isfile(os.path.join(d, MARKER))):
                removed.append(d)
            elif not name.startswith("."):
                kept.append(d)
        store_goes = os.path.isdir(self.store) and not kept
        if store_goes:
            removed.append(self.store)
        if kept:
            self.warnings.append("left in place, not built by this module: %s" % ", ".join(kept))
        self.result = dict(changed=bool(removed), removed=removed, path=self.path)
        if self.diff:
            self.result["diff"] = {"before": {"paths": removed}, "after": {"paths": []}}
        if self.check_mode:
            return self.result
        for path in removed:
            if os.path.islink(path):
                os.remove(path)
            elif path != self.store:
                shutil.rmtree(path)
        if store_goes:
            shutil.rmtree(self.store)
        return self.result

    # -- preflight: nothing on disk changes before every input has been checked -------------------------------------
    def preflight(self):
        p = self.p
        separation = self.b.separation_problems()
        if separation:
            self.fail("%s; nothing was built" % "; ".join(separation), {})
        if p["uv_version"] and uv_version_problem(p["uv_version"]):
            self.fail("uv_version=%s: %s; nothing was built" % (p["uv_version"], uv_version_problem(p["uv_version"])),
                      {})
        # With uv_version, uv is looked at only when it is about to run (ensure_uv): a re-run that changes nothing
        # does not need it.
        if not p["uv_version"]:
            self.ensure_uv({})
        try:
            with open(p["lock"], "rb") as f:
                self.lock_bytes = f.read()
        except (IOError, OSError) as e:
            self.fail("lock=%s cannot be read (%s); copy the lock file to the target first" % (p["lock"], e))
        self.pins = parse_lock(self.lock_bytes.decode("utf-8", "replace"))
        if not self.pins:
            self.fail("lock=%s pins no package (expected `uv pip compile` output: name==version lines)" % p["lock"])
        if os.path.lexists(self.path) and not os.path.islink(self.path):
            self.fail("path=%s exists and is not a symlink managed by this module (a venv built by hand?); "
                      "move it away or choose another path" % self.path)
        self.interpreter, self.py_version = self.python_version()

    def python_version(self):
        p = self.p
        if os.path.isabs(p["python"]):
            # an interpreter given by path is asked its version first: a Python 2 (or a 3 older than SGLang supports)
            # is named as such instead of as uv's failure to query it
            rc, out, err = self.run([p["python"], "-c", _VERSION_CODE])
            if rc != 0 or not out.strip():
                self.fail("python=%s does not run (%s); point python at a Python 3.10+ interpreter (apt install "
                          "python3)" % (p["python"], (err or out).strip()[-300:] or "rc %d" % rc))
            found = tuple(int(x) for x in out.strip().split(".")[:2] if x.isdigit())
            if found < MIN_PYTHON:
                self.fail("python=%s is Python %s: SGLang needs Python %d.%d or newer; point python at a newer "
                          "interpreter (apt install python3) - nothing was built" % (
                              p["python"], out.strip(), MIN_PYTHON[0], MIN_PYTHON[1]))
            # the version just printed is the build id's; uv is asked to find this interpreter only before a build
            # (a re-run that changes nothing starts no uv)
            return None, out.strip()
        self.ensure_uv({"decision": "uv"})
        interpreter = self.find_interpreter()
        rc, out, err = self.run([interpreter, "-c", _VERSION_CODE])
        if rc != 0:
            self.fail("python=%s (%s) does not run: %s" % (p["python"], interpreter, err.strip()))
        return interpreter, out.strip()

    def ensure_uv(self, result):
        """uv is about to run. Without uv_version it must be an executable; with uv_version it must also say that
        version (asked as the owner, as every uv call here) - else nothing is done: the result is unchanged with
        uv_ok=false and what was found, for the caller to install the pinned uv and call again."""
        p = self.p
        usable = os.path.isfile(p["uv"]) and os.access(p["uv"], os.X_OK)
        problem = tool_problem(p["uv"]) if usable else None
        if not p["uv_version"]:
            if not usable:
                self.fail("uv=%s is not an executable file; install uv first (role sglang_venv does)" % p["uv"], {})
            if problem:
                self.fail("uv=%s: %s; nothing was built" % (p["uv"], problem), {})
            return
        if problem:
            # an install of an earlier release made uv the service account's: installed again, root's
            raise _Done(self.without_diff(result, uv_ok=False, uv_found=None, uv_problem=problem))
        found = None
        if usable and self.b.run([p["uv"], "--version"], "uv --version") is None:
            words = self.b.last_out.split()
            found = words[1] if len(words) > 1 and words[0] == "uv" else self.b.last_out.strip()
        if found != p["uv_version"]:
            raise _Done(self.without_diff(result, uv_ok=False, uv_found=found))
        result["uv_ok"] = True

    @staticmethod
    def without_diff(result, **extra):
        result = dict(result, changed=False, **extra)
        result.pop("diff", None)
        return result

    def find_interpreter(self):
        """The interpreter uv finds for O(python) (a version such as 3.11, or a path), or fail naming it. The
        caller has made sure of uv first (ensure_uv)."""
        p = self.p
        err = self.b.run(find_argv(p["uv"], p["python"]), "finding Python %s" % p["python"])
        if err:
            self.fail("python=%s: no such interpreter on the target (%s). Install it (apt install python3.X) "
                      "or point python at one that exists%s" % (
                          p["python"], err.splitlines()[-1] if err else "",
                          "" if p["python_downloads"] else ", or allow python_downloads"), {})
        return self.b.last_out.strip().splitlines()[-1]

    # -- the decision --------------------------------------------------------------------------------------------
    def sources(self):
        p = self.p
        sources = dict(index_url=p["index_url"] or "", extra_index_urls=p["extra_index_urls"],
                       find_links=p["find_links"], no_index=p["no_index"])
        if p["no_binary"]:
            sources["no_binary"] = sorted(p["no_binary"])      # a source build is another venv than a wheel's
        digests = []
        for req in p["extra_requirements"] or []:
            try:
                with open(req, "rb") as f:
                    digests.append(hashlib.sha256(f.read()).hexdigest())
            except (IOError, OSError) as e:
                self.fail("extra_requirements=%s cannot be read (%s); copy it to the target first" % (req, e))
        if digests:   # one file: its digest alone, as before a list was taken (a build id that stays the same)
            sources["extra_requirements"] = digests[0] if len(digests) == 1 else digests
        return sources

    def decide(self):
        p, path, store = self.p, self.path, self.store
        self.lock_sha = hashlib.sha256(self.lock_bytes).hexdigest()
        self.wanted = build_id(self.lock_sha, self.py_version, p["packages"], p["packages_no_deps"], p["extra"],
                               self.sources())
        self.build_dir = os.path.join(store, self.wanted)
        self.active_target, self.active_id = self._active()
        self.marker = read_marker(self.build_dir)
        action = decide(self.active_id, self.wanted, self.marker is not None and self.marker.get("build") == self.wanted,
                        os.path.isdir(self.build_dir))
        if action == "none" and not self.sealed():
            action = "seal"       # a build from before builds were sealed (service-owned): made root's, not rebuilt
        if not p["activate"] and action == "switch":
            action = "ready"      # built beside the one in service, complete: nothing to do until it is activated
        self.action = action
        beside = not p["activate"] and self.active_id != self.wanted
        self.result = dict(changed=action not in ("none", "ready"), decision=action, build=self.wanted,
                           build_path=self.build_dir, previous=self.active_id,
                           active=self.active_id if beside else self.wanted,
                           python=os.path.join(self.build_dir if beside else path, "bin", "python"),
                           python_version=self.py_version, lock_sha256=self.lock_sha, pins=len(self.pins), removed=[])
        if self.diff and action != "none" and not beside:   # beside: path keeps pointing at the build in service
            self.result["diff"] = dict(before="%s -> %s\n" % (path, self.active_target or "(none)"),
                                       after="%s -> %s\n" % (path, self.build_dir))

    def sealed(self):
        return bool((self.marker or {}).get("sealed") and os.lstat(self.build_dir).st_uid == 0)

    # -- the change ----------------------------------------------------------------------------------------------
    def make(self):
        p, build_dir = self.p, self.build_dir
        if self.action not in ("build", "repair"):
            if not self.sealed():
                self.seal()   # switching back to (or keeping) a build made before sealing
                self.mark_sealed(dict(self.marker, sealed=True))
            return
        self.ensure_uv(self.result)
        if os.path.lexists(build_dir):
            shutil.rmtree(build_dir)
        if not os.path.isdir(self.store):
            os.makedirs(self.store, 0o755)
        # the store is root's: the service account builds only inside its own build directory, which is sealed
        # (root-owned, read-only) before it is switched in, so root never runs what the service could change
        os.chown(self.store, 0, 0)
        os.chmod(self.store, 0o755)
        # 0700 while it is made: the serving account cannot reach a file of it (uv leaves its venv's .lock writable
        # by all - the lab's attacker held it open for writing), so nothing it does can delay or taint the seal;
        # mark_sealed opens it to readers once it is root's and marked
        os.mkdir(build_dir, 0o700)
        if self.b.user is not None:
            os.chown(build_dir, self.b.user.pw_uid, self.b.user.pw_gid)
        scratch = self.scratch()
        try:
            failure = self.build(self.interpreter or self.find_interpreter())
        finally:
            self.b.clear_progress()
            if scratch:
                shutil.rmtree(scratch, ignore_errors=True)
                self.b.env.pop("TMPDIR", None)
                self.b.env["UV_LINK_MODE"] = "copy"
        if failure:
            shutil.rmtree(build_dir, ignore_errors=True)
            self.result.update(changed=False, build=self.active_id, build_path=self.active_target)
            self.fail("%s; the venv in service (%s) is untouched" % (failure, self.active_target or "none"))
        self.seal(fresh=True)
        self.mark_sealed(dict(build=self.wanted, lock_sha256=self.lock_sha, python=self.py_version,
                              packages=p["packages"], packages_no_deps=p["packages_no_deps"], extra=p["extra"],
                              created=time.time(), sealed=True))

    def mark_sealed(self, marker):
        """After the seal: the marker written, then the build opened to readers (0755) - the service reads and runs it
        from now on; before this it is 0700, its builder's alone."""
        write_marker(self.build_dir, marker)
        os.chmod(self.build_dir, 0o755)

    def scratch(self):
        """With no uv cache kept (UV_NO_CACHE), uv unpacks every wheel into a temporary cache and would then copy
        each file into the build: the build twice on the disk while it is made (10 GB for 0.5.9's lock). Its temporary
        cache is put beside the build instead (TMPDIR: a private directory of the build account in the store, the
        same file system), and the files are hard-linked from it; uv removes it when it ends and the scratch directory
        goes after the build, so every installed file has one link again before the seal, which refuses any other.
        Returns that directory, or None when uv keeps a cache (copy mode: nothing shares an inode with it)."""
        home = self.b.user.pw_dir if self.b.user is not None else os.environ.get("HOME", "/root")
        if uv_cache_dir(self.b.env, home) is not None:
            return None
        scratch = os.path.join(self.store, ".scratch-" + self.wanted)
        shutil.rmtree(scratch, ignore_errors=True)
        os.mkdir(scratch, 0o700)
        if self.b.user is not None:
            os.chown(scratch, self.b.user.pw_uid, self.b.user.pw_gid)
        self.b.env.update(TMPDIR=scratch, UV_LINK_MODE="hardlink")
        return scratch

    def build(self, interpreter):
        p = self.p
        err = self.b.run(venv_argv(p["uv"], interpreter, self.build_dir), "uv venv")
        if err:
            return err
        steps = install_steps(p, self.build_dir, verbose=bool(p["progress_file"]))
        progress = BuildProgress(len(steps)) if p["progress_file"] else None
        for argv, what in steps:
            err = self.b.run(argv, what, progress)
            if err:
                return err
        return None

    def seal(self, fresh=False):
        """Seal the build (root's, read-only, no set-id bit); name every file whose set-id or sticky bit was
        cleared. Refused - a fresh build removed, the venv in service untouched - when a process holds a file of the
        build open for writing (before and after the seal), a link leaves the build, a file has another hard link, or
        an installed file is not what its package's RECORD says."""
        build_dir = self.build_dir
        try:
            writers = open_writers(build_dir, own_pid=os.getpid())
            if writers:
                raise SealError("%s is held open for writing by %s: what it writes after the seal would be root's venv; "
                                "stop it and build again" % (build_dir, "; ".join(writers[:5])))
            cleared = seal(build_dir)
            problems = [("a process holds a file open for writing", open_writers(build_dir, own_pid=os.getpid())),
                        ("a link points outside the build", links_leaving(build_dir)),
                        ("an installed file is not what its package's RECORD says", record_mismatches(build_dir))]
            for what, found in problems:
                if found:
                    raise SealError("%s: %s: %s" % (build_dir, what, "; ".join(found[:5])))
        except SealError as e:
            if fresh:
                shutil.rmtree(build_dir, ignore_errors=True)
                self.result.update(changed=False, build=self.active_id, build_path=self.active_target)
            self.fail("%s; the build is refused%s and the venv in service (%s) is untouched" % (
                e, " and removed" if fresh else "", self.active_target or "none"))
        self.result["setid_cleared"] = cleared
        if cleared:
            self.warnings.append("the build held set-id or sticky bits, cleared when it was sealed (a package does "
                                 "not need them; something in the build made them): %s" % ", ".join(cleared[:10]))

    def switch(self):
        """Atomic: a new symlink beside the old one, renamed over it; then the builds beyond ``keep`` go."""
        tmp_link = "%s.new-%d" % (self.path, os.getpid())
        parent = os.path.dirname(self.path)
        if not os.path.isdir(parent):
            os.makedirs(parent, 0o755)
        os.symlink(self.build_dir, tmp_link)
        os.rename(tmp_link, self.path)
        builds = [(name, m.get("created", 0)) for name, m in self._complete_builds()]
        for old in prune(builds, self.wanted, self.p["keep"]):
            shutil.rmtree(os.path.join(self.store, old), ignore_errors=True)
            self.result["removed"].append(old)

    def finish(self):
        """The result; with verify_imports, the venv's interpreter first imports them (as run_as, else the owner) and the answer
        is returned as ``imports`` - in the same call, so a no-op re-run needs no second round trip. In check mode a
        venv that would change is not asked (it is not there yet). With verify_cached, the last answer is reused
        while the venv's packages, its interpreter and the GPUs the container sees are unchanged (IMPORTS_CACHE);
        only a real run records an answer, and only one without import errors."""
        result, names = self.result, self.p["verify_imports"]
        if not names or (self.check_mode and result["changed"]):
            return result
        build_dir = os.path.realpath(os.path.dirname(os.path.dirname(result["python"])))
        fingerprint = imports_fingerprint(build_dir, names, gpu_view()) if self.p["verify_cached"] else None
        cached = read_imports_cache(build_dir, fingerprint) if fingerprint else None
        if cached is not None:
            result["imports"] = dict(cached["imports"], cached=True, verified_at=cached["verified_at"])
            return result
        python = result["python"]
        err = self.b.run([python, "-c", VERIFY_CODE] + names, "importing %s with %s" % (", ".join(names), python),
                         serving=True)
        imports = None if err else parse_verify(self.b.last_out)
        if imports is None:
            self.fail("%s: %s" % (python, err or "printed no JSON: %s" % self.b.last_out.strip()[-1000:]))
        now = int(time.time())
        if (fingerprint and not self.check_mode and not imports.get("errors")
                and os.geteuid() == os.lstat(build_dir).st_uid):
            write_imports_cache(build_dir, fingerprint, imports, now)
        result["imports"] = dict(imports, cached=False, verified_at=now)
        return result
