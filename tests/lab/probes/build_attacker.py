"""Run as the serving account (lab, #58 item 2) while role sglang_venv builds a venv: the issue's attacks on the build
path, repeated until STOP exists (or LIMIT seconds), then what was tried and what worked written to OUT as JSON.

- config: its own ~/.config/uv/uv.toml asks uv for `link-mode = "symlink"` (written once, left in place);
- hard link: a file of its own linked into each directory of every build in the stores not yet sealed (not root's),
  and into the store itself - a link there would make the seal re-own the file;
- open descriptor: each file of such a build opened for writing, uv's `.lock` and `pyvenv.cfg` by name (a
  descriptor kept past the seal would write into root's venv; up to 0.19.0 the build was 0755 while made and uv's
  `.lock` in it writable by all: this probe held it open and the seal refused the build);
- cache: a file planted in the build account's uv cache.

    runuser -u sglang -- python3 build_attacker.py STOP OUT LIMIT BUILD_CACHE STORE [STORE ...]
"""
import errno
import json
import os
import stat
import sys
import time


def attempt(report, what, call, *args):
    report["tried"][what] = report["tried"].get(what, 0) + 1
    try:
        result = call(*args)
    except OSError as e:
        key = "%s %s" % (what, errno.errorcode.get(e.errno, e.errno))
        report["refused"][key] = report["refused"].get(key, 0) + 1
        return None
    report["succeeded"].append("%s %s" % (what, args[1] if call is os.link else args[0]))   # the path it reached
    return result


def unsealed_builds(report, stores):
    for store in stores:
        try:
            names = os.listdir(store)
        except OSError as e:
            report["refused"]["list %s" % errno.errorcode.get(e.errno)] = 1
            continue
        for name in names:
            path = os.path.join(store, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode) and st.st_uid != 0:
                if path not in report["builds_seen"]:
                    report["builds_seen"][path] = st.st_uid
                yield path


def one_pass(report, stores, bait, cache):
    for store in stores:
        attempt(report, "link", os.link, bait, os.path.join(store, "planted-link"))
    attempt(report, "plant_in_cache", os.open, os.path.join(cache, "planted"), os.O_WRONLY | os.O_CREAT, 0o644)
    for build in unsealed_builds(report, stores):
        for known in (".lock", "pyvenv.cfg"):       # uv's own files, by name: no listing needed to try them
            fd = attempt(report, "open_for_writing", os.open, os.path.join(build, known), os.O_WRONLY)
            if fd is not None:
                report["held"].append(fd)
        dirs = files = 0
        for dirpath, _dirnames, filenames in os.walk(build, onerror=lambda e: report["refused"].__setitem__(
                "walk %s" % errno.errorcode.get(e.errno), 1)):
            if dirs < 40:
                dirs += 1
                attempt(report, "link", os.link, bait, os.path.join(dirpath, "planted-link"))
            for name in filenames:
                if files >= 200:
                    break
                files += 1
                fd = attempt(report, "open_for_writing", os.open, os.path.join(dirpath, name), os.O_WRONLY)
                if fd is not None:
                    report["held"].append(fd)       # kept open: what the seal must see


def main(stop, out, limit, cache, *stores):
    home = os.path.expanduser("~")
    os.makedirs(os.path.join(home, ".config", "uv"), exist_ok=True)
    with open(os.path.join(home, ".config", "uv", "uv.toml"), "w") as fh:
        fh.write('link-mode = "symlink"\n')
    bait = os.path.join(home, "bait")
    with open(bait, "w") as fh:
        fh.write("the serving account's own file\n")
    report = {"uid": os.getuid(), "tried": {}, "refused": {}, "succeeded": [], "builds_seen": {}, "held": [],
              "passes": 0}
    t0 = time.time()
    while not os.path.exists(stop) and time.time() - t0 < float(limit):
        one_pass(report, stores, bait, cache)
        report["passes"] += 1
        time.sleep(0.3)
    report["seconds"] = round(time.time() - t0, 1)
    report["held"] = len(report["held"])
    tmp = out + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(report, fh, indent=1, sort_keys=True)
    os.rename(tmp, out)


if __name__ == "__main__":
    main(*sys.argv[1:])
