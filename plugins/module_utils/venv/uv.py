# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The decisions behind a venv built from a lock file (module uv_venv, role sglang_venv). Stdlib only.

A build lives in <store>/<build id>/ and the venv path is a symlink to the active build, so a new pin is
built beside the one in service and switched in with one rename; the build id is a digest of everything
that decides the venv's content (lock, interpreter, package selection, extras, indexes).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json
import os
import re
import stat
import subprocess

from ..host import read_json, write_json

MARKER = ".gpuserve-build.json"

_REQ_LINE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;\\]+)")
# flash_attn-2.8.3+cu12torch2.8cxx11abiTRUE-cp311-cp311-linux_x86_64.whl (the upstream release naming)
_FA_WHEEL = re.compile(
    r"^flash_attn-(?P<version>[0-9][^+-]*)(?:\+cu(?P<cuda>\d+)torch(?P<torch>\d+\.\d+)cxx11abi(?P<abi>TRUE|FALSE))?"
    r"-(?P<python>cp\d+)-(?P<abi_tag>[a-z0-9_]+)-(?P<platform>[a-z0-9_]+)\.whl$")


def normalize_name(name):
    """PEP 503 name normalisation (Flash_Attn -> flash-attn)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_lock(text):
    """Pinned versions of a `uv pip compile` output: {normalized name: version}.

    A package pinned differently per marker (numpy on 3.10 vs 3.11) keeps every version, comma-joined.
    """
    pins = {}
    for line in text.splitlines():
        m = _REQ_LINE.match(line.strip())
        if not m:
            continue
        name = normalize_name(m.group(1))
        if name in pins and m.group(2) not in pins[name].split(","):
            pins[name] = pins[name] + "," + m.group(2)
        else:
            pins.setdefault(name, m.group(2))
    return pins


def build_id(lock_sha256, python_version, packages=(), packages_no_deps=(), extra=(), sources=None):
    """A short, stable digest of what decides a build's content."""
    doc = {
        "lock": lock_sha256,
        "python": python_version,
        "packages": sorted(packages),
        "packages_no_deps": sorted(packages_no_deps),
        "extra": list(extra),
        "sources": sources or {},
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode("utf-8")).hexdigest()[:16]


def decide(active_id, wanted_id, wanted_complete, wanted_exists):
    """What to do: 'none' (in service), 'switch' (a complete build of it exists), 'build', or 'repair'
    (a build directory of it exists without its completion marker: an interrupted install)."""
    if active_id == wanted_id and wanted_complete:
        return "none"
    if wanted_complete:
        return "switch"
    if wanted_exists:
        return "repair"
    return "build"


def prune(builds, active_id, keep):
    """Which build ids to remove: all but the active one and the `keep` newest others.

    builds: [(build id, created timestamp)]. Incomplete builds are not listed here (the caller removes
    them only when it rebuilds that id)."""
    others = sorted((b for b in builds if b[0] != active_id), key=lambda b: b[1], reverse=True)
    return [b[0] for b in others[max(keep, 0):]]


def parse_flash_attn_wheel(filename):
    """Tags of a flash-attn wheel file name, or None when the name is not a flash-attn wheel."""
    m = _FA_WHEEL.match(filename.rsplit("/", 1)[-1])
    if not m:
        return None
    d = m.groupdict()
    return {
        "version": d["version"],
        "cuda_major": d["cuda"],
        "torch": d["torch"],
        "cxx11abi": None if d["abi"] is None else d["abi"] == "TRUE",
        "python": d["python"],
        "platform": d["platform"],
    }


def flash_attn_mismatches(filename, torch_version, cuda_version, python_version, cxx11abi=True, machine="x86_64"):
    """Why a flash-attn wheel cannot work in the venv (empty list: it matches).

    torch_version: the lock's torch (2.9.1); cuda_version: torch's CUDA build (12.8); python_version:
    the venv interpreter (3.11.2); cxx11abi: torch's C++ ABI (PyPI wheels since torch 2.7: True)."""
    tags = parse_flash_attn_wheel(filename)
    if tags is None:
        return ["%s is not a flash-attn wheel file name (flash_attn-<version>+cu<N>torch<X.Y>cxx11abi<TRUE|FALSE>"
                "-cp<NN>-cp<NN>-linux_<arch>.whl)" % filename]
    problems = []
    py_tag = "cp" + "".join(str(python_version).split(".")[:2])
    if tags["python"] != py_tag:
        problems.append("Python: the wheel is %s, the venv's interpreter is %s (%s)" % (tags["python"], python_version, py_tag))
    if not tags["platform"].endswith(machine):
        problems.append("platform: the wheel is %s, the host is %s" % (tags["platform"], machine))
    if tags["torch"] is not None:
        torch_mm = ".".join(str(torch_version).split(".")[:2])
        if tags["torch"] != torch_mm:
            problems.append("torch: the wheel is built for torch %s, the venv has torch %s" % (tags["torch"], torch_version))
        cuda_major = str(cuda_version).split(".", 1)[0]
        if tags["cuda_major"] != cuda_major:
            problems.append("CUDA: the wheel is built for CUDA %s, torch %s is a CUDA %s build"
                            % (tags["cuda_major"], torch_version, cuda_version))
        if tags["cxx11abi"] != bool(cxx11abi):
            problems.append("C++ ABI: the wheel has cxx11abi=%s, torch %s has cxx11abi=%s"
                            % (tags["cxx11abi"], torch_version, bool(cxx11abi)))
    return problems


