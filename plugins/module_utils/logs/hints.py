# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What to do about a start-up failure, with the log's own numbers.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ..plan import static_rest_gb
from .rules import (MESSAGE_MAX, _GLOO_PEER_LOST, _RENDEZVOUS_MARKERS, _RE_FREE, _RE_GLOO_PEER, _RE_HTTP_STATUS,
                    _RE_INPUT_TOO_LONG, _RE_NO_MODULE, _RE_TRIED, _STORE_LOST_MARKERS, _STORE_SOCKET, _gb)


def _line_with(text, needle):
    for ln in text.splitlines():
        if needle in ln:
            return ln.strip()[:MESSAGE_MAX]
    return text.strip().splitlines()[-1][:MESSAGE_MAX] if text.strip() else ""


def _fmt(x):
    return ("%.2f" % x).rstrip("0").rstrip(".")


def _fmt_small(x):
    """Two decimals, or two significant digits below 0.01 (a fraction of 0.0001 is not 0)."""
    return _fmt(x) if x == 0 or abs(x) >= 0.01 else "%.2g" % x


def _kv_pool_hint(failure, facts, parser):
    mfs = facts.get("mem_fraction_static")
    m0 = facts.get("avail_mem_before_load_gb")
    m1 = facts.get("avail_mem_after_load_gb")
    w = facts.get("weights_gb")
    spec = bool(parser and parser.spec)
    parts = []
    if mfs is not None and m0 is not None and (m1 is not None or w is not None):
        if m1 is None:
            m1 = m0 - w
        weights = m0 - m1 if w is None else w
        rest = static_rest_gb(m0, m1, mfs)       # the planner's own budget arithmetic
        parts.append(
            "The static budget is mem_fraction_static x free memory = %s x %s = %s GiB%s; the weights "
            "took %s GiB, leaving %s GiB for the KV cache%s."
            % (_fmt_small(mfs), _fmt(m0), _fmt_small(mfs * m0),
               " of the machine's memory (--device cpu)" if facts.get("device") == "cpu" else " per GPU",
               _fmt_small(weights), _fmt_small(rest),
               " and the hybrid (mamba/GDN) state pools" if "mamba_cache_gb" in facts or spec else ""))
        profiled = facts.get("profiled_max_total_num_tokens")
        if profiled is not None and profiled <= 0:
            parts.append("SGLang's own profile of that room came to %d tokens: the pool is short by %d tokens "
                         "before even one fits." % (profiled, 1 - profiled))
        if facts.get("max_total_tokens_requested") is not None:
            parts.append("The cap --max-total-tokens %d does not help: SGLang takes the smaller of the cap and "
                         "what memory holds." % facts["max_total_tokens_requested"])
        need = weights / m0 if m0 else None
        if need is not None and rest <= 0:
            parts.append("Any mem_fraction_static at or below %s cannot hold the weights." % _fmt(need))
    elif mfs is not None:
        parts.append("mem_fraction_static was %s." % _fmt_small(mfs))
    parts.append(
        "Raise --mem-fraction-static (lowering it makes this worse), or shrink what sits in the budget: "
        "more GPUs (tp_size), a quantized checkpoint, and for hybrid GDN models with speculative decoding "
        "fewer --max-running-requests, fewer --speculative-num-draft-tokens or --mamba-ssm-dtype bfloat16. "
        "--context-length and --disable-cuda-graph do not enter this budget. "
        "Run playbooks/plan.yml with these numbers to see each fix's token count.")
    return " ".join(parts)


def _weight_load_hint(failure, facts, parser):
    m0 = facts.get("avail_mem_before_load_gb")
    extra = " Free memory before loading was %s GiB per GPU." % _fmt(m0) if m0 is not None else ""
    return ("The weights did not fit on the GPU while loading." + extra + " Use more GPUs (raise tp_size), a "
            "quantized checkpoint, or free the GPU (check nvidia-smi for other processes).")


