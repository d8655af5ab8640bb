# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A change that would fail does not take a serving SGLang down (standard library only).

Two guards around a relaunch:
- ``check_args``: before anything is written or stopped, the launch's arguments are parsed by the installed release's
  own parser - ``ServerArgs.add_cli_args`` of the venv's ``sglang.srt.server_args``, on an ``argparse`` parser named
  ``launch_server.py`` as ``prepare_server_args`` builds it (SGLang 0.5.9) - without launching anything. A misspelt
  flag or an invalid choice is refused with argparse's own words (what the launch would have died of, exit status 2),
  and the running server keeps serving. Every option is first looked up by its exact name in that parser's table:
  a prefix the parser would take as another option (``--api-ke`` as ``--api-key``), a secret on argv, or one of the
  collection's own options given twice is refused the same way. The check runs as the account the server runs as (the unit's User=, the
  service account that built the venv), never as root on its behalf.
- ``LastGood``: each time a launch is ready, the unit file, its EnvironmentFile and SGLang's --config file are kept
  (root's, 0600) with that launch's configuration hash; when a relaunch fails after the switch, they are put back and
  started again, and the result says so.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import pwd
import subprocess

from ..host import read_json, write_json, write_private
from .argv import SECRET_ARGS, SERVER_OWN

# Run by the venv's interpreter with the launch's arguments (after ``-m sglang.launch_server``). ``--config`` (SGLang's
# file holding the API key) is left out: the check never reads the key, and the merger only turns its keys into flags.
ARGS_CHECK = r"""
import argparse, sys
argv = sys.argv[1:]
if "--config" in argv:
    i = argv.index("--config")
    del argv[i:i + 2]
try:
    from sglang.srt.server_args import ServerArgs
except Exception as e:  # an import the venv cannot do here: not checked (said), the launch decides
    print("GPUSERVE-NO-PARSER %s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else ""))
    sys.exit(0)
parser = argparse.ArgumentParser(prog="launch_server.py")
ServerArgs.add_cli_args(parser)
# every option word by its exact name in this parser's own table: argparse would take a prefix (--api-ke) as the
# option it begins (--api-key); the collection's own options and the secrets only once, where the collection put them
table = parser._option_string_actions
seen = {}
for word in argv:
    if not word.startswith("--"):
        continue
    flag = word.split("=", 1)[0]
    if flag not in table:
        near = sorted(o for o in table if o.startswith(flag))
        if near:
            parser.error("%s is not an option of this release's parser (it would be taken as %s); give an option's "
                         "full name" % (flag, " or ".join(near)))
        continue   # no option at all: argparse's own words below (unrecognized arguments)
    dest = table[flag].dest
    seen[dest] = seen.get(dest, 0) + 1
    if dest in %(secrets)r:
        parser.error("%s (%s) is a secret: it never goes on the command line" % (flag, dest))
    if dest in %(own)r and seen[dest] > 1:
        parser.error("%s (%s) is given twice: the collection sets it itself" % (flag, dest))
parser.parse_args(argv)
print("GPUSERVE-ARGS-OK")
"""
ARGS_CHECK = ARGS_CHECK.replace("%(secrets)r", repr(SECRET_ARGS)).replace("%(own)r", repr(SERVER_OWN))
ARGS_CHECK_TIMEOUT = 300.0


def check_args(argv, env, user=None, timeout=ARGS_CHECK_TIMEOUT):
    """Parse ``argv`` (``[python, -m, sglang.launch_server, ...]``) with the venv's own SGLang parser, as ``user`` - the
    account the server runs as (``nobody`` when it does not exist yet); None: this process's own account, which then
    launches the server itself (manager=process). Returns (failure or None, note or None): a failure record
    (kind ``args``) with argparse's words, or a note when the check could not be made (the release has no such parser,
    it did not answer)."""
    run_as = _account(user)
    env = dict(env or {})
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    if run_as is not None:
        env["HOME"] = run_as.pw_dir if os.path.isdir(run_as.pw_dir) else "/"
    kw = {}
    if run_as is not None and os.geteuid() == 0:
        kw = dict(user=run_as.pw_uid, group=run_as.pw_gid, extra_groups=[])
    try:
        p = subprocess.run([argv[0], "-c", ARGS_CHECK] + list(argv[3:]), capture_output=True, text=True, env=env,
                           cwd="/", timeout=timeout, check=False, **kw)
    except subprocess.TimeoutExpired:
        return None, "the launch's arguments were not checked: the venv's parser did not answer within %d s" % timeout
    except OSError as e:
        return None, "the launch's arguments were not checked: %s cannot run (%s)" % (argv[0], e.strerror)
    out = p.stdout.strip().splitlines()
    if p.returncode == 0 and out and out[-1] == "GPUSERVE-ARGS-OK":
        return None, None
    if p.returncode == 0 and out and out[-1].startswith("GPUSERVE-NO-PARSER"):
        return None, ("the launch's arguments were not checked: the venv's sglang has no parser to ask (%s)"
                      % out[-1].split(" ", 1)[1])
    words = [line for line in p.stderr.strip().splitlines() if line.strip()]
    said = next((line for line in reversed(words) if ": error: " in line), words[-1] if words else "exit %d" % p.returncode)
    if p.returncode != 2:
        return None, "the launch's arguments were not checked: the venv's parser ended with %s" % said[-300:]
    return {"kind": "bad_argument", "rank": None, "phase": "args", "exit_code": None, "traceback": "", "message": said[-500:],
            "hint": "SGLang's own parser refuses this launch (it would exit with status 2 at start): fix the argument it "
                    "names in sglang_server_args (snake_case ServerArgs names, e.g. speculative_algorithm). Nothing was "
                    "written or stopped: the running server keeps serving."}, None


def _account(user):
    if not user:
        return None
    for name in (user, "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    return None


class LastGood(object):
    """The files of the last launch that was ready: <state_dir>/<name>.last-good/{record.json, unit, env, config}."""

    FILES = ("unit", "env", "config")

    def __init__(self, state_dir, name):
        self.dir = os.path.join(state_dir, name + ".last-good")

    def record(self):
        return read_json(os.path.join(self.dir, "record.json"))

    def save(self, config_hash, argv, launch_id, paths):
        """Keep copies of ``paths`` ({"unit": path, "env": path, "config": path}) as the configuration ``config_hash``
        (a file that does not exist is recorded as absent). Nothing when the kept one is this configuration already."""
        rec = self.record() or {}
        if rec.get("config_hash") == config_hash:
            return False
        if not os.path.isdir(self.dir):
            os.makedirs(self.dir, 0o700)
        kept = {}
        for key in self.FILES:
            path = paths.get(key)
            if path and os.path.isfile(path) and not os.path.islink(path):
                st = os.stat(path)
                with open(path, "rb") as fh:
                    write_private(os.path.join(self.dir, key), fh.read(), 0o600)
                kept[key] = {"path": path, "mode": st.st_mode & 0o7777, "uid": st.st_uid, "gid": st.st_gid}
            else:
                kept[key] = {"path": path, "absent": True}
        write_json(os.path.join(self.dir, "record.json"), {"config_hash": config_hash, "argv": argv,
                                                           "launch_id": launch_id, "files": kept})
        return True

    def put_back(self):
        """Write the kept files back where they were (their modes and owners), or remove the ones that were absent.
        Returns the record, or None when nothing is kept."""
        rec = self.record()
        if not rec:
            return None
        for key, meta in sorted(rec.get("files", {}).items()):
            path = meta.get("path")
            if not path:
                continue
            if meta.get("absent"):
                if os.path.lexists(path):
                    os.unlink(path)
                continue
            with open(os.path.join(self.dir, key), "rb") as fh:
                data = fh.read()
            write_private(path, data, meta["mode"], meta["gid"])
            if os.geteuid() == 0:
                os.chown(path, meta["uid"], meta["gid"], follow_symlinks=False)
        return rec
