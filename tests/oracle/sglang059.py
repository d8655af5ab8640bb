"""SGLang 0.5.9's own memory arithmetic, run from the wheel's source (see stubs.py for how it is made importable).

For one scenario - a model config (a config.json dict), server args, the GPU's total memory (MiB) and two measured
numbers, the free memory after the distributed init (M0, GiB) and after the weights are loaded (M1, GiB) - this runs:

- ``ServerArgs(**args).__post_init__`` (the real one): defaults by GPU size, the automatic mem_fraction_static with all
  its adjustments (multimodal, piecewise CUDA graphs, DP attention, speculative reserves), speculative defaults,
  per-model adjustments (radix cache off for hybrid models with speculative decoding, max_running_requests 48, ...);
- ``ModelConfig.from_server_args`` (the real one): head dims, KV heads per TP rank, MLA, hybrid SWA and linear
  attention layer ids, multimodal on/off, context length;
- ``ModelRunnerKVCacheMixin.init_memory_pool`` (the real one) on a runner whose few attributes are set the way
  ``ModelRunner.__init__``/``initialize`` set them - those statements are themselves taken from model_runner.py's
  source with ``ast`` and run, not rewritten: the layer counts, the KV cache dtype, the mamba/hybrid config
  properties, and max_running_requests. The pool constructors are replaced by a recorder that stops the run when
  the first pool would be allocated (by then every size is decided).

With pp_size > 1 each pipeline stage is run with its layer range from the wheel's own ``get_pp_indices`` (as a
model's ``make_layers`` takes it) and the ``all_reduce(MIN)`` of init_memory_pool answers the smallest stage's pool
(stubs.PP); ``check_server_args`` (what a launch runs first) is run for every scenario.

The only inputs not from SGLang: get_device_memory_capacity() answers the scenario's GPU memory,
get_available_gpu_memory() answers M1, get_attention_tp_size() answers tp // dp (DP attention) or tp, and
torch.cuda answers like an sm86 GPU; the model's quant_config carries the config's kv_cache_quant_algo.
"""
import ast
import importlib
import logging
import os
import types

import stubs

RUNNER_METHODS = ("qwen3_next_config", "hybrid_lightning_config", "hybrid_gdn_config", "mamba2_config",
                  "kimi_linear_config", "mambaish_config", "configure_kv_cache_dtype")


class _PoolReached(Exception):
    pass


class _FirstPool(object):
    """Stands for ReqToTokenPool & co.: records the size SGLang asks for, then stops init_memory_pool."""
    seen = {}

    def __init__(self, *a, **k):
        _FirstPool.seen = dict(k)
        raise _PoolReached()


def _free_names(nodes):
    names = set()
    for node in nodes:
        for n in ast.walk(node):
            if isinstance(n, ast.Name):
                names.add(n.id)
    return names


