"""An sglang wheel for the oracle: downloaded once with pip from the configured package index, checked against the
sha256 the release's SGLang lock pins (roles/sglang_venv/files/locks/sglang-<release>.lock), extracted under
build/oracle/. Its source is what the oracle runs.

0.5.9's wheel is pure Python (py3-none-any). 0.5.23's only wheel is cp311-cp311-manylinux_2_34_x86_64 (the lock's tags
record says so): it is fetched for that platform, and the oracle imports only its Python source. 0.5.23 builds its
ServerArgs with msgspec (a C extension), which no stand-in can honestly replace: the real msgspec the lock pins is
fetched the same way (by its hash, for CPython 3.11) and put on the oracle's path (``deps``)."""
import glob
import hashlib
import os
import re
import shutil
import subprocess
import sys
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CACHE = os.path.join(ROOT, "build", "oracle")
LOCKS = os.path.join(ROOT, "roles", "sglang_venv", "files", "locks")
RELEASES = ("0.5.9", "0.5.23")
# the real packages an oracle needs beside the wheel's source, per release (pinned by the same lock)
REAL_DEPS = {"0.5.9": (), "0.5.23": ("msgspec",)}


def _lock(release):
    return os.path.join(LOCKS, "sglang-%s.lock" % release)


def pinned(release, name):
    """(version, {sha256}) of ``name`` in the release's lock."""
    with open(_lock(release)) as f:
        text = f.read()
    m = re.search(r"^%s==(\S+)((?:\s*\\\n\s*--hash=sha256:[0-9a-f]{64})+)" % re.escape(name), text, re.M)
    if not m:
        raise SystemExit("oracle: %s pins no %s with hashes" % (_lock(release), name))
    return m.group(1), set(re.findall(r"sha256:([0-9a-f]{64})", m.group(2)))


def _platform_args(release, name):
    """pip's platform options for the file the lock's tags record names for ``name`` (none for a py3-none-any)."""
    tags = os.path.join(LOCKS, "sglang-%s.tags" % release)
    with open(tags) as f:
        line = next(line for line in f if line.startswith("%s==" % name))
    tag = line.split()[1]
    if tag.startswith("py3-none-any"):
        return []
    python, abi, plat = tag.split("-")[:3]
    return ["--platform", plat.split(".")[-1], "--python-version", python[2:3] + "." + python[3:], "--implementation",
            "cp", "--abi", abi]


def _fetch(release, name, dest):
    """Download ``name`` as the release's lock pins it into CACHE, check its hash, extract it to ``dest``."""
    version, hashes = pinned(release, name)
    wheel_dir = os.path.join(CACHE, "wheels")
    wheels = glob.glob(os.path.join(wheel_dir, "%s-%s-*.whl" % (name.replace("-", "_"), version)))
    if not wheels:
        os.makedirs(wheel_dir, exist_ok=True)
        pip = os.path.join(ROOT, ".venv", "bin", "pip")
        pin = os.path.join(wheel_dir, "%s-%s.pin.txt" % (name, release))     # the lock's hashes, as pip takes them
        with open(pin, "w") as f:
            f.write("%s==%s %s\n" % (name, version, " ".join("--hash=sha256:%s" % h for h in sorted(hashes))))
        subprocess.run([pip, "download", "-q", "--no-deps", "--require-hashes", "--only-binary", ":all:"]
                       + _platform_args(release, name) + ["-r", pin, "-d", wheel_dir], check=True)
        wheels = glob.glob(os.path.join(wheel_dir, "%s-%s-*.whl" % (name.replace("-", "_"), version)))
    wheel = wheels[0]
    with open(wheel, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    if digest not in hashes:
        os.unlink(wheel)
        raise SystemExit("oracle: %s has sha256 %s, not one %s pins; removed" % (wheel, digest, _lock(release)))
    tmp = dest + ".tmp"
    with zipfile.ZipFile(wheel) as z:
        z.extractall(tmp)
    os.rename(tmp, dest)


def site(release="0.5.9"):
    """The extracted wheel's directory (fetched, checked and extracted when missing)."""
    dest = os.path.join(CACHE, "sglang-%s" % release)
    if not os.path.isfile(os.path.join(dest, "sglang", "srt", "server_args.py")):
        _fetch(release, "sglang", dest)
    return dest


def deps(release):
    """The directory holding the real packages the release's oracle imports (REAL_DEPS), or None."""
    if not REAL_DEPS[release]:
        return None
    if sys.version_info[:2] != (3, 11):
        raise SystemExit("oracle: %s's msgspec is fetched for CPython 3.11 (the lock's platform); run the oracle "
                         "with the dev venv's Python 3.11, not %d.%d" % ((release,) + sys.version_info[:2]))
    dest = os.path.join(CACHE, "sglang-%s-deps" % release)
    for name in REAL_DEPS[release]:
        if not os.path.isdir(os.path.join(dest, name)):
            part = os.path.join(CACHE, "sglang-%s-deps-%s" % (release, name))
            if not os.path.isdir(part):
                _fetch(release, name, part)
            os.makedirs(dest, exist_ok=True)
            os.rename(os.path.join(part, name), os.path.join(dest, name))
            shutil.rmtree(part)         # the wheel's metadata: only the package is imported
    return dest


if __name__ == "__main__":
    print(site(sys.argv[1] if len(sys.argv) > 1 else "0.5.9"))
    sys.exit(0)
