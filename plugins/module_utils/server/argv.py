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

from ..host import has_control
from .options import ROUTER as _ROUTER_OPTIONS, SERVER as _SERVER_OPTIONS


# Secret server args, by the dest SGLang's parser gives them (0.5.23 added ssl_keyfile_password), and the names of
# secrets that are no SGLang option at all but must never be passed as one either.
SECRET_ARGS = ("api_key", "admin_api_key", "ssl_keyfile_password", "hf_token", "token")
# What the collection sets itself on SGLang's command line: an operator's arg may not name it, however spelt.
SERVER_OWN = ("host", "port", "model_path", "config")
# The router's (sglang-router 0.3.2, RouterArgs): what the role sets itself, and what is a secret (a key, a password,
# a database URL that may carry one).
ROUTER_OWN = ("host", "port", "policy", "worker_urls", "api_key", "prometheus_host", "prometheus_port",
              "pd_disaggregation", "prefill", "decode")
ROUTER_SECRETS = ("api_key", "control_plane_api_keys", "oracle_password", "postgres_db_url", "redis_url")
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_TABLES = {}


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


def word_problem(name, value):
    """Why one value word of a flag cannot go on a command line, or None: a text beginning with ``-`` (argparse
    would read it as a flag of its own - ``[info, "--host", "0.0.0.0"]`` after ``--log-level`` rebinds the server,
    and ``--api-key=...`` puts a secret on argv) or holding a control character (a line break ends a systemd
    ExecStart= line and starts a directive of its own). Numbers (a negative int or float) are the exception: they
    are written by us, never parsed as a flag by argparse (it knows no flag that looks like a number)."""
    if not isinstance(value, str):
        return None
    if value.startswith("-"):
        return ("%s=%r: a value beginning with '-' would reach the program as a flag of its own; give each flag as "
                "its own key (negative numbers without quotes)" % (name, value))
    if has_control(value):
        return ("%s=%r: the value holds a control character (line break, tab, ...); use printable characters only"
                % (name, value))
    return None


_UNIT_NAME = re.compile(r"^[A-Za-z0-9:_.@\\-]+\.(service|socket|target|mount|device|path|timer|slice|scope|swap|automount)$")


def control_problems(values):
    """Problems with values bound for a systemd unit, a config file or a command line (a mapping: variable name ->
    value; a list is checked item by item): each one holding a control character is named. A line break in a value
    written into a unit starts a directive of its own (``ExecStartPre=+...`` runs as root)."""
    problems = []
    for name in sorted(values or {}, key=str):
        value = values[name]
        for item in (value if isinstance(value, (list, tuple)) else [value]):
            if isinstance(item, str) and has_control(item):
                problems.append("%s=%r holds a control character (line break, tab, ...): it would end a line of the "
                                "unit or config file and start one of its own; use printable characters only"
                                % (name, item))
                break
    return problems


def unit_value(value, name):
    """``value`` made safe for one systemd unit setting or comment (what the unit template writes): a control
    character is refused (ValueError naming ``name``), ``%`` is doubled so no specifier is expanded."""
    problems = control_problems({name: value})
    if problems:
        raise ArgvError(problems[0])
    return str(value).replace("%", "%%")


def unit_name_problems(names, name):
    """Problems with a list of systemd unit names bound for After=/Requires= (each one word with a unit suffix)."""
    if not isinstance(names, (list, tuple)):
        return ["%s=%r: a list of unit names such as [nvidia-persistenced.service]" % (name, names)]
    bad = [u for u in names if not isinstance(u, str) or not _UNIT_NAME.match(u)]
    if bad:
        return ["%s: %r is not a unit name (letters, digits, ':', '_', '.', '@', '-' and a suffix such as .service)"
                % (name, bad[0])]
    return []


def value_problems(values, prefix="args."):
    """Problems with the words a mapping of flags would put on a command line (``prefix`` + key names each), for
    the server's args and the router's extra args alike: every scalar and every list item is checked by
    ``word_problem``; a nested list or mapping is refused."""
    problems = []
    for key in sorted(values or {}, key=str):
        value = values[key]
        items = value if isinstance(value, (list, tuple)) else [value]
        for item in items:
            if isinstance(item, (list, tuple, dict)):
                problems.append("%s%s: a list item cannot be a list or mapping; give plain values" % (prefix, key))
                break
            problem = word_problem("%s%s" % (prefix, key), item)
            if problem:
                problems.append(problem)
                break
    return problems


