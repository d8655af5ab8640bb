"""Report the SGLang venv as JSON: sglang, torch (CUDA build, availability, GPU count), flash_attn.

Run by role sglang_venv with the venv's interpreter. A package that is not installed is null; a package
that is installed but fails to import is reported with the error (the role fails on sglang's)."""
import importlib
import json
import sys


def probe(name):
    try:
        mod = importlib.import_module(name)
    except ImportError as exc:
        if getattr(exc, "name", None) == name:
            return None, None
        return None, "%s: %s" % (type(exc).__name__, exc)
    except Exception as exc:  # pylint: disable=broad-except
        return None, "%s: %s" % (type(exc).__name__, exc)
    return mod, None


facts = {"python": sys.version.split()[0], "executable": sys.executable, "errors": {}}
for name in ("sglang", "torch", "flash_attn", "sgl_kernel", "flashinfer"):
    mod, err = probe(name)
    facts[name] = getattr(mod, "__version__", None) if mod is not None else None
    if err:
        facts["errors"][name] = err
torch = sys.modules.get("torch")
if torch is not None:
    facts["torch_cuda"] = torch.version.cuda
    facts["cuda_available"] = bool(torch.cuda.is_available())
    facts["gpu_count"] = torch.cuda.device_count() if facts["cuda_available"] else 0
    facts["cxx11abi"] = bool(torch.compiled_with_cxx11_abi())
print(json.dumps(facts, sort_keys=True))
