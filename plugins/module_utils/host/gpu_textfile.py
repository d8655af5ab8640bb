# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The node's GPUs for Prometheus, kept fresh: the nvidia_driver role (``nvidia_driver_metrics``) copies this package
to the node and a systemd timer runs, every ``nvidia_driver_metrics_interval`` seconds,

    python3 -m gpuserve_host.gpu_textfile --node pve1 --out /var/lib/prometheus/node-exporter/gpuserve_nvidia.prom

which reads the GPUs as nvidia_gpu_facts reads them (``read_gpus``: nvidia-smi bounded by ``--timeout``, the
driver's /proc files) and writes the families of its ``metrics_file`` (``gpu_metrics``) atomically. A GPU fallen off
the bus, or a driver mismatch after an upgrade, shows within one interval - a file written once at deploy would not.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import argparse
import shutil
import sys

from .exposition import write_textfile
from .gpus import GpuReadError, gpu_metrics, read_gpus


def refresh(out, node, smi="nvidia-smi", timeout=10, **paths):
    """Read the GPUs and replace ``out`` with their families; returns the facts read (their state says how it went:
    a node without a driver or a hanging nvidia-smi is a state, written as such, never an exception)."""
    smi = smi if "/" in smi else shutil.which(smi)
    facts = read_gpus(smi, timeout, **paths)
    write_textfile(out, gpu_metrics(node, facts))
    return facts


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python3 -m gpuserve_host.gpu_textfile",
                                     description="Write the node's GPUs for the node exporter's textfile collector.")
    parser.add_argument("--node", required=True, help="the node label (the inventory's name of the node)")
    parser.add_argument("--out", required=True, help="the .prom file to replace")
    parser.add_argument("--nvidia-smi", default="nvidia-smi", help="nvidia-smi, by name (on PATH) or path")
    parser.add_argument("--timeout", type=int, default=10, help="seconds nvidia-smi may take")
    args = parser.parse_args(argv)
    try:
        facts = refresh(args.out, args.node, args.nvidia_smi, args.timeout)
    except (GpuReadError, OSError) as exc:
        sys.stderr.write("gpu_textfile: %s\n" % exc)
        return 1
    sys.stdout.write("%s: state %s, %d GPU(s)\n" % (args.out, facts.get("state"), facts.get("gpu_count") or 0))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())   # run by the unit on the node, never by Ansible (modules exit through exit_json)
