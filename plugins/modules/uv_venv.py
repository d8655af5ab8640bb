#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: uv_venv
short_description: A Python venv built with uv from a lock file, switched in atomically
version_added: 0.2.0
description:
  - Builds a virtual environment with C(uv venv) and C(uv pip sync) (or C(uv pip install) constrained by the
    lock) in C(<store>/<build id>/), then points O(path) (a symlink) at it with one rename. The venv in
    service is never modified; a new pin, interpreter or package selection is a new build beside it.
  - The build id is a digest of the lock file, the interpreter version, the package selection, the extras
    and the package sources, so a second run with the same inputs finds its build and changes nothing.
  - A build directory without its completion marker (an install that was interrupted) is removed and built
    again; a failed build is removed and O(path) is left as it was.
  - Hashes in the lock (C(uv pip compile --generate-hashes)) are verified by uv, also when the lock is used
    as constraints.
author:
  - gpuserve.sglang contributors (@gpuserve)
options:
  path:
    description:
      - The venv path services use (C(<path>/bin/python)). A symlink this module manages; an existing real
        directory there is refused (move it away first).
    type: path
    required: true
  store:
    description: Where builds live. Defaults to C(<path>.builds).
    type: path
  uv:
    description: The uv binary.
    type: path
    required: true
  python:
    description:
      - Interpreter for the venv, a path or a version request uv understands (C(3.11), C(/usr/bin/python3)).
    type: str
    default: /usr/bin/python3
  python_downloads:
    description: Let uv download a managed Python when O(python) is not installed (many sites cannot reach those downloads).
    type: bool
    default: false
  lock:
    description: The lock file on the target (C(uv pip compile) output, ideally with hashes).
    type: path
    required: true
  packages:
    description:
      - Install only these requirements (with their dependencies), constrained by the lock, instead of the
        whole lock. Empty with O(packages_no_deps) empty means the whole lock (C(uv pip sync)).
    type: list
    elements: str
    default: []
  packages_no_deps:
    description: Requirements installed without their dependencies, constrained by the lock.
    type: list
    elements: str
    default: []
  extra:
    description:
      - Requirements installed after the lock (a wheel path, a URL, C(name==version)), without dependencies
        (those must be in the lock), constrained by the lock. flash-attn goes here.
    type: list
    elements: str
    default: []
  extra_requirements:
    description:
      - A requirements file on the target whose every requirement carries C(--hash=sha256:...), installed last without
        dependencies, constrained by the lock, with C(--require-hashes) - for a source distribution the lock does not
        hold (flash-attn built from source). Its content is part of the build id.
    type: path
    version_added: 0.8.0
  no_build_isolation:
    description: Packages built without build isolation (C(flash-attn) built from source needs the venv's torch).
    type: list
    elements: str
    default: []
  index_url:
    description: Package index instead of PyPI (a mirror, or a proxy).
    type: str
  extra_index_urls:
    description: More package indexes.
    type: list
    elements: str
    default: []
  find_links:
    description: Wheelhouse directories or URLs.
    type: list
    elements: str
    default: []
  no_index:
    description: Use only O(find_links) (a wheelhouse), no package index (C(--no-index)).
    type: bool
    default: false
  offline:
    description: Use only the uv cache and O(find_links) (C(--offline)).
    type: bool
    default: false
  environment:
    description:
      - Secret environment for uv (C(HTTPS_PROXY) with credentials, C(UV_INDEX_*_PASSWORD), ...). Not logged, and
        Ansible masks every occurrence of each value in the output, so keep short non-secret values out of it.
    type: dict
    default: {}
  public_environment:
    description: Non-secret environment for uv (C(UV_NATIVE_TLS), C(SSL_CERT_FILE), C(MAX_JOBS), C(CUDA_HOME), ...).
    type: dict
    default: {}
  owner:
    description:
      - Build as this user (the service account, so no package's build step runs as root), inside its own build
        directory only. The finished build is then sealed - owned by root and not writable by anyone else - before
        it is switched in, so root never runs a file the service account could change. Needs the module to run as
        root. A build made before sealing existed is sealed on the next run (RV(decision=seal)).
    type: str
  keep:
    description: Previous complete builds kept for a quick switch back.
    type: int
    default: 1
  no_binary:
    description:
      - Packages always built from their source distribution, never taken from a wheel (C(flash-attn) built from
        source, even when a wheelhouse in O(find_links) holds a wheel of it).
    type: list
    elements: str
    default: []
  progress_file:
    description:
      - While a build runs, write what it has reached here (JSON, rewritten atomically) for a poller such as
        M(gpuserve.sglang.job_progress) to print - run the module with C(async). The step, and for a source build
        the compiler steps done of all (ninja's C([12/73]), read from uv's verbose output) and the package being
        built. Removed when the build ends.
    type: path
  verify_imports:
    description:
      - Python modules the venv's interpreter imports (as O(owner)) once the venv is in place - also when
        nothing changed, in this same call - returned as RV(imports). A module that is absent is null; one that
        fails to import fails nothing here but is named in RV(imports) under C(errors) (the caller decides).
      - In check mode a venv that would change is not asked.
    type: list
    elements: str
    default: []
  verify_cached:
    description:
      - Reuse the last answer of O(verify_imports) instead of starting the venv's interpreter again (importing
        torch and SGLang takes 10-30 s on a GPU node), while everything it depends on is unchanged - the names
        asked, every entry of the venv's site-packages (name, size, mtime), the interpreter its C(python)
        resolves to, the container's C(/dev/nvidia*) nodes and the loaded driver's version. The answer is kept in
        the build (C(.gpuserve-imports.json), root's), written only by a run that is not in check mode and only
        when nothing failed to import. RV(imports) then says C(cached=true) and when it was asked (C(verified_at)).
      - A file changed inside a package directory without changing its top-level entry is not seen; builds are
        root's and read-only to everyone else (only root can do that).
    type: bool
    default: false
    version_added: 0.7.0
  uv_version:
    description:
      - The version O(uv) must be (C(uv --version), asked as O(owner)), checked only when uv is about to run - to
        build, or to find an interpreter O(python) gives by version. When it is another version or missing, nothing
        is done - the module returns unchanged with RV(uv_ok) false and RV(uv_found), for the caller to install the
        pinned uv and call again (role sglang_venv does). A run that needs no uv - nothing to do, a switch, check
        mode with O(python) a path - does not ask it, and a missing O(uv) is then no error.
      - Without it, O(uv) must be an executable file, checked first.
    type: str
    version_added: 0.7.0
extends_documentation_fragment:
  - gpuserve.sglang.attributes
attributes:
  diff_mode:
    support: full
notes:
  - The decisions (build id, what to do, pruning, flash-attn wheel checks) are plain Python in
    C(plugins/module_utils/uv_venv.py), unit-tested directly.
seealso:
  - module: gpuserve.sglang.sglang_server
"""

EXAMPLES = r"""
- name: SGLang 0.5.9 with its whole pin set, as the service user
  gpuserve.sglang.uv_venv:
    path: /opt/sglang/venv
    uv: /opt/sglang/tools/uv/bin/uv
    lock: /opt/sglang/locks/sglang-0.5.9.lock
    owner: sglang

- name: The same lock, only sglang and what importing it needs (a lab without GPUs)
  gpuserve.sglang.uv_venv:
    path: /opt/sglang/venv
    uv: /opt/sglang/tools/uv/bin/uv
    lock: /opt/sglang/locks/sglang-0.5.9.lock
    packages_no_deps: [sglang==0.5.9]
    packages: [numpy, requests, pydantic]
"""

RETURN = r"""
imports:
  description:
    - With O(verify_imports), what the venv's interpreter imported - C(python) (its version), C(executable), each
      module's C(__version__) (null when not installed), C(errors) (module -> the import error), and with torch
      C(torch_cuda), C(cuda_available), C(gpu_count), C(cxx11abi); C(cached) (the answer was reused, see
      O(verify_cached)) and C(verified_at) (when the interpreter was asked, seconds since the epoch).
  returned: when O(verify_imports) is set and the venv exists
  type: dict
  sample: {"python": "3.11.2", "sglang": "0.5.9", "torch": "2.9.1", "flash_attn": null, "errors": {}, "cached": false,
           "verified_at": 1796150000}
uv_ok:
  description: With O(uv_version), whether uv is that version - false means nothing was done (see O(uv_version)).
  returned: when O(uv_version) is set and uv was about to run
  type: bool
uv_found:
  description: The version O(uv) said (C(uv --version)), or null when it is missing or does not run.
  returned: when RV(uv_ok) is false
  type: str
  sample: 0.8.22
uv_problem:
  description: Why the uv found cannot be trusted although it may be the right version - it, or a directory above it,
    is not root's or is writable by another account (the service account could replace it). Nothing was built; the
    role installs uv again, root's.
  returned: when RV(uv_ok) is false for that reason
  type: str
decision:
  description: C(none), C(switch) (to an existing complete build), C(build), C(repair) (an interrupted build redone),
    or C(seal) (the build in service made root's and read-only); C(uv) when uv, not the O(uv_version) one, was
    needed to find the interpreter before anything could be decided.
  returned: always
  type: str
build:
  description: The build id in service after the run (in check mode, the one that would be).
  returned: always
  type: str
build_path:
  description: The build directory behind O(path).
  returned: always
  type: str
previous:
  description: The build id that was in service before, if any.
  returned: always
  type: str
python:
  description: The venv's interpreter (through O(path)).
  returned: always
  type: str
python_version:
  description: Version of the interpreter the venv is built on.
  returned: always
  type: str
lock_sha256:
  description: SHA-256 of the lock file.
  returned: always
  type: str
pins:
  description: Number of pinned packages in the lock.
  returned: always
  type: int
removed:
  description: Old builds removed (beyond O(keep)).
  returned: always
  type: list
  elements: str
setid_cleared:
  description: Files and directories of the build whose set-user-id, set-group-id or sticky bit was cleared when it
    was sealed (a warning names them too); a build sealed root's never keeps one.
  returned: when a build was sealed
  type: list
  elements: str
"""

import collections
import hashlib
import os
import pwd
import shutil
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuserve.sglang.plugins.module_utils.uv_venv import (
    VERIFY_CODE, BuildProgress, build_id, decide, gpu_view, imports_fingerprint, install_steps, parse_lock, parse_verify,
    SealError, prune, read_imports_cache, read_marker, run_streaming, seal, tool_problem, write_imports_cache,
    write_marker)
from ansible_collections.gpuserve.sglang.plugins.module_utils.files import write_json


MIN_PYTHON = (3, 10)   # sglang 0.5.9's Requires-Python


class Builder(object):
    def __init__(self, module):
        self.module = module
        self.p = module.params
        self.env = dict((k, str(v)) for k, v in (self.p["public_environment"] or {}).items())
        self.env.update((k, str(v)) for k, v in (self.p["environment"] or {}).items())
        self.env["UV_PYTHON_DOWNLOADS"] = "automatic" if self.p["python_downloads"] else "never"
        self.env["UV_NO_PROGRESS"] = "1"
        self.user = None
        self.elapsed = 0.0
        if self.p["owner"]:
            try:
                self.user = pwd.getpwnam(self.p["owner"])
            except KeyError:
                module.fail_json(msg="owner=%s: no such user on the target; create the service account first" % self.p["owner"])
            self.env["HOME"] = self.user.pw_dir
            self.env["USER"] = self.user.pw_name

    def run(self, argv, what, progress=None):
        if self.user is not None and os.geteuid() == 0 and self.user.pw_uid != 0:
            # by its path: the build's PATH (public_environment, e.g. CUDA's bin first) need not hold /usr/sbin
            argv = [self.module.get_bin_path("runuser", required=True), "-u", self.user.pw_name, "--"] + argv
        if progress is not None:
            return self.run_reporting(argv, what, progress)
        rc, out, err = self.module.run_command(argv, environ_update=self.env, cwd="/")
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


def finish(module, b, path, result):
    """Exit with the result; with verify_imports, the venv's interpreter first imports them (as the owner) and
    the answer is returned as ``imports`` - in the same call, so a no-op re-run needs no second round trip. In
    check mode a venv that would change is not asked (it is not there yet). With verify_cached, the last answer is
    reused while the venv's packages, its interpreter and the GPUs the container sees are unchanged
    (module_utils.uv_venv.IMPORTS_CACHE); only a real run records an answer, and only one without import errors."""
    names = module.params["verify_imports"]
    if names and not (module.check_mode and result["changed"]):
        build_dir = os.path.realpath(path)
        fingerprint = imports_fingerprint(build_dir, names, gpu_view()) if module.params["verify_cached"] else None
        cached = read_imports_cache(build_dir, fingerprint) if fingerprint else None
        if cached is not None:
            result["imports"] = dict(cached["imports"], cached=True, verified_at=cached["verified_at"])
            module.exit_json(**result)
        python = os.path.join(path, "bin", "python")
        err = b.run([python, "-c", VERIFY_CODE] + names, "importing %s with %s" % (", ".join(names), python))
        imports = None if err else parse_verify(b.last_out)
        if imports is None:
            module.fail_json(msg="%s: %s" % (python, err or "printed no JSON: %s" % b.last_out.strip()[-1000:]), **result)
        now = int(time.time())
        if fingerprint and not module.check_mode and not imports.get("errors") and os.geteuid() == os.lstat(build_dir).st_uid:
            write_imports_cache(build_dir, fingerprint, imports, now)
        result["imports"] = dict(imports, cached=False, verified_at=now)
    module.exit_json(**result)


def ensure_uv(module, b, p, result):
    """uv is about to run. Without uv_version it must be an executable; with uv_version it must also say that
    version (asked as the owner, as every uv call here) - else nothing is done: exit unchanged with uv_ok=false and
    what was found, for the caller to install the pinned uv and call again."""
    usable = os.path.isfile(p["uv"]) and os.access(p["uv"], os.X_OK)
    problem = tool_problem(p["uv"]) if usable else None
    if not p["uv_version"]:
        if not usable:
            module.fail_json(msg="uv=%s is not an executable file; install uv first (role sglang_venv does)" % p["uv"])
        if problem:
            module.fail_json(msg="uv=%s: %s; nothing was built" % (p["uv"], problem))
        return
    if problem:
        # an install of an earlier release made uv the service account's: installed again, root's
        result = dict(result, changed=False, uv_ok=False, uv_found=None, uv_problem=problem)
        result.pop("diff", None)
        module.exit_json(**result)
    found = None
    if usable and b.run([p["uv"], "--version"], "uv --version") is None:
        words = b.last_out.split()
        found = words[1] if len(words) > 1 and words[0] == "uv" else b.last_out.strip()
    if found != p["uv_version"]:
        result = dict(result, changed=False, uv_ok=False, uv_found=found)
        result.pop("diff", None)
        module.exit_json(**result)
    result["uv_ok"] = True


def find_interpreter(module, b, p):
    """The interpreter uv finds for O(python) (a version such as 3.11, or a path), or fail naming it. The caller
    has made sure of uv first (ensure_uv)."""
    err = b.run([p["uv"], "python", "find", "--no-project", p["python"]], "finding Python %s" % p["python"])
    if err:
        module.fail_json(msg="python=%s: no such interpreter on the target (%s). Install it (apt install python3.X) "
                             "or point python at one that exists%s" % (
                                 p["python"], err.splitlines()[-1] if err else "",
                                 "" if p["python_downloads"] else ", or allow python_downloads"))
    return b.last_out.strip().splitlines()[-1]


def sealed_setid(module, build_dir, result):
    """Seal the build (root's, read-only, no set-id bit); name every file whose set-id or sticky bit was cleared."""
    try:
        cleared = seal(build_dir)
    except SealError as e:
        module.fail_json(msg="%s; the venv in service is untouched" % e, **result)
    result["setid_cleared"] = cleared
    if cleared:
        module.warn("the build held set-id or sticky bits, cleared when it was sealed (a package does not need them; "
                    "something in the build made them): %s" % ", ".join(cleared[:10]))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            store=dict(type="path"),
            uv=dict(type="path", required=True),
            python=dict(type="str", default="/usr/bin/python3"),
            python_downloads=dict(type="bool", default=False),
            lock=dict(type="path", required=True),
            packages=dict(type="list", elements="str", default=[]),
            packages_no_deps=dict(type="list", elements="str", default=[]),
            extra=dict(type="list", elements="str", default=[]),
            extra_requirements=dict(type="path"),
            no_build_isolation=dict(type="list", elements="str", default=[]),
            index_url=dict(type="str"),
            extra_index_urls=dict(type="list", elements="str", default=[]),
            find_links=dict(type="list", elements="str", default=[]),
            no_index=dict(type="bool", default=False),
            offline=dict(type="bool", default=False),
            environment=dict(type="dict", default={}, no_log=True),
            public_environment=dict(type="dict", default={}),
            owner=dict(type="str"),
            keep=dict(type="int", default=1),
            no_binary=dict(type="list", elements="str", default=[]),
            progress_file=dict(type="path"),
            verify_imports=dict(type="list", elements="str", default=[]),
            verify_cached=dict(type="bool", default=False),
            uv_version=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    path = p["path"].rstrip("/")
    store = (p["store"] or path + ".builds").rstrip("/")
    b = Builder(module)

    # Preflight: nothing on disk changes before every input has been checked. With uv_version, uv is looked at
    # only when it is about to run (ensure_uv): a re-run that changes nothing does not need it.
    if not p["uv_version"]:
        ensure_uv(module, b, p, {})
    try:
        with open(p["lock"], "rb") as f:
            lock_bytes = f.read()
    except (IOError, OSError) as e:
        module.fail_json(msg="lock=%s cannot be read (%s); copy the lock file to the target first" % (p["lock"], e))
    pins = parse_lock(lock_bytes.decode("utf-8", "replace"))
    if not pins:
        module.fail_json(msg="lock=%s pins no package (expected `uv pip compile` output: name==version lines)" % p["lock"])
    if os.path.lexists(path) and not os.path.islink(path):
        module.fail_json(msg="path=%s exists and is not a symlink managed by this module (a venv built by hand?); "
                             "move it away or choose another path" % path)
    if os.path.isabs(p["python"]):
        # an interpreter given by path is asked its version first: a Python 2 (or a 3 older than SGLang supports)
        # is named as such instead of as uv's failure to query it
        rc, out, err = module.run_command([p["python"], "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"])
        if rc != 0 or not out.strip():
            module.fail_json(msg="python=%s does not run (%s); point python at a Python 3.10+ interpreter (apt install "
                                 "python3)" % (p["python"], (err or out).strip()[-300:] or "rc %d" % rc))
        found = tuple(int(x) for x in out.strip().split(".")[:2] if x.isdigit())
        if found < MIN_PYTHON:
            module.fail_json(msg="python=%s is Python %s: SGLang needs Python %d.%d or newer; point python at a newer "
                                 "interpreter (apt install python3) - nothing was built" % (
                                     p["python"], out.strip(), MIN_PYTHON[0], MIN_PYTHON[1]))
        # the version just printed is the build id's; uv is asked to find this interpreter only before a build
        # (a re-run that changes nothing starts no uv)
        interpreter, py_version = None, out.strip()
    else:
        ensure_uv(module, b, p, {"decision": "uv"})
        interpreter = find_interpreter(module, b, p)
        rc, out, err = module.run_command([interpreter, "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"])
        if rc != 0:
            module.fail_json(msg="python=%s (%s) does not run: %s" % (p["python"], interpreter, err.strip()))
        py_version = out.strip()

    lock_sha = hashlib.sha256(lock_bytes).hexdigest()
    sources = dict(index_url=p["index_url"] or "", extra_index_urls=p["extra_index_urls"], find_links=p["find_links"],
                   no_index=p["no_index"])
    if p["no_binary"]:
        sources["no_binary"] = sorted(p["no_binary"])      # a source build is another venv than a wheel's
    if p["extra_requirements"]:
        try:
            with open(p["extra_requirements"], "rb") as f:
                sources["extra_requirements"] = hashlib.sha256(f.read()).hexdigest()
        except (IOError, OSError) as e:
            module.fail_json(msg="extra_requirements=%s cannot be read (%s); copy it to the target first"
                                 % (p["extra_requirements"], e))
    wanted = build_id(lock_sha, py_version, p["packages"], p["packages_no_deps"], p["extra"], sources)
    build_dir = os.path.join(store, wanted)
    active_target = os.path.realpath(path) if os.path.islink(path) else ""
    active_id = os.path.basename(active_target) if os.path.dirname(active_target) == os.path.realpath(store) else ""
    marker = read_marker(build_dir)
    action = decide(active_id, wanted, marker is not None and marker.get("build") == wanted, os.path.isdir(build_dir))
    if action == "none" and not ((marker or {}).get("sealed") and os.lstat(build_dir).st_uid == 0):
        action = "seal"       # a build from before builds were sealed (service-owned): made root's, not rebuilt

    result = dict(changed=action != "none", decision=action, build=wanted, build_path=build_dir, previous=active_id,
                  python=os.path.join(path, "bin", "python"), python_version=py_version, lock_sha256=lock_sha,
                  pins=len(pins), removed=[])
    if module._diff and action != "none":
        result["diff"] = dict(before="%s -> %s\n" % (path, active_target or "(none)"), after="%s -> %s\n" % (path, build_dir))
    if module.check_mode or action == "none":
        finish(module, b, path, result)

    if action in ("build", "repair"):
        ensure_uv(module, b, p, result)
        if os.path.lexists(build_dir):
            shutil.rmtree(build_dir)
        if not os.path.isdir(store):
            os.makedirs(store, 0o755)
        # the store is root's: the service account builds only inside its own build directory, which is sealed
        # (root-owned, read-only) before it is switched in, so root never runs what the service could change
        os.chown(store, 0, 0)
        os.chmod(store, 0o755)
        os.mkdir(build_dir, 0o755)
        if b.user is not None:
            os.chown(build_dir, b.user.pw_uid, b.user.pw_gid)
        try:
            failure = build(b, p, interpreter or find_interpreter(module, b, p), build_dir)
        finally:
            b.clear_progress()
        if failure:
            shutil.rmtree(build_dir, ignore_errors=True)
            result.update(changed=False, build=active_id, build_path=active_target)
            module.fail_json(msg="%s; the venv in service (%s) is untouched" % (failure, active_target or "none"), **result)
        sealed_setid(module, build_dir, result)
        write_marker(build_dir, dict(build=wanted, lock_sha256=lock_sha, python=py_version, packages=p["packages"],
                                     packages_no_deps=p["packages_no_deps"], extra=p["extra"], created=time.time(),
                                     sealed=True))
    elif not ((marker or {}).get("sealed") and os.lstat(build_dir).st_uid == 0):
        sealed_setid(module, build_dir, result)   # switching back to (or keeping) a build made before sealing
        write_marker(build_dir, dict(marker, sealed=True))

    if action == "seal" and active_id == wanted:
        finish(module, b, path, result)
    # Atomic switch: a new symlink beside the old one, renamed over it.
    tmp_link = "%s.new-%d" % (path, os.getpid())
    parent = os.path.dirname(path)
    if not os.path.isdir(parent):
        os.makedirs(parent, 0o755)
    os.symlink(build_dir, tmp_link)
    os.rename(tmp_link, path)

    builds = []
    for name in os.listdir(store):
        m = read_marker(os.path.join(store, name))
        if m is not None and m.get("build") == name:
            builds.append((name, m.get("created", 0)))
    for old in prune(builds, wanted, p["keep"]):
        shutil.rmtree(os.path.join(store, old), ignore_errors=True)
        result["removed"].append(old)
    finish(module, b, path, result)


def build(b, p, interpreter, build_dir):
    err = b.run([p["uv"], "venv", "--no-project", "--allow-existing", "--python", interpreter, build_dir], "uv venv")
    if err:
        return err
    steps = install_steps(p, build_dir, verbose=bool(p["progress_file"]))
    progress = BuildProgress(len(steps)) if p["progress_file"] else None
    for argv, what in steps:
        err = b.run(argv, what, progress)
        if err:
            return err
    return None


if __name__ == "__main__":
    main()
