# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""SGLang server args (ServerArgs snake_case dict) -> argv list. Standard library only.

Never a shell string: every value is its own argv element, so quotes, spaces, ``$`` and newlines
reach SGLang byte for byte.  Secrets are refused: they belong in the environment file.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

SECRET_ARGS = ("api_key", "admin_api_key", "hf_token", "token")
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class ArgvError(ValueError):
    """Bad server args: the message names the key and the fix."""


def server_argv(python, model_path, args, module="sglang.launch_server"):
    """Return [python, -m, module, --model-path, path, --flag, value, ...] (sorted for stability)."""
    if not python:
        raise ArgvError("python: the venv interpreter path is required")
    if not model_path:
        raise ArgvError("model_path: the model directory (or repo id) is required")
    argv = [python, "-m", module, "--model-path", str(model_path)]
    for key in sorted(args or {}):
        value = args[key]
        if not isinstance(key, str) or not _NAME.match(key):
            raise ArgvError("args key %r is not an SGLang ServerArgs name (snake_case, e.g. tp_size)" % (key,))
        if key in SECRET_ARGS:
            raise ArgvError("args.%s: secrets never go on the command line (they would show in ps and logs); "
                            "pass it through the environment file instead" % key)
        if key in ("model_path", "model"):
            raise ArgvError("args.%s: give the model through model_path, not args" % key)
        flag = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            argv.append(flag)
        elif isinstance(value, (list, tuple)):
            if not value:
                continue
            argv.append(flag)
            argv.extend(_scalar(key, v) for v in value)
        elif isinstance(value, dict):
            raise ArgvError("args.%s: a mapping cannot be a command-line value; use a JSON string" % key)
        else:
            argv.extend([flag, _scalar(key, value)])
    return argv


def _scalar(key, value):
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (int, str)):
        return str(value)
    raise ArgvError("args.%s: unsupported value type %s" % (key, type(value).__name__))
