"""The wheel tags of every file a lock pins, for the sglang_venv preflight (#47 item 2): which Python, glibc and machine
each pinned package can be installed on, read from the file names the index gives for the lock's own sha256s (a
wheel's name carries its tags: sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl), never typed by hand.

    python3 tests/ci/lock_tags.py LOCK PYLOCK OUT

LOCK is the requirements lock (`uv pip compile --generate-hashes`), PYLOCK the same pins compiled again as a PEP 751
pylock.toml (it names each file of the platforms the lock is resolved for); OUT gets one line per pin, `name==version tag ...` (an sdist is `sdist`), after a
header with the lock's sha256 (a record of another lock is refused by the preflight)."""
import hashlib
import os
import re
import sys
import tomllib

PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;\\]+)")


def norm(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def lock_pins(text):
    """{(name, version): set of sha256} of a requirements lock."""
    pins, cur = {}, None
    for line in text.splitlines():
        m = PIN.match(line)
        if m:
            cur = (norm(m.group(1)), m.group(2))
            pins.setdefault(cur, set())
        elif not line.startswith(" "):
            cur = None
        if cur:
            pins[cur].update(re.findall(r"--hash=sha256:([0-9a-f]{64})", line))
    return pins


def file_tag(url):
    base = url.rsplit("/", 1)[-1].split("#", 1)[0]
    if base.endswith(".whl"):
        return "-".join(base[:-4].split("-")[-3:])
    return "sdist"


def record(lock_text, pylock):
    files = {}
    for pkg in pylock.get("packages", []):
        key = (norm(pkg["name"]), pkg.get("version", ""))
        for f in pkg.get("wheels", []) + ([pkg["sdist"]] if pkg.get("sdist") else []):
            files.setdefault(key, {})[f.get("hashes", {}).get("sha256")] = file_tag(f.get("url") or f.get("name", ""))
    lines = []
    for (name, version), hashes in sorted(lock_pins(lock_text).items()):
        # a lock resolved for one platform (its .in's `# resolve:`) still pins every file of a version, the pylock
        # only the files of that platform: the others are not recorded (they install nowhere the lock is for)
        known = files.get((name, version), {})
        tags = sorted(set(known[h] for h in hashes if h in known))
        if not tags:
            raise SystemExit("lock_tags: %s==%s: the pylock names none of its files" % (name, version))
        lines.append("%s==%s %s" % (name, version, " ".join(tags)))
    return lines


def main(lock, pylock, out):
    with open(lock, "rb") as f:
        raw = f.read()
    with open(pylock, "rb") as f:
        doc = tomllib.load(f)
    lines = record(raw.decode("utf-8"), doc)
    with open(out, "w") as f:
        f.write("# The tags of the files %s pins (from the index's file names of its sha256s), written by\n"
                "# tests/ci/lock.sh; read by the sglang_venv preflight. One line per pin: name==version tag...\n"
                "# lock-sha256: %s\n" % (os.path.basename(lock), hashlib.sha256(raw).hexdigest()))
        f.write("\n".join(lines) + "\n")
    return len(lines)


if __name__ == "__main__":
    print("lock: wrote %s (%d pins' file tags)" % (sys.argv[3], main(*sys.argv[1:4])))
