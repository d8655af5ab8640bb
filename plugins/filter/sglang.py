# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuserve.sglang.plugins.module_utils.sglang_argv import ArgvError, server_argv
from ansible_collections.gpuserve.sglang.plugins.module_utils.sglang_log import parse_log
from ansible_collections.gpuserve.sglang.plugins.module_utils.sglang_process import systemd_exec_line


def sglang_log(text):
    if not isinstance(text, str):
        raise AnsibleFilterError("sglang_log: expected log text, got %s" % type(text).__name__)
    return parse_log(text)


def sglang_argv(args, python, model_path):
    try:
        return server_argv(python, model_path, args)
    except ArgvError as exc:
        raise AnsibleFilterError("sglang_argv: %s" % exc)


def sglang_systemd_exec(argv):
    if not isinstance(argv, (list, tuple)) or not all(isinstance(a, str) for a in argv):
        raise AnsibleFilterError("sglang_systemd_exec: expected an argv list of strings")
    return systemd_exec_line(list(argv))


class FilterModule(object):
    def filters(self):
        return {"sglang_log": sglang_log, "sglang_argv": sglang_argv, "sglang_systemd_exec": sglang_systemd_exec}
