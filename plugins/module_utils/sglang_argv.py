# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""SGLang server args (ServerArgs snake_case dict) -> argv list. Standard library only.

Never a shell string: every value is its own argv element, so quotes, spaces, ``$`` and newlines
reach SGLang byte for byte.  Secrets are refused here: SGLang 0.5.9 reads its API key only from
``--api-key`` or from the YAML file named by ``--config`` (``server_args_config_parser.py``,
``ConfigArgumentMerger``: keys become ``--<key>`` inside the process, so the file's contents never
reach ``/proc/<pid>/cmdline``).  ``config_text`` writes that file's body; ``server_argv`` adds
``--config <path>``.  No environment variable sets the key in 0.5.9 (``SGLANG_API_KEY`` occurs
nowhere in its source).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
import json
import re

SECRET_ARGS = ("api_key", "admin_api_key", "hf_token", "token")
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class ArgvError(ValueError):
    """Bad server args: the message names the key and the fix."""


# Secret server args that SGLang 0.5.9 takes from its --config file, by ServerArgs name -> flag (without --).
CONFIG_SECRETS = {"api_key": "api-key", "admin_api_key": "admin-api-key"}


# Numeric server args checked before anything is planned or launched, whatever else runs: name -> (type, low,
# high, low inclusive, high inclusive, what it is).  Ranges are SGLang 0.5.9's own where it checks them
# (server_args.py), else the only values that make sense (a size of 0 GPUs, a port above 65535).
_NUMERIC = {
    "mem_fraction_static": (float, 0.0, 1.0, False, False, "the fraction of each GPU's memory SGLang may hold"),
    "tp_size": (int, 1, 1024, True, True, "GPUs per tensor-parallel group"),
    "pp_size": (int, 1, 1024, True, True, "pipeline-parallel stages"),
    "dp_size": (int, 1, 1024, True, True, "data-parallel replicas"),
    "ep_size": (int, 1, 1024, True, True, "expert-parallel size"),
    "nnodes": (int, 1, 1024, True, True, "nodes"),
    "node_rank": (int, 0, 1023, True, True, "this node's rank"),
    "port": (int, 1, 65535, True, True, "the HTTP port"),
    "context_length": (int, 1, 1 << 24, True, True, "the context length in tokens"),
    "max_running_requests": (int, 1, 1 << 24, True, True, "concurrent requests"),
    "max_total_tokens": (int, 1, 1 << 40, True, True, "the KV pool's token count"),
    "chunked_prefill_size": (int, -1, 1 << 24, True, True, "tokens per prefill chunk (-1 disables chunking)"),
    "cuda_graph_max_bs": (int, 1, 1 << 16, True, True, "the largest CUDA-graph batch"),
    "page_size": (int, 1, 1 << 16, True, True, "tokens per KV page"),
    "speculative_num_steps": (int, 1, 64, True, True, "draft steps"),
    "speculative_eagle_topk": (int, 1, 64, True, True, "draft branches per step"),
    "speculative_num_draft_tokens": (int, 1, 1024, True, True, "draft tokens verified per step"),
}


def validate_args(args):
    """Problems with the numeric server args, each naming the key, the value and the allowed range (a list)."""
    problems = []
    for key in sorted(args or {}):
        if key not in _NUMERIC or args[key] is None:
            continue
        kind, low, high, low_in, high_in, what = _NUMERIC[key]
        value = args[key]
        rng = "%s%s, %s%s" % ("[" if low_in else "(", low, high, "]" if high_in else ")")
        ok_type = isinstance(value, (int, float)) and not isinstance(value, bool)
        if kind is int and isinstance(value, float):
            ok_type = False
        if not ok_type:
            problems.append("args.%s=%r: must be a %s in %s (%s)%s" % (
                key, value, "number" if kind is float else "whole number", rng, what,
                "; write it without quotes" if isinstance(value, str) else ""))
            continue
        if (value < low or (value == low and not low_in)) or (value > high or (value == high and not high_in)):
            problems.append("args.%s=%s: outside %s (%s)" % (key, value, rng, what))
    return problems


