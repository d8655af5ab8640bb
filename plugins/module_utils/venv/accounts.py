# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The build account against the serving account (#58 item 2): uv and every package's build step run as a dedicated
build account, which shares no uid, group or home with the account that serves the venv, and whose uv cache the
serving account cannot write - else the serving account (a compromised server, still running during a rollout)
could change what the next build installs, and root would seal it.

``account_problems(build, serve, groups_of, cache, lstat)`` is pure: the accounts as ``pwd`` entries, ``groups_of(pw)``
the set of gids an account is in, ``cache`` the uv cache directory the build will use, ``lstat`` to read it (and
its parents). Each problem is a sentence naming the account or the path and the fix."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import stat


def uv_cache_dir(env, build_home):
    """The cache uv will use as the build account: UV_CACHE_DIR, else XDG_CACHE_HOME/uv, else ~/.cache/uv."""
    if env.get("UV_CACHE_DIR"):
        return env["UV_CACHE_DIR"]
    if env.get("UV_NO_CACHE") not in (None, "", "0", "false"):
        return None
    return os.path.join(env.get("XDG_CACHE_HOME") or os.path.join(build_home, ".cache"), "uv")


def _inside(path, parent):
    path, parent = os.path.normpath(path), os.path.normpath(parent)
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def writable_by(st, uid, gids):
    """Whether an account (uid, its gids) may create, remove or rename entries in (or write) what ``st`` describes;
    root's entries writable only by root are not. A sticky other-writable directory counts: the account can create
    the entry uv would create next."""
    if st.st_uid == uid:
        return True
    if st.st_mode & stat.S_IWGRP and st.st_gid in gids:
        return True
    return bool(st.st_mode & stat.S_IWOTH)


def account_problems(build, serve, groups_of, cache, lstat=os.lstat):
    """What makes ``build`` (pwd entry of the build account) not separate from ``serve`` (the serving account's)."""
    problems = []
    b_gids, s_gids = groups_of(build), groups_of(serve)
    if build.pw_uid == 0:
        problems.append("owner=%s is root: the build runs package code; give a dedicated build account" % build.pw_name)
    if build.pw_uid == serve.pw_uid:
        problems.append("owner=%s and run_as=%s are the same uid (%d): the account that serves the venv could change "
                        "what the next build installs; give a dedicated build account"
                        % (build.pw_name, serve.pw_name, build.pw_uid))
    shared = sorted(b_gids & s_gids)
    if shared:
        problems.append("owner=%s and run_as=%s share the group(s) %s: give the build account a group of its own "
                        "and no other" % (build.pw_name, serve.pw_name, ", ".join(str(g) for g in shared)))
    b_home, s_home = build.pw_dir or "/", serve.pw_dir or "/"
    if _inside(b_home, s_home) or _inside(s_home, b_home):
        problems.append("owner=%s's home %s and run_as=%s's home %s overlap: uv reads its cache and settings under "
                        "the build account's home; give it a home of its own"
                        % (build.pw_name, b_home, serve.pw_name, s_home))
    if cache:
        problems.extend(_cache_problems(cache, serve, s_gids, lstat))
    return problems


def _cache_problems(cache, serve, s_gids, lstat):
    """The cache and every existing parent must be out of the serving account's reach: a parent it can write lets it
    swap the cache for its own, and when the cache does not exist yet, the nearest existing parent it can write lets
    it make the cache first. A sticky directory the serving account does not own (/tmp) only guards what exists."""
    path, below_exists = os.path.normpath(cache), False
    while True:
        try:
            st = lstat(path)
        except OSError:
            st = None
        if st is not None:
            if stat.S_ISLNK(st.st_mode):
                return ["the uv cache's path %s is a symbolic link at %s: give a cache directory by its real path"
                        % (cache, path)]
            guarded = below_exists and st.st_mode & stat.S_ISVTX and st.st_uid != serve.pw_uid
            if writable_by(st, serve.pw_uid, s_gids) and not guarded:
                return ["the uv cache %s can be written by run_as=%s (%s: owner uid %d, mode %04o): a poisoned entry "
                        "would be built into the next venv; give the build account a cache the serving account "
                        "cannot write (its home's, by default)" % (cache, serve.pw_name, path, st.st_uid,
                                                                   stat.S_IMODE(st.st_mode))]
            below_exists = True
        parent = os.path.dirname(path)
        if parent == path:
            return []
        path = parent