def _cuda_graph_hint(failure, facts, parser):
    mfs = facts.get("mem_fraction_static")
    bs = parser.cuda_graph_max_bs if parser else None
    now_mfs = " (now %s)" % _fmt(mfs) if mfs is not None else ""
    now_bs = " (now %s)" % bs if bs else ""
    return ("CUDA-graph capture ran out of memory in the (1 - mem_fraction_static) headroom. Lower "
            "--mem-fraction-static%s or --cuda-graph-max-bs%s; --disable-cuda-graph is the last resort."
            % (now_mfs, now_bs))


def _cuda_oom_hint(failure, facts, parser):
    msg = failure.get("message") or ""
    mfs = facts.get("mem_fraction_static")
    tm = _RE_TRIED.search(msg)
    fm = _RE_FREE.search(msg)
    nums = ""
    if tm:
        nums += " It tried to allocate %s GiB" % _fmt(_gb(tm.group(1), tm.group(2)))
        if fm:
            nums += " with %s GiB free" % _fmt(_gb(fm.group(1), fm.group(2)))
        nums += "."
    where = "the draft model (weights, KV and graphs come out of the headroom)" if failure.get(
        "phase") == "draft" else "activations, graphs or workspaces"
    return ("CUDA ran out of memory for %s.%s Lower --mem-fraction-static to leave more headroom%s, or lower "
            "--chunked-prefill-size / --cuda-graph-max-bs." % (where, nums, " (now %s)" % _fmt(mfs) if mfs else ""))


def _port_hint(failure, facts, parser):
    port = parser.port if parser and parser.port else None
    return ("The HTTP port%s is already taken. Find its owner with `ss -ltnp 'sport = :%s'`, stop it or set "
            "another port." % (" %d" % port if port else "", port if port else "PORT"))


def _import_hint(failure, facts, parser):
    mm = _RE_NO_MODULE.search(failure.get("message") or "")
    what = "module '%s' is missing" % mm.group(1) if mm else "a compiled package failed to load"
    return ("The Python environment is broken: %s. Rebuild it with the sglang_venv role (pinned sglang 0.5.9, "
            "torch 2.9.1, sgl-kernel 0.3.21, flashinfer 0.6.3) and check that flash-attn/sgl-kernel wheels "
            "match torch, CUDA and the Python ABI." % what)


def _nccl_hint(failure, facts, parser):
    msg = failure.get("message") or ""
    if any(mk in msg for mk in _STORE_LOST_MARKERS) and any(mk in msg for mk in _STORE_SOCKET):
        return ("This rank had reached rank 0's TCPStore at --dist-init-addr%s and lost the connection before the "
                "ranks had met: the process holding that port stopped, was restarted or died - often a rank 0 of an "
                "earlier launch, still running when this rank joined it, then stopped. Read rank 0's log of the same "
                "minute for its own failure, then stop every rank and start them together (deploy.yml does; "
                "status.yml prints the group's restart command); restarting one rank alone meets whatever rank 0 is "
                "running then." % (" (%s)" % parser.dist_init_addr if parser is not None and parser.dist_init_addr
                                   else ""))
    if "gloo/transport/tcp" in msg and any(mk in msg for mk in _GLOO_PEER_LOST):
        peer = _RE_GLOO_PEER.search(msg)
        return ("Another rank of this server went away: Gloo's connection to %s closed. SGLang 0.5.9's scheduler "
                "sends every loop's requests to the other ranks over Gloo, so when one rank dies or is stopped the "
                "others stop at their next broadcast - this rank's failure is the echo, not the cause. Find that rank's "
                "own failure - earlier in this log for a rank of this node; on another node in its log (status.yml "
                "names every rank down, with its last launch's failure) - then restart the ranks together (deploy.yml; "
                "status.yml prints the command for a multi-node group)." % (
                    "the rank at %s" % peer.group(1) if peer else "a peer rank"))
    if any(mk in msg for mk in _RENDEZVOUS_MARKERS):
        return ("The ranks never met at --dist-init-addr (torch's TCPStore on rank 0): a rank did not start, died "
                "before joining, cannot reach rank 0's address and port (firewall, route, wrong address), or the port "
                "is taken on rank 0 (also by a process of an earlier launch). Read the other ranks' logs for the "
                "first error, check a TCP connect from every rank to that port, and start all ranks together "
                "(deploy.yml does).")
    return ("NCCL / torch.distributed failed. Check that every GPU of the TP group is visible in the container "
            "(nvidia-smi), try NCCL_P2P_DISABLE=1 or --disable-custom-all-reduce on PCIe-only cards, and "
            "NCCL_DEBUG=INFO for the cause. If another rank logged an error first, fix that one.")


