"""SGLang 0.5.23's own memory arithmetic, run from the wheel's source (stubs.configure("0.5.23") says what stands in).

0.5.23 restructured what 0.5.9 kept in three places; its pieces are callable on their own, so no source is sliced:

- ``ServerArgs(**args).resolve_once()`` (the real one: construction no longer resolves) runs the resolution pipeline
  of ``arg_groups`` - the GPU-size defaults and the automatic mem_fraction_static of ``memory_hook``, the cuda graph
  configuration, speculative and per-model hooks, validation; ``overrides.resolved_view`` reads the result;
- the runtime context is published from it (``get_context().set_server_args``), as a launch does;
- ``ModelConfig.from_server_args``, ``resolve_layer_indices``, ``configure_kv_cache_dtype``,
  ``resolve_sliding_window_size`` and ``resolve_spec_aux_hidden_state_config`` (the model runner's components);
- ``KVCacheConfigurator._resolve_memory_pool_config`` (the real one) sizes the pools from the measured memory, and
  ``_build_req_to_token_pool`` is asked for the request pool, whose class is replaced by a recorder.

The only inputs not from SGLang: get_device_memory_capacity() answers the scenario's GPU memory,
get_available_gpu_memory() answers M1, the WORLD group is a single-process one, the model object is a namespace
with its layer range and the config's kv_cache_quant_algo, and torch.cuda answers like an sm86 GPU.

The scenarios are 0.5.9's, in 0.5.23's words (RENAMED): --cuda-graph-max-bs became --cuda-graph-max-bs-decode, and
so on; --enable-piecewise-cuda-graph (0.5.9's opt-in prefill graph) is 0.5.23's default prefill backend.
"""
import ast
import importlib
import logging
import os
import types

import scenarios
import stubs

# 0.5.9's server args by their 0.5.23 names (None: gone, the default does what it asked)
RENAMED = {"cuda_graph_max_bs": "cuda_graph_max_bs_decode", "cuda_graph_bs": "cuda_graph_bs_decode",
           "mamba_scheduler_strategy": "mamba_radix_cache_strategy", "enable_piecewise_cuda_graph": None}


def in_0523_words(args):
    out = {}
    for k, v in args.items():
        if k in RENAMED:
            if RENAMED[k] is not None:
                out[RENAMED[k]] = v
        else:
            out[k] = v
    return out


# The model classes whose get_attention_sliding_window_size() the runner asks (resolve_sliding_window_size): the
# module-level function of their file, on the text config, read from the wheel's source by ast (the model modules
# themselves need torch). Gemma3ForConditionalGeneration asks its language model, Gemma3ForCausalLM.
WINDOW_METHODS = {"GptOssForCausalLM": "gpt_oss", "Gemma2ForCausalLM": "gemma2", "Gemma3ForCausalLM": "gemma3_causal",
                  "Gemma3ForConditionalGeneration": "gemma3_causal"}


def window_function(site, module):
    path = os.path.join(site, "sglang", "srt", "models", module + ".py")
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "get_attention_sliding_window_size")
    ns = {}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), path, "exec"), ns)
    return ns[fn.name]


class _Recorded(Exception):
    pass


class _RequestPool(object):
    """Stands for the request pools: records the size SGLang asks for, then stops."""
    seen = {}

    def __init__(self, *a, **k):
        _RequestPool.seen = dict(k)
        raise _Recorded()


