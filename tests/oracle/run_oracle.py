"""The planner against one SGLang release's own code on generated scenarios (make oracle runs it once per release:
0.5.9 and 0.5.23, each in its own process - both are "sglang"). Last line printed:
    oracle agreement <release> N/M
(oracle.sh then prints the total, "oracle agreement N/M").

    python -S tests/oracle/run_oracle.py [--release R] [--site DIR] [-n N] [--show K] [--only NAME]

0.5.23: the same generated scenarios in 0.5.23's words (sglang0523.RENAMED), a separate draft model's config from
scenarios.draft_config, and 300 hybrid scenarios of its own (mamba_0523_scenarios: its mamba radix cache strategies);
pipeline stages are not run for it (the planner refuses them by name for 0.5.23), nor the configurations choose()
picks (choose is 0.5.9's only).

Agreement per scenario: SGLang refuses the args <=> plan() refuses them; otherwise the same outcome (SGLang's
"Not enough memory" <=> kv_pool_oom), mem_fraction_static within 1e-6, chunked_prefill_size and cuda_graph_max_bs
equal, the speculative parameters equal, max_total_num_tokens exact (or within one page), the request pool size
and max_running_requests equal, and for hybrid models the mamba cache size equal.
"""
import argparse
import importlib
import os
import sys
import time
import types

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import fetch  # noqa: E402
import scenarios  # noqa: E402
import tables  # noqa: E402


def load_module_util(name):
    """plugins/module_utils/<name>.py by file path (stdlib only, as the architecture promises): the directory made a
    package of its own, so a file's relative imports of its siblings resolve. A fresh copy each call (the self-test
    plants a mistake in one)."""
    if "gpuserve_module_utils" not in sys.modules:
        pkg = types.ModuleType("gpuserve_module_utils")
        pkg.__path__ = [os.path.join(ROOT, "plugins", "module_utils")]
        sys.modules["gpuserve_module_utils"] = pkg
    for loaded in [m for m in sys.modules if m.startswith("gpuserve_module_utils.%s" % name.split(".")[0])]:
        sys.modules.pop(loaded)         # the package and its files: a planted mistake stays in its own copy
    return importlib.import_module("gpuserve_module_utils." + name)


def plant_value(p, name, value):
    """Set ``name`` wherever the planner package binds it (the file that defines it and each file that imported it),
    as a mistake in the source would be seen by every caller."""
    for mod in [p] + [m for m in sys.modules.values() if getattr(m, "__name__", "").startswith(p.__name__ + ".")]:
        if hasattr(mod, name):
            setattr(mod, name, value)


def chosen_cases(todo, n):
    """choose() on the first n scenarios' models and GPUs, one goal each: every configuration it picks is then
    checked like a scenario (its own budget numbers as the measured ones)."""
    tuner = load_module_util("plan.tune")
    out, refused = [], 0
    for i, (name, cfg, args, gpu, _m0, _m1) in enumerate(todo[:n]):
        goal = tuner.GOALS[i % len(tuner.GOALS)]
        keep = dict((k, v) for k, v in args.items() if k.startswith("speculative_") or k in ("enable_multimodal",))
        gpus = [{"index": j, "memory_total_mib": gpu} for j in range(max(1, int(args.get("tp_size", 1))))]
        try:
            r = tuner.choose(cfg, gpus, goal, keep)
        except (tuner.TuneError, tuner.PlanError):
            refused += 1
            continue
        g = r["plan"]["per_gpu"][0]
        m0 = g["avail_mem_before_load_gb"]
        out.append(("chosen-%s-%s" % (goal, name), cfg, r["args"], gpu, m0, round(m0 - g["weights_gb"], 2)))
    return out, refused