def max_build_jobs(cpus, mem_total_mib, mib_per_job=6144):
    """MAX_JOBS for a flash-attn source build: bounded by the CPUs and by memory (each nvcc job of
    flash-attn takes several GiB; too many jobs get the build OOM-killed)."""
    by_mem = int(mem_total_mib) // int(mib_per_job)
    return max(1, min(int(cpus), by_mem))


# ninja's "[12/73] Building CUDA object ..." (flash-attn's setup.py builds with ninja); uv -v prints a build
# backend's output as it comes, each line after "DEBUG "
_NINJA_STEP = re.compile(r"\[(\d+)/(\d+)\]\s*(.*)$")
_UV_BUILDING = re.compile(r"(?:DEBUG )?Building:?\s+(\S+)")


# what uv -v prints of its own phases (0.9.30, seen on a real sync): "Resolved 212 packages in 1.2s", "Identified
# uncached distribution: torch==2.9.1" (one per package to fetch), "Downloading torch (846.1MiB)" and " Downloaded
# torch" (only for files over 1 MiB, with the size the index or the server gave), "Prepared 180 packages in 95s",
# "Installed 212 packages in 20s", "Bytecode compiled 51234 files in 60s"
_UV_RESOLVED = re.compile(r"^Resolved (\d+) packages?\b")
_UV_UNCACHED = re.compile(r"^Identified uncached distribution: (\S+)")
_UV_DOWNLOADING = re.compile(r"^Downloading (\S+) \(([\d.]+)(B|KiB|MiB|GiB|TiB)\)\s*$")
_UV_DOWNLOADED = re.compile(r"^\s*Downloaded (\S+)\s*$")
_UV_PREPARED = re.compile(r"^Prepared (\d+) packages?\b")
_UV_INSTALLED = re.compile(r"^Installed (\d+) packages?\b")
_UV_COMPILED = re.compile(r"^Bytecode compiled (\d+) files?\b")
_UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
_UV_COUNTS = {_UV_RESOLVED: "resolved", _UV_PREPARED: "prepared", _UV_INSTALLED: "installed", _UV_COMPILED: "bytecode"}
_UV_PHASES = tuple(_UV_COUNTS) + (_UV_UNCACHED, _UV_DOWNLOADING, _UV_DOWNLOADED)


def _count(n, what):
    return "%d %s%s" % (n, what, "" if n == 1 else "s")


def _size(n):
    return "%.1f GiB" % (n / float(1 << 30)) if n >= 1 << 30 else "%.1f MiB" % (n / float(1 << 20))


