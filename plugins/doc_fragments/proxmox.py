# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    # The Proxmox VE API connection every gpuserve.sglang module that calls the API shares: one spec
    # (plugins/module_utils/pve/lxc.py API_ENV names the environment fallbacks, as community.proxmox's), settable once
    # for all of them with module_defaults and the action group gpuserve.sglang.proxmox.
    DOCUMENTATION = r"""
options:
  api_host:
    description:
      - Proxmox VE API host.
      - Falls back to the environment variable E(PROXMOX_HOST) when not given.
    type: str
    required: true
  api_port:
    description:
      - API port.
      - Falls back to E(PROXMOX_PORT) when not given.
    type: int
    default: 8006
  api_user:
    description:
      - User, e.g. C(root@pam).
      - Falls back to E(PROXMOX_USER).
    type: str
    required: true
  api_password:
    description:
      - Password (ticket login). Either this or O(api_token_id) + O(api_token_secret).
      - Falls back to E(PROXMOX_PASSWORD).
    type: str
  api_token_id:
    description:
      - API token name (without the user part), e.g. C(ansible).
      - Falls back to E(PROXMOX_TOKEN_ID).
    type: str
  api_token_secret:
    description:
      - API token secret.
      - Falls back to E(PROXMOX_TOKEN_SECRET).
    type: str
  validate_certs:
    description:
      - Verify the API's TLS certificate (against the system CAs, or O(ca_file)).
      - Falls back to E(PROXMOX_VALIDATE_CERTS) when not given.
    type: bool
    default: true
  ca_file:
    description:
      - CA bundle on the controller that signed the API's certificate, such as a copy of the cluster's
        C(/etc/pve/pve-root-ca.pem) (the CA of every node's self-signed certificate). Verification stays on.
      - Falls back to E(PROXMOX_CA_FILE).
    type: path
notes:
  - The API options can be set once for every module of the group with
    C(module_defaults) and C(group/gpuserve.sglang.proxmox).
"""