def ours(planner, cfg, args, gpu, m0, m1, release="0.5.9"):
    ranks = int(args.get("tp_size", 1)) * int(args.get("pp_size", 1))
    gpus = [{"index": i, "memory_total_mib": gpu} for i in range(ranks)]
    kw = {}
    if release != "0.5.9":
        import sglang0523
        args = sglang0523.in_0523_words(args)
        kw = {"release": release, "draft_config": scenarios.draft_config(cfg)
              if args.get("speculative_draft_model_path") else None}
    try:
        return planner.plan(cfg, gpus, args, measured={"avail_mem_before_load_gb": m0, "avail_mem_after_load_gb": m1},
                            _fixes=False, **kw)
    except planner.PlanError as e:
        return {"error": str(e)}


COVERAGE = {   # what the scenarios exercise in SGLang's own code (printed, so a narrowed generator shows)
    "refused": lambda sg, a: "error" in sg,
    "out-of-memory": lambda sg, a: sg.get("outcome") == "kv_pool_oom",
    "auto fraction": lambda sg, a: "error" not in sg and "mem_fraction_static" not in a,
    "multimodal fraction": lambda sg, a: "error" not in sg and "mem_fraction_static" not in a
    and abs(sg["mem_fraction_static"] * 1000 - round(sg["mem_fraction_static"] * 1000)) > 1e-6,
    "speculative": lambda sg, a: bool(sg.get("speculative")),
    "mamba": lambda sg, a: sg.get("max_mamba_cache_size") is not None,
    "hybrid SWA": lambda sg, a: sg.get("swa_max_total_num_tokens") is not None,
    "fp8 KV": lambda sg, a: "float8" in str(sg.get("kv_cache_dtype")),
    "paged": lambda sg, a: (sg.get("page_size") or 1) > 1,
    "DP attention": lambda sg, a: bool(a.get("enable_dp_attention")),
    "pipeline stages": lambda sg, a: "error" not in sg and int(a.get("pp_size") or 1) > 1,
    "pipeline stages, uneven": lambda sg, a: len(set(sg.get("pp_stages") or [])) > 1,
    "several nodes": lambda sg, a: "error" not in sg and int(a.get("nnodes") or 1) > 1,
}


def compare(sg, pl):
    """The list of differences (empty: agreement)."""
    if "error" in sg or "error" in pl:
        if ("error" in sg) != ("error" in pl):
            return ["refusal: sglang %s / plan %s" % (sg.get("error", "accepts"), pl.get("error", "accepts"))]
        return []
    diffs = []
    if abs(float(sg["mem_fraction_static"]) - float(pl["mem_fraction_static"])) > 1e-6:
        diffs.append("mem_fraction_static %r / %r" % (sg["mem_fraction_static"], pl["mem_fraction_static"]))
    for k in ("chunked_prefill_size", "cuda_graph_max_bs"):
        if sg[k] != pl[k]:
            diffs.append("%s %r / %r" % (k, sg[k], pl[k]))
    ps = pl.get("speculative") or None
    if ps:
        ps = dict((k, v) for k, v in ps.items() if k != "given")    # ours also says what was asked (NEXTN)
    if (sg["speculative"] or None) != ps:
        diffs.append("speculative %r / %r" % (sg["speculative"], ps))
    sg_oom = sg["outcome"] == "kv_pool_oom"
    if sg_oom != (pl["outcome"] == "kv_pool_oom"):
        diffs.append("outcome %s / %s (tokens %s / %s)" % (sg["outcome"], pl["outcome"], sg["max_total_num_tokens"],
                                                           pl["max_total_num_tokens"]))
        return diffs
    if sg_oom:
        return diffs
    page = int(sg.get("page_size") or 1)
    if abs(sg["max_total_num_tokens"] - pl["max_total_num_tokens"]) > (page if page > 1 else 0):
        diffs.append("max_total_num_tokens %d / %d" % (sg["max_total_num_tokens"], pl["max_total_num_tokens"]))
    if sg["req_to_token_pool_size"] != pl["req_to_token_pool_size"]:
        diffs.append("request pool %r / %r" % (sg["req_to_token_pool_size"], pl["req_to_token_pool_size"]))
    if sg["max_running_requests"] != pl["max_running_requests"]:
        diffs.append("max_running_requests %r / %r" % (sg["max_running_requests"], pl["max_running_requests"]))
    if sg.get("max_mamba_cache_size") is not None and sg["max_mamba_cache_size"] != pl.get("max_mamba_cache_size"):
        diffs.append("max_mamba_cache_size %r / %r" % (sg["max_mamba_cache_size"], pl.get("max_mamba_cache_size")))
    return diffs


