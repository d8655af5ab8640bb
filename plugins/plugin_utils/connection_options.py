# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Controller code of the pct connection (never shipped to a target): its options given to ansible-core's config
manager before the plugin loader parses its DOCUMENTATION for them.

Ansible runs every task in a forked worker that loads the task's connection plugin again; for a collection's plugin
it parses the plugin's DOCUMENTATION (about 18 kB for pct, ssh's options copied) to learn its options - 20 to 45 ms in
every container task, about half of the worker's time in a task that runs no module (measured on the lab).
ansible-playbook has already parsed ansible.builtin.ssh's own documentation in the parent process (it preloads its
built-in connection plugins), so the same options are taken from there and the plugin's own added, in microseconds;
the loader then finds the definitions present and skips the parse. The config manager's methods are not a public
API: this runs only on an ansible-core release it was tested on (TESTED_CORE) whose manager has them, and only when
ssh's are loaded; otherwise nothing is registered and the loader parses DOCUMENTATION, as for any plugin.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy

# The ansible-core minor releases whose config manager this hook was tested on (CI installs tests/ci/locks/dev.lock's).
TESTED_CORE = ((2, 19),)
_CONFIG_METHODS = ("has_configuration_definition", "get_configuration_definitions",
                   "initialize_plugin_configuration_definitions")


def core_version():
    """(major, minor) of the running ansible-core."""
    from ansible.release import __version__ as version
    return tuple(int(x) for x in version.split(".")[:2])


def register_ssh_based(config, names, own_options, version=None):
    """Register ansible.builtin.ssh's option definitions plus ``own_options`` under each of ``names`` (the loader keys
    a plugin's definitions by the name it resolved: ansible-core 2.19 the Python module name, earlier releases the
    FQCN); True when it did."""
    if (version or core_version()) not in TESTED_CORE or not all(hasattr(config, m) for m in _CONFIG_METHODS):
        return False
    if not config.has_configuration_definition("connection", "ssh"):
        return False
    # a new mapping of option name to definition: ssh's definitions themselves are shared, not copied (the config
    # manager only reads them; a deep copy of their tagged values costs more than the parse it saves)
    defs = dict(config.get_configuration_definitions("connection", "ssh"))
    defs.update(copy.deepcopy(own_options))
    for name in names:
        if not config.has_configuration_definition("connection", name):
            config.initialize_plugin_configuration_definitions("connection", name, defs)
    return True
