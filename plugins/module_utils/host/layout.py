# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What one role lays out on a host, in one call: system groups and accounts, directories, files whose content
the controller gives, paths that must be gone, and systemd units enabled at boot.

A no-op re-run of deploy.yml is mostly such checks; each was one module call (one round trip through ssh and
``pct exec``). Here a role's are read at once, and only what differs is changed, in this order: groups,
accounts, paths (in the order given), a systemd reload when asked for and a path changed, then the units not
enabled yet. Check mode reads and reports, and changes nothing.

Semantics follow ansible.builtin's group/user/file/copy modules where the roles relied on them:
- a group or account is created as a system one; an existing account's primary group, home and shell are set,
  and wanted supplementary groups are added (never removed);
- a directory is created with its missing parents (root's, 0755); an existing one (a link to one is followed)
  gets the owner, group and mode given, and keeps what is not given;
- a file is written atomically (a temporary file in the same directory, then renamed over it, which also
  replaces a link at that path); only owner, group and mode are fixed when the content is already right;
- a secret's content never appears in a result, a diff or an error; its mode must give nothing to others.

Stdlib only; ``run()`` takes the system's calls as arguments, so tests drive it on a temporary tree.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import grp
import os
import pwd
import shutil
import stat
import subprocess
import tempfile

DIFF_LIMIT = 65536
STATES = ("directory", "file", "absent")


class LayoutError(Exception):
    """Bad input or a state that cannot be repaired safely; the message names the entry and the fix."""


def parse_mode(value, where):
    """'0750', '750' or an int -> int; None stays None."""
    if value is None or value == "":
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    else:
        text = str(value).strip()
        try:
            number = int(text, 8)
        except ValueError:
            raise LayoutError("%s: mode %r is not octal; write it as a quoted string such as '0750'" % (where, value))
    if not 0 <= number <= 0o7777:
        raise LayoutError("%s: mode %r is out of range (0000-7777)" % (where, value))
    return number


def check_spec(spec):
    """Refuse bad entries before anything is read or changed. Returns the paths normalised (a new list)."""
    paths = []
    seen = {}
    for index, entry in enumerate(spec.get("paths") or []):
        path = entry.get("path") or ""
        where = "paths[%d] (%s)" % (index, path or "no path")
        if not os.path.isabs(path) or os.path.normpath(path) != path or path == "/":
            raise LayoutError("%s: an absolute, normalised path below / is required" % where)
        state = entry.get("state") or ("file" if entry.get("content") is not None or entry.get("secret") is not None
                                       else "directory")
        if state not in STATES:
            raise LayoutError("%s: state %r; one of %s" % (where, state, ", ".join(STATES)))
        has_content = entry.get("content") is not None
        has_secret = entry.get("secret") is not None
        if state == "file" and has_content == has_secret:
            raise LayoutError("%s: a file needs exactly one of content and secret" % where)
        if state != "file" and (has_content or has_secret):
            raise LayoutError("%s: content or secret is only for state=file" % where)
        mode = parse_mode(entry.get("mode"), where)
        if has_secret and (mode is None or mode & 0o007):
            raise LayoutError("%s: a secret's mode must be given and give nothing to others (such as '0600' or "
                              "'0640'), not %r" % (where, entry.get("mode")))
        wanted = dict(where=where, path=path, state=state, owner=entry.get("owner") or None, group=entry.get("group") or None,
                      mode=mode, content=entry.get("content"), secret=entry.get("secret"))
        if path in seen:
            if dict(wanted, where=None) != dict(seen[path], where=None):
                # two settings of one path would be undone by each other on every run
                raise LayoutError("%s: the path is given twice, wanted differently (two role variables name the same "
                                  "path: set them apart)" % where)
            continue
        seen[path] = wanted
        paths.append(wanted)
    for index, unit in enumerate(spec.get("enabled") or []):
        if not unit or "/" in unit or unit.startswith("-"):
            raise LayoutError("enabled[%d]: %r is not a systemd unit name" % (index, unit))
    for index, user in enumerate(spec.get("users") or []):
        if not user.get("name") or not user.get("group"):
            raise LayoutError("users[%d]: name and group are required" % index)
    return paths


class System(object):
    """The calls run() makes; tests replace the account database and the commands."""

    def __init__(self, run_command=None):
        self.run_command = run_command or self._run

    @staticmethod
    def _run(argv):
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
        return proc.returncode, proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace")

    @staticmethod
    def group(name):
        try:
            return grp.getgrnam(name)
        except KeyError:
            return None

    @staticmethod
    def user(name):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            return None

    @staticmethod
    def member_of(name):
        return set(g.gr_name for g in grp.getgrall() if name in g.gr_mem)


def _must(system, argv, what):
    rc, out, err = system.run_command(argv)
    if rc != 0:
        raise LayoutError("%s: %s exited %d: %s" % (what, argv[0], rc, (err or out).strip()[-500:]))
    return out


def _accounts(spec, system, check, report):
    """Groups, then accounts. Returns the names that do not exist yet (check mode only)."""
    pending = set()
    for group in spec.get("groups") or []:
        name = group["name"]
        if system.group(name) is None:
            report.append(("group", name, "created"))
            if check:
                pending.add(name)
            else:
                _must(system, ["groupadd"] + (["--system"] if group.get("system", True) else []) + ["--", name],
                      "group %s" % name)
    for user in spec.get("users") or []:
        name = user["name"]
        wanted_groups = list(user.get("groups") or [])
        current = system.user(name)
        if current is None:
            argv = ["useradd"] + (["--system"] if user.get("system", True) else []) + ["--gid", user["group"]]
            if user.get("home"):
                argv += ["--home-dir", user["home"]]
            argv += ["--create-home"] if user.get("create_home") else ["--no-create-home"]
            if user.get("shell"):
                argv += ["--shell", user["shell"]]
            if wanted_groups:
                argv += ["--groups", ",".join(wanted_groups)]
            report.append(("user", name, "created"))
            if check:
                pending.add(name)
            else:
                _must(system, argv + ["--", name], "account %s" % name)
            continue
        argv = []
        primary = system.group(user["group"])
        if primary is None or primary.gr_gid != current.pw_gid:
            argv += ["--gid", user["group"]]
        if user.get("home") and current.pw_dir != user["home"]:
            argv += ["--home", user["home"]]
        if user.get("shell") and current.pw_shell != user["shell"]:
            argv += ["--shell", user["shell"]]
        missing = [g for g in wanted_groups if g not in system.member_of(name)]
        if missing:
            argv += ["--append", "--groups", ",".join(missing)]
        if argv:
            report.append(("user", name, "changed (%s)" % " ".join(a for a in argv if a.startswith("--"))))
            if not check:
                _must(system, ["usermod"] + argv + ["--", name], "account %s" % name)
    return pending


def _id(name, lookup, field, what, pending, where):
    """A name or number -> its id; None for 'leave as it is'; 'pending' for a name check mode has not created."""
    if name is None:
        return None
    if name.isdigit():
        return int(name)
    found = lookup(name)
    if found is None and name not in pending:
        raise LayoutError("%s: %s %s does not exist; create the %s first" % (
            where, what, name, "account" if what == "owner" else "group"))
    return getattr(found, field) if found else "pending"


def _ids(entry, system, pending):
    """(uid, gid) wanted for a path entry (see _id)."""
    return (_id(entry["owner"], system.user, "pw_uid", "owner", pending, entry["where"]),
            _id(entry["group"], system.group, "gr_gid", "group", pending, entry["where"]))


def _attr_changes(st, uid, gid, mode):
    what = []
    if uid is not None and uid != st.st_uid:
        what.append("owner")
    if gid is not None and gid != st.st_gid:
        what.append("group")
    if mode is not None and stat.S_IMODE(st.st_mode) != mode:
        what.append("mode %04o->%04o" % (stat.S_IMODE(st.st_mode), mode))
    return what


def _set_attrs(path, uid, gid, mode, follow=True):
    os.chown(path, -1 if uid is None else uid, -1 if gid is None else gid, follow_symlinks=follow)
    if mode is not None:
        os.chmod(path, mode)


def _text(data):
    if len(data) > DIFF_LIMIT:
        return "(%d bytes)\n" % len(data)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return "(%d bytes, not text)\n" % len(data)


def _directory(entry, uid, gid, check, report, diffs):
    path = entry["path"]
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    if st is None:
        if os.path.islink(path):
            raise LayoutError("%s: a link to a missing target; remove the link or create its target" % path)
        report.append(("path", path, "directory created"))
        diffs.append(dict(before_header=path, after_header=path, before={"state": "absent"},
                          after={"state": "directory"}))
        if not check:
            parent = os.path.dirname(path)
            if not os.path.isdir(parent):
                os.makedirs(parent, 0o755)
            os.mkdir(path, 0o700)
            mode = entry["mode"] if entry["mode"] is not None else 0o755
            _set_attrs(path, None if uid == "pending" else uid, None if gid == "pending" else gid, mode)
        return True
    if not stat.S_ISDIR(st.st_mode):
        raise LayoutError("%s: exists and is not a directory; move it away, then re-run" % path)
    return _fix_attrs("directory", entry, st, uid, gid, check, report, diffs)


def _fix_attrs(kind, entry, st, uid, gid, check, report, diffs, follow=True):
    """Owner, group and mode of a path that is already what it should be otherwise; True when they change."""
    what = ["owner or group"] if "pending" in (uid, gid) else _attr_changes(st, uid, gid, entry["mode"])
    if not what:
        return False
    path = entry["path"]
    report.append(("path", path, kind + " " + ", ".join(what)))
    diffs.append(dict(before_header=path, after_header=path, before=_attrs_of(st), after=_wanted_attrs(st, entry)))
    if not check:
        _set_attrs(path, uid, gid, entry["mode"], follow=follow)
    return True


def _attrs_of(st):
    return {"owner": st.st_uid, "group": st.st_gid, "mode": "%04o" % stat.S_IMODE(st.st_mode)}


def _wanted_attrs(st, entry):
    return {"owner": entry["owner"] or st.st_uid, "group": entry["group"] or st.st_gid,
            "mode": "%04o" % (entry["mode"] if entry["mode"] is not None else stat.S_IMODE(st.st_mode))}


def _file(entry, uid, gid, check, report, diffs):
    path = entry["path"]
    secret = entry["secret"] is not None
    data = (entry["secret"] if secret else entry["content"])
    data = data.encode("utf-8") if not isinstance(data, bytes) else data
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise LayoutError("%s: is a directory where a file belongs; move it away, then re-run" % path)
    regular = st is not None and stat.S_ISREG(st.st_mode)
    before = None
    if regular:
        with open(path, "rb") as handle:
            before = handle.read()
    if regular and before == data:
        return _fix_attrs("file", entry, st, uid, gid, check, report, diffs, follow=False)
    report.append(("path", path, ("secret " if secret else "file ") + ("written" if regular else "created")))
    if secret:
        diffs.append(dict(before_header=path, after_header=path,
                          before="(secret)\n" if regular else "", after="(secret, %s)\n" % (
                              "changed" if regular else "new")))
    else:
        diffs.append(dict(before_header=path, after_header=path, before=_text(before) if regular else "",
                          after=_text(data)))
    if check:
        return True
    directory = os.path.dirname(path)
    if not os.path.isdir(directory):
        os.makedirs(directory, 0o755)
    mode = entry["mode"]
    if mode is None:
        mode = stat.S_IMODE(st.st_mode) if regular else 0o644
    handle, temp = tempfile.mkstemp(prefix=".%s." % os.path.basename(path), dir=directory)  # created 0600
    try:
        with os.fdopen(handle, "wb") as out:
            # owner and mode before the first byte: a secret is never readable by anyone else, not even briefly
            keep_uid = st.st_uid if regular else -1
            keep_gid = st.st_gid if regular else -1
            os.fchown(out.fileno(), keep_uid if uid in (None, "pending") else uid,
                      keep_gid if gid in (None, "pending") else gid)
            os.fchmod(out.fileno(), mode)
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.rename(temp, path)
    except BaseException:
        if os.path.lexists(temp):
            os.unlink(temp)
        raise
    return True


def _absent(entry, check, report, diffs):
    path = entry["path"]
    if not os.path.lexists(path):
        return False
    report.append(("path", path, "removed"))
    diffs.append(dict(before_header=path, after_header=path, before={"state": "present"}, after={"state": "absent"}))
    if not check:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            _unlink_in_parent(path)
    return True


def _unlink_in_parent(path):
    """Unlink ``path`` relative to its directory opened without following a link: a parent swapped for a link (a
    textfile directory its owner turned into one) is refused, never followed to unlink a file of the same name
    elsewhere."""
    directory, name = os.path.split(path)
    try:
        dfd = os.open(directory or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as e:
        raise LayoutError("%s: its directory %s cannot be opened without following a link (%s); nothing was removed"
                          % (path, directory, e.strerror))
    try:
        os.unlink(name, dir_fd=dfd)
    finally:
        os.close(dfd)


def _units(units, system, check, report):
    if not units:
        return []
    dummy_rc, out, dummy_err = system.run_command(["systemctl", "is-enabled", "--"] + list(units))
    states = out.split()
    if len(states) != len(units):
        todo = list(units)  # a unit systemd does not know yet says so on stderr only: ask to enable all
    else:
        todo = [u for u, s in zip(units, states) if s != "enabled"]
    for unit in todo:
        report.append(("unit", unit, "enabled"))
    if todo and not check:
        _must(system, ["systemctl", "enable", "--"] + todo, "units %s" % ", ".join(todo))
    return todo


def run(spec, check=False, system=None):
    """Lay out ``spec`` (groups, users, paths, enabled, daemon_reload); returns the result a module reports:
    changed, changed_paths, enabled (units enabled now), actions (one line each) and diff entries."""
    system = system or System()
    paths = check_spec(spec)
    report = []
    diffs = []
    pending = _accounts(spec, system, check, report)
    changed_paths = []
    for entry in paths:
        if entry["state"] == "absent":
            touched = _absent(entry, check, report, diffs)
        else:
            uid, gid = _ids(entry, system, pending)
            if entry["state"] == "directory":
                touched = _directory(entry, uid, gid, check, report, diffs)
            else:
                touched = _file(entry, uid, gid, check, report, diffs)
        if touched:
            changed_paths.append(entry["path"])
    if spec.get("daemon_reload") and changed_paths:
        report.append(("systemd", "daemon-reload", "reloaded"))
        if not check:
            _must(system, ["systemctl", "daemon-reload"], "systemd")
    enabled = _units(spec.get("enabled") or [], system, check, report)
    present = dict((path, os.path.exists(path)) for path in spec.get("probe") or [])
    return dict(changed=bool(report), changed_paths=changed_paths, enabled=enabled, present=present,
                actions=["%s %s: %s" % item for item in report], diff=diffs)
