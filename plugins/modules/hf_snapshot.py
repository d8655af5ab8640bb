#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: hf_snapshot
short_description: A complete, verified copy of a Hugging Face Hub model repo at a pinned revision
version_added: 0.2.0
description:
  - Resolves O(revision) to a commit, lists the repo's files with their sizes and hashes from the Hub API, checks
    the free disk against what is left to download (plus O(disk_margin_mib)) before writing a byte, downloads the
    missing files in parallel into C(<file>.incomplete) (continued with a Range request after an interruption),
    verifies each against the Hub (size, and sha256 for LFS files or the git blob sha1 otherwise), and writes a
    manifest last.
  - A re-run at a pinned commit with a complete manifest checks file sizes only and sends nothing over the network
    (O(verify=full) re-hashes every file and re-fetches a corrupted one).
  - Progress (bytes done, total, rate) is written to C(<local_dir>/.gpuserve-progress.json) while it runs, for a
    poller (role hf_model runs this module asynchronously and reports it).
  - One run per O(local_dir) at a time (a lock beside it); a new revision of a complete model in service is built
    beside it and switched in only when complete and verified (RV(staged)); transient network errors are retried
    (O(retries)). File names that could leave O(local_dir) are refused before anything is written.
  - The files come from the Hub through this module's own client (default), through the huggingface_hub library of
    a venv (O(downloader=huggingface_hub)), from a snapshot already on the target (O(source_dir)) or from another
    host's snapshot with rsync over ssh (O(source_host)); whatever fetched them, every file is verified against the
    Hub's (or the source manifest's) sizes and hashes before the manifest is written.
  - The token goes only into the HTTP Authorization header (and, for the library, into its environment as
    C(HF_TOKEN_PATH)); it is never in argv, the result or the logs.
author:
  - gpuserve.sglang contributors (@gpuserve)
