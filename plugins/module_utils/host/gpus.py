# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the nvidia_gpu_facts module reads: nvidia-smi (bounded: a wedged GPU makes it hang forever), the driver's
/proc files, the device nodes, and on a node the kernels, libraries, free disk and DKMS. The parsing is in
``nvidia``; here are the reads."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import glob
import os
import stat
import subprocess

from .exposition import render
from .nvidia import SMI_ARGV, STATES, dkms_has_module, gpu_facts, read_node


class GpuReadError(Exception):
    """A read that could not finish (a command that did not answer in time), named with the fix."""


def read_text(path):
    try:
        with open(path) as fh:
            return fh.read()
    except (IOError, OSError):
        return ""


def device_nodes(patterns):
    """The character and block nodes the glob ``patterns`` match: path, type, major, minor, mode."""
    out = []
    for pattern in patterns:
        for path in sorted(glob.glob(pattern)):
            try:
                st = os.stat(path)
            except OSError:
                continue
            if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
                out.append({"path": path, "type": "c" if stat.S_ISCHR(st.st_mode) else "b",
                            "major": os.major(st.st_rdev), "minor": os.minor(st.st_rdev),
                            "mode": "%04o" % stat.S_IMODE(st.st_mode)})
    return out


def read_gpus(smi, timeout, proc_version_path="/proc/driver/nvidia/version", proc_devices_path="/proc/devices",
              dev_glob=("/dev/nvidia*", "/dev/nvidia-caps/*"), proc_gpus_dir="/proc/driver/nvidia/gpus"):
    """The GPU facts (nvidia.gpu_facts) from nvidia-smi at ``smi`` (None when there is none) and the driver's files."""
    timed_out = None
    rc, out, err = None, "", ""
    if smi and os.access(smi, os.X_OK):
        try:     # bounded: a wedged GPU makes nvidia-smi hang forever
            proc = subprocess.run([smi] + SMI_ARGV[1:], capture_output=True, text=True, timeout=timeout, check=False)
            rc, out, err = proc.returncode, proc.stdout, proc.stderr
        except subprocess.TimeoutExpired:
            timed_out = timeout
    information = [read_text(f) for f in sorted(glob.glob(os.path.join(proc_gpus_dir, "*", "information")))]
    return gpu_facts(out, err, rc, proc_version=read_text(proc_version_path),
                     sys_module_version=read_text("/sys/module/nvidia/version"),
                     proc_devices=read_text(proc_devices_path), device_nodes=device_nodes(dev_glob),
                     smi_timeout=timed_out,
                     gpu_information=information)


def read_node_facts(lib_dirs, free_path, dkms_binary, dkms_version, timeout):
    """The node's kernels, libraries and free disk (nvidia.read_node), and with ``dkms_version`` whether DKMS built
    the module for the newest and the boot kernel."""
    node = read_node(lib_dirs=lib_dirs, free_path=free_path)
    if not dkms_version:
        return node
    node["dkms_status"] = node["newest_kernel_has_module"] = node["boot_kernel_has_module"] = None
    if os.access(dkms_binary, os.X_OK):
        argv = [dkms_binary, "status", "-m", "nvidia", "-v", dkms_version]
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            raise GpuReadError("%s did not answer within %s s (killed): run it by hand" % (" ".join(argv), timeout))
        node["dkms_status"] = proc.stdout
        node["newest_kernel_has_module"] = dkms_has_module(proc.stdout, node["newest_kernel"] or "")
        node["boot_kernel_has_module"] = dkms_has_module(proc.stdout, node["boot_kernel"] or "")
    return node


def gpu_metrics(node, facts):
    """The node's GPUs for Prometheus (label ``node``): the driver's state (one sample per state, 1 for the current),
    the GPUs seen, each GPU's memory in bytes (labels gpu, uuid, name), the lost GPUs (label pci_bus_id), and whether
    the userspace driver differs from the kernel module (the NVML mismatch that stops every CUDA program)."""
    base = {"node": node}
    mib = 1 << 20

    def per_gpu(key):
        return [(dict(base, gpu=str(g.get("index")), uuid=g.get("uuid") or "", name=g.get("name") or ""),
                 None if g.get(key) is None else g[key] * mib) for g in facts.get("gpus") or []]
    userspace, kernel = facts.get("driver_version"), facts.get("kernel_module_version")
    if facts.get("state") == "version_mismatch":
        mismatch = True
    else:
        mismatch = None if not (userspace and kernel) else userspace != kernel
    lost = facts.get("lost_gpus") or []
    return render([
        ("gpuserve_nvidia_state", "The NVIDIA driver's state on the node (1 for the current one)",
         [(dict(base, state=s), int(s == facts.get("state"))) for s in sorted(STATES)]),
        ("gpuserve_nvidia_gpus", "GPUs nvidia-smi lists", [(base, int(facts.get("gpu_count") or 0))]),
        ("gpuserve_nvidia_gpu_memory_total_bytes", "A GPU's memory", per_gpu("memory_total_mib")),
        ("gpuserve_nvidia_gpu_memory_used_bytes", "A GPU's memory in use", per_gpu("memory_used_mib")),
        ("gpuserve_nvidia_gpus_lost", "GPUs fallen off the bus (nvidia-smi's exit 15, NVML's message)",
         [(base, len(lost))]),
        ("gpuserve_nvidia_gpu_lost", "A GPU fallen off the bus, by its PCI bus id",
         [(dict(base, pci_bus_id=g.get("pci_bus_id") or ""), 1) for g in lost]),
        ("gpuserve_nvidia_driver_mismatch", "1 when the userspace driver differs from the kernel module",
         [(base, mismatch)]),
    ])
