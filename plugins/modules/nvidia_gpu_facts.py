#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: nvidia_gpu_facts
short_description: NVIDIA driver, kernel module, GPUs and device nodes as facts
version_added: 0.1.0
description:
  - Runs C(nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,memory.total,memory.used,memory.free,driver_version,compute_cap
    --format=csv,noheader,nounits) and reads C(/proc/driver/nvidia/version), C(/sys/module/nvidia/version),
    C(/proc/devices) and the C(/dev/nvidia*) nodes.
  - A host without a driver, without a GPU, or with a userspace/kernel-module version mismatch is not an
    error but a named O(ignore:state) with a hint; set O(require) to fail on it instead.
  - Works on the Proxmox node and inside a container (where the kernel module is the host's).
  - Read-only; returns C(ansible_facts.gpuserve_nvidia).
author:
  - gpuserve.sglang contributors (@gpuserve)
options:
  nvidia_smi:
    description: The nvidia-smi binary (name looked up in PATH, or a path).
    type: str
    default: nvidia-smi
  proc_devices_path:
    description: Where to read the character-device majors from. The lab points it at a recorded copy.
    type: path
    default: /proc/devices
  proc_version_path:
    description: The loaded kernel module's version file.
    type: path
    default: /proc/driver/nvidia/version
  dev_glob:
    description: Device nodes to report (major:minor); C(nvidia-caps/*) are included with C(/dev/nvidia*).
    type: list
    elements: str
    default: [/dev/nvidia*, /dev/nvidia-caps/*]
  set_facts:
    description: Also set the facts as C(gpuserve_nvidia) (V(false) for an ad-hoc look that prints each fact once).
    type: bool
    default: true
  proc_gpus_dir:
    description: The driver's per-GPU directory; each C(information) file gives the GPU's device minor (N of
      C(/dev/nvidiaN)), which is what passthrough grants - not nvidia-smi's index.
    type: path
    default: /proc/driver/nvidia/gpus
  timeout:
    description: Seconds nvidia-smi may take; a GPU or driver that hangs gives state C(error) with the reason.
    type: float
    default: 60
  node:
    description:
      - Also read the node's side of the driver into RV(node), in this same call (role C(nvidia_driver) needs
        it) - C(/etc/os-release), the running kernel and architecture, whether it is a Proxmox VE node
        (C(/usr/bin/pveversion)) and has C(update-initramfs), the Secure Boot EFI variable, free MiB on
        O(free_path), NVIDIA devices (vendor C(0x10de)) on the PCI bus, the installed userspace driver
        (C(libnvidia-ml.so.*) in O(lib_dirs)), the kernels in C(/lib/modules), and with O(dkms_version) whether
        DKMS built that module for the newest of them.
    type: bool
    default: false
  free_path:
    description: With O(node), the path whose free space is reported (the driver install writes under C(/)).
    type: path
    default: /
  lib_dirs:
    description: With O(node), the directories searched for C(libnvidia-ml.so.*).
    type: list
    elements: path
    default: [/usr/lib/x86_64-linux-gnu, /usr/lib64, /usr/lib/aarch64-linux-gnu]
  dkms_binary:
    description: With O(node) and O(dkms_version), the dkms program (skipped when absent).
    type: path
    default: /usr/sbin/dkms
  dkms_version:
    description: With O(node), ask C(dkms status -m nvidia -v <this>) (bounded by O(timeout)) for the newest kernel.
    type: str
  metrics_file:
    description:
      - Write the node's GPUs for Prometheus to this file (the exposition format, for the node exporter's textfile
        collector, e.g. C(/var/lib/prometheus/node-exporter/gpuserve_nvidia.prom)), replaced atomically, mode 0644;
        not in check mode.
      - Families (label C(node)) C(gpuserve_nvidia_state) (label C(state), 1 for the current one),
        C(gpuserve_nvidia_gpus), C(gpuserve_nvidia_gpu_memory_total_bytes) and C(gpuserve_nvidia_gpu_memory_used_bytes)
        (labels C(gpu), C(uuid), C(name)), C(gpuserve_nvidia_gpus_lost), C(gpuserve_nvidia_gpu_lost) (label
        C(pci_bus_id)) and C(gpuserve_nvidia_driver_mismatch).
    type: path
    version_added: 0.12.0
  metrics_node:
    description: The C(node) label of O(metrics_file) (default the host's name).
    type: str
    version_added: 0.12.0
  require:
    description:
      - C(none) reports any state; C(driver) fails unless a driver answers (GPUs or not);
        C(gpu) fails unless at least one GPU is visible.
    type: str
    choices: [none, driver, gpu]
    default: none
extends_documentation_fragment:
  - gpuserve.sglang.attributes
  - ansible.builtin.action_common_attributes.facts
attributes:
  facts:
    support: full
notes:
  - The parsing is plain Python in C(plugins/module_utils/host/nvidia.py), unit-tested on recorded outputs.
seealso:
  - module: gpuserve.sglang.sglang_memory_plan
"""

EXAMPLES = r"""
- name: Read the node's GPUs
  gpuserve.sglang.nvidia_gpu_facts:
  register: nv

- name: The planner gets the GPUs it will run on
  gpuserve.sglang.sglang_memory_plan:
    model_path: /srv/models/Qwen3.6-27B
    gpus: "{{ nv.gpus[:2] }}"
    args: {tp_size: 2}

- name: Fail unless GPUs are visible, with the state's hint
  gpuserve.sglang.nvidia_gpu_facts:
    require: gpu
"""

RETURN = r"""
state:
  description:
    - C(ok), C(no_driver), C(no_gpu), C(version_mismatch), C(gpu_lost) or C(error).
    - C(gpu_lost) - a GPU fell off the bus or became inaccessible (nvidia-smi exits 15, NVML "Unable to determine the
      device handle"); RV(gpus) lists the GPUs that still answer, RV(lost_gpus) the lost ones.
  returned: always
  type: str
  sample: ok
message:
  description: nvidia-smi's decisive line, or what the state means.
  returned: always
  type: str
  sample: "NVIDIA-SMI 570.153.02, Driver Version: 570.153.02, CUDA Version: 12.8"
hint:
  description: What to do when the state is not C(ok); null otherwise.
  returned: always
  type: str
  sample: null
driver_version:
  description: Userspace driver version (nvidia-smi's, or the NVML library's on a mismatch).
  returned: always
  type: str
  sample: 570.153.02
kernel_module_version:
  description: Version of the loaded kernel module (C(/proc/driver/nvidia/version), else C(/sys/module/nvidia/version)).
  returned: always
  type: str
  sample: 570.153.02
kernel_module_type:
  description: C(open) or C(proprietary) kernel modules; null when none is loaded.
  returned: always
  type: str
  sample: open
gpu_count:
  description: Number of GPUs nvidia-smi lists.
  returned: always
  type: int
  sample: 2
memory_total_mib:
  description: Sum of the GPUs' memory in MiB.
  returned: always
  type: int
  sample: 98280
gpus:
  description: One entry per GPU with C(index), C(name), C(uuid), C(pci_bus_id), C(memory_total_mib),
    C(memory_used_mib), C(memory_free_mib), C(driver_version), C(compute_cap), and C(minor) / C(device) (the
    C(/dev/nvidiaN) node of that GPU, from the driver's per-GPU information; may differ from C(index)); unknown
    values are null.
  returned: always
  type: list
  sample: [{"index": 0, "name": "NVIDIA RTX A6000", "uuid": "GPU-3f2a8c1e-5b6d-4e7f-9a0b-1c2d3e4f5a6b",
          "pci_bus_id": "00000000:41:00.0", "memory_total_mib": 49140, "memory_used_mib": 1,
          "memory_free_mib": 48667, "driver_version": "570.153.02", "compute_cap": "8.6", "minor": 0,
          "device": "/dev/nvidia0"}]
  elements: dict
device_majors:
  description: Character-device majors by driver name (C(nvidia-frontend), C(nvidia-uvm), C(nvidia-caps), ...).
  returned: always
  type: dict
  sample: {"nvidia-frontend": 195, "nvidia-uvm": 510}
device_nodes:
  description: Existing device nodes with C(path), C(type) (C(c)/C(b)), C(major), C(minor), C(mode).
  returned: always
  type: list
  sample: [{"path": "/dev/nvidia0", "type": "c", "major": 195, "minor": 0, "mode": "0666"},
          {"path": "/dev/nvidiactl", "type": "c", "major": 195, "minor": 255, "mode": "0666"}]
  elements: dict
node:
  description:
    - With O(node) only. C(os_family) (C(Debian) for Debian and Proxmox VE), C(distribution),
      C(distribution_version), C(kernel), C(architecture), C(pve), C(initramfs), C(secure_boot) (null without
      the EFI variable), C(free_mib), C(free_path), C(nvidia_pci) (PCI addresses), C(userspace_versions) (newest
      last), C(userspace_version), C(kernels), C(newest_kernel), C(boot_kernel) (the kernel the node boots next,
      the one pinned by C(proxmox-boot-tool kernel pin) in C(/etc/kernel/next-boot-pin) or
      C(/etc/kernel/proxmox-boot-pin) when it is installed, else the newest), C(boot_kernel_pin) (that file, or null),
      C(headers_packages) (the headers DKMS needs, as apt names them - C(proxmox-default-headers) and
      C(proxmox-headers-<version>) of the running kernel and of C(boot_kernel) on Proxmox, else C(linux-headers-<version>)),
      and with O(dkms_version) C(dkms_status) (its output, null when dkms is absent), C(newest_kernel_has_module)
      and C(boot_kernel_has_module) (null when dkms is absent).
  returned: when O(node) is true
  type: dict
  sample: {"os_family": "Debian", "kernel": "6.8.12-4-pve", "pve": true, "secure_boot": false, "free_mib": 20480,
           "userspace_version": "570.153.02", "newest_kernel": "6.8.12-4-pve", "newest_kernel_has_module": true,
           "boot_kernel": "6.8.12-4-pve", "boot_kernel_pin": null, "boot_kernel_has_module": true}
ansible_facts:
  description: The same result under C(gpuserve_nvidia) (without RV(node)).
  returned: always
  type: dict
  sample: {"gpuserve_nvidia": {"state": "ok", "gpu_count": 2, "kernel_module_version": "570.153.02"}}
lost_gpus:
  description: The GPUs nvidia-smi could not reach (state C(gpu_lost)), as C({pci_bus_id, minor, uuid, device}).
  returned: always
  type: list
  sample: [{"pci_bus_id": "00000000:C1:00.0", "minor": 1, "uuid": "GPU-7d8e9f0a-1b2c-3d4e-5f6a-7b8c9d0e1f2a",
          "device": "/dev/nvidia1"}]
  elements: dict
  version_added: 0.7.0
"""

import platform

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuserve.sglang.plugins.module_utils.host import (LIB_DIRS, GpuReadError, gpu_metrics,
                                                                           read_gpus, read_node_facts, write_textfile)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            nvidia_smi=dict(type="str", default="nvidia-smi"),
            proc_devices_path=dict(type="path", default="/proc/devices"),
            proc_version_path=dict(type="path", default="/proc/driver/nvidia/version"),
            dev_glob=dict(type="list", elements="str", default=["/dev/nvidia*", "/dev/nvidia-caps/*"]),
            require=dict(type="str", default="none", choices=["none", "driver", "gpu"]),
            timeout=dict(type="float", default=60),
            proc_gpus_dir=dict(type="path", default="/proc/driver/nvidia/gpus"),
            set_facts=dict(type="bool", default=True),
            node=dict(type="bool", default=False),
            free_path=dict(type="path", default="/"),
            lib_dirs=dict(type="list", elements="path", default=list(LIB_DIRS)),
            dkms_binary=dict(type="path", default="/usr/sbin/dkms"),
            dkms_version=dict(type="str"),
            metrics_file=dict(type="path"), metrics_node=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    smi = module.get_bin_path(p["nvidia_smi"]) if "/" not in p["nvidia_smi"] else p["nvidia_smi"]
    facts = read_gpus(smi, p["timeout"], p["proc_version_path"], p["proc_devices_path"], p["dev_glob"],
                      p["proc_gpus_dir"])
    result = dict(facts, changed=False)
    if p["set_facts"]:
        result["ansible_facts"] = {"gpuserve_nvidia": facts}
    try:
        if p["node"]:
            result["node"] = read_node_facts(p["lib_dirs"], p["free_path"], p["dkms_binary"], p["dkms_version"],
                                             p["timeout"])
    except GpuReadError as exc:
        module.fail_json(msg=str(exc))
    if p["metrics_file"] and not module.check_mode:
        write_textfile(p["metrics_file"], gpu_metrics(p["metrics_node"] or platform.node(), facts))
    wanted = {"driver": ("ok", "no_gpu"), "gpu": ("ok",)}.get(p["require"])
    if wanted and facts["state"] not in wanted:
        module.fail_json(msg="require=%s: %s (%s). %s" % (p["require"], facts["message"], facts["state"], facts["hint"]),
                         **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