options:
  repo_id:
    description: The model repo, C(<org>/<name>). Required with O(state=present).
    type: str
  state:
    description:
      - V(present) puts the snapshot at O(local_dir) as described above.
      - V(absent) removes what this module put there - O(local_dir) when it holds this module's manifest
        (C(.gpuserve-snapshot.json)), the revision kept beside it (C(<local_dir>.previous)) and any staging directory
        (C(<local_dir>.staging-<sha>)); a directory without the manifest is left and named in a warning. Nothing is
        fetched, no other option is needed. Added in 0.13.0.
    type: str
    choices: [present, absent]
    default: present
  revision:
    description: A full commit sha (pinned, recommended), a tag or a branch.
    type: str
    default: main
  local_dir:
    description: Where the files go (the model path SGLang loads).
    type: path
    required: true
  endpoint:
    description: The Hub or a mirror (C(HF_ENDPOINT)).
    type: str
    default: https://huggingface.co
  source_dir:
    description:
      - Copy from a snapshot already on the target (an NFS export, or the copy taken from the node a deployment
        moves off) instead of the Hub. It must hold the manifest this module writes; every file is verified against
        it while copying, and O(revision), when a commit, must be the one it holds. No network is used.
    type: path
  downloader:
    description:
      - C(builtin) downloads with this module's own client of the Hub API (no dependency on the target).
      - C(huggingface_hub) downloads with the huggingface_hub library of the venv whose interpreter is O(python) (the
        SGLang venv has it) - resumable HTTP, and hf_xet for Xet-backed repos; the file list, the disk check and the
        verification of every file against the Hub's sizes and hashes stay this module's.
      - C(auto) is C(huggingface_hub) when O(python) is given and imports it, else C(builtin) (asked in this same
        call, so a re-run needs no separate probe).
      - The library runs as O(owner), never as root - O(python) is the SGLang venv's, which the service account built.
        Run as root without an O(owner) other than root, C(huggingface_hub) is refused and C(auto) is C(builtin).
      - O(source_dir) or O(source_host), when set, is used instead of any of these.
    type: str
    choices: [auto, builtin, huggingface_hub]
    default: builtin
  python:
    description: The interpreter of a venv with huggingface_hub, for O(downloader=huggingface_hub) or O(downloader=auto).
    type: path
  hf_transfer:
    description:
      - With O(downloader=huggingface_hub), let hf_transfer fetch large files over parallel connections (when it is
        installed). It cannot resume - a file interrupted mid-way starts again from its first byte - so it is off by
        default.
    type: bool
    default: false
  source_host:
    description:
      - Copy from a verified snapshot on another host - the node or CT a deployment moves off - with rsync over ssh
        (C([user@]host)), instead of the Hub. The source's manifest (written there by this module) gives the files,
        sizes and hashes; an interrupted copy continues from its partial file; every file is verified before the
        manifest is written here. rsync and ssh must be on the target (role hf_model installs them).
    type: str
  source_host_dir:
    description: The snapshot directory on O(source_host) (default O(local_dir)).
    type: path
  ssh_port:
    description: SSH port of O(source_host).
    type: int
    default: 22
  ssh_key_file:
    description: Private key (on the target, mode 0600) authorized on O(source_host).
    type: path
  ssh_known_hosts_file:
    description: Known-hosts file holding O(source_host)'s host key (default the account's own).
    type: path
  bwlimit_kib:
    description: With O(source_host), cap the copy at this many KiB/s (rsync C(--bwlimit)) so the old node keeps serving; 0 is no cap.
    type: int
    default: 0
  ssh_host_key_checking:
    description: C(yes) requires the host key to be known already; C(accept-new) records it on first contact.
    type: str
    choices: ['yes', accept-new]
    default: 'yes'
  token:
    description: Hugging Face token for private or gated repos. Prefer O(token_file).
    type: str
  token_file:
    description: A file on the target holding the token (mode 0600).
    type: path
  allow_patterns:
    description: Only files matching one of these globs.
    type: list
    elements: str
    default: []
  ignore_patterns:
    description: Skip files matching these globs.
    type: list
    elements: str
    default: []
  verify:
    description: C(quick) trusts the manifest and file sizes; C(full) re-hashes every file.
    type: str
    choices: [quick, full]
    default: quick
  workers:
    description: Files downloaded in parallel.
    type: int
    default: 4
  retries:
    description:
      - Retries of a transient error (connection reset or timeout, HTTP 429/5xx) per request of the builtin client,
        the broken file continued from its partial copy by a Range request. Each retry is shown in the progress
        file and returned in RV(retries).
    type: int
    default: 5
  retry_backoff:
    description: Seconds before the first retry, doubled for each next one (at most 60).
    type: float
    default: 2.0
  disk_margin_mib:
    description: Free space that must remain after the download.
    type: int
    default: 1024
  timeout:
    description: Seconds a single HTTP read may stall.
    type: int
    default: 60
  owner:
    description:
      - Owner of the files (the service account that reads them).
      - The account the huggingface_hub library runs as (O(downloader)); the model directory and the library's cache in
        it are given to it before the download, and a token from O(token_file) (root's) reaches it as C(HF_TOKEN).
    type: str
extends_documentation_fragment:
  - gpuserve.sglang.attributes
notes:
  - The logic is plain Python in C(plugins/module_utils/hub/) - C(snapshot.py) (the snapshot), C(sources.py),
    C(files.py), C(transport.py) and C(manager.py), tested against a real Hub-compatible server.
  - The builtin downloader is a small, dependency-free client of the Hub's HTTP API, so the module runs with the
    target's system Python before any venv exists. O(downloader=huggingface_hub) runs the library in a child process
    of the venv's interpreter as O(owner), never as root, the token passed in its environment (C(HF_TOKEN_PATH)
    for O(token_file) when the library could read it, else C(HF_TOKEN)).
seealso:
  - module: gpuserve.sglang.sglang_memory_plan
"""

EXAMPLES = r"""
- name: Migration - reuse the verified copy of the old node (NFS-mounted) instead of 52 GB from the Hub
  gpuserve.sglang.hf_snapshot:
    repo_id: Qwen/Qwen3.6-27B
    revision: 0123456789abcdef0123456789abcdef01234567
    local_dir: /srv/models/Qwen3.6-27B
    source_dir: /mnt/old-node/srv/models/Qwen3.6-27B
    owner: sglang

- name: Migration - rsync the verified copy from the CT on the old node (52 GB over the LAN, not the Hub)
  gpuserve.sglang.hf_snapshot:
    repo_id: Qwen/Qwen3.6-27B
    revision: 0123456789abcdef0123456789abcdef01234567
    local_dir: /srv/models/Qwen3.6-27B
    source_host: root@ct128.lan
    ssh_key_file: /etc/sglang/model-source-ssh-key
    ssh_known_hosts_file: /etc/sglang/model-source-known_hosts
    owner: sglang

- name: Qwen3.6-27B with the SGLang venv's huggingface_hub (hf_xet for a Xet-backed repo)
  gpuserve.sglang.hf_snapshot:
    repo_id: Qwen/Qwen3.6-27B
    revision: 0123456789abcdef0123456789abcdef01234567
    local_dir: /srv/models/Qwen3.6-27B
    downloader: huggingface_hub
    python: /opt/sglang/venv/bin/python
    token_file: /etc/sglang/hf-token
    owner: sglang