def option_table(program, release):
    """{option: dest} of the parser of ``program`` ("server": SGLang's ServerArgs, "router": sglang-router's
    RouterArgs) in ``release``, as the parser itself holds it (module ``options``, generated from the parsers)."""
    key = (program, release)
    if key not in _TABLES:
        table = {}
        for word in (_SERVER_OPTIONS if program == "server" else _ROUTER_OPTIONS)[release].split():
            option, dummy, dest = word.partition("=")
            table[option] = dest or option[2:].replace("-", "_")
        _TABLES[key] = table
    return _TABLES[key]


def resolve_option(flag, table):
    """What a plain ``argparse.ArgumentParser()`` (abbreviations allowed, as SGLang's and the router's are) makes of
    ``flag``: (dest, option) for the option itself or the one option it is an unambiguous prefix of, else (None,
    [the options it is a prefix of]) - argparse refuses those (ambiguous, or unrecognized when none)."""
    if flag in table:
        return table[flag], flag
    hits = sorted(option for option in table if option.startswith(flag))
    if len(hits) == 1:
        return table[hits[0]], hits[0]
    return None, hits


_RESERVED_FIX = {
    "host": "the bind address is the role's own (sglang_server_host)",
    "port": "the port is the role's own (sglang_server_port)",
    "model_path": "give the model through model_path, not args",
    "config": "the collection writes SGLang's --config file itself (it holds the API key); put its settings in args",
}


def _version(release):
    return tuple(int(part) if part.isdigit() else 0 for part in release.split("."))


def name_problems(names, program="server", release=None, prefix="args."):
    """Problems with the arg names ``names`` (snake_case, each ``--`` + dashes on the command line): each must be an
    option of the parser exactly - never a prefix, which the parser would take as the option it begins (``api_ke``
    is ``--api-key``) - and none may reach an option the collection sets itself or a secret, by any name. Checked
    against ``release``'s table, or every release known when it is None or unknown (a name an abbreviation in one of
    them is judged by what it becomes there). The role's own exact names (host, port) are the caller's to allow.
    Without a known ``release``, a name no option of any known release begins with is left to the parser that
    launches (sglang_server asks the venv's own before anything is written: a typo is refused in its words, and an
    option of a newer release passes)."""
    tables = _SERVER_OPTIONS if program == "server" else _ROUTER_OPTIONS
    releases = [release] if release in tables else sorted(tables, key=_version)
    what = "SGLang" if program == "server" else "sglang-router"
    own, secrets = (SERVER_OWN, SECRET_ARGS) if program == "server" else (ROUTER_OWN, ROUTER_SECRETS)
    problems = []
    for key in sorted(names or (), key=str):
        flag = "--" + key.replace("_", "-")
        found = dict((r, resolve_option(flag, option_table(program, r))) for r in releases)
        reserved = [(r, dest, option) for r in releases for dest, option in [found[r]] if dest in own + secrets]
        if reserved:
            dummy, dest, option = reserved[0]
            which = [r for r, d, o in reserved if (d, o) == (dest, option)]
            said = flag if option == flag else "%s as %s (any unambiguous prefix of an option is that option)" % (
                flag, option)
            fix = ("a secret never goes on the command line (ps, the unit, the launch record): set it through the "
                   "role's secret variable (sglang_server_api_key, sglang_router_api_key)" if dest in secrets
                   else _RESERVED_FIX.get(dest, "the role sets %s itself" % dest))
            problems.append("%s%s: %s %s's parser%s take%s %s: %s" % (
                prefix, key, what, "'s and ".join(which), "s" if len(which) > 1 else "",
                "" if len(which) > 1 else "s", said, fix))
        elif not any(option == flag for dummy, option in found.values()):
            near = sorted(set(option for dummy, option in found.values() if isinstance(option, str)))
            many = sorted(set(o for dummy, options in found.values() if isinstance(options, list) for o in options))
            if not (near or many or release in tables):
                continue   # no option of any known release begins so: the installed parser's own words refuse it
            said = (" - its parser would take it as %s" % " or ".join(near) if near else
                    " - its parser refuses it as ambiguous (%s)" % ", ".join(many[:4] + ["..."] * (len(many) > 4))
                    if many else "")
            example = (near or many or ["--tp-size" if program == "server" else "--health-check-interval-secs"])[0]
            problems.append("%s%s: %s is not an option of %s %s%s; give an option's full name (snake_case, e.g. "
                            "%s)" % (prefix, key, flag, what, " or ".join(releases), said,
                                     example[2:].replace("-", "_")))
    return problems


