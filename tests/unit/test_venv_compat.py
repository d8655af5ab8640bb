"""venv/compat.py: the node's NVIDIA driver against the CUDA of the lock's torch, read from the lock itself (its
nvidia-cuda-runtime pin), with NVIDIA's driver rule (CUDA Toolkit release notes, Table 3) - refused below the CUDA
major's minimum, limited below the toolkit's own driver, fine at or above it."""
import hashlib
import os

import pytest

from unit_helpers import ROOT, load_module_util, load_plugin

V = load_module_util("venv")
# the check itself runs on the controller, with packaging (plugins/plugin_utils/wheels.py)
W = load_plugin("plugin_utils", "wheels", "gpuserve_wheels")
LOCK_059 = os.path.join(ROOT, "roles", "sglang_venv", "files", "locks", "sglang-0.5.9.lock")


def pins059():
    with open(LOCK_059) as fh:
        return V.parse_lock(fh.read())


def test_the_cuda_of_the_059_lock_is_read_from_its_runtime_pin():
    pins = pins059()
    assert pins["nvidia-cuda-runtime-cu12"] == "12.8.90" and pins["torch"] == "2.9.1"
    assert V.lock_cuda(pins) == "12.8"
    assert V.lock_cuda({"torch": "2.9.1+cpu"}) is None                          # a CPU torch pins no runtime
    assert V.lock_cuda({"nvidia-cuda-runtime": "13.0.96", "nvidia-cuda-runtime-cu13": "13.0.96"}) == "13.0"


def test_a_driver_below_the_majors_minimum_is_refused_with_the_fix_and_the_containers_it_restarts():
    r = V.driver_check("515.105.01", "12.8", "pve1", ["ct129", "ct131"])
    assert r["level"] == "refuse" and r["needs"] == "525.60.13"
    assert r["msg"] == (
        "the lock's torch runs on CUDA 12.8, which an NVIDIA driver loads from 525.60.13 on (570.26 for all of it), "
        "and pve1 has 515.105.01: no CUDA call would work in this venv. Set nvidia_driver_version >= 570.26 for pve1 "
        "(role nvidia_driver): upgrading the driver restarts every GPU container of pve1 (ct129, ct131); or use a "
        "lock whose torch is built for CUDA 11.x (older than this table) or older")
    # CUDA 13 (a 0.5.23-like lock) on the 570 branch that served 0.5.9
    r13 = V.driver_check("570.153.02", "13.0", "pve1")
    assert r13["level"] == "refuse" and "loads from 580.65.06 on" in r13["msg"]
    assert r13["msg"].endswith("built for CUDA 12.8 or older")


@pytest.mark.parametrize("driver,level", [
    ("525.60.13", "limited"), ("535.247.01", "limited"), ("570.26", "ok"), ("570.153.02", "ok"), ("580.126.09", "ok"),
])
def test_minor_version_compatibility_is_limited_and_the_toolkits_driver_is_fine(driver, level):
    r = V.driver_check(driver, "12.8", "pve1")
    assert r["level"] == level, r
    if level == "limited":
        assert "no PTX JIT" in r["msg"] and r["needs"] == "570.26"


def test_what_cannot_be_judged_is_said_not_refused():
    assert V.driver_check("", "12.8", "pve1")["level"] == "unknown"
    unknown = V.driver_check("600.1", "14.0", "pve1")
    assert unknown["level"] == "unknown" and "newer than this collection's table" in unknown["msg"]
    assert V.driver_check("", None)["level"] == "ok"


def test_the_table_is_ordered_as_nvidia_ships_it():
    """Each CUDA minor's toolkit driver is newer than the one before, and each major's minimum is its .0's."""
    def key(version):
        return tuple(int(p) for p in version.split("."))
    ordered = sorted(V.TOOLKIT_DRIVER, key=key)
    drivers = [key(V.TOOLKIT_DRIVER[c]) for c in ordered]
    assert drivers == sorted(drivers)
    assert all(V.MAJOR_MINIMUM[m] == V.TOOLKIT_DRIVER[m + ".0"] for m in V.MAJOR_MINIMUM)


# -- the second link: the container's Python, glibc and machine against the wheels the lock pins ----------------------
LOCKS = os.path.join(ROOT, "roles", "sglang_venv", "files", "locks")


def lock_and_tags(version):
    with open(os.path.join(LOCKS, "sglang-%s.lock" % version)) as fh, \
            open(os.path.join(LOCKS, "sglang-%s.tags" % version)) as th:
        return fh.read(), th.read()


def test_the_0523_lock_pins_cuda_13_from_its_unsuffixed_runtime_pin():
    lock, _tags = lock_and_tags("0.5.23")
    pins = V.parse_lock(lock)
    assert pins["sglang"] == "0.5.23" and pins["torch"] == "2.14.1" and pins["sglang-kernel"] == "0.4.10"
    assert "nvidia-cuda-runtime-cu12" not in pins and V.lock_cuda(pins) == "13.0"


