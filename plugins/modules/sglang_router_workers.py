#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: sglang_router_workers
short_description: The workers of a running SGLang router, changed through its API without a restart
version_added: 0.7.0
description:
  - Makes the worker list of a running SGLang router (sglang-router 0.3.2) exactly O(workers) through the router's
    C(/workers) API - C(POST /workers) for a missing one, C(DELETE /workers/<id>) for one no longer wanted - then
    lists the workers until the router shows exactly that set, because the router applies both in the background.
    The router is not restarted and keeps serving the others.
  - The API key is read from O(api_key_file) on the target (the file the router itself reads); it is sent as a bearer
    token and never returned or logged.
  - The logic is plain Python in C(plugins/module_utils/server/router.py).
author:
  - gpuserve.sglang contributors (@gpuserve)
options:
  url:
    description: The router's address as seen from the target.
    type: str
    default: http://127.0.0.1:30080
  api_key_file:
    description: File holding the router's API key (sglang-router 0.3.2 has one key, also sent to the workers).
    type: path
  workers:
    description: The worker URLs (C(http://<host>:<port>)) the router must route to, and no others.
    type: list
    elements: str
    required: true
  timeout:
    description:
      - Seconds to wait until the router lists exactly O(workers). A worker the router cannot reach (down, or
        answering 401 to its key) is never listed; the failure names it.
    type: int
    default: 60
attributes:
  check_mode:
    support: full
    description: Lists the router's workers and reports what would be added or removed.
  diff_mode:
    support: full
    description: The worker URLs before and after.
notes:
  - Only the router's own API is used (no sglang-router code on the target is needed beyond the running router).
extends_documentation_fragment:
  - gpuserve.sglang.attributes
"""

EXAMPLES = r"""
- name: The router routes to the two replicas of the inventory
  gpuserve.sglang.sglang_router_workers:
    url: http://127.0.0.1:30080
    api_key_file: /etc/sglang-router/router.key
    workers:
      - http://10.0.0.21:30000
      - http://10.0.0.22:30000
"""

RETURN = r"""
added:
  description: Worker URLs added (would be, in check mode).
  returned: always
  type: list
  elements: str
  sample: [http://10.0.0.22:30000]
removed:
  description: Worker URLs removed (would be, in check mode).
  returned: always
  type: list
  elements: str
  sample: []
workers:
  description: The router's workers afterwards (before, in check mode) - id, url, health and load.
  returned: always
  type: list
  elements: dict
  sample: [{id: 5dda16b0-4ef6-4b15-97ce-ea6484469370, url: "http://10.0.0.21:30000", is_healthy: true, load: 0}]
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuserve.sglang.plugins.module_utils.server import (
    RouterClient, RouterError, normalize_url, reconcile, worker_url_problem)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type="str", default="http://127.0.0.1:30080"),
            api_key_file=dict(type="path"),
            workers=dict(type="list", elements="str", required=True),
            timeout=dict(type="int", default=60),
        ),
        supports_check_mode=True,
    )
    p = module.params
    problems = [x for x in (worker_url_problem(u) for u in p["workers"]) if x]
    if problems:
        module.fail_json(msg="workers: %s; nothing was changed" % "; ".join(problems))
    key = None
    if p["api_key_file"]:
        try:
            with open(p["api_key_file"]) as fh:
                key = fh.read().strip() or None
        except (IOError, OSError) as e:
            module.fail_json(msg="api_key_file=%s cannot be read (%s)" % (p["api_key_file"], e.strerror))
        if key:
            module.no_log_values.add(key)
    try:
        r = reconcile(RouterClient(p["url"], key), p["workers"], module.check_mode, p["timeout"])
    except RouterError as e:
        module.fail_json(msg=str(e))
    result = dict(changed=r["changed"], added=r["added"], removed=r["removed"], workers=r["workers"])
    if module._diff and r["changed"]:
        before = sorted(w["url"] for w in r["workers"]) if module.check_mode else sorted(
            set(w["url"] for w in r["workers"]) - set(r["added"]) | set(r["removed"]))
        result["diff"] = {"before": "\n".join(before) + "\n",
                          "after": "\n".join(sorted(normalize_url(u) for u in p["workers"])) + "\n"}
    module.exit_json(**result)


if __name__ == "__main__":
    main()
