"""choose(): the planner picks the server args for a goal. Optimality against an independent brute force over the
declared grid, the motivating case with its numbers, and bad input named."""
import itertools
import json
import os

import pytest

from unit_helpers import FIXTURES, load_module_util

ST = load_module_util("plan.tune")
SM = load_module_util("plan")
A6000 = {"name": "NVIDIA RTX A6000", "memory_total_mib": 49140}
H200 = {"name": "NVIDIA H200", "memory_total_mib": 143771}
L40S = {"name": "NVIDIA L40S", "memory_total_mib": 46068}


def cfg(name):
    with open(os.path.join(FIXTURES, "model_configs", name + ".json")) as fh:
        return json.load(fh)


def gpus(kind, n):
    return [dict(kind, index=i) for i in range(n)]


SMALL_GRID = {"tp_size": (1, 2, 4, 8), "pp_size": (1, 2), "mem_fraction_static": tuple(round(0.60 + 0.02 * i, 2) for i in range(18)),
              "max_running_requests": (None, 1, 8, 48, 256), "chunked_prefill_size": (None, 2048),
              "cuda_graph_max_bs": (None, 8), "speculative_steps": ((3, 1, 4), (1, 1, 2))}


def grid_args(model, g, args):
    """Every combination of the declared grid as server args (valid TP sizes only), nothing pruned."""
    specs = [None] if not args.get("speculative_algorithm") else list(ST.GRID["speculative_steps"])
    for tp, pp, mfs, mrr, chunk, gbs, sp in itertools.product(
            ST.GRID["tp_size"], ST.GRID["pp_size"], (None,) + ST.GRID["mem_fraction_static"],
            ST.GRID["max_running_requests"], ST.GRID["chunked_prefill_size"], ST.GRID["cuda_graph_max_bs"], specs):
        if tp * pp > len(g) or model.heads % tp or not (model.mla or model.kv_heads % tp == 0 or tp % model.kv_heads == 0):
            continue
        a = dict(args, tp_size=tp)
        if pp > 1:
            a["pp_size"] = pp
        for key, value in (("mem_fraction_static", mfs), ("max_running_requests", mrr),
                           ("chunked_prefill_size", chunk), ("cuda_graph_max_bs", gbs)):
            if value is not None:
                a[key] = value
        if sp:
            a.update(zip(("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens"), sp))
        yield a


