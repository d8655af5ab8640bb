# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The failure kinds of an SGLang start-up log, each declared once (``TABLE``), and the order in which an exception's
text is read into one (``CLASSIFIERS``). The parser, the handlers, the watch (``DECISIVE``), the hints and - compared
by tests/unit/test_sglang_log.py - role sglang_server's diagnose and module sglang_log_facts' documentation read them
from here. A new kind is one ``Kind`` (and a classifier when an exception names it) plus its fixture.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from collections import namedtuple

from .hints import (_cuda_graph_hint, _cuda_oom_hint, _hint_by_message, _import_hint, _kv_pool_hint, _line_with,
                    _model_hint, _nccl_hint, _port_hint, _tp_hint, _weight_load_hint)
from .rules import (_DRAFT_FRAMES, _GRAPH_FRAMES, _HUB_ACCESS, _IMPORT_MARKERS, _LOAD_FRAMES, _MODEL_MARKERS,
                    _NCCL_MARKERS, _OOM_MARKERS, _RE_ARCH, _RE_KV_OOM, _RE_KV_OOM_LATER, _tb_has, _tb_path_has)


def _unsupported_hint(failure, facts, parser):
    return ("SGLang 0.5.9 has no implementation for this architecture. Check the architectures in config.json, "
            "upgrade SGLang, or pass --trust-remote-code if the model ships its own code.")


def _bad_argument_hint(failure, facts, parser):
    return "A server argument was rejected: %s Fix it in sglang_server_args." % (failure.get("message") or "")


# name         the kind, as sglang_log_facts returns it
# specificity  how strongly it names a root cause: when several failures are logged (two TP ranks, the sigquit echo,
#              an NCCL error on the rank whose peer died) the most specific wins, ties to the earliest. NCCL errors
#              are often a consequence of a peer rank dying, hence ranked low
# phase        the phase it implies was reached (when only the error line was pasted), or None
# decisive     SGLang always dies of it before ready: the watch need not wait for the exit
# memory       a memory budget failed: diagnose replays the plan with the log's numbers
# prefixed     an SGLang-prefixed log line (no traceback) of this kind is a failure on its own
# hint         what to do, with the log's numbers (None: by the message, hints._hint_by_message)
# description  what it means, in sglang_log_facts' documentation
Kind = namedtuple("Kind", "name specificity phase decisive memory prefixed hint description")

TABLE = (
    Kind("kv_pool_oom", 9, "memory_pool", True, True, True, _kv_pool_hint,
         "the KV pool could not be built from what the weights left"),
    Kind("weight_load_oom", 9, "load_weights", False, True, True, _weight_load_hint, "out of GPU memory loading the weights"),
    Kind("cuda_graph_oom", 9, "cuda_graph", False, True, True, _cuda_graph_hint, "out of GPU memory capturing CUDA graphs"),
    Kind("cuda_oom", 7, None, False, True, True, _cuda_oom_hint, "out of GPU memory elsewhere"),
    Kind("port_in_use", 9, "http", False, False, False, _port_hint, "the server's port is taken"),
    Kind("import_error", 9, None, False, False, False, _import_hint, "a package did not import"),
    Kind("nccl_error", 4, "dist_init", False, False, True, _nccl_hint,
         "the ranks could not meet or lost each other (NCCL, Gloo, the rendezvous)"),
    Kind("model_not_found", 9, None, False, False, True, _model_hint, "the model's files are missing or not accessible"),
    Kind("unsupported_model", 8, None, False, False, True, _unsupported_hint, "SGLang has no such architecture"),
    Kind("tp_mismatch", 9, "load_weights", True, False, False, _tp_hint, "tp_size does not divide the model"),
    Kind("bad_argument", 9, None, True, False, False, _bad_argument_hint, "a server argument was rejected"),
    Kind("warmup_failed", 8, "warmup", False, False, False, None, "the server listened, its own warm-up request failed"),
    Kind("other", 2, None, False, False, False, None, "none of the above"),
)

BY_NAME = dict((k.name, k) for k in TABLE)
KINDS = tuple(k.name for k in TABLE)
SPECIFICITY = dict((k.name, k.specificity) for k in TABLE)
KIND_PHASE = dict((k.name, k.phase) for k in TABLE if k.phase)
DECISIVE = frozenset(k.name for k in TABLE if k.decisive)
MEMORY = tuple(k.name for k in TABLE if k.memory)
PREFIXED = frozenset(k.name for k in TABLE if k.prefixed)


def hint_for(failure, facts, parser=None):
    """What to do about a failure, with the log's numbers where it has them: by its kind, else by its message."""
    kind = BY_NAME.get(failure["kind"])
    if kind is not None and kind.hint is not None:
        return kind.hint(failure, facts, parser)
    return _hint_by_message(failure, facts)


