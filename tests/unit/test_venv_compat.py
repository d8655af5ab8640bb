"""venv/compat.py: the node's NVIDIA driver against the CUDA of the lock's torch, read from the lock itself (its
nvidia-cuda-runtime pin), with NVIDIA's driver rule (CUDA Toolkit release notes, Table 3) - refused below the CUDA
major's minimum, limited below the toolkit's own driver, fine at or above it."""
import os

import pytest

from unit_helpers import ROOT, load_module_util

V = load_module_util("venv")
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
