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
  state:
    description:
      - V(present) builds and switches as described above.
      - V(absent) removes the symlink at O(path) and the builds this module made in O(store) (directories named by a
        build id), then O(store) when nothing else is in it. A real directory at O(path) or anything else in O(store)
        is left and named in a warning. O(uv) and O(lock) are not needed. Added in 0.13.0.
    type: str
    choices: [present, absent]
    default: present
  store:
    description: Where builds live. Defaults to C(<path>.builds).
    type: path
  uv:
    description: The uv binary. Required with O(state=present), unless O(switch_to).
    type: path
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
    description: The lock file on the target (C(uv pip compile) output, ideally with hashes). Required with O(state=present), unless O(switch_to).
    type: path
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
      - Requirements files on the target whose every requirement carries C(--hash=sha256:...), installed last without
        dependencies, constrained by the lock, with C(--require-hashes) - for what the lock does not hold (flash-attn
        built from source, a transfer engine's wheels for prefill/decode disaggregation). Their content is part of the
        build id.
      - Before 0.20.0 one path; one path is still taken (a list of one).
    type: list
    elements: path
    default: []
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
      - Build as this user (a dedicated build account, so no package's build step runs as root nor as the account
        that serves the venv), inside its own build directory only; uv runs with its home (uv's cache). The
        finished build is then sealed - owned by root and not writable by anyone else - before it is switched in, so
        root never runs a file the build account could change. Needs the module to run as root. A build made before
        sealing existed is sealed on the next run (RV(decision=seal)).
      - uv runs with C(UV_NO_CONFIG=1) (no C(uv.toml) of the account is read) and C(UV_LINK_MODE=copy) (every file
        the build's own, with one link; set in O(public_environment) or not). The seal is refused - a fresh build
        removed, the venv in service untouched - when a process holds a file of the build open for writing (before
        or after it), a regular file has more than one hard link (checked before anything is re-owned), a link points
        outside the build (the venv's own interpreter links aside), or an installed file is not what its package's
        dist-info C(RECORD) says (a poisoned cache entry).
    type: str
  run_as:
    description:
      - The account that runs the venv (the service account). The imports of O(verify_imports) are made as it (it
        sees the GPUs as the server does).
      - With O(owner), the build is refused before anything is done unless the two are apart - no shared uid, group
        or home, and a uv cache (C(UV_CACHE_DIR), else the build account's C(~/.cache/uv)) that this account cannot
        write, nor any parent of it. A serving account that could change the next build's inputs (a compromised
        server, still running while the next release is built) would have root seal them.
    type: str
    version_added: 0.18.0
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
      - Python modules the venv's interpreter imports (as O(run_as), else O(owner)) once the venv is in place - also when
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
      - A version older than 0.4.4, the oldest uv that takes every option the build passes (uv 0.4.3's C(uv venv) has
        no C(--no-project)), is refused before anything is done.
    type: str
    version_added: 0.7.0
  activate:
    description:
      - V(false) builds (or finds) the wanted build beside the one in service and leaves O(path) as it is - the next
        release made ready before an upgrade drains anything. RV(python) is then the build's own interpreter and
        O(verify_imports) asks it; RV(decision) is V(ready) when the build was already complete. Nothing is pruned.
      - The same call with V(true) puts it in service (RV(decision=switch), nothing built).
    type: bool
    default: true
    version_added: 0.17.0
  switch_to:
    description:
      - Put this build back in service (a build id of O(store), complete and sealed - the RV(previous) of the call that
        switched away from it), with one rename; O(uv) and O(lock) are not needed and nothing is built. The rollback
        of an upgrade whose server did not start. Another id is refused with the builds the store holds, O(path)
        unchanged.
    type: str
    version_added: 0.17.0
extends_documentation_fragment:
  - gpuserve.sglang.attributes
attributes:
  diff_mode:
    support: full
notes:
  - The decisions (build id, what to do, pruning, flash-attn wheel checks) are plain Python in
    C(plugins/module_utils/venv/), unit-tested directly.
seealso:
  - module: gpuserve.sglang.sglang_server
"""

EXAMPLES = r"""
- name: SGLang 0.5.9 with its whole pin set, as the service user
  gpuserve.sglang.uv_venv:
    path: /opt/sglang/venv
    uv: /opt/sglang/tools/uv/bin/uv
    lock: /opt/sglang/locks/sglang-0.5.9.lock
    owner: sglang-build
    run_as: sglang

- name: The next release built beside the venv in service (nothing switched yet)
  gpuserve.sglang.uv_venv:
    path: /opt/sglang/venv
    uv: /opt/sglang/tools/uv/bin/uv
    lock: /opt/sglang/locks/sglang-0.5.9.lock
    owner: sglang-build
    run_as: sglang
    activate: false
  register: next_build

- name: Put the build that was in service back (the rollback of an upgrade that did not start)
  gpuserve.sglang.uv_venv:
    path: /opt/sglang/venv
    switch_to: "{{ next_build.active }}"

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
  sample: true
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
  sample: null
decision:
  description: C(none), C(switch) (to an existing complete build), C(build), C(repair) (an interrupted build redone),
    or C(seal) (the build in service made root's and read-only); C(uv) when uv, not the O(uv_version) one, was
    needed to find the interpreter before anything could be decided; C(ready) with O(activate=false) when the build
    beside the one in service was already complete.
  returned: always
  type: str
  sample: build
build:
  description: The build id in service after the run (in check mode, the one that would be); with O(activate=false),
    the build made ready beside it.
  returned: always
  type: str
  sample: 5f0c2a9e1b7d4c33
active:
  description: The build id O(path) points at after the run (with O(activate=false), the one still in service).
  returned: always
  type: str
  sample: 5f0c2a9e1b7d4c33
  version_added: 0.17.0
build_path:
  description: The build directory behind O(path).
  returned: always
  type: str
  sample: /opt/sglang/venv.builds/5f0c2a9e1b7d4c33
previous:
  description: The build id that was in service before, if any.
  returned: always
  type: str
  sample: 9a8b7c6d5e4f3a21
python:
  description: The venv's interpreter (through O(path)); with O(activate=false), the interpreter of the build beside it.
  returned: always
  type: str
  sample: /opt/sglang/venv/bin/python
python_version:
  description: Version of the interpreter the venv is built on.
  returned: always
  type: str
  sample: 3.11.2
lock_sha256:
  description: SHA-256 of the lock file.
  returned: always
  type: str
  sample: 3a7bd3e2360a3d29eea436fcfb7e44c735d117c42d1c1835420b6b9942dd4f1b
pins:
  description: Number of pinned packages in the lock.
  returned: always
  type: int
  sample: 212
removed:
  description:
    - Old builds removed (beyond O(keep)), by build id.
    - With O(state=absent) (since 0.13.0), the paths removed - the symlink, the builds, the store (in check mode, that
      would be removed).
  returned: always
  type: list
  sample: ["1c2d3e4f5a6b7c8d"]
  elements: str
setid_cleared:
  description: Files and directories of the build whose set-user-id, set-group-id or sticky bit was cleared when it
    was sealed (a warning names them too); a build sealed root's never keeps one.
  returned: when a build was sealed
  type: list
  sample: []
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuserve.sglang.plugins.module_utils.venv import ARGUMENT_SPEC, REQUIRED_IF, VenvFailed, VenvManager


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, required_if=REQUIRED_IF, supports_check_mode=True)
    manager = VenvManager(module.params, module.run_command, module.get_bin_path, check_mode=module.check_mode,
                          diff=module._diff)
    try:
        result, failed = manager.ensure(), None
    except VenvFailed as exc:
        result, failed = exc.result, exc.msg
    for warning in manager.warnings:
        module.warn(warning)
    if failed:
        module.fail_json(msg=failed, **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
