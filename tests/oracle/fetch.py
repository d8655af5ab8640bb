"""The sglang==0.5.9 wheel for the oracle: downloaded once with pip from the configured package index, checked
against the sha256 the SGLang lock pins (roles/sglang_venv/files/locks/sglang-0.5.9.lock), extracted under
build/oracle/. Pure-Python wheel: its source is what the oracle runs."""
import hashlib
import os
import re
import subprocess
import sys
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
VERSION = "0.5.9"
CACHE = os.path.join(ROOT, "build", "oracle")
LOCK = os.path.join(ROOT, "roles", "sglang_venv", "files", "locks", "sglang-%s.lock" % VERSION)


def pinned_hashes():
    with open(LOCK) as f:
        text = f.read()
    m = re.search(r"^sglang==%s((?:\s*\\\n\s*--hash=sha256:[0-9a-f]{64})+)" % re.escape(VERSION), text, re.M)
    if not m:
        raise SystemExit("oracle: %s pins no sglang==%s with hashes" % (LOCK, VERSION))
    return set(re.findall(r"sha256:([0-9a-f]{64})", m.group(1)))


def site():
    """The extracted wheel's directory (fetched, checked and extracted when missing)."""
    dest = os.path.join(CACHE, "sglang-%s" % VERSION)
    if os.path.isfile(os.path.join(dest, "sglang", "srt", "server_args.py")):
        return dest
    name = "sglang-%s-py3-none-any.whl" % VERSION
    wheel = os.path.join(CACHE, name)
    if not os.path.isfile(wheel):
        os.makedirs(CACHE, exist_ok=True)
        pip = os.path.join(ROOT, ".venv", "bin", "pip")
        subprocess.run([pip, "download", "-q", "--no-deps", "--only-binary", ":all:", "sglang==%s" % VERSION,
                        "-d", CACHE], check=True)
    with open(wheel, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    if digest not in pinned_hashes():
        os.unlink(wheel)
        raise SystemExit("oracle: %s has sha256 %s, not one the lock pins; removed" % (wheel, digest))
    tmp = dest + ".tmp"
    with zipfile.ZipFile(wheel) as z:
        z.extractall(tmp)
    os.rename(tmp, dest)
    return dest


if __name__ == "__main__":
    print(site())
    sys.exit(0)
