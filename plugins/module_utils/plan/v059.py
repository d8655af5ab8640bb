# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""SGLang 0.5.9's rules at the steps where the releases differ (server_args._handle_gpu_memory_settings,
_handle_mamba_radix_cache, ModelRunner.profile_max_num_token / handle_max_mamba_cache / init_memory_pool; proved
against that code by tests/oracle, release 0.5.9). ``Rules`` answers each step for memory._Sizing; v0523.Rules
answers the same steps for 0.5.23."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from .model import GIB, MAMBA_RADIX_ARCHS, bucket_defaults
from .sizes import auto_mem_fraction_static, cell_size, kv_dtype_bytes

RELEASE = "0.5.9"


class Rules(object):
    """0.5.9's answer at each step where 0.5.23 answers otherwise (v0523.Rules: the same methods)."""

    release = RELEASE
    eagle_tree_backends = ("flashinfer", "fa3")     # topk > 1 with page_size > 1: the backends that draft a tree

    def ngram_steps(self, steps, draft, topk):
        """NGRAM's speculative_num_steps: left as given (None when unset)."""
        return steps

    def args(self, args):
        """The launch's args in the planner's (0.5.9's) names: as given."""
        return args

    def buckets(self, gpu_mem, tp):
        """The GPU-size defaults of chunked_prefill_size and cuda_graph_max_bs."""
        return bucket_defaults(gpu_mem, tp)

    def decode_graph(self, graph_bs, a):
        return graph_bs

    def refusals(self, model, a):
        return None

    def auto_fraction(self, s, gpu_mem, chunked, graph_bs):
        """mem_fraction_static when not given: (fraction, reserved MiB)."""
        a, model = s.a, s.model
        return auto_mem_fraction_static(
            gpu_mem, s.tp, s.pp, chunked, graph_bs, s.algo, a.max_prefill_tokens, model, bool(a.language_only),
            a.enable_multimodal, bool(a.enable_piecewise_cuda_graph), bool(a.enable_dp_attention), int(a.dp_size))

    def kv_budget(self, s, rest):
        return rest

    def cells(self, s, stage_cells):
        """Each stage's KV cell per token (the draft's KV is a pool of its own in 0.5.9: see draft_kv_gb)."""
        return stage_cells

    def extra_buffer(self, model, a):
        return str(a.mamba_scheduler_strategy or "") == "extra_buffer"

    def radix_off_with_spec(self, model, extra_buffer):
        """_handle_mamba_radix_cache: no radix cache with speculative decoding, unless the extra buffer."""
        return model.arch in MAMBA_RADIX_ARCHS and not extra_buffer

    def mamba(self, s, rest):
        """handle_max_mamba_cache: the speculative reserve, then the state slots; what is left for the KV pool."""
        if s.algo is not None:
            s.spec_reserve = s.per_req * (int(s.max_running) // s.dp_div) * s.draft_tokens / GIB
            rest -= s.spec_reserve
        s.slots = self.mamba_slots(s, rest)
        s.mamba_gb = s.slots * s.per_req / GIB
        return rest - s.mamba_gb

    def mamba_slots(self, s, rest):
        a = s.a
        if a.max_mamba_cache_size is not None:
            return int(a.max_mamba_cache_size) // s.dp_div
        if s.radix_off and s.max_running is not None:
            return int(s.max_running) // s.dp_div
        r = float(a.mamba_full_memory_ratio)
        return int((rest * r / (1 + r) * GIB) // s.per_req)

    def requests(self, s):
        """The request slots (the req_to_token pool, from the profiled count before any cap), the caps and pages,
        the hybrid SWA split, and the running requests."""
        model, a, algo = s.model, s.a, s.algo
        if a.is_set("max_running_requests") or algo is not None:
            pool_reqs = int(s.max_running)
        else:
            pool_reqs = min(max(int(s.tokens / float(s.context_len) * 512), 2048), 4096)
        if model.hybrid_gdn:
            ratio = 1 if s.radix_off else 3 + ((1 if algo is not None else 2) if s.extra_buffer else 0)
            pool_reqs = min(pool_reqs, s.slots // ratio)
            if algo is not None and s.dp_attention:
                pool_reqs = min(pool_reqs, int(s.max_running) // s.dp_size)
        tokens = s.capped_tokens()
        if model.swa_layers:
            tokens = self.swa_split(s, tokens)
        if tokens > 0:
            s.max_reqs = min(tokens // 2 if not a.is_set("max_running_requests") and algo is None
                             else int(s.max_running) // s.dp_div, pool_reqs)
        else:
            s.max_reqs = pool_reqs
        s.tokens, s.pool_reqs = tokens, pool_reqs

    def swa_split(self, s, tokens):
        """set_num_tokens_hybrid_swa: the pool is split so that SWA layers hold swa_full_tokens_ratio x the full
        ones; the full layers' tokens (and s.swa_tokens)."""
        model, page = s.model, s.page
        kvh = max(1, model.kv_heads // s.attn_tp)
        per_token = kvh * (model.head_dim + model.v_head_dim) * kv_dtype_bytes(model, s.a)
        fl, sl = model.full_layers, model.swa_layers
        if fl == 0:
            s.swa_tokens = tokens
            return tokens
        ratio_swa = float(s.a.swa_full_tokens_ratio)
        total = tokens * (per_token * fl + per_token * sl)
        full = int(total / (per_token * fl + ratio_swa * per_token * sl))
        s.swa_tokens = int(full * ratio_swa) // page * page
        return full // page * page

    def draft_kv_gb(self, s):
        """The draft's own KV pool (as many tokens as the target's), outside the static pools."""
        return max(s.tokens, 0) * cell_size(s.model, s.a, s.tp, draft=True) / GIB
