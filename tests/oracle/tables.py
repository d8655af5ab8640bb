"""The tables the planner copies from SGLang's source, regenerated from the wheel and compared (run by
run_oracle.py, so `make oracle` fails when a committed table and SGLang's source differ).

Each entry: the planner's constant, and how it is read from the release's source (by ast, so comments and formatting do
not matter): the list literal assigned to a name, or the string literals of a set/list inside a function."""
import ast
import os


def _literal_list(tree, name):
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return [e.value for e in node.value.elts]
    raise LookupError(name)


def _module_strings(tree, name):
    """The string literals of a module-level NAME = (...) / [...] / {...} / frozenset({...})."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            value = node.value
            if isinstance(value, ast.Call) and value.args:          # frozenset({...}), set([...])
                value = value.args[0]
            return [e.value for e in value.elts if isinstance(e, ast.Constant)]
    raise LookupError(name)


def _strings_in_function(tree, func, var=None):
    """The strings of a set/list literal inside a function; ``*NAME`` (0.5.23: ``*SWA_SINK_ARCHS``) expands to the
    module-level collection NAME's strings."""
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == func:
            for sub in ast.walk(node):
                if isinstance(sub, ast.Assign) and (var is None or any(getattr(t, "id", None) == var
                                                                       for t in sub.targets)):
                    if isinstance(sub.value, (ast.Set, ast.List)):
                        out = []
                        for e in sub.value.elts:
                            if isinstance(e, ast.Starred) and isinstance(e.value, ast.Name):
                                out.extend(_module_strings(tree, e.value.id))
                            elif isinstance(e, ast.Constant):
                                out.append(e.value)
                        return out
    raise LookupError("%s in %s" % (var, func))


def _parse(site, *rel):
    path = os.path.join(site, "sglang", "srt", *rel)
    with open(path) as f:
        return ast.parse(f.read(), path)


def tables(site, release="0.5.9"):
    """{planner constant name: (values from SGLang's source, where)}."""
    mc = _parse(site, "configs", "model_config.py")
    out = {
        "MULTIMODAL_ARCHS": (_literal_list(mc, "multimodal_model_archs"),
                             "configs/model_config.py multimodal_model_archs"),
        "MULTIMODAL_OFF_BY_DEFAULT": (_strings_in_function(mc, "__init__", "mm_disabled_models"),
                                      "configs/model_config.py ModelConfig.__init__ mm_disabled_models"),
        "HYBRID_SWA_ARCHS": (_strings_in_function(mc, "is_hybrid_swa_model", "hybrid_swa_archs"),
                             "configs/model_config.py is_hybrid_swa_model"),
    }
    # 0.5.23 moved the context keys; its architecture lists hold many the planner does not know (compared on the
    # planner's own architectures, check() below), and one list more: the multimodal models keeping the prefill
    # CUDA graph
    keys = ("utils", "hf_transformers_utils.py") if release == "0.5.9" else ("utils", "hf_transformers", "common.py")
    out["CONTEXT_LENGTH_KEYS"] = (_literal_list(_parse(site, *keys), "CONTEXT_LENGTH_KEYS"),
                                  "%s CONTEXT_LENGTH_KEYS" % "/".join(keys))
    if release != "0.5.9":
        out["v0523.MULTIMODAL_BREAKABLE_GRAPH_ARCHS"] = (
            _literal_list(mc, "multimodal_breakable_cuda_graph_supported_model_archs"),
            "configs/model_config.py multimodal_breakable_cuda_graph_supported_model_archs")
    return out


# SGLang's list holds architectures the planner does not know at all: those are left out of the committed copy on
# purpose (the planner refuses an unknown architecture before it would look them up)
def check(site, planner, release="0.5.9"):
    """Lines describing each table: 'ok' or the difference. Returns (lines, all_equal)."""
    lines, ok = [], True
    for name, (source, where) in sorted(tables(site, release).items()):
        holder = planner
        for part in name.split(".")[:-1]:
            holder = getattr(holder, part)
        ours = list(getattr(holder, name.split(".")[-1]))
        if name == "HYBRID_SWA_ARCHS" or (release != "0.5.9" and name in ("MULTIMODAL_ARCHS",
                                                                          "MULTIMODAL_OFF_BY_DEFAULT")):
            source = [a for a in source if a in planner.KNOWN_ARCHITECTURES]
            ours = [a for a in ours if a in planner.KNOWN_ARCHITECTURES]
        if ours == list(source) or (name != "CONTEXT_LENGTH_KEYS" and sorted(ours) == sorted(source)):
            lines.append("table %s: %d entries, as in %s" % (name, len(ours), where))
            continue
        ok = False
        lines.append("table %s differs from %s: missing %s, extra %s" % (
            name, where, sorted(set(source) - set(ours)), sorted(set(ours) - set(source))))
    return lines, ok