- name: Qwen3.6-27B at a pinned commit, token from a 0600 file
  gpuserve.sglang.hf_snapshot:
    repo_id: Qwen/Qwen3.6-27B
    revision: 0123456789abcdef0123456789abcdef01234567
    local_dir: /srv/models/Qwen3.6-27B
    token_file: /etc/sglang/hf-token
    owner: sglang
"""

RETURN = r"""
removed:
  description: With O(state=absent), the directories removed (in check mode, that would be removed).
  returned: when O(state=absent)
  type: list
  sample: ["/srv/models/Qwen3.6-27B", "/srv/models/Qwen3.6-27B.previous"]
  elements: str
  version_added: 0.13.0
up_to_date:
  description:
    - True when the copy was already complete, verified and owned as asked, so nothing was changed (in check
      mode, nothing would be). A role's quick look in check mode uses it to skip the background download.
  returned: success
  type: bool
  sample: false
path:
  description: The local directory.
  returned: always
  type: str
  sample: /srv/models/Qwen3.6-27B
revision:
  description: The commit the snapshot is at.
  returned: success
  type: str
  sample: 0123456789abcdef0123456789abcdef01234567
file_count:
  description: Files in the snapshot.
  returned: success
  type: int
  sample: 17
bytes:
  description: Total size of the snapshot's files.
  returned: success
  type: int
  sample: 55781234567
fetched:
  description: Files downloaded (or that would be, in check mode).
  returned: success
  type: list
  sample: ["config.json", "model-00001-of-00011.safetensors"]
  elements: str
repaired:
  description: Files found corrupted (wrong hash) and fetched again.
  returned: success
  type: list
  sample: []
  elements: str
staged:
  description: True when a new revision of a complete model in service was built beside it and switched in
    (C(<local_dir>.staging-<sha>), unchanged files hard-linked); the old revision is kept in RV(previous_path).
  returned: when a revision changed
  type: bool
  sample: false
switched_from:
  description: The revision that was in service before the switch.
  returned: when RV(staged)
  type: str
  sample: null
previous_path:
  description: Where the previous revision is kept (C(<local_dir>.previous), one kept).
  returned: when RV(staged)
  type: str
  sample: null
retries:
  description: Transient errors retried by this run (what, attempt, error, wait_s); empty when none.
  returned: success
  type: list
  sample: [{"what": "model-00004-of-00011.safetensors", "attempt": 1, "error": "connection reset by peer",
          "wait_s": 2.0}]
  elements: dict
bytes_transferred:
  description: Bytes received over the network by this run.
  returned: success
  type: int
  sample: 55781234567
network:
  description: Whether the Hub was asked at all (false for a verified snapshot at a pinned commit).
  returned: success
  type: bool
  sample: true
config:
  description: The model's C(config.json), parsed (for the memory planner).
  returned: success and the repo has a config.json
  type: dict
  sample: {"architectures": ["Qwen3_5ForConditionalGeneration"], "torch_dtype": "bfloat16"}
manifest:
  description: The manifest that marks the snapshot complete (written last).
  returned: success
  type: str
  sample: /srv/models/Qwen3.6-27B/.gpuserve-snapshot.json
progress_file:
  description: Where progress is written while downloading.
  returned: success
  type: str
  sample: /srv/models/Qwen3.6-27B/.gpuserve-progress.json
downloader:
  description:
    - With O(downloader=huggingface_hub) and files to fetch, the versions of huggingface_hub, hf_xet and hf_transfer
      found; with O(source_host), the rsync used.
  returned: when the library or rsync was used
  type: dict
  sample: {"huggingface_hub": "0.36.0", "hf_xet": "1.2.0", "hf_transfer": null}
error_kind:
  description: C(unauthorized), C(forbidden), C(not_found), C(http), C(network), C(integrity), C(disk), C(locked)
    (another run is writing O(local_dir); the message names its pid), C(unsafe_path)
    (a listed file name that would leave O(local_dir)) or C(downloader).
  returned: failure
  type: str
  sample: null
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuserve.sglang.plugins.module_utils.hub import (ARGUMENT_SPEC, MUTUALLY_EXCLUSIVE, REQUIRED_IF,
                                                                          SnapshotFailed, SnapshotManager)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, mutually_exclusive=MUTUALLY_EXCLUSIVE, required_if=REQUIRED_IF,
                           supports_check_mode=True)
    manager = SnapshotManager(module.params, check_mode=module.check_mode, which=module.get_bin_path)
    try:
        result, failed = manager.ensure(), None
    except SnapshotFailed as exc:
        result, failed = exc.result, exc.msg
    for secret in manager.secrets:
        module.no_log_values.add(secret)
    for warning in manager.warnings:
        module.warn(warning)
    if failed:
        module.fail_json(msg=failed, **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
