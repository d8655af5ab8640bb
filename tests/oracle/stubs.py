"""Import SGLang's own Python source (0.5.9, 0.5.23) without torch, CUDA or transformers, for the planner's oracle.

Only the arithmetic is wanted (ServerArgs' defaults and automatic fraction, ModelConfig's derived shapes, the model
runner's pool sizing), but those modules import half of SGLang at load time. Three import hooks make that work with
the standard library alone:

- Stub: a third-party package (torch, transformers, numpy, ...) becomes a module whose every attribute is an inert
  stand-in (falsy, callable, subscriptable, usable as a base class). OVERRIDES give the few constants the arithmetic
  really reads: torch's dtypes and their sizes, torch.cuda answering like one Ampere GPU, torch's version, and a
  transformers.PretrainedConfig that stores its keyword arguments as attributes (what the config classes rely on).
- Patcher: a real SGLang module with one function replaced after it loads (CUDA custom-op registration).
- STUB_SG: SGLang modules that only supply parsers and registries the arithmetic never calls.

Nothing here decides a number: every number comes from SGLang's code; the stand-ins only make it importable.
Runs under `python -S` (no site-packages), so no real third-party package is picked up by accident.
"""
import importlib
import importlib.abc
import math
import importlib.machinery
import sys
import types

STUB_ROOTS = frozenset((
    "torch", "numpy", "tqdm", "pybase64", "requests", "IPython", "pydantic", "aiohttp", "transformers", "orjson",
    "psutil", "triton", "zmq", "packaging", "PIL", "starlette", "typing_extensions", "safetensors",
    "huggingface_hub", "regex", "torchvision", "dill", "sentencepiece", "sgl_kernel", "compressed_tensors", "gguf",
    "fastapi", "uvicorn", "uvloop", "msgspec", "setproctitle", "partial_json_parser", "xgrammar", "llguidance",
    "outlines", "openai", "prometheus_client", "interegular", "einops", "scipy", "modelscope", "torchao",
    "flashinfer", "blobfile", "tiktoken", "cuda", "pynvml", "nvidia", "datasets", "yaml", "soundfile", "decord",
))
STUB_SG = frozenset((
    "sglang.srt.function_call.function_call_parser", "sglang.srt.layers.attention.fla.chunk_delta_h",
    "sglang.srt.lora.lora_registry", "sglang.srt.parser.reasoning_parser",
))
# torch.npu & co. must not exist (SGLang probes them with hasattr and raises when "present but unavailable")
DENY = {"torch": frozenset(("npu", "xpu", "hpu", "musa", "mps"))}
CAPABILITY = [(8, 6)]          # what torch.cuda.get_device_capability() answers (sm86: RTX A6000)


class _Base(object):
    def __init__(self, *a, **k):
        pass

    def __init_subclass__(cls, **kw):
        pass


class PretrainedConfig(object):
    """transformers.PretrainedConfig as far as the arithmetic needs it: keyword arguments become attributes,
    attribute_map aliases work, nested *_config dicts become configs (as transformers' composite configs do)."""
    model_type = ""
    attribute_map = {}

    def __init_subclass__(cls, **kw):
        pass

    def __init__(self, **kwargs):
        # transformers 4.57 (the 0.5.9 lock's): torch_dtype is an alias of dtype, a string becomes a torch dtype
        dtype = kwargs.pop("dtype", None) or kwargs.pop("torch_dtype", None)
        kwargs.pop("torch_dtype", None)
        if isinstance(dtype, str):
            dtype = DTYPES.get(dtype, dtype)
        kwargs["dtype"] = dtype
        for k, v in kwargs.items():
            if isinstance(v, dict) and k.endswith("_config") and k != "quantization_config" and k != "rope_scaling":
                v = PretrainedConfig(**v)
            try:
                setattr(self, k, v)
            except AttributeError:
                pass

    def __getattribute__(self, k):
        amap = object.__getattribute__(self, "attribute_map")
        if k in amap:
            k = amap[k]
        return object.__getattribute__(self, k)

    def __setattr__(self, k, v):
        amap = type(self).attribute_map
        if k in amap:
            k = amap[k]
        object.__setattr__(self, k, v)

    @property
    def torch_dtype(self):
        return self.dtype

    def to_dict(self):
        return dict((k, v.to_dict() if isinstance(v, PretrainedConfig) else v) for k, v in vars(self).items())

    def get_text_config(self, decoder=False, **kw):
        return getattr(self, "text_config", None) or self