class SGLang0523(object):
    version = "0.5.23"

    def __init__(self, site, deps):
        self._config = None
        self._gpu_mem = None
        self._m1 = None
        stubs.configure(self.version, patches={"sglang.srt.utils.hf_transformers.config": dict(
            get_config=self._get_config, get_generation_config=lambda *a, **k: None)})
        stubs.install(site, deps)
        logging.disable(logging.CRITICAL)
        os.environ.setdefault("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", "0")
        imp = importlib.import_module
        self.sa = imp("sglang.srt.server_args")
        self.ov = imp("sglang.srt.arg_groups.overrides")
        self.rc = imp("sglang.srt.runtime_context")
        self.mc = imp("sglang.srt.configs.model_config")
        self.kvc = imp("sglang.srt.mem_cache.kv_cache_configurator")
        self.kvd = imp("sglang.srt.mem_cache.kv_cache_dtype")
        self.layers = imp("sglang.srt.model_executor.model_runner_components.layer_setup")
        self.load = imp("sglang.srt.model_executor.model_runner_components.load_model_utils")
        self.aux = imp("sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state")
        self.spec = imp("sglang.srt.speculative.spec_info")
        self.common = imp("sglang.srt.utils.hf_transformers.common")
        imp("sglang.srt.arg_groups.memory_hook").get_device_memory_capacity = lambda *a, **k: self._gpu_mem
        self.kvc.get_available_gpu_memory = lambda *a, **k: self._m1
        for name in ("ReqToTokenPool", "HybridReqToTokenPool", "DecodeReqToTokenPool",
                     "HybridMambaDecodeReqToTokenPool"):
            if hasattr(self.kvc, name):
                setattr(self.kvc, name, _RequestPool)
        self.windows = dict((arch, window_function(site, module)) for arch, module in WINDOW_METHODS.items())
        self.rc.get_parallel().override_permanently(world_group=types.SimpleNamespace(cpu_group=None, world_size=1))

    def _get_config(self, model, trust_remote_code=False, revision=None, model_override_args=None, **kw):
        # the separate draft model of a scenario (speculative_draft_model_path) has its own config
        d = dict(scenarios.draft_config(self._config) if str(model) == "/oracle/draft" else self._config)
        cls = self.common._CONFIG_REGISTRY.get(d.get("model_type"), stubs.PretrainedConfig)
        return cls(**d)

    def run(self, config, args, gpu_mem_mib, m0, m1):
        """SGLang's own answer: a dict, or {'error': ...} when SGLang itself refuses the args."""
        if int(args.get("pp_size") or 1) > 1:
            return {"skipped": "pipeline stages are not run for 0.5.23 yet"}
        self._config, self._gpu_mem, self._m1 = config, gpu_mem_mib, m1
        try:
            server_args = self.sa.ServerArgs(model_path="/oracle/model", **in_0523_words(args))
            server_args.resolve_once()
        except (ValueError, AssertionError, TypeError, RuntimeError, NotImplementedError) as e:
            return {"error": "ServerArgs: %s: %s" % (type(e).__name__, e)}
        r = self.ov.resolved_view(server_args)
        algo_name = r.speculative_algorithm
        out = {"mem_fraction_static": r.mem_fraction_static, "chunked_prefill_size": r.chunked_prefill_size,
               "cuda_graph_max_bs": r.cuda_graph_config.decode.max_bs,
               "speculative": None if algo_name is None else {
                   "algorithm": algo_name, "num_steps": r.speculative_num_steps,
                   "eagle_topk": r.speculative_eagle_topk, "num_draft_tokens": r.speculative_num_draft_tokens},
               "disable_radix_cache": r.disable_radix_cache, "page_size": r.page_size}
        self.rc.get_context().set_server_args(server_args)
        model_config = self.mc.ModelConfig.from_server_args(server_args)
        algo = self.spec.SpeculativeAlgorithm.from_string(algo_name)
        qc = config.get("quantization_config") or (config.get("text_config") or {}).get("quantization_config") or {}
        model = types.SimpleNamespace(start_layer=0, end_layer=model_config.hf_text_config.num_hidden_layers,
                                      quant_config=types.SimpleNamespace(
                                          kv_cache_quant_algo=qc.get("kv_cache_quant_algo")))
        window = self.windows.get((config.get("architectures") or [""])[0])
        if window is not None:
            text_config = model_config.hf_text_config
            model.get_attention_sliding_window_size = lambda: window(text_config)
        layer_info = self.layers.resolve_layer_indices(model=model, model_config=model_config, is_draft_worker=False)
        kv_dtype_str, kv_dtype = self.kvd.configure_kv_cache_dtype(
            server_args_kv_cache_dtype=self.rc.get_model().kv_cache_dtype, model=model,
            model_dtype=model_config.dtype, is_draft_worker=False, is_dflash=False,
            speculative_draft_attention_backend=None,
            speculative_draft_kv_cache_dtype=self.rc.get_spec().speculative_draft_kv_cache_dtype)
        out["kv_cache_dtype"] = repr(kv_dtype)
        aux = self.aux.resolve_spec_aux_hidden_state_config(server_args=server_args, model_config=model_config,
                                                            spec_algorithm=algo, is_draft_worker=False)
        k = self.kvc.KVCacheConfigurator(
            device="cuda", gpu_id=0, attn_dp_size=self.rc.get_parallel().attn_dp_size, pp_size=1, pp_group=None,
            model=model, model_config=model_config, server_args=server_args, kv_cache_dtype=kv_dtype,
            kv_cache_dtype_str=kv_dtype_str, model_dtype=model_config.dtype,
            page_size=self.rc.get_schedule().page_size,
            sliding_window_size=self.load.resolve_sliding_window_size(model, model_config), spec_algorithm=algo,
            is_draft_worker=False, post_capture_kv_active=False, spec_aux_config=aux, draft_parallel_layout=None,
            is_hybrid_swa=model_config.is_hybrid_swa, is_hybrid_swa_compress=model_config.is_hybrid_swa_compress,
            use_mla_backend=model_config.attention_arch == self.mc.AttentionArch.MLA, layer_info=layer_info,
            forward_stream=None, req_to_token_pool=None, token_to_kv_pool_allocator=None, memory_pool_config=None,
            draft_model_idx=None)
        try:
            pool = k._resolve_memory_pool_config(m0)
        except ValueError as e:
            if "cannot hold even one request" in str(e):        # validate_swa_pool_size: new in 0.5.23
                out.update(outcome="kv_pool_oom", max_total_num_tokens=None, why="SWA pool below one request")
                return out
            if "Loaded weights leave no GPU memory for the KV cache" not in str(e):
                raise
            out.update(outcome="kv_pool_oom", max_total_num_tokens=None)
            return out
        except RuntimeError as e:
            if "Not enough GPU memory for hybrid" not in str(e) and "state cache is too small" not in str(e):
                raise
            out.update(outcome="kv_pool_oom", max_total_num_tokens=None)
            return out
        sizes = k._derive_pool_sizes(config=pool)
        _RequestPool.seen = {}
        try:
            k._build_req_to_token_pool(max_num_reqs=sizes.max_running_requests)
        except _Recorded:
            pass
        out.update(outcome="ok", max_total_num_tokens=sizes.max_total_num_tokens,
                   req_to_token_pool_size=_RequestPool.seen.get("size"),
                   max_mamba_cache_size=self.rc.get_schedule().max_mamba_cache_size
                   if k.mambaish_config is not None else None,
                   context_length=model_config.context_len,
                   swa_max_total_num_tokens=sizes.swa_max_total_num_tokens,
                   max_running_requests=sizes.max_running_requests)
        return out