# -- what an exception's text is: the classifiers, in order; the first that knows the text names the kind ---------
# each takes (text, frames, phase) and returns None or (kind, decisive message, facts read from the text)

def _kv_pool_error(text, frames, phase):
    m = _RE_KV_OOM.search(text)
    if m:
        return "kv_pool_oom", m.group(0), ({"mem_fraction_static": float(m.group(1).rstrip("."))} if m.group(1) else {})
    m = _RE_KV_OOM_LATER.search(text)
    if m:      # the fraction read from the error: authoritative
        return "kv_pool_oom", _line_with(text, "Loaded weights leave"), {"mem_fraction_static": float(m.group(1))}
    if "Not enough GPU memory for hybrid" in text or "Memory pool size is too small" in text:
        return "kv_pool_oom", _line_with(text, "memory"), {}
    if "state cache is too small to serve any requests" in text:
        # 0.5.2x: the hybrid (mamba/linear-attention) state pool leaves no request slot
        return "kv_pool_oom", _line_with(text, "too small to serve"), {}
    if "KV" in text and ("leaves no room for the full KV pool" in text or "no memory for the KV cache" in text
                         or "no memory left for the KV cache" in text):
        # later releases' wordings of the same budget failure (0.5.2x pool_configurator: the SWA pool cap)
        return "kv_pool_oom", _line_with(text, "KV"), {}
    return None


def _gpu_oom(text, frames, phase):
    """Out of GPU memory: where it happened decides the kind (the draft model's, a graph capture, the weights)."""
    for mk in _OOM_MARKERS:
        if mk in text:
            msg = _line_with(text, mk)
            if phase == "draft" or _tb_has(frames, _DRAFT_FRAMES):
                return "cuda_oom", msg, {}
            if "Capture cuda graph failed" in text or _tb_has(frames, _GRAPH_FRAMES) or phase == "cuda_graph":
                return "cuda_graph_oom", msg, {}
            if _tb_has(frames, _LOAD_FRAMES) or phase == "load_weights":
                return "weight_load_oom", msg, {}
            return "cuda_oom", msg, {}
    return None


def _port(text, frames, phase):
    if "address already in use" in text or "Errno 98" in text:
        return "port_in_use", _line_with(text, "address already in use"), {}
    return None


def _markers(kind, markers, when=None):
    def classify(text, frames, phase):
        for mk in markers:
            if mk in text and (when is None or when(mk, text)):
                return kind, _line_with(text, mk), {}
        return None
    return classify


def _architecture(text, frames, phase):
    if _RE_ARCH.search(text):
        return "unsupported_model", _line_with(text, "not supported") or _line_with(text, "SGlang"), {}
    return None


def _divisibility(text, frames, phase):
    if "is not divisible by" in text or "must be divisible by" in text and "moe" in text.lower():
        return "tp_mismatch", _line_with(text, "divisible"), {}
    if text.startswith("AssertionError") and text.strip() == "AssertionError" and (
            _tb_has(frames, ("__init__",)) and _tb_path_has(frames, ("/models/",))):
        return "tp_mismatch", "AssertionError in model init (a head count is not divisible by tp_size)", {}
    return None


def _argument(text, frames, phase):
    if "must be divisible by" in text or "cannot contain a colon" in text or "invalid choice" in text:
        return "bad_argument", text.splitlines()[-1], {}
    return None


def _graph_capture(text, frames, phase):
    if "Capture cuda graph failed" in text:
        return "other", _line_with(text, "Capture cuda graph failed"), {}
    return None


CLASSIFIERS = (
    _kv_pool_error,
    _gpu_oom,
    _port,
    # the ranks lost each other; a graph-capture failure around it is only the wrapper
    _markers("nccl_error", ("gloo/transport/tcp", "ProcessGroupGloo", "Gloo connectFullMesh failed")),
    _markers("import_error", _IMPORT_MARKERS),
    _markers("model_not_found", _MODEL_MARKERS),
    _markers("model_not_found", _HUB_ACCESS, lambda mk, text: "Access to model" != mk or "is restricted" in text),
    _architecture,
    _divisibility,
    _argument,
    _markers("nccl_error", _NCCL_MARKERS),
    _graph_capture,
)


def classify(text, frames, phase):
    """(kind, decisive message, facts read from the text) for an exception's text and frames, or (None, None, {})."""
    if text:
        for classifier in CLASSIFIERS:
            found = classifier(text, frames, phase)
            if found:
                return found
    return None, None, {}