def _model_hint(failure, facts, parser):
    code = _RE_HTTP_STATUS.search(failure.get("message") or "")
    if code and code.group(1) in ("401", "403"):
        return ("The Hub refused the model (HTTP %s): the repo is gated or the token is missing/invalid. Accept "
                "the licence on the Hub and provide the token to hf_model (never on the command line)."
                % code.group(1))
    return ("The model path or repo id does not resolve. Point --model-path at the downloaded snapshot "
            "(hf_model role facts) or fix the repo id/revision.")


def _tp_hint(failure, facts, parser):
    tp = facts.get("tp_size")
    return ("tp_size%s must divide the model's attention heads, KV heads (or be a multiple) and expert sizes. "
            "Choose a tp_size that divides them (see config.json)." % (" (%d)" % tp if tp else ""))


def _hint_by_message(failure, facts):
    msg = failure.get("message") or ""
    mm = _RE_INPUT_TOO_LONG.search(msg)
    if failure["kind"] == "warmup_failed" and not mm:
        return ("SGLang loaded the model and listened, then its own warm-up request failed, so it never became ready: "
                "read the message and the traceback tail. A warm-up that times out is a server too slow for its first "
                "request (a large prefill, CUDA graphs still compiling); --skip-server-warmup starts without it, and "
                "the first real request meets the same problem.")
    if mm:
        pool = facts.get("max_total_num_tokens")
        return ("A request of %s tokens%s is longer than this launch takes (%s tokens): SGLang 0.5.9 allows an input "
                "of at most the smaller of context_length and the KV pool (max_total_num_tokens%s) less a few reserved "
                "tokens. Raise --max-total-tokens (or leave it unset so the pool is sized from memory) or "
                "--context-length; a pool smaller than the warm-up request never becomes ready."
                % (mm.group(1), " (the server's own warm-up)" if failure.get("phase") == "warmup" else "",
                   mm.group(2), "=%d" % pool if pool is not None else ""))
    for words, hint in _BY_MESSAGE:
        if all(w in msg for w in words):
            return hint
    return "See the message and the traceback tail; the log does not say more than this."


_BY_MESSAGE = (
    (("active drivers", "There should only be one"),
     "Triton found no driver for this device: a Triton kernel ran where no GPU is (with --device cpu, --page-size "
     "above 1 allocates through one at the first request, the warm-up). Use --page-size 1 on the CPU engine, or run "
     "on a GPU."),
    (("unbalanced",), "Free memory differs between the TP GPUs: another process holds memory on one of them. Free it "
                      "(nvidia-smi) or restart the container."),
    (("scheduler is dead",), "A scheduler process died without a Python error; exit code -9 usually means the OS OOM "
                             "killer (host RAM): check `dmesg -T | grep -i oom` and the container's memory limit."),
    (("died during initialization",), "A scheduler process died without a Python error; exit code -9 usually means "
                                      "the OS OOM killer (host RAM): check `dmesg -T | grep -i oom` and the "
                                      "container's memory limit."),
    (("out of memory",), "The KV pool was exhausted at run time: lower --max-running-requests or "
                         "--chunked-prefill-size, or give the pool more memory."),
)
