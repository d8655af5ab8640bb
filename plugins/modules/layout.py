#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: layout
short_description: A role's accounts, directories, files and enabled units, checked and set in one call
version_added: 0.8.0
description:
  - What a role lays out on a host - system groups and accounts, directories, files whose content the controller
    gives (a rendered template, a lock, a token), paths that must be gone, systemd units enabled at boot - is read
    in one call and only what differs is changed. A re-run that changes nothing then costs one round trip for the
    lot instead of one per group, account, directory, file and unit (each through ssh and C(pct exec)).
  - Order - groups, accounts, O(paths) in the order given, C(systemctl daemon-reload) when O(daemon_reload) and a
    path changed, then the O(enabled) units not enabled yet.
  - Groups and accounts are created as system ones (C(groupadd --system), C(useradd --system)); an existing
    account's primary group, home and shell are set and wanted supplementary groups added, never removed.
  - A directory is created with missing parents (root's, 0755); a link to a directory is followed. A file is
    written to a temporary file in its directory with its owner and mode set before the first byte, then renamed
    over the path. Owner, group or mode left out are kept as they are (a new directory or file gets root and
    0755 or 0644).
  - A O(paths[].secret) is a file content that never appears in a result, a diff or an error; its mode must give
    nothing to others.
  - The logic is plain Python in C(plugins/module_utils/host/layout.py).
author:
  - gpuserve.sglang contributors (@gpuserve)
options:
  groups:
    description: System groups that must exist.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: The group's name.
        type: str
        required: true
  users:
    description: System accounts that must exist (after O(groups)).
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: The account's name.
        type: str
        required: true
      group:
        description: Its primary group.
        type: str
        required: true
      groups:
        description: Supplementary groups it must be in (added, never removed).
        type: list
        elements: str
        default: []
      home:
        description: Its home directory.
        type: str
      create_home:
        description: Whether C(useradd) creates the home when it creates the account. Give the home as a O(paths)
          entry to have it created or its mode kept on an existing account too.
        type: bool
        default: false
      shell:
        description: Its login shell.
        type: str
        default: /usr/sbin/nologin
  paths:
    description: Directories, files and absent paths, set in this order.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: An absolute, normalised path.
        type: path
        required: true
      state:
        description: What must be at O(paths[].path). Defaults to C(file) when a content or secret is given, else
          C(directory).
        type: str
        choices: [directory, file, absent]
      owner:
        description: Owner (name or uid); left as it is when omitted.
        type: str
      group:
        description: Group (name or gid); left as it is when omitted.
        type: str
      mode:
        description: Octal mode as a quoted string (C('0750')); left as it is when omitted.
        type: raw
      content:
        description: The file's content (shown in a diff when it changes).
        type: str
      secret:
        description: The file's content when it is a secret - never returned, logged or diffed.
        type: str
  daemon_reload:
    description: Run C(systemctl daemon-reload) when any of O(paths) changed (give it when a unit file is among them).
    type: bool
    default: false
  enabled:
    description: Systemd units that must be enabled at boot (one C(systemctl is-enabled) asks for all of them).
    type: list
    elements: str
    default: []
  probe:
    description: Paths whose existence is only reported, in RV(present) (read after the changes; nothing is done to
      them). Saves a separate C(stat) round trip.
    type: list
    elements: path
    default: []
attributes:
  check_mode:
    support: full
    description: Reads everything and reports what would change; changes nothing.
  diff_mode:
    support: full
    description: Files show their content before and after (secrets only that they change); directories and files
      show owner, group and mode.
extends_documentation_fragment:
  - gpuserve.sglang.attributes
"""

EXAMPLES = r"""
- name: The service account, its directories and its unit
  gpuserve.sglang.layout:
    groups: [{name: sglang}]
    users: [{name: sglang, group: sglang, groups: [video], home: /var/lib/sglang}]
    paths:
      - {path: /var/lib/sglang, owner: sglang, group: sglang, mode: "0750"}
      - {path: /var/log/sglang, owner: root, group: sglang, mode: "0750"}
      - path: /etc/systemd/system/sglang-main.service
        content: "{{ lookup('ansible.builtin.template', 'sglang.service.j2') }}"
        owner: root
        group: root
        mode: "0644"
    daemon_reload: true
    enabled: [sglang-main.service]
  register: layout

- name: A token only root reads
  gpuserve.sglang.layout:
    paths:
      - {path: /etc/sglang/hf-token, secret: "{{ hf_token }}\n", owner: root, group: root, mode: "0600"}
  no_log: true
"""

RETURN = r"""
changed_paths:
  description: The paths created, written, removed or whose owner, group or mode was set (would be, in check mode).
  returned: always
  type: list
  elements: str
  sample: [/etc/systemd/system/sglang-main.service]
enabled:
  description: The units enabled now (would be, in check mode).
  returned: always
  type: list
  sample: ["sglang-sglang.service"]
  elements: str
present:
  description: For each of O(probe), whether it exists (a link is followed).
  returned: always
  type: dict
  sample: {/etc/ssl/certs/ca-certificates.crt: true}
actions:
  description: One line per change, such as C(path /var/log/sglang - directory mode 0755->0750).
  returned: always
  type: list
  sample: ["path /var/log/sglang - directory mode 0755->0750"]
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuserve.sglang.plugins.module_utils.host import LayoutError, run


def _summary(params):
    """The arguments as they are echoed back: a content by its size, never a secret."""
    shown = dict(params)
    shown["paths"] = []
    for entry in params["paths"] or []:
        item = dict(entry)
        if item.get("content") is not None:
            item["content"] = "(%d characters)" % len(item["content"])
        if item.get("secret") is not None:
            item["secret"] = "(secret)"
        shown["paths"].append(item)
    return shown


def main():
    module = AnsibleModule(
        argument_spec=dict(
            groups=dict(type="list", elements="dict", default=[], options=dict(name=dict(type="str", required=True))),
            users=dict(type="list", elements="dict", default=[], options=dict(
                name=dict(type="str", required=True),
                group=dict(type="str", required=True),
                groups=dict(type="list", elements="str", default=[]),
                home=dict(type="str"),
                create_home=dict(type="bool", default=False),
                shell=dict(type="str", default="/usr/sbin/nologin"),
            )),
            paths=dict(type="list", elements="dict", default=[], options=dict(
                path=dict(type="path", required=True),
                state=dict(type="str", choices=["directory", "file", "absent"]),
                owner=dict(type="str"),
                group=dict(type="str"),
                mode=dict(type="raw"),
                content=dict(type="str"),
                secret=dict(type="str", no_log=True),
            )),
            daemon_reload=dict(type="bool", default=False),
            enabled=dict(type="list", elements="str", default=[]),
            probe=dict(type="list", elements="path", default=[]),
        ),
        supports_check_mode=True,
    )
    invocation = {"module_args": _summary(module.params)}
    try:
        result = run(module.params, check=module.check_mode)
    except (LayoutError, OSError) as exc:
        module.fail_json(msg=str(exc), invocation=invocation)
    diff = result.pop("diff")
    if module._diff and diff:
        result["diff"] = diff
    module.exit_json(invocation=invocation, **result)


if __name__ == "__main__":
    main()