class _Stub(object):
    """Anything: falsy, zero, callable (as a decorator it returns what it decorates), a base class, a context."""

    def __init__(self, name="stub"):
        self.__name = name

    def __getattr__(self, k):
        if k.startswith("__") and k.endswith("__"):
            raise AttributeError(k)
        return _Stub(self.__name + "." + k)

    def __call__(self, *a, **k):
        if len(a) == 1 and callable(a[0]) and not k:
            return a[0]
        return _Stub(self.__name + "()")

    def __getitem__(self, k):
        return _Stub(self.__name + "[]")

    def __setitem__(self, k, v):
        pass

    def __mro_entries__(self, bases):
        return (_Base,)

    def __iter__(self):
        return iter(())

    def __bool__(self):
        return False

    def __int__(self):
        return 0

    __index__ = __int__

    def __float__(self):
        return 0.0

    def __eq__(self, o):
        return self is o

    def __hash__(self):
        return id(self)

    def __lt__(self, o):
        return False

    __gt__ = __le__ = __ge__ = __lt__

    def __len__(self):
        return 0

    def __contains__(self, o):
        return False

    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False

    def __repr__(self):
        return "<stub %s>" % self.__name

    def _same(self, *a):
        return self

    for _n in ("add", "radd", "mul", "rmul", "neg", "pos", "sub", "rsub", "truediv", "rtruediv", "floordiv",
               "rfloordiv", "mod", "rmod", "pow", "rpow", "and", "rand", "xor", "rxor", "lshift", "rshift", "abs",
               "invert", "or", "ror"):
        locals()["__%s__" % _n] = _same
    del _n


class StubModule(types.ModuleType):
    def __getattr__(self, k):
        if k.startswith("__") and k.endswith("__"):
            raise AttributeError(k)
        if k in DENY.get(self.__name__, ()):
            raise AttributeError(k)
        return _Stub(self.__name__ + "." + k)


class DType(object):
    """A torch dtype: a name and a size in bytes (torch._utils._element_size reads itemsize)."""

    def __init__(self, name, size):
        self.name, self.itemsize = name, size

    def __repr__(self):
        return "torch." + self.name

    def __hash__(self):
        return hash(self.name)

    def __eq__(self, o):
        return isinstance(o, DType) and o.name == self.name

    def __ne__(self, o):
        return not self == o


_DT = dict(float16=2, bfloat16=2, float32=4, float64=8, half=2, float=4, int8=1, uint8=1, int32=4, int64=8,
           int16=2, float8_e4m3fn=1, float8_e5m2=1, float8_e4m3fnuz=1, float8_e5m2fnuz=1, float4_e2m1fn_x2=1, bool=1)
DTYPES = dict((k, DType(k, v)) for k, v in _DT.items())
DTYPES["half"], DTYPES["float"] = DTYPES["float16"], DTYPES["float32"]


class Tensor(object):
    """torch.tensor(int) as init_memory_pool uses it for the pipeline stages' all_reduce: a value and item()."""

    def __init__(self, value, dtype=None):
        self.value = value

    def item(self):
        return self.value


# The all_reduce(MIN) over the pipeline stages (init_memory_pool, pp_size > 1): the oracle runs each stage once to
# learn every stage's count (SEEN), then again with MIN set to the smallest - what the collective would answer.
PP = {"seen": [], "min": None}


def _all_reduce(tensor, op=None, group=None):
    PP["seen"].append(tensor.value)
    if PP["min"] is not None:
        tensor.value = min(tensor.value, PP["min"])