@pytest.mark.parametrize("where,python,glibc,machine,ok", [
    ("Debian 12", "3.11.2", "2.36", "x86_64", True),
    ("Ubuntu 22.04", "3.10.12", "2.35", "x86_64", False),   # cp311 only
    ("Ubuntu 24.04", "3.12.3", "2.39", "x86_64", False),    # cp311 only
    ("Debian 11 with a 3.11", "3.11.9", "2.31", "x86_64", False),  # manylinux_2_34
    ("Debian 12 arm64", "3.11.2", "2.36", "aarch64", False),
])
def test_0523_installs_only_on_cpython_311_with_glibc_234_on_x86_64(where, python, glibc, machine, ok):
    lock, tags = lock_and_tags("0.5.23")
    r = W.wheels_check(lock, tags, python, glibc, machine, lock_name="sglang-0.5.23.lock", where="ct129")
    assert (r["level"] == "ok") is ok, (where, r["msg"])
    if not ok:
        # the release's own wheel is named first, with what it asks for
        assert r["problems"][0] == ("sglang==0.5.23 ships only cp311-cp311-manylinux_2_34_x86_64 (CPython 3.11, "
                                    "glibc >= 2.34, x86_64)")
        assert r["msg"].startswith("sglang-0.5.23.lock does not install on ct129 (CPython %s, glibc %s, %s): "
                                   "sglang==0.5.23 ships only" % (python, glibc, machine))
        assert "sglang_venv_python" in r["msg"] and "Debian 12: 2.36" in r["msg"]


@pytest.mark.parametrize("python,glibc,machine", [("3.10.12", "2.35", "x86_64"), ("3.11.2", "2.36", "x86_64"),
                                                  ("3.12.3", "2.39", "x86_64"), ("3.11.2", "2.36", "aarch64")])
def test_the_universal_059_lock_installs_on_every_target_python(python, glibc, machine):
    """0.5.9's lock is universal (markers per Python and machine): each pin whose marker holds has a file there."""
    lock, tags = lock_and_tags("0.5.9")
    r = W.wheels_check(lock, tags, python, glibc, machine)
    assert r["level"] == "ok" and not r["problems"], r["msg"]


def test_a_light_build_checks_only_its_own_packages():
    lock, tags = lock_and_tags("0.5.23")
    r = W.wheels_check(lock, tags, "3.10.12", "2.35", "x86_64", packages=["sglang", "numpy"])
    assert r["problems"] == ["sglang==0.5.23 ships only cp311-cp311-manylinux_2_34_x86_64 (CPython 3.11, glibc >= "
                             "2.34, x86_64)"]
    assert W.wheels_check(lock, tags, "3.11.2", "2.36", "x86_64", packages=["sglang", "numpy"])["level"] == "ok"


def test_a_record_of_another_lock_or_none_is_said():
    lock, tags = lock_and_tags("0.5.23")
    stale = W.wheels_check(lock + "# edited\n", tags, "3.11.2", "2.36", "x86_64", lock_name="sglang-0.5.23.lock")
    assert stale["level"] == "refuse" and "is for another lock" in stale["msg"] and "lock.sh write" in stale["msg"]
    assert W.wheels_check(lock, None, "3.11.2", "2.36", "x86_64")["level"] == "unknown"


@pytest.mark.parametrize("tag,python,glibc,machine,ok", [
    ("py3-none-any", "3.10.1", "2.17", "aarch64", True),
    ("py2.py3-none-any", "3.12.0", "2.36", "x86_64", True),
    ("cp310-abi3-manylinux2014_x86_64", "3.13.1", "2.36", "x86_64", True),     # abi3: this CPython or newer
    ("cp312-abi3-manylinux2014_x86_64", "3.11.2", "2.36", "x86_64", False),
    ("cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64", "3.11.2", "2.17", "x86_64", True),
    ("cp311-cp311-manylinux_2_28_x86_64", "3.11.2", "2.27", "x86_64", False),
    ("cp311-cp311-musllinux_1_2_x86_64", "3.11.2", "2.36", "x86_64", False),
    ("cp311-cp311-macosx_11_0_arm64", "3.11.2", "2.36", "x86_64", False),
    ("cp311-cp311-linux_x86_64", "3.11.2", "2.36", "x86_64", True),
    ("py3-none-manylinux1_x86_64", "3.11.2", "2.5", "x86_64", True),
    ("sdist", "3.9.0", "2.5", "riscv64", True),
])
def test_wheel_tags_as_pip_and_uv_take_them(tag, python, glibc, machine, ok):
    assert W.tag_installs(tag, python, glibc, machine) is ok


@pytest.mark.parametrize("marker,holds", [
    ("", True),
    ("python_full_version < '3.11'", False),
    ("python_full_version == '3.11.*'", True),
    ("platform_machine == 'x86_64' and sys_platform == 'linux'", True),
    ("platform_machine == 'arm64' and sys_platform == 'darwin'", False),
    ("sys_platform != 'emscripten' and sys_platform != 'win32'", True),
    ("os_name == 'nt' or sys_platform == 'win32'", False),
    ("(python_full_version >= '3.12' and platform_machine == 'aarch64') or (python_full_version == '3.11.*' and "
     "platform_machine == 'x86_64' and sys_platform == 'linux')", True),
    ("'linux' in sys_platform", True),
    ("python_full_version >= '3.11' and implementation_name != 'PyPy'", True),
])
def test_pep508_markers_of_the_locks(marker, holds):
    assert W.marker_holds(marker, W.marker_env("3.11.2", "x86_64")) is holds


def test_every_lock_has_its_tags_record_for_every_pin():
    """tests/ci/lock.sh write makes both; a lock edited without its record is caught here (lock.sh check against the
    index catches a stale pair)."""
    import glob
    locks = sorted(glob.glob(os.path.join(ROOT, "roles", "*", "files", "locks", "*.lock")))
    assert len(locks) >= 3
    for lock in locks:
        with open(lock) as fh, open(lock[:-len(".lock")] + ".tags") as th:
            text, tags = fh.read(), th.read()
        sha, record = V.parse_tags(tags)
        assert sha == hashlib.sha256(text.encode("utf-8")).hexdigest(), lock
        pins = set("%s==%s" % (n, v) for n, v, _m in V.lock_requirements(text))
        assert pins == set(record), (lock, pins ^ set(record))