def _without_spec_reserve(p):
    orig = p.auto_mem_fraction_static

    def auto(gpu_mem_mib, tp, pp, chunked, graph_bs, spec_algo, *rest, **kw):
        return orig(gpu_mem_mib, tp, pp, chunked, graph_bs, None, *rest, **kw)
    plant_value(p, "auto_mem_fraction_static", auto)


def _bucket_shifted(p):
    orig = p.bucket_defaults
    plant_value(p, "bucket_defaults", lambda mem, tp: orig(mem * 1.3 if mem else mem, tp))


def _stages_ignored(p):
    orig = p.kv_layers
    plant_value(p, "kv_layers", lambda model, pp_rank=0, pp_size=1: orig(model, 0, 1))


def _v0523(p, name, value):
    setattr(p.v0523, name, value)


def _no_prefill_graph_reserve(p):
    orig = p.v0523.graph_reserve_mib
    _v0523(p, "graph_reserve_mib", lambda *a, **k: orig(*a, **dict(k, prefill_graph=False)))


def _buckets_of_0_5_9(p):
    _v0523(p, "bucket_defaults", p.bucket_defaults)


def _mamba_without_extra_buffer(p):
    _v0523(p, "mamba_extra_buffer", lambda model, a: False)


def _tracking_slots_always_two(p):
    _v0523(p, "mamba_ratio", lambda a, radix_off, extra_buffer: 1 if radix_off else (5 if extra_buffer else 3))


def _no_mm_reserve(p):
    _v0523(p, "MM_RESERVE_MIB", 0)


# 0.5.23's rules, each planted wrong once (what 0.5.9's arithmetic would have said): each must be caught.
PLANTED_0523 = {
    "0.5.23's prefill CUDA graph reserve forgotten": _no_prefill_graph_reserve,
    "0.5.9's GPU-size buckets kept for 0.5.23": _buckets_of_0_5_9,
    "control: the planner as it is": lambda p: None,
    "0.5.23's mamba extra buffer ignored (3 slots per request)": _mamba_without_extra_buffer,
    "0.5.23's multimodal embedding cache left in the KV budget": _no_mm_reserve,
    "0.5.23's extra buffer: 2 tracking slots even lazy or without overlap": _tracking_slots_always_two,
}

# Mistakes the planner really made before the oracle existed (or easily could): each must be caught.
PLANTED = {
    "pipeline stages sized as if each held every layer": _stages_ignored,
    "multimodal by class-name suffix": lambda p: plant_value(p, "MULTIMODAL_ARCHS", tuple(
        a for a in p.MULTIMODAL_ARCHS if not a.endswith("ForConditionalGeneration"))),
    "Gemma's sliding window as a hybrid pool": lambda p: plant_value(p, "HYBRID_SWA_ARCHS", p.HYBRID_SWA_ARCHS + (
        "Gemma2ForCausalLM", "Gemma3ForCausalLM")),
    "the speculative reserve forgotten": _without_spec_reserve,
    "control: the planner as it is": lambda p: None,
    "GPU-size bucket off by one step": _bucket_shifted,
    "hybrid SWA pools (GPT-OSS, Llama 4) ignored": lambda p: plant_value(p, "HYBRID_SWA_ARCHS", ()),
}