OVERRIDES = {
    # numpy: the two reductions the mamba state size uses (configs/mamba_utils.py)
    "numpy": dict(prod=lambda xs: math.prod(int(x) for x in xs), sum=lambda xs: sum(int(x) for x in xs)),
    "torch": dict(__version__="2.9.1", dtype=DType, tensor=Tensor, **DTYPES),
    "torch.distributed": dict(all_reduce=_all_reduce, ReduceOp=type("ReduceOp", (), dict(
        SUM=0, PRODUCT=1, MIN=2, MAX=3, BAND=4, BOR=5, BXOR=6, AVG=7, PREMUL_SUM=8))),
    "torch._utils": dict(_element_size=lambda d: d.itemsize),
    "torch.cuda": dict(is_available=lambda: True, get_device_capability=lambda *a, **k: CAPABILITY[0],
                       get_device_name=lambda *a, **k: "NVIDIA RTX A6000", device_count=lambda: 8,
                       is_initialized=lambda: False),
    "torch.version": dict(cuda="12.8", hip=None, __version__="2.9.1"),
    "transformers": dict(PretrainedConfig=PretrainedConfig),
    "transformers.configuration_utils": dict(PretrainedConfig=PretrainedConfig),
    "dill": dict(dumps=lambda *a, **k: b"", loads=lambda *a, **k: None),
    "sglang.srt.layers.attention.fla.chunk_delta_h": dict(CHUNK_SIZE=64),
}
PATCHES = {"sglang.srt.utils.common": dict(direct_register_custom_op=lambda *a, **k: None)}


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name in STUB_SG or name.split(".")[0] in STUB_ROOTS:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        m = StubModule(spec.name)
        m.__path__ = []
        return m

    def exec_module(self, m):
        for k, v in OVERRIDES.get(m.__name__, {}).items():
            setattr(m, k, v)
        for sub in OVERRIDES:
            if sub.rpartition(".")[0] == m.__name__:
                setattr(m, sub.rpartition(".")[2], importlib.import_module(sub))


class _Patcher(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in PATCHES:
            return None
        for f in sys.meta_path:
            if f is self or not hasattr(f, "find_spec"):
                continue
            spec = f.find_spec(name, path, target)
            if spec is not None:
                real = spec.loader.exec_module

                def exec_module(m, real=real):
                    real(m)
                    for k, v in PATCHES[name].items():
                        setattr(m, k, v)
                spec.loader.exec_module = exec_module
                return spec
        return None


class _Target(object):
    backend = "cuda"


# What 0.5.23 needs beyond 0.5.9 (configure("0.5.23")): three more third-party roots stubbed; msgspec real (fetch.deps:
# 0.5.23's ServerArgs is a msgspec struct); the transformers compatibility patches it applies at import skipped (they
# adapt transformers' own classes, absent here); the torch and CUDA of its lock; triton answering "cuda" (fla's
# device probe); transformers' cached_file finding no extra file in the model directory.
RELEASE_STUBS = {
    "0.5.23": dict(
        add=("pydantic_core", "tvm_ffi", "filelock"), real=("msgspec",),
        overrides={"torch": dict(__version__="2.14.1"), "torch.version": dict(cuda="13.0", __version__="2.14.1"),
                   "triton.runtime": dict(driver=types.SimpleNamespace(active=types.SimpleNamespace(
                       get_current_target=_Target))),
                   "transformers.utils": dict(cached_file=lambda *a, **k: None)},
        patches={"sglang.srt.utils.hf_transformers_patches": dict(apply_all=lambda: None)}),
}


def configure(release, patches=None):
    """Set the stand-ins up for ``release`` (RELEASE_STUBS), with the harness's own ``patches`` (a module name: the
    attributes replaced after it loads). Call before install()."""
    global STUB_ROOTS
    extra = RELEASE_STUBS.get(release, {})
    STUB_ROOTS = frozenset((set(STUB_ROOTS) | set(extra.get("add", ()))) - set(extra.get("real", ())))
    for name, values in extra.get("overrides", {}).items():
        OVERRIDES[name] = dict(OVERRIDES.get(name, {}), **values)
    for name, values in list(extra.get("patches", {}).items()) + list((patches or {}).items()):
        PATCHES[name] = dict(PATCHES.get(name, {}), **values)


def install(site, deps=None):
    """Make `import sglang...` load the wheel's source under `site` with the stand-ins above (and the real packages
    under ``deps``, when the release needs some)."""
    if "site" in sys.modules and any("site-packages" in p for p in sys.path):
        raise RuntimeError("run the oracle with python -S: a real site-packages would shadow the stand-ins")
    if deps:
        sys.path.insert(0, deps)
    sys.path.insert(0, site)
    sys.meta_path.insert(0, _StubFinder())
    sys.meta_path.insert(0, _Patcher())