def is_loopback(host):
    """True for an address only this machine reaches (127.0.0.0/8, ::1, localhost)."""
    host = str(host or "").strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def helper_rank(args):
    """True for a rank other than 0 of a multi-node server (``node_rank`` >= 1 with ``nnodes`` > 1): SGLang 0.5.9
    runs no tokenizer and no API there, only a health server that answers 200 once its schedulers are ready."""
    try:
        return int((args or {}).get("nnodes") or 1) > 1 and int((args or {}).get("node_rank") or 0) >= 1
    except (TypeError, ValueError):
        return False


def local_url(host, port):
    """The URL this machine reaches a server at that binds ``host``:``port`` (a wildcard bind is reached on
    loopback; a specific address only on that address - a server bound to 10.0.3.101 refuses 127.0.0.1)."""
    host = str(host or "").strip("[]")
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return "http://%s:%d" % ("[%s]" % host if ":" in host else host, int(port))


def config_text(secrets):
    """Body of SGLang's ``--config`` YAML for the secret args in ``secrets`` ({"api_key": "..."}; None skipped).

    Keys are the flag names (the merger turns ``api-key`` into ``--api-key``); each value is a JSON string,
    which YAML reads as a double-quoted scalar, so any character of the key survives unchanged.
    """
    lines = ["# written by gpuserve.sglang.sglang_server; read by SGLang at start-up (--config)\n"]
    for name in sorted(secrets or {}):
        if name not in CONFIG_SECRETS:
            raise ArgvError("%s: only %s go into SGLang's config file" % (name, ", ".join(sorted(CONFIG_SECRETS))))
        value = secrets[name]
        if value is None or value == "":
            continue
        value = str(value)
        if any(ord(c) < 32 for c in value):
            raise ArgvError("%s: the value contains a control character (line break, tab, ...); use printable "
                            "characters only" % name)
        lines.append("%s: %s\n" % (CONFIG_SECRETS[name], json.dumps(value)))
    return "".join(lines)


def server_argv(python, model_path, args, module="sglang.launch_server", config_file=None):
    """Return [python, -m, module, --model-path, path, --flag, value, ..., --config file] (sorted for stability)."""
    if not python:
        raise ArgvError("python: the venv interpreter path is required")
    if not model_path:
        raise ArgvError("model_path: the model directory (or repo id) is required")
    problems = validate_args(args)
    if problems:
        raise ArgvError("; ".join(problems))
    argv = [python, "-m", module, "--model-path", str(model_path)]
    for key in sorted(args or {}):
        value = args[key]
        if not isinstance(key, str) or not _NAME.match(key):
            raise ArgvError("args key %r is not an SGLang ServerArgs name (snake_case, e.g. tp_size)" % (key,))
        if key in SECRET_ARGS:
            raise ArgvError("args.%s: secrets never go on the command line (they would show in ps and logs); "
                            "set it through the role's secret variable (sglang_server_api_key, sglang_server_env)" % key)
        if key == "config":
            raise ArgvError("args.config: the collection writes SGLang's --config file itself (it holds the API key); "
                            "put its settings in args")
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
    if config_file:
        if not str(config_file).endswith((".yaml", ".yml")):
            raise ArgvError("config_file=%s: SGLang accepts only a .yaml or .yml file after --config" % config_file)
        argv.extend(["--config", str(config_file)])
    return argv


def _scalar(key, value):
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (int, str)):
        return str(value)
    raise ArgvError("args.%s: unsupported value type %s" % (key, type(value).__name__))


def _value(text):
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def args_from_argv(argv):
    """The server args (ServerArgs snake_case) a launch ran with, read back from its argv (server_argv's inverse):
    ``--flag value`` pairs, bare flags as true, several values as a list; the model path, the bind address and
    ``--config`` (secrets) are left out."""
    args = {}
    items = list(argv or [])
    if "sglang.launch_server" in items:
        items = items[items.index("sglang.launch_server") + 1:]
    i = 0
    while i < len(items):
        word = items[i]
        i += 1
        if not word.startswith("--"):
            continue
        values = []
        while i < len(items) and not items[i].startswith("--"):
            values.append(items[i])
            i += 1
        key = word[2:].replace("-", "_")
        if key in ("model_path", "model", "host", "port", "config"):
            continue
        args[key] = True if not values else (_value(values[0]) if len(values) == 1 else [_value(v) for v in values])
    return args