class BuildProgress(object):
    """What an install step has reached, from its output lines (uv -v): uv's own phases (packages resolved, to fetch,
    the large files downloaded with their bytes, installed, compiled) and, in a source build, the package and ninja's
    [k/N]. Pure: feed lines, read message()."""

    def __init__(self, steps):
        self.steps = max(int(steps), 1)
        self.step = 0
        self.what = ""
        self.last = ""
        self._reset()

    def start(self, what):
        self.step += 1
        self.what = what
        self._reset()

    def _reset(self):
        self.package = None
        self.compiled = self.compile_total = None
        self.resolved = self.prepared = self.installed = self.bytecode = None
        self.to_fetch = 0
        self.large = {}             # name -> bytes, for the files uv names as it downloads them
        self.large_done = set()

    def feed(self, line):
        """Take one output line; True when it changes what message() says."""
        text = line.rstrip("\r\n")
        if text.startswith("DEBUG "):
            text = text[6:]
        m = _NINJA_STEP.search(text)
        if m and 0 < int(m.group(1)) <= int(m.group(2)):
            changed = (int(m.group(1)), int(m.group(2))) != (self.compiled, self.compile_total)
            self.compiled, self.compile_total = int(m.group(1)), int(m.group(2))
            self.last = m.group(3)[:120]
            return changed
        m = _UV_BUILDING.match(text)
        if m and not text.startswith("Building wheel"):
            name = m.group(1).split("@", 1)[0].strip()
            if name and name != self.package:
                self.package = name
                return True
            return False
        return self._uv_phase(text)

    def _uv_phase(self, text):
        """One of uv's phase lines taken in. They are a few among -v's thousands of DEBUG lines, so the message is
        rendered (to tell whether it changed) only for a line that is one."""
        for rx in _UV_PHASES:
            m = rx.match(text)
            if m:
                break
        else:
            return False
        before = self.message(0)
        if rx is _UV_UNCACHED:
            self.to_fetch += 1
        elif rx is _UV_DOWNLOADING:
            self.large[m.group(1)] = int(float(m.group(2)) * _UNITS[m.group(3)])
        elif rx is _UV_DOWNLOADED:
            if m.group(1) in self.large:
                self.large_done.add(m.group(1))
        else:
            setattr(self, _UV_COUNTS[rx], int(m.group(1)))
        return self.message(0) != before

    def bytes_done(self):
        return sum(self.large[n] for n in self.large_done)

    def _uv_message(self):
        if self.installed is not None:
            return "%s installed, %s" % (_count(self.installed, "package"), _count(self.bytecode, "file") + " compiled"
                                         if self.bytecode is not None else "compiling bytecode")
        said = [_count(self.resolved, "package") + " resolved"] if self.resolved is not None else []
        if self.prepared is not None:
            return ", ".join(said + ["%d fetched%s; installing" % (
                self.to_fetch, " (%s)" % _size(sum(self.large.values())) if self.large else "")])
        if self.to_fetch:
            said.append("%d to fetch" % self.to_fetch)
        down = "%s of %s downloaded (%d of %s)" % (_size(self.bytes_done()), _size(sum(self.large.values())),
                                                   len(self.large_done), _count(len(self.large), "large file"))
        return "; ".join(([", ".join(said)] if said else []) + ([down] if self.large else []))

    def message(self, elapsed):
        msg = "step %d of %d (%s) after %d s" % (self.step, self.steps, self.what, int(elapsed))
        if self.compile_total:
            msg += ": compiling %d of %d (%d %%)" % (
                self.compiled, self.compile_total, 100 * self.compiled // self.compile_total)
            if self.package:
                msg += " in the build of %s" % self.package
        elif self.package:
            msg += ": building %s from source" % self.package
        else:
            said = self._uv_message()
            if said:
                msg += ": " + said
        return msg

    def doc(self, elapsed):
        return {"state": "building", "message": self.message(elapsed), "step": self.step, "steps": self.steps,
                "compiled": self.compiled, "compile_total": self.compile_total, "package": self.package,
                "resolved": self.resolved, "to_fetch": self.to_fetch, "installed": self.installed,
                "downloaded_bytes": self.bytes_done(), "download_bytes": sum(self.large.values()),
                "large_done": len(self.large_done), "large_total": len(self.large), "elapsed_s": round(elapsed, 1)}


def run_streaming(argv, env, on_line, cwd="/"):
    """Run argv (stdout and stderr merged), calling on_line(text) for each line as it comes; returns the exit code.
    For a long build whose output is progress (the caller keeps what it needs for an error message)."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=cwd, close_fds=True)
    try:
        for raw in iter(proc.stdout.readline, b""):
            on_line(raw.decode("utf-8", "replace"))
    finally:
        proc.stdout.close()
    return proc.wait()


# Run by uv_venv (verify_imports) with the venv's own interpreter, as the service account: ``python -c
# VERIFY_CODE name...`` prints one JSON object. A package that is not installed is null; one that is installed but
# fails to import is reported with its error. With torch: its CUDA build, whether CUDA is usable, the GPU count and
# the C++ ABI (the flash-attn wheel must match it).
VERIFY_CODE = r'''
import importlib, json, sys
facts = {"python": sys.version.split()[0], "executable": sys.executable, "errors": {}}
for name in sys.argv[1:]:
    try:
        mod = importlib.import_module(name)
    except ImportError as exc:
        mod = None
        if getattr(exc, "name", None) != name:
            facts["errors"][name] = "%s: %s" % (type(exc).__name__, exc)
    except Exception as exc:
        mod = None
        facts["errors"][name] = "%s: %s" % (type(exc).__name__, exc)
    facts[name] = getattr(mod, "__version__", None) if mod is not None else None
torch = sys.modules.get("torch")
if torch is not None:
    facts["torch_cuda"] = torch.version.cuda
    facts["cuda_available"] = bool(torch.cuda.is_available())
    facts["gpu_count"] = torch.cuda.device_count() if facts["cuda_available"] else 0
    facts["cxx11abi"] = bool(torch.compiled_with_cxx11_abi())
print(json.dumps(facts, sort_keys=True))
'''


# The last import check's answer, kept in the build (root's, beside its marker) so that a re-run need not start the
# venv's interpreter again (importing torch and SGLang takes 10-30 s on a GPU node). It is reused only while what it
# depends on is the same: the names asked, every entry of the venv's site-packages (name, size, mtime: a package
# installed, removed or replaced changes them), the interpreter the venv's python resolves to, and what the
# container sees of the GPUs (its /dev/nvidia* nodes and the loaded driver's version).
IMPORTS_CACHE = ".gpuserve-imports.json"


def gpu_view(dev="/dev", version_file="/proc/driver/nvidia/version"):
    """The GPU side an import check depends on (torch's CUDA answer): the nvidia device nodes and the driver version."""
    try:
        nodes = sorted(n for n in os.listdir(dev) if n.startswith("nvidia"))
    except OSError:
        nodes = []
    try:
        with open(version_file) as f:
            driver = f.read().strip()
    except (IOError, OSError):
        driver = None
    return {"nodes": nodes, "driver": driver}


def imports_fingerprint(venv_dir, names, gpus):
    """A digest of everything an import check's answer depends on (see IMPORTS_CACHE)."""
    h = hashlib.sha256(json.dumps([sorted(names), gpus], sort_keys=True).encode("utf-8"))
    lib = os.path.join(venv_dir, "lib")
    for sub in sorted(os.listdir(lib)) if os.path.isdir(lib) else []:
        sp = os.path.join(lib, sub, "site-packages")
        if not os.path.isdir(sp):
            continue
        entries = []
        for name in os.listdir(sp):
            st = os.lstat(os.path.join(sp, name))
            entries.append([name, st.st_size, st.st_mtime_ns])
        h.update(json.dumps([sub, sorted(entries)]).encode("utf-8"))
    python = os.path.join(venv_dir, "bin", "python")
    try:
        real = os.path.realpath(python)
        st = os.stat(real)
        h.update(("%s %d %d" % (real, st.st_size, st.st_mtime_ns)).encode("utf-8"))
    except OSError:
        h.update(b"no interpreter")
    return h.hexdigest()


def read_imports_cache(build_dir, fingerprint):
    """The cached answer when it was recorded for this fingerprint, else None."""
    doc = read_json(os.path.join(build_dir, IMPORTS_CACHE))
    if not isinstance(doc, dict) or doc.get("fingerprint") != fingerprint or not isinstance(doc.get("imports"), dict):
        return None
    return doc


def write_imports_cache(build_dir, fingerprint, imports, when):
    """Record an answer (only one without import errors is worth keeping); a failure to write is not an error."""
    try:
        write_json(os.path.join(build_dir, IMPORTS_CACHE), {"fingerprint": fingerprint, "imports": imports,
                                                            "verified_at": when})
        return True
    except (IOError, OSError):
        return False


def parse_verify(stdout):
    """The JSON VERIFY_CODE printed (its last line: an import may print before it), or None."""
    for line in reversed((stdout or "").strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                return None
    return None


# ---- the build's steps and its marker (module uv_venv runs them; pure or plain file operations, unit-tested)

def source_args(p):
    """uv's package-source flags from the module's parameters (index, extra indexes, find-links, no-index,
    offline)."""
    args = []
    if p.get("index_url"):
        args += ["--index-url", p["index_url"]]
    for url in p.get("extra_index_urls") or []:
        args += ["--extra-index-url", url]
    for loc in p.get("find_links") or []:
        args += ["--find-links", loc]
    if p.get("no_index"):
        args.append("--no-index")
    if p.get("offline"):
        args.append("--offline")
    return args


# The oldest uv that takes every option the build passes (venv_argv, find_argv, install_steps), measured against the
# releases themselves (tests/integration/test_uv_floor.py runs each argv with --help appended on uv UV_MIN and on the
# release before it): uv 0.4.3's `uv venv` has no --no-project; 0.4.4 takes them all. The lock itself does not
# raise it (uv 0.2.0 resolves both locks' pins, dry run on glibc 2.36).
UV_MIN = "0.4.4"
UV_MIN_WHY = "uv 0.4.3's `uv venv` has no --no-project"


def _version_key(text):
    return tuple(int(x) for x in re.findall(r"\d+", text or "")[:3])


def uv_version_problem(version):
    """Why a uv of ``version`` (``0.9.30``, or ``uv --version``'s line) cannot run this build, or None."""
    words = (version or "").split()
    version = words[1] if len(words) > 1 and words[0] == "uv" else (words[0] if words else "")
    if not re.match(r"^\d+\.\d+(\.\d+)?", version):
        return "%r is not a uv version" % version
    if _version_key(version) < _version_key(UV_MIN):
        return ("uv %s is older than the oldest uv that takes every option the build passes (%s; %s): use uv %s or "
                "newer - role sglang_venv pins one (sglang_venv_uv_version)" % (version, UV_MIN, UV_MIN_WHY, UV_MIN))
    return None


def venv_argv(uv, interpreter, build_dir):
    """``uv venv`` for a build."""
    return [uv, "venv", "--no-project", "--allow-existing", "--python", interpreter, build_dir]


def find_argv(uv, python):
    """``uv python find`` for a Python given by version."""
    return [uv, "python", "find", "--no-project", python]


def install_steps(p, build_dir, verbose=False):
    """The uv pip commands that fill a fresh venv at build_dir, as (argv, what): the whole lock with ``uv pip sync``
    - or, with packages / packages_no_deps, only those packages of the lock - then the extras without their
    dependencies (which must be in the lock). Bytecode is compiled at build time: the sealed venv is read-only to
    the service, which cannot write it later. ``verbose``: uv -v, so a build backend's output streams to a poller."""
    uv = p["uv"]
    py = ["--python", os.path.join(build_dir, "bin", "python")]
    no_binary = []
    for name in p.get("no_binary") or []:
        no_binary += ["--no-binary", name]
    nbi = []
    for name in p.get("no_build_isolation") or []:
        nbi += ["--no-build-isolation-package", name]
    lock = ["-c", p["lock"]]
    steps = [] if (p.get("packages") or p.get("packages_no_deps")) else [(["sync"], [p["lock"]], "uv pip sync of %s" % p["lock"])]
    for names, flags, label in ((p.get("packages_no_deps"), ["--no-deps"], "uv pip install --no-deps"),
                                (p.get("packages"), [], "uv pip install"), (p.get("extra"), ["--no-deps"], "uv pip install")):
        if names:
            steps.append((["install"], flags + lock + list(names), "%s %s" % (label, " ".join(names))))
    reqs = p.get("extra_requirements") or []
    if isinstance(reqs, str):
        reqs = [reqs]
    if reqs:
        # what the lock does not hold (flash-attn built from source, a transfer engine's wheels): each file pinned by hash
        files = [a for r in reqs for a in ("-r", r)]
        steps.append((["install"], ["--no-deps", "--require-hashes"] + lock + files,
                      "uv pip install --require-hashes %s" % " ".join(files)))
    # `uv pip sync` has no --no-build-isolation-package (uv 0.9.30 refuses it: "unexpected argument"); what it
    # would build is the lock's, none of which the option names (flash-attn is an extra, installed below)
    return [([uv, "pip"] + verb + (["-v"] if verbose else []) + py + source_args(p)
             + (nbi if verb == ["install"] else []) + no_binary + ["--compile-bytecode"] + tail,
             what) for verb, tail, what in steps]


def read_marker(build_dir):
    return read_json(os.path.join(build_dir, MARKER))


def tool_problem(path):
    """Why root must not trust the tool at ``path`` (uv: the service account runs it to build what root seals and
    later runs), or None: the file it resolves to and every directory above it must be root's and writable by no one
    else - a uv the service account could replace would poison every later build."""
    real = os.path.realpath(path)
    here = real
    while True:
        try:
            st = os.lstat(here)
        except OSError as e:
            return "%s: %s" % (here, e.strerror)
        if st.st_uid != 0 or (st.st_mode & 0o022 and not (stat.S_ISDIR(st.st_mode) and st.st_mode & 0o1000)):
            return ("%s (%s) is owned by uid %d with mode %04o: the service account could replace it; it must be "
                    "root's and writable by root only (role sglang_venv installs uv so)" % (
                        here, "the uv in use" if here == real else "a directory above it", st.st_uid,
                        stat.S_IMODE(st.st_mode)))
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent


def write_marker(build_dir, data):
    write_json(os.path.join(build_dir, MARKER), data)