# Prefill/decode disaggregation (--disaggregation-transfer-backend): the backends each release's ServerArgs offers
# (0.5.9 server_args.py; 0.5.23 adds mooncake_tcp, which sets MC_FORCE_TCP=1 itself). "fake" moves no KV: 0.5.9 skips
# the transfer ("For warmup reqs, we don't kv transfer") and its decode side appends a zeroed first token; 0.5.23
# refuses it for a prefill server. The role's own names for the three flags it sets.
TRANSFER_BACKENDS = {"0.5.9": ("mooncake", "nixl", "ascend", "fake", "mori"),
                     "0.5.23": ("mooncake", "mooncake_tcp", "nixl", "ascend", "fake", "mori")}
DISAGGREGATION_OWN = {"disaggregation_mode": "sglang_server_disaggregation_mode",
                      "disaggregation_transfer_backend": "sglang_server_disaggregation_transfer_backend",
                      "disaggregation_bootstrap_port": "sglang_server_disaggregation_bootstrap_port"}


def is_port(value):
    """Whether ``value`` (a number or its digits as text) is a TCP port, 1-65535."""
    return bool(re.match(r"^[0-9]{1,5}$", str(value))) and 0 < int(value) < 65536


def disaggregation_problems(mode, backend, bootstrap_port, args=None, release=None, prefix="sglang_server_"):
    """What is wrong with a server's prefill/decode settings (the role's ``disaggregation_mode``,
    ``_transfer_backend``, ``_bootstrap_port``), each naming its variable, or []. ``args``: the operator's args, none
    of which may reach one of the three flags the role sets, by its name or as a prefix SGLang's parser takes for it
    (``release``'s table, or every known release's)."""
    problems = []
    tables = [release] if release in _SERVER_OPTIONS else sorted(_SERVER_OPTIONS, key=_version)
    for key in sorted(args or (), key=str):
        flag = "--" + str(key).replace("_", "-")
        for r in tables:
            dest, option = resolve_option(flag, option_table("server", r))
            if dest in DISAGGREGATION_OWN:
                problems.append("%sargs.%s: SGLang %s's parser takes %s%s: prefill/decode is the role's - set %s"
                                % (prefix, key, r, flag, "" if option == flag else " as %s" % option,
                                   DISAGGREGATION_OWN[dest]))
                break
    if mode in (None, ""):
        return problems
    if mode not in ("prefill", "decode"):
        return problems + ["%sdisaggregation_mode=%r: prefill, decode, or empty (a plain server)" % (prefix, mode)]
    known = TRANSFER_BACKENDS.get(release) or tuple(sorted(set(b for r in TRANSFER_BACKENDS.values() for b in r)))
    if backend == "fake":
        problems.append("%sdisaggregation_transfer_backend=fake moves no KV (SGLang skips the transfer and the decode "
                        "server starts from a zeroed token): use mooncake (mooncake-transfer-engine in the venv; "
                        "MC_FORCE_TCP=1 where there is no RDMA) or nixl" % prefix)
    elif backend not in known:
        problems.append("%sdisaggregation_transfer_backend=%r: one of %s%s" % (
            prefix, backend, ", ".join(b for b in known if b != "fake"),
            " (SGLang %s)" % release if release in TRANSFER_BACKENDS else ""))
    if not is_port(bootstrap_port):
        problems.append("%sdisaggregation_bootstrap_port=%r: a TCP port, 1-65535 (8998 is SGLang's default; the "
                        "router names it with each prefill server)" % (prefix, bootstrap_port))
    return problems


