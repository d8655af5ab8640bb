#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: records_info
short_description: Read the records this collection keeps on a host - launch record, venv build marker, model manifest
version_added: 0.10.0
description:
  - Each record has one owner that knows its path and shape; playbooks and roles ask this module for them instead of
    rebuilding a path in YAML.
  - The launch record of a server (written by M(gpuserve.sglang.sglang_server)) - its pid, configuration hash, launch
    id, log path and offset, argv, and after a failed launch that was rolled back C(restored_after).
  - The build marker of a venv (written by M(gpuserve.sglang.uv_venv)) - the build id, the lock's hash, the versions.
  - The manifest of a model snapshot (written by M(gpuserve.sglang.hf_snapshot)) - the revision and every file with
    its size and hash.
  - Read-only. A record that does not exist is returned as an empty dict, with C(exists=false) beside it.
author:
  - gpuserve.sglang contributors (@gpuserve)
options:
  server:
    description:
      - The server whose launch record to read, as M(gpuserve.sglang.sglang_server) names it (O(server.name), and
        O(server.state_dir) when not the default).
    type: dict
    suboptions:
      name:
        description: The server's name (the module's O(gpuserve.sglang.sglang_server#module:name)).
        type: str
        required: true
      state_dir:
        description: The directory of its launch records.
        type: path
        default: /var/lib/gpuserve-sglang
  venv:
    description:
      - A venv path (the symlink M(gpuserve.sglang.uv_venv) switches, or one build's directory) whose build marker to
        read.
    type: path
  model_dir:
    description: A model directory whose snapshot manifest to read.
    type: path
extends_documentation_fragment:
  - gpuserve.sglang.attributes
"""

EXAMPLES = r"""
- name: The launch record of the server and the build and model it runs
  gpuserve.sglang.records_info:
    server:
      name: qwen
    venv: /opt/sglang/venv
    model_dir: /srv/models/qwen3.6-27b
  register: records

- name: The launch's log offset
  ansible.builtin.debug:
    msg: "launch {{ records.launch_record.launch_id }} from byte {{ records.launch_record.log_offset }}"
  when: records.launch_record_exists
"""

RETURN = r"""
launch_record:
  description: The server's launch record (C(pid), C(config_hash), C(launch_id), C(log_path), C(log_offset), C(argv),
    C(manager), and C(restored_after) after a rollback); empty when there is none.
  returned: when O(server) was given
  type: dict
  sample: {"pid": 4121, "config_hash": "9c1d0e7a2b3f4c5d6e7f8a9b0c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d", "launch_id": "41a706607eb6",
          "log_path": "/var/log/sglang/sglang.log", "log_offset": 18342,
          "argv": ["/opt/sglang/venv/bin/python", "-m", "sglang.launch_server", "--tp-size", "2", "--host",
          "127.0.0.1", "--port", "30000", "--model-path", "/srv/models/Qwen3.6-27B", "--config",
          "/etc/sglang/sglang.yaml"], "manager": "systemd"}
launch_record_exists:
  description: Whether the server has a launch record.
  returned: when O(server) was given
  type: bool
  sample: true
build:
  description: The venv's build marker (C(build), C(lock_sha256), the versions it was built with); empty when none.
  returned: when O(venv) was given
  type: dict
  sample: {"build": "5f0c2a9e1b7d4c33",
          "lock_sha256": "3a7bd3e2360a3d29eea436fcfb7e44c735d117c42d1c1835420b6b9942dd4f1b",
          "python": "3.11.2", "sealed": true}
build_exists:
  description: Whether the venv has a build marker.
  returned: when O(venv) was given
  type: bool
  sample: true
manifest:
  description: The model's snapshot manifest (C(repo_id), C(revision), C(files)); empty when none.
  returned: when O(model_dir) was given
  type: dict
  sample: {"repo_id": "Qwen/Qwen3.6-27B", "revision": "0123456789abcdef0123456789abcdef01234567",
          "files": {"config.json": {"size": 4120,
          "sha256": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"}}}
manifest_exists:
  description: Whether the model directory has a manifest.
  returned: when O(model_dir) was given
  type: bool
  sample: true
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuserve.sglang.plugins.module_utils.hub import read_manifest
from ansible_collections.gpuserve.sglang.plugins.module_utils.server import read_launch_record
from ansible_collections.gpuserve.sglang.plugins.module_utils.venv import read_marker


def main():
    module = AnsibleModule(
        argument_spec=dict(
            server=dict(type="dict", options=dict(name=dict(type="str", required=True),
                                                  state_dir=dict(type="path", default="/var/lib/gpuserve-sglang"))),
            venv=dict(type="path"),
            model_dir=dict(type="path"),
        ),
        required_one_of=[("server", "venv", "model_dir")],
        supports_check_mode=True,
    )
    p = module.params
    result = dict(changed=False)
    for key, given, read in (("launch_record", p["server"], lambda s: read_launch_record(s["state_dir"], s["name"])),
                             ("build", p["venv"], read_marker), ("manifest", p["model_dir"], read_manifest)):
        if given:
            record = read(given)
            result[key] = record or {}
            result[key + "_exists"] = record is not None
    module.exit_json(**result)


if __name__ == "__main__":
    main()