def brute_force(config, g, goal, args, min_context=None, min_requests=1, margin=0.05):
    """Every combination of the grid through plan(), nothing pruned: the best score for the goal."""
    model = SM.Model(config)
    min_context = min_context or model.context_len
    best = None
    for a in grid_args(model, g, args):
        if goal == "concurrency":
            a["context_length"] = min_context
        try:
            p = SM.plan(config, g, a, _fixes=False)
        except SM.PlanError:
            continue
        h = p["per_gpu"][0]
        if h["headroom_gb"] < h["headroom_need_gb"] * (1 + margin):
            continue
        if p["outcome"] not in (("fits", "context_truncated") if goal == "tokens" else ("fits",)):
            continue
        score = p["max_total_num_tokens"] if goal == "tokens" else min(
            p["max_running_requests"], p["max_total_num_tokens"] // min_context)
        best = score if best is None else max(best, score)
    return best


CASES = [("llama-3.1-8b", A6000, 1, {}), ("llama-3.1-8b", L40S, 2, {}), ("qwen3-32b", A6000, 2, {}),
         ("qwen3-32b", L40S, 4, {}), ("qwen3-next-80b-a3b", H200, 2, {}), ("qwen3-next-80b-a3b", H200, 4,
                                                                           {"speculative_algorithm": "NEXTN"}),
         ("qwen3.6-27b", A6000, 2, {"speculative_algorithm": "NEXTN"}), ("deepseek-v3", H200, 8, {})]


@pytest.mark.parametrize("goal", ["tokens", "concurrency"])
@pytest.mark.parametrize("name,gpu,n,args", CASES)
def test_choose_finds_what_a_brute_force_over_the_grid_finds(monkeypatch, name, gpu, n, args, goal):
    monkeypatch.setattr(ST, "GRID", SMALL_GRID)
    config = cfg(name)
    min_context = 8192 if goal == "concurrency" else None
    want = brute_force(config, gpus(gpu, n), goal, args, min_context=min_context)
    if want is None:
        with pytest.raises(ST.TuneError):
            ST.choose(config, gpus(gpu, n), goal, args, min_context=min_context)
        return
    got = ST.choose(config, gpus(gpu, n), goal, args, min_context=min_context)
    assert got["candidates"][0]["score"] == want
    assert got["plan"]["outcome"] in ("fits", "context_truncated")
    # what choose returns is what plan() says of its args
    again = SM.plan(config, gpus(gpu, n), got["args"], _fixes=False)
    assert again["max_total_num_tokens"] == got["plan"]["max_total_num_tokens"]


# --- the motivating case: Qwen3.6-27B with NEXTN on 2x RTX A6000 ---
QWEN = cfg("qwen3.6-27b")
SEED = {"tp_size": 2, "mem_fraction_static": 0.85, "speculative_algorithm": "NEXTN", "speculative_num_steps": 3,
        "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4, "context_length": 262144}
MEASURED = {"avail_mem_before_load_gb": 46.62, "weights_gb": 25.91, "avail_mem_after_load_gb": 20.71}


def test_fit_changes_one_thing_and_the_smallest_that_works():
    # the seed fails (48 requests x 4 draft tokens of verify state); fewer running requests is the one change: 32 is
    # the smallest move that starts (the pool then holds 73638 tokens: context_truncated, but SGLang starts)
    assert SM.plan(QWEN, gpus(A6000, 2), SEED, measured=MEASURED)["outcome"] == "kv_pool_oom"
    r = ST.choose(QWEN, gpus(A6000, 2), "fit", SEED, measured=MEASURED)
    assert [c["key"] for c in r["changes"]] == ["max_running_requests"] and r["args"]["max_running_requests"] == 32
    assert r["plan"]["max_total_num_tokens"] == 73638 and r["plan"]["outcome"] == "context_truncated"
    # and 48 (the default the seed ran with) does not start: 32 is the smallest move, not an arbitrary one
    assert SM.plan(QWEN, gpus(A6000, 2), dict(SEED, max_running_requests=48), measured=MEASURED)["outcome"] == \
        "kv_pool_oom"


def test_context_concurrency_and_tokens_for_the_motivating_case():
    base = {"speculative_algorithm": "NEXTN"}
    ctx = ST.choose(QWEN, gpus(A6000, 2), "context", base, min_requests=4)
    # 4 requests of 126496 tokens = 505984 = the pool: the longest context 4 requests hold at once
    assert ctx["args"]["context_length"] == 126496 and ctx["plan"]["max_total_num_tokens"] >= 4 * 126496
    assert ctx["plan"]["max_running_requests"] >= 4
    conc = ST.choose(QWEN, gpus(A6000, 2), "concurrency", base, min_context=32768)
    assert conc["args"]["context_length"] == 32768
    resident = min(conc["plan"]["max_running_requests"], conc["plan"]["max_total_num_tokens"] // 32768)
    assert resident == conc["candidates"][0]["score"] == 13
    tok = ST.choose(QWEN, gpus(A6000, 2), "tokens", base)
    assert tok["plan"]["max_total_num_tokens"] == 521222 and tok["args"]["mem_fraction_static"] == 0.89
    # one step further and the headroom no longer covers its need with the 5 % margin
    over = SM.plan(QWEN, gpus(A6000, 2), dict(tok["args"], mem_fraction_static=0.90), _fixes=False)["per_gpu"][0]
    assert over["headroom_gb"] < over["headroom_need_gb"] * 1.05
    assert tok["explain"][1].startswith("chosen: ") and any(line.startswith("runner-up: ") for line in tok["explain"])


def test_explicit_args_win_over_the_search_unless_the_goal_is_fit():
    r = ST.choose(QWEN, gpus(A6000, 2), "tokens", {"speculative_algorithm": "NEXTN", "max_running_requests": 8})
    assert r["args"]["max_running_requests"] == 8


def test_nothing_fits_names_the_smallest_tp_size_that_would():
    # Qwen3-32B in bf16 is about 65 GB: 4 x 15 GiB leaves no pool (16.4 GB of weights per GPU), 8 do
    with pytest.raises(ST.TuneError, match=r"tp_size=8 \(8 GPUs of this size\) would"):
        ST.choose(cfg("qwen3-32b"), gpus({"name": "T4", "memory_total_mib": 15360}, 2), "tokens", {})


@pytest.mark.parametrize("kw,says", [
    ({"goal": "speed"}, "goal='speed': choose one of fit, context, concurrency, tokens"),
    ({"min_context": 10 ** 7}, "min_context=10000000 is longer than the model's context 262144"),
    ({"allow": ("fp8", "no_speculation")}, "unknown word(s) ['fp8']"),
    ({"gpus": [A6000, H200]}, "GPUs of mixed sizes (49140, 143771 MiB)"),
])
def test_bad_input_is_named(kw, says):
    call = dict(config=QWEN, gpus=gpus(A6000, 2), goal="tokens", args={})
    call.update(kw)
    with pytest.raises(ST.TuneError) as e:
        ST.choose(**call)
    assert says in str(e.value)


def brute_force_context(config, g, args, min_requests, margin=0.05):
    """goal context by brute force: every combination of the grid, the context min(model's, tokens // requests)
    that many requests hold - kept when SGLang starts with it, its headroom holds and that many may run at once."""
    model = SM.Model(config)
    best = None
    for a in grid_args(model, g, args):
        try:
            first = SM.plan(config, g, a, _fixes=False)
            c = min(model.context_len, first["max_total_num_tokens"] // min_requests)
            if c < 1:
                continue
            p = SM.plan(config, g, dict(a, context_length=c), _fixes=False)
        except SM.PlanError:
            continue
        h = p["per_gpu"][0]
        if p["outcome"] == "fits" and h["headroom_gb"] >= h["headroom_need_gb"] * (1 + margin) and \
                p["max_running_requests"] >= min_requests and p["max_total_num_tokens"] >= c * min_requests:
            best = c if best is None else max(best, c)
    return best


@pytest.mark.parametrize("min_requests", [1, 4])
@pytest.mark.parametrize("name,gpu,n,args", [CASES[0], CASES[2], CASES[4], CASES[6]])
def test_goal_context_is_at_least_what_a_brute_force_finds_and_always_valid(monkeypatch, name, gpu, n, args,
                                                                            min_requests):
    """choose may also shorten a context whose headroom fails (the brute force only tries the longest), so its
    answer is at least as long; and what it answers holds: SGLang starts, min_requests of it fit and may run."""
    monkeypatch.setattr(ST, "GRID", SMALL_GRID)
    config = cfg(name)
    want = brute_force_context(config, gpus(gpu, n), args, min_requests)
    try:
        got = ST.choose(config, gpus(gpu, n), "context", args, min_requests=min_requests)
    except ST.TuneError:
        assert want is None
        return
    c = got["plan"]["context_length"]
    assert want is None or c >= want
    p = SM.plan(config, gpus(gpu, n), got["args"], _fixes=False)
    assert p["outcome"] == "fits" and p["max_total_num_tokens"] >= c * min_requests
    assert p["max_running_requests"] >= min_requests


def _starts(config, g, a, margin=0.05):
    try:
        p = SM.plan(config, g, a, _fixes=False)
    except SM.PlanError:
        return False
    h = p["per_gpu"][0]
    return p["outcome"] in ("fits", "context_truncated") and h["headroom_gb"] >= h["headroom_need_gb"] * (1 + margin)


@pytest.mark.parametrize("name,gpu,n,args", [
    ("qwen3.6-27b", A6000, 2, dict(SEED)),
    ("qwen3-32b", A6000, 2, {"tp_size": 1, "mem_fraction_static": 0.9}),
    ("llama-3.1-8b", {"name": "RTX 4090", "memory_total_mib": 24564}, 1,
     {"mem_fraction_static": 0.95, "cuda_graph_max_bs": 256, "chunked_prefill_size": 16384}),
])
def test_fit_makes_no_more_changes_than_needed(monkeypatch, name, gpu, n, args):
    """goal fit: when choose changes k keys, no set of fewer changes on the grid starts SGLang (checked by trying the
    operator's args unchanged and every single-key change of the grid)."""
    monkeypatch.setattr(ST, "GRID", SMALL_GRID)
    config, g = cfg(name), gpus(gpu, n)
    got = ST.choose(config, g, "fit", args)
    k = len(got["changes"])
    assert _starts(config, g, got["args"])
    if k >= 1:
        assert not _starts(config, g, args)
    if k >= 2:
        singles = {"tp_size": ST.GRID["tp_size"], "mem_fraction_static": ST.GRID["mem_fraction_static"],
                   "max_running_requests": [v for v in ST.GRID["max_running_requests"] if v],
                   "chunked_prefill_size": [2048], "cuda_graph_max_bs": [8]}
        for key, values in singles.items():
            for v in values:
                if v == args.get(key) or (key == "tp_size" and v > n):
                    continue
                assert not _starts(config, g, dict(args, **{key: v})), "a single change %s=%s starts it" % (key, v)


@pytest.mark.parametrize("name,gpu,n", [("llama-3.1-8b", A6000, 1), ("qwen3.6-27b", A6000, 2), ("deepseek-v3", H200, 8)])
def test_piecewise_graphs_are_not_a_search_dimension_because_an_explicit_fraction_makes_them_free(name, gpu, n):
    """Why GRID has no piecewise dimension: in SGLang 0.5.9's arithmetic (which plan() follows, proven by the oracle)
    piecewise CUDA graphs only enlarge the reserve of the automatic fraction; with an explicit fraction - which every
    configuration choose() returns has - the pool and the planner's headroom are the same with or without them, so
    switching them off could buy nothing. If the planner ever charges them with an explicit fraction, this fails and
    they belong in the grid."""
    config, g = cfg(name), gpus(gpu, n)
    base = {"tp_size": n}
    for fraction in (0.8, 0.88):
        a = dict(base, mem_fraction_static=fraction)
        off = SM.plan(config, g, a, _fixes=False)
        on = SM.plan(config, g, dict(a, enable_piecewise_cuda_graph=True), _fixes=False)
        assert on["max_total_num_tokens"] == off["max_total_num_tokens"]
        assert on["per_gpu"][0]["headroom_need_gb"] == off["per_gpu"][0]["headroom_need_gb"]
    auto_off = SM.plan(config, g, base, _fixes=False)
    auto_on = SM.plan(config, g, dict(base, enable_piecewise_cuda_graph=True), _fixes=False)
    assert auto_on["mem_fraction_static"] < auto_off["mem_fraction_static"]      # the auto fraction reserves for them
    chosen = ST.choose(config, g, "tokens", {"enable_piecewise_cuda_graph": True}, keep=[])
    assert chosen["args"]["enable_piecewise_cuda_graph"] is True and "mem_fraction_static" in chosen["args"]


def test_pipeline_stages_are_chosen_where_they_hold_more_kv_mla_on_eight_gpus():
    """MLA's latent KV is not split by TP (every attention rank holds all of it); pipeline stages split the layers,
    so on 8 H200 the tokens goal takes TP 2 x PP 4 - and plan() of the chosen args agrees (the oracle checks the
    stages' arithmetic against SGLang's own code)."""
    r = ST.choose(cfg("deepseek-v3"), gpus(H200, 8), "tokens", {})
    assert (r["args"].get("tp_size"), r["args"].get("pp_size")) == (2, 4)
    assert [c["key"] for c in r["changes"] if c["key"] in ("tp_size", "pp_size")] == ["pp_size", "tp_size"]
    assert "pipeline stages" in next(c["why"] for c in r["changes"] if c["key"] == "pp_size")
    tp8 = SM.plan(cfg("deepseek-v3"), gpus(H200, 8), dict(r["args"], tp_size=8, pp_size=1), _fixes=False)
    assert r["plan"]["max_total_num_tokens"] > tp8["max_total_num_tokens"]
    # with speculative decoding (which 0.5.9 refuses with stages) no stage is proposed
    nextn = ST.choose(cfg("deepseek-v3"), gpus(H200, 8), "tokens", {"speculative_algorithm": "NEXTN"})
    assert nextn["args"].get("pp_size") in (None, 1)


def test_concurrency_keeps_the_operators_context_and_says_so():
    """#44: for the motivating deployment with context_length 32768 (kept, as the role keeps the operator's keys) the
    goal concurrency serves many requests of 32768 tokens - not 1 request of the model's 262144."""
    seed = {"tp_size": 2, "speculative_algorithm": "NEXTN", "speculative_num_steps": 3, "speculative_eagle_topk": 1,
            "speculative_num_draft_tokens": 4, "context_length": 32768}
    conc = ST.choose(QWEN, gpus(A6000, 2), "concurrency", seed, keep=list(seed) + ["host", "port"])
    assert conc["args"]["context_length"] == 32768 and conc["candidates"][0]["score"] == 10
    assert "each holding 32768 tokens (the operator's context_length)" in conc["explain"][0]
    # without it, the model's context, said as such
    assert "(the model's context)" in ST.choose(QWEN, gpus(A6000, 2), "concurrency", {"tp_size": 2})["explain"][0]


def test_concurrency_at_the_operators_context_where_the_models_would_not_fit():
    """#44: an 8B model with an FP8 KV cache on one 24 GB GPU at 32k starts with the operator's args; the goal finds
    the most requests of that context (it raised 'nothing starts SGLang', measuring at the model's 131072)."""
    llama = cfg("llama-3.1-8b")
    rtx4090 = {"name": "NVIDIA GeForce RTX 4090", "memory_total_mib": 24564}
    own = {"kv_cache_dtype": "fp8_e4m3", "context_length": 32768}
    assert SM.plan(llama, gpus(rtx4090, 1), own)["outcome"] == "fits"
    conc = ST.choose(llama, gpus(rtx4090, 1), "concurrency", own, keep=list(own))
    assert conc["args"]["context_length"] == 32768 and conc["args"]["kv_cache_dtype"] == "fp8_e4m3"
    assert conc["candidates"][0]["score"] == 3


def test_a_context_no_configuration_holds_is_named_with_the_nearest_that_is():
    llama = cfg("llama-3.1-8b")
    with pytest.raises(ST.TuneError) as e:
        ST.choose(llama, gpus({"name": "NVIDIA GeForce RTX 4090", "memory_total_mib": 24564}, 1), "concurrency", {},
                  min_context=131072)
    assert str(e.value) == ("no configuration on these 1 GPU(s) of 24564 MiB holds one request of 131072 tokens "
                            "(min_context); at 32768 tokens: 1 request(s) - give that context (min_context or "
                            "context_length)")
    with pytest.raises(ST.TuneError) as e:
        ST.choose(QWEN, gpus(A6000, 2), "concurrency", {"context_length": 8192}, min_context=16384,
                  keep=["context_length"])
    assert "context_length=8192 is kept: give one of them" in str(e.value)


def test_concurrency_for_a_quantized_27b_on_one_24gb_gpu_at_a_short_context():
    """#44: Qwen3.6-27B with 4-bit AWQ weights on one 24 GB GPU, context_length 8192: the operator's args start SGLang
    (5 requests); the goal keeps that context and finds the most requests of it."""
    awq = dict(QWEN, quantization_config={"quant_method": "awq", "bits": 4, "group_size": 128})
    one = gpus({"name": "NVIDIA GeForce RTX 4090", "memory_total_mib": 24564}, 1)
    own = {"context_length": 8192}
    assert SM.plan(awq, one, own)["outcome"] == "fits"
    conc = ST.choose(awq, one, "concurrency", own, keep=list(own))
    assert conc["args"]["context_length"] == 8192 and conc["candidates"][0]["score"] == 9