def disaggregation_args(mode, backend, bootstrap_port):
    """The args the role adds for a prefill or decode server ({} for a plain one)."""
    if not mode:
        return {}
    return {"disaggregation_mode": mode, "disaggregation_transfer_backend": backend,
            "disaggregation_bootstrap_port": int(bootstrap_port)}


def secret_names(names, program="server"):
    """The names among ``names`` that any known release's parser takes as a secret (exactly or as a prefix)."""
    tables = _SERVER_OPTIONS if program == "server" else _ROUTER_OPTIONS
    secrets = SECRET_ARGS if program == "server" else ROUTER_SECRETS
    found = []
    for key in sorted(names or (), key=str):
        if not isinstance(key, str):
            continue
        flag = "--" + key.replace("_", "-")
        if key in secrets or any(resolve_option(flag, option_table(program, r))[0] in secrets for r in tables):
            found.append(key)
    return found


def validate_args(args, release=None):
    """Problems with the server args, each naming the key, the value and the allowed range or the fix (a list):
    names that are not options of SGLang's parser exactly or that reach what the collection sets itself or a secret
    (``name_problems``; the role's own ``host`` and ``port`` pass), value words that would become flags
    (``value_problems``), numbers out of range."""
    problems = []
    for key in sorted(args or {}, key=str):
        if not isinstance(key, str) or not _NAME.match(key):
            problems.append("args key %r is not an SGLang ServerArgs name (snake_case, e.g. tp_size)" % (key,))
    if problems:
        return problems
    problems.extend(name_problems([k for k in args or {} if k not in ("host", "port")], "server", release))
    problems.extend(value_problems(args))
    numbers = numeric_args(args)
    for key in sorted(args or {}):
        if key not in _NUMERIC or args[key] is None:
            continue
        kind, low, high, low_in, high_in, what = _NUMERIC[key]
        value = numbers[key]
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


_INT_TEXT = re.compile(r"\A[+-]?[0-9]+\Z")
_FLOAT_TEXT = re.compile(r"\A[+-]?([0-9]+([.][0-9]*)?|[.][0-9]+)([eE][+-]?[0-9]+)?\Z")


def numeric_args(args):
    """``args`` with the numeric server args given as text made numbers: every ``-e key=value`` reaches a play as a
    string (``-e sglang_server_port=22``), as Ansible's own int options take them. Anything else is left as it is."""
    out = dict(args or {})
    for key, value in out.items():
        if key in _NUMERIC and isinstance(value, str):
            text = value.strip()
            if _NUMERIC[key][0] is int and _INT_TEXT.match(text):
                out[key] = int(text)
            elif _NUMERIC[key][0] is float and _FLOAT_TEXT.match(text):
                out[key] = float(text)
    return out


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
    """Return [python, -m, module, --flag, value, ... (sorted), --host h, --port p, --model-path path, --config file]:
    the collection's own flags last. SGLang's merger puts the --config file's keys before the command line's (CLI >
    config), and every name was resolved first (``validate_args``), so nothing on argv can reach them."""
    if not python:
        raise ArgvError("python: the venv interpreter path is required")
    if not model_path:
        raise ArgvError("model_path: the model directory (or repo id) is required")
    problems = control_problems({"python": python, "model_path": model_path, "config_file": config_file or ""})
    problems += validate_args(args)
    if problems:
        raise ArgvError("; ".join(problems))
    args = numeric_args(args)
    argv = [python, "-m", module]
    # the operator's args first, sorted; the collection's own flags last, so that no arg can follow and override them
    # (argparse keeps the last of a repeated option)
    own = [key for key in ("host", "port") if key in (args or {})]
    for key in sorted(k for k in args or {} if k not in own) + own:
        value = args[key]
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
    argv.extend(["--model-path", str(model_path)])
    if config_file:
        if not str(config_file).endswith((".yaml", ".yml")):
            raise ArgvError("config_file=%s: SGLang accepts only a .yaml or .yml file after --config" % config_file)
        argv.extend(["--config", str(config_file)])
    return argv


def _scalar(key, value):
    problem = word_problem("args." + key, value)
    if problem:
        raise ArgvError(problem)
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
