# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""How a manager (the work of one module) says it failed: the message for the operator and the result so far, so a
failure carries the same facts as a success (the module passes both to fail_json)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class Failed(Exception):
    """A refusal or a failure: ``msg`` for the operator, ``result`` with the facts."""

    def __init__(self, msg, result=None):
        super(Failed, self).__init__(msg)
        self.msg = msg
        self.result = result if result is not None else {}