def self_test(oracle, site, release="0.5.9"):
    """Each planted mistake must make at least one scenario (or a table) disagree; the control must not."""
    todo = scenarios.scenarios(600) + (scenarios.pp_scenarios(100) if release == "0.5.9"
                                       else scenarios.mamba_0523_scenarios(100))
    planted = PLANTED if release == "0.5.9" else PLANTED_0523
    answers = [oracle.run(cfg, args, gpu, m0, m1) for _n, cfg, args, gpu, m0, m1 in todo]
    caught = 0
    for what, plant in planted.items():
        planner = load_module_util("plan")
        plant(planner)
        bad = sum(1 for sg, (_n, cfg, args, gpu, m0, m1) in zip(answers, todo)
                  if compare(sg, ours(planner, cfg, args, gpu, m0, m1, release)))
        table_ok = tables.check(site, planner, release)[1]
        control = what.startswith("control:")
        hit = bad > 0 or not table_ok
        said = ("FALSE ALARM" if hit else "quiet") if control else ("caught" if hit else "NOT caught")
        print("self-test: %-48s %s (%d of %d scenarios disagree%s)" % (
            what, said, bad, len(todo), "" if table_ok else ", a table differs"))
        caught += hit != control
    print("self-test %s: %d of %d planted mistakes handled as expected" % (release, caught, len(planted)))
    return 0 if caught == len(planted) else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--release", default="0.5.9", choices=fetch.RELEASES)
    ap.add_argument("--site", help="the extracted sglang wheel (default: fetched and cached under build/oracle)")
    ap.add_argument("-n", type=int, default=2400)
    ap.add_argument("--show", type=int, default=15, help="disagreements printed in full")
    ap.add_argument("--only", help="run only scenarios whose name starts with this")
    ap.add_argument("--self-test", action="store_true",
                    help="plant known mistakes in a copy of the planner and check that the oracle catches each")
    a = ap.parse_args()
    site = a.site or fetch.site(a.release)
    t0 = time.time()
    if a.release == "0.5.9":
        from sglang059 import SGLang059
        oracle = SGLang059(site)
    else:
        from sglang0523 import SGLang0523
        oracle = SGLang0523(site, fetch.deps(a.release))
    if a.self_test:
        return self_test(oracle, site, a.release)
    planner = load_module_util("plan")
    extra = scenarios.pp_scenarios() if a.release == "0.5.9" else scenarios.mamba_0523_scenarios()
    todo = [s for s in scenarios.scenarios(a.n) + extra if not a.only or s[0].startswith(a.only)]
    chosen, unplaceable = chosen_cases(todo, 0 if a.only or a.release != "0.5.9" else 200)
    todo = todo + chosen
    bad, refused, by_kind = [], 0, {}
    seen = {k: 0 for k in COVERAGE}
    for name, cfg, args, gpu, m0, m1 in todo:
        sg = oracle.run(cfg, args, gpu, m0, m1)
        refused += "error" in sg
        for what, test in COVERAGE.items():
            seen[what] += bool(test(sg, args))
        d = compare(sg, ours(planner, cfg, args, gpu, m0, m1, a.release))
        if d:
            bad.append((name, args, gpu, m0, m1, d))
            for x in d:
                key = name.split("-")[0] + ": " + x.split(" ")[0]
                by_kind[key] = by_kind.get(key, 0) + 1
    for name, args, gpu, m0, m1, d in bad[:a.show]:
        print("DISAGREE %s gpu=%s MiB m0=%s m1=%s args=%s\n    %s" % (name, gpu, m0, m1, args, "\n    ".join(d)))
    for k in sorted(by_kind, key=lambda k: -by_kind[k]):
        print("  %5d  %s" % (by_kind[k], k))
    print("covered: " + ", ".join("%s %d" % (k, v) for k, v in seen.items()))
    print("sglang %s refused %d of the scenarios (the planner must refuse them too); %.1f s" % (
        oracle.version, refused, time.time() - t0))
    print("choose: %d configurations the planner chose for a goal are among them (checked like the others); %d "
          "models fit no configuration on their GPUs" % (len(chosen), unplaceable))
    table_lines, tables_ok = tables.check(site, planner, a.release)
    for line in table_lines:
        print(line)
    # this release's line; oracle.sh adds them up into the total the Makefile's contract reads
    print("oracle agreement %s %d/%d" % (oracle.version, len(todo) - len(bad), len(todo)))
    return 0 if not bad and tables_ok else 1


if __name__ == "__main__":
    sys.exit(main())
