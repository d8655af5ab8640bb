"""Write a tiny, valid pure-Python wheel (a package whose __init__ sets __version__), for tests that need
real installs without a network: the uv_venv integration tests and the sglang_venv flash-attn stand-in.

    python3 tests/lab/make_wheel.py OUTDIR NAME VERSION [--local-tag TAG] [--python-tag cp311 --platform linux_x86_64]
    python3 tests/lab/make_wheel.py OUTDIR NAME VERSION --sdist [--steps N --delay S]

--sdist writes a source distribution instead, whose build prints ninja's progress lines as flash-attn's setup.py
does ("[3/73] Building CUDA object csrc/...") with a delay per step, then builds the same tiny wheel (a slow
source build for the build-progress tests; its in-tree build backend needs nothing from an index).
"""
import argparse
import base64
import hashlib
import io
import os
import random
import tarfile
import zipfile


def _record_line(path, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (path, digest, len(data))


def make_wheel(outdir, name, version, local_tag=None, python_tag="py3", abi_tag="none", platform="any", requires=(),
               payload_bytes=0):
    """Write <outdir>/<name>-<version>[+local]-<tags>.whl and return its path. ``payload_bytes``: a data file of that
    many bytes that do not compress (the same for the same name), stored as they are - a wheel of a known size."""
    mod = name.replace("-", "_").lower()
    full = version + ("+" + local_tag if local_tag else "")
    dist = "%s-%s.dist-info" % (mod, full)
    files = {
        "%s/__init__.py" % mod: ("__version__ = %r\n" % full).encode(),
        **({"%s/payload.bin" % mod: random.Random(name).randbytes(payload_bytes)} if payload_bytes else {}),
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
            z.writestr(zipfile.ZipInfo(p, date_time=(2026, 1, 1, 0, 0, 0)), d,
                       compress_type=zipfile.ZIP_STORED if p.endswith("payload.bin") else zipfile.ZIP_DEFLATED)
    return path


_BACKEND = """import os, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_wheel


def get_requires_for_build_wheel(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    for i in range(1, %(steps)d + 1):
        print("[%%d/%(steps)d] Building CUDA object csrc/kernel_%%d.cu.o" %% (i, i), flush=True)
        time.sleep(%(delay)r)
    return os.path.basename(make_wheel.make_wheel(wheel_directory, %(name)r, %(version)r, local_tag="source"))
"""


def make_sdist(outdir, name, version, steps=8, delay=0.3):
    """Write <outdir>/<name>-<version>.tar.gz whose build takes steps x delay seconds, printing ninja-style
    progress; the wheel it builds says __version__ '<version>+source'. Returns its path."""
    mod = name.replace("-", "_").lower()
    top = "%s-%s" % (mod, version)
    with open(os.path.abspath(__file__), "rb") as f:
        helper = f.read()
    files = {
        "pyproject.toml": ('[build-system]\nrequires = []\nbuild-backend = "slow_backend"\nbackend-path = ["."]\n\n'
                           '[project]\nname = "%s"\nversion = "%s"\n' % (name, version)).encode(),
        "PKG-INFO": ("Metadata-Version: 2.1\nName: %s\nVersion: %s\n" % (name, version)).encode(),
        "slow_backend.py": (_BACKEND % dict(steps=int(steps), delay=float(delay), name=name, version=version)).encode(),
        "make_wheel.py": helper,
    }
    os.makedirs(outdir, exist_ok=True)
    path = os.path.join(outdir, "%s.tar.gz" % top)
    with tarfile.open(path, "w:gz") as t:
        for rel, data in sorted(files.items()):
            info = tarfile.TarInfo("%s/%s" % (top, rel))
            info.size, info.mtime, info.mode = len(data), 1767225600, 0o644
            t.addfile(info, io.BytesIO(data))
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
    ap.add_argument("--sdist", action="store_true")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--delay", type=float, default=0.3)
    a = ap.parse_args()
    if a.sdist:
        print(make_sdist(a.outdir, a.name, a.version, a.steps, a.delay))
        return
    print(make_wheel(a.outdir, a.name, a.version, a.local_tag, a.python_tag, a.abi_tag or (
        a.python_tag if a.python_tag.startswith("cp") else "none"), a.platform))


if __name__ == "__main__":
    main()