class SGLang059(object):
    version = "0.5.9"

    def __init__(self, site):
        stubs.install(site)
        logging.disable(logging.CRITICAL)
        os.environ.setdefault("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", "0")
        self.site = site
        self.hf = importlib.import_module("sglang.srt.utils.hf_transformers_utils")
        self.mc = importlib.import_module("sglang.srt.configs.model_config")
        self.sa = importlib.import_module("sglang.srt.server_args")
        self.mx = importlib.import_module("sglang.srt.model_executor.model_runner_kv_cache_mixin")
        self.spec = importlib.import_module("sglang.srt.speculative.spec_info")
        self._config = None
        self._gpu_mem = None
        self._m1 = None
        self._attn_tp = 1
        self.mc.get_config = self._get_config
        self.mc.get_generation_config = lambda *a, **k: None
        self.sa.get_device_memory_capacity = lambda *a, **k: self._gpu_mem
        self.mx.get_available_gpu_memory = lambda *a, **k: self._m1
        self.mx.get_attention_tp_size = lambda: self._attn_tp
        self.mx.get_world_group = lambda: types.SimpleNamespace(world_size=1, cpu_group=None)
        # the process groups SGLang would have initialised: attention TP size = tp // dp (DP attention) or tp
        ps = importlib.import_module("sglang.srt.distributed.parallel_state")
        oracle = self

        class _Group(object):
            rank_in_group = 0
            cpu_group = None

            def __init__(self, size):
                self._size = size

            @property
            def world_size(self):
                return self._size()
        ps._ATTN_TP = _Group(lambda: oracle._attn_tp)
        ps._TP = _Group(lambda: oracle._tp)
        self._tp = 1
        for name in ("ReqToTokenPool", "HybridReqToTokenPool", "MHATokenToKVPool", "MLATokenToKVPool",
                     "NSATokenToKVPool", "SWAKVPool", "HybridLinearKVPool", "DoubleSparseTokenToKVPool",
                     "MHATokenToKVPoolFP4", "MLATokenToKVPoolFP4"):
            setattr(self.mx, name, _FirstPool)
        self.Runner, self._layers, self._max_running = self._runner_parts()
        self.pp_indices = importlib.import_module("sglang.srt.distributed.utils").get_pp_indices

    # -- the parts of ModelRunner, from its source ------------------------------------------------
    def _runner_parts(self):
        path = os.path.join(self.site, "sglang", "srt", "model_executor", "model_runner.py")
        with open(path) as f:
            tree = ast.parse(f.read(), path)
        imports, assigns = {}, {}
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                for a in node.names:
                    imports[a.asname or a.name] = (node.module, a.name)
            elif isinstance(node, ast.Import):
                for a in node.names:
                    imports[a.asname or a.name.split(".")[0]] = (a.name if a.asname else a.name.split(".")[0], None)
            elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                assigns[node.targets[0].id] = node
        cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ModelRunner")
        funcs = dict((n.name, n) for n in cls.body if isinstance(n, ast.FunctionDef))
        init_body = funcs["initialize"].body
        # ModelRunner.initialize: from "model_has_mtp_layers = ..." to the full/SWA layer ids written back
        start = next(i for i, s in enumerate(init_body) if isinstance(s, ast.Assign)
                     and getattr(s.targets[0], "id", None) == "model_has_mtp_layers")
        end = next(i for i, s in enumerate(init_body) if isinstance(s, ast.Assign)
                   and ast.unparse(s.targets[0]) == "self.model_config.full_attention_layer_ids")
        # initialize() begins with "server_args = self.server_args"; the slices below read that local
        prologue = [s for s in init_body[:start] if isinstance(s, ast.Assign) and ast.unparse(s) == "server_args = self.server_args"]
        layers = ast.FunctionDef(name="_layers", args=funcs["initialize"].args, body=prologue + init_body[start:end + 1],
                                 decorator_list=[], returns=None, type_comment=None)
        maxrun = next(s for s in init_body if isinstance(s, ast.Assign)
                      and ast.unparse(s.targets[0]) == "self.max_running_requests")
        maxrun_fn = ast.FunctionDef(name="_max_running", args=funcs["initialize"].args, body=prologue + [maxrun],
                                    decorator_list=[], returns=None, type_comment=None)
        wanted = [funcs[n] for n in RUNNER_METHODS] + [layers, maxrun_fn]

        def resolve(name):
            mod, attr = imports[name]
            m = importlib.import_module(mod)
            ns[name] = m if attr is None else getattr(m, attr)

        ns = {"__name__": "sglang.srt.model_executor.model_runner", "logger": logging.getLogger("oracle")}
        todo = _free_names(wanted)
        done = set()
        while todo - done:
            name = (todo - done).pop()
            done.add(name)
            if name in imports:
                resolve(name)
            elif name in assigns:
                todo |= _free_names([assigns[name].value])
                for dep in _free_names([assigns[name].value]) - done:
                    done.add(dep)
                    if dep in imports:
                        resolve(dep)
                exec(compile(ast.Module(body=[assigns[name]], type_ignores=[]), path, "exec"), ns)
        for fn in wanted:
            fn.decorator_list = []
            exec(compile(ast.fix_missing_locations(ast.Module(body=[fn], type_ignores=[])), path, "exec"), ns)
        attrs = {}
        for n in RUNNER_METHODS:
            attrs[n] = ns[n] if n == "configure_kv_cache_dtype" else property(ns[n])
        runner = type("OracleModelRunner", (self.mx.ModelRunnerKVCacheMixin,), attrs)
        return runner, ns["_layers"], ns["_max_running"]

    def _get_config(self, model, trust_remote_code=False, revision=None, model_override_args=None, **kw):
        d = dict(self._config)
        cls = self.hf._CONFIG_REGISTRY.get(d.get("model_type"), stubs.PretrainedConfig)
        return cls(**d)

    # -- one scenario ------------------------------------------------------------------------------
    def run(self, config, args, gpu_mem_mib, m0, m1):
        """SGLang's own answer: a dict, or {'error': ...} when SGLang itself refuses the args. With pp_size > 1 every
        pipeline stage runs (its layer range from the wheel's own get_pp_indices, as the model's make_layers takes
        it): once to learn each stage's count, then again with the all_reduce(MIN) answering the smallest; the
        answer is stage 0's (what rank 0 logs), with every stage's count in pp_stages."""
        pp = int(args.get("pp_size") or 1)
        if pp == 1:
            return self._run(config, args, gpu_mem_mib, m0, m1, None)
        stubs.PP["seen"], stubs.PP["min"] = [], None
        first = [self._run(config, args, gpu_mem_mib, m0, m1, r) for r in range(pp)]
        if any("error" in o for o in first) or not stubs.PP["seen"]:
            return first[0]
        stubs.PP["min"] = min(stubs.PP["seen"])
        try:
            stages = [self._run(config, args, gpu_mem_mib, m0, m1, r) for r in range(pp)]
        finally:
            stubs.PP["min"] = None
        out = dict(stages[0])
        out["pp_stages"] = [o.get("max_total_num_tokens") for o in first]
        if any(o.get("outcome") == "kv_pool_oom" for o in stages):
            out["outcome"] = "kv_pool_oom"
        return out

    def _run(self, config, args, gpu_mem_mib, m0, m1, pp_rank):
        self._config = config
        self._gpu_mem = gpu_mem_mib
        self._m1 = m1
        sargs = dict(args)
        try:
            server_args = self.sa.ServerArgs(model_path="/oracle/model", **sargs)
            # what entrypoints/engine.py runs before launching anything
            server_args.check_server_args()
        except (ValueError, AssertionError, TypeError, RuntimeError) as e:
            return {"error": "ServerArgs: %s: %s" % (type(e).__name__, e)}
        out = {"mem_fraction_static": server_args.mem_fraction_static,
               "chunked_prefill_size": server_args.chunked_prefill_size,
               "cuda_graph_max_bs": server_args.cuda_graph_max_bs,
               "speculative": None if server_args.speculative_algorithm is None else {
                   "algorithm": server_args.speculative_algorithm,
                   "num_steps": server_args.speculative_num_steps,
                   "eagle_topk": server_args.speculative_eagle_topk,
                   "num_draft_tokens": server_args.speculative_num_draft_tokens},
               "disable_radix_cache": server_args.disable_radix_cache,
               "page_size": server_args.page_size}
        model_config = self.mc.ModelConfig.from_server_args(server_args)
        r = self.Runner.__new__(self.Runner)
        r.model_config = model_config
        r.server_args = server_args
        r.tp_size, r.pp_size = server_args.tp_size, server_args.pp_size
        r.dp_size = server_args.dp_size if server_args.enable_dp_attention else 1
        self._attn_tp = server_args.tp_size // r.dp_size
        self._tp = server_args.tp_size
        r.mem_fraction_static = server_args.mem_fraction_static
        r.is_draft_worker = False
        r.spec_algorithm = self.spec.SpeculativeAlgorithm.from_string(server_args.speculative_algorithm)
        r.is_hybrid_swa = model_config.is_hybrid_swa
        r.use_mla_backend = model_config.attention_arch == self.mc.AttentionArch.MLA
        r.dtype = model_config.dtype
        r.device, r.gpu_id, r.page_size = "cuda", 0, server_args.page_size
        qc = config.get("quantization_config") or (config.get("text_config") or {}).get("quantization_config") or {}
        r.model = types.SimpleNamespace(quant_config=types.SimpleNamespace(
            kv_cache_quant_algo=qc.get("kv_cache_quant_algo")))
        if pp_rank is not None:
            r.pp_rank = pp_rank
            r.model.start_layer, r.model.end_layer = self.pp_indices(
                model_config.hf_text_config.num_hidden_layers, pp_rank, server_args.pp_size)
        r.req_to_token_pool = None
        # model_runner.py:1021-1031 without a model object (the model's own window method only sets its value,
        # which the pool sizing asserts positive and does not otherwise read)
        if model_config.is_hybrid_swa and model_config.sliding_window_size is not None:
            r.sliding_window_size = model_config.sliding_window_size
        else:
            r.sliding_window_size = model_config.attention_chunk_size
        try:
            self._layers(r, m0)
        except AssertionError as e:     # "PP is not compatible with MTP models." (speculative decoding with PP)
            return {"error": "ModelRunner.initialize: AssertionError: %s" % e}
        r.configure_kv_cache_dtype()
        _FirstPool.seen = {}
        out["kv_cache_dtype"] = repr(r.kv_cache_dtype)
        try:
            r.init_memory_pool(m0)
        except _PoolReached:
            pass
        except RuntimeError as e:
            if "Not enough memory" not in str(e):
                raise
            out.update(outcome="kv_pool_oom", max_total_num_tokens=r.max_total_num_tokens)
            return out
        out.update(outcome="ok", max_total_num_tokens=r.max_total_num_tokens,
                   req_to_token_pool_size=_FirstPool.seen.get("size"),
                   max_mamba_cache_size=server_args.max_mamba_cache_size if r.mambaish_config is not None else None,
                   context_length=model_config.context_len,
                   swa_max_total_num_tokens=getattr(r, "swa_max_total_num_tokens", None))
        r.req_to_token_pool = types.SimpleNamespace(size=_FirstPool.seen.get("size"))
        self._max_running(r, m0)
        out["max_running_requests"] = r.max_running_requests
        return out
