"""Write a tiny, valid pure-Python wheel (a package whose __init__ sets __version__), for tests that need
real installs without a network: the uv_venv integration tests and the sglang_venv flash-attn stand-in.

    python3 tests/lab/make_wheel.py OUTDIR NAME VERSION [--local-tag TAG] [--python-tag cp311 --platform linux_x86_64]
"""
import argparse
import base64
import hashlib
import os
import zipfile


def _record_line(path, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (path, digest, len(data))


def make_wheel(outdir, name, version, local_tag=None, python_tag="py3", abi_tag="none", platform="any", requires=()):
    """Write <outdir>/<name>-<version>[+local]-<tags>.whl and return its path."""
    mod = name.replace("-", "_").lower()
    full = version + ("+" + local_tag if local_tag else "")
    dist = "%s-%s.dist-info" % (mod, full)
    files = {
        "%s/__init__.py" % mod: ("__version__ = %r\n" % full).encode(),
        "%s/METADATA" % dist: ("Metadata-Version: 2.1\nName: %s\nVersion: %s\n%s" % (
            name, full, "".join("Requires-Dist: %s\n" % r for r in requires))).encode(),
        "%s/WHEEL" % dist: ("Wheel-Version: 1.0\nGenerator: gpuserve-tests\nRoot-Is-Purelib: true\nTag: %s-%s-%s\n"
                            % (python_tag, abi_tag, platform)).encode(),
    }
    record = [_record_line(p, d) for p, d in files.items()] + ["%s/RECORD,," % dist]
    files["%s/RECORD" % dist] = ("\n".join(record) + "\n").encode()
    path = os.path.join(outdir, "%s-%s-%s-%s-%s.whl" % (mod, full, python_tag, abi_tag, platform))
    os.makedirs(outdir, exist_ok=True)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for p, d in files.items():
            z.writestr(zipfile.ZipInfo(p, date_time=(2026, 1, 1, 0, 0, 0)), d)
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir")
    ap.add_argument("name")
    ap.add_argument("version")
    ap.add_argument("--local-tag")
    ap.add_argument("--python-tag", default="py3")
    ap.add_argument("--abi-tag")
    ap.add_argument("--platform", default="any")
    a = ap.parse_args()
    print(make_wheel(a.outdir, a.name, a.version, a.local_tag, a.python_tag, a.abi_tag or (
        a.python_tag if a.python_tag.startswith("cp") else "none"), a.platform))


if __name__ == "__main__":
    main()
