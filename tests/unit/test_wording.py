"""Fixtures generated from tests/wording/table.json - the wording of every line the parser reads, as each SGLang
release from 0.3.6 to 0.5.23 prints it (extracted from the releases' own source by tests/wording/wording.py).
Every wording of every release becomes a log line with its placeholders filled, and parse_log must read it."""
import json
import os
import re

import pytest

from unit_helpers import ROOT, load_module_util

SL = load_module_util("logs")
TABLE = os.path.join(ROOT, "tests", "wording", "table.json")
with open(TABLE) as _f:
    WORDING = json.load(_f)
RELEASES = ("0.3.6", "0.4.0", "0.4.3", "0.4.6", "0.4.9", "0.5.1", "0.5.3", "0.5.6", "0.5.9", "0.5.23")

# a value for each placeholder, by what its expression names (the table keeps SGLang's expressions)
_SAMPLES = (
    ("architectures", "['FooForCausalLM']"), ("all_supported_archs", "dict_keys(['LlamaForCausalLM'])"),
    ("model_arch", "FooForCausalLM"), ("model_arch_name_to_cls", "['LlamaForCausalLM', 'MistralForCausalLM']"),
    ("__name__", "LlamaForCausalLM"), ("dtype", "torch.bfloat16"), ("quant_str", ""),
    ("mem_fraction_static", 0.85), ("suggested_mem_fraction_static", 0.912), ("minimum_mem_fraction_static", 0.9118),
    ("max_mamba_cache_size", 2), ("max_num_reqs", 0), ("ratio", 3), ("step", 1),
    ("total_rest_memory", -0.2), ("stage_per_req", 76972032),
    ("max_total_tokens", 200000), ("user_limit", 200000), ("token_capacity", 0), ("max_total_num_tokens", 123456),
    ("chunked_prefill_size", 4096), ("max_prefill_tokens", 16384), ("max_running_requests", 2048),
    ("context_len", 131072), ("available_gpu_mem", 14.38), ("num_tokens", 123456), ("size", 123456),
    ("before_avail_memory - after_avail_memory", 15.12), ("weight_load_mem_usage", 15.12),
    ("after_avail_memory", 31.5), ("get_available_gpu_memory", 46.62), ("before_mem - after_mem", 0.62),
    ("avail_mem", 14.38), ("startup_available_gpu_memory_gb", 14.38), ("cuda_graph_mem_usage", 0.62),
    ("after_mem", 14.38), ("before_mem", 15.0), ("tic", 3.0), ("weight_load_time", 9.0),
    ("k_size", 7.5), ("v_size", 7.5), ("kv_size", 15.0), ("conv_state", 0.1), ("temporal_state", 3.0),
    ("intermediate", 0.5), ("output_size", 5120), ("tp_size", 3), ("attn_tp_size", 3), ("dim_size", 5120),
    ("replicas", 5), ("global_aux_state_size", 2), ("aux_state_size", 2),
)


# the same expression stands for another value in another line
_PER_KIND = {"load_weight_end": {"get_available_gpu_memory": 31.5}, "mamba_pool": {"size": 48}}


def _value(expr, kind=None):
    """The sample of the longest key the expression contains (k_size before size)."""
    samples = dict(_SAMPLES)
    samples.update(_PER_KIND.get(kind, {}))
    hits = sorted((k for k in samples if k in expr), key=len, reverse=True)
    if not hits:
        raise AssertionError("no sample value for the placeholder {%s}: add one to _SAMPLES" % expr)
    return samples[hits[0]]


def render(wording, kind=None):
    """The wording with every {expr[:spec]} filled, as SGLang's f-string would print it ({} and %.2f too)."""
    if wording.startswith("{} is not divisible by {}"):
        return wording.replace("{}", "32", 1).replace("{}", "3", 1)

    def fill(m):
        expr, spec = (m.group(1).split(":", 1) + [""])[:2]
        if " if " in expr and " else " in expr:        # {'a' if cond else 'b'}: SGLang on a GPU takes the else
            return expr.rsplit(" else ", 1)[1].strip().strip("'\"")
        v = _value(expr, kind)
        return format(v, spec) if spec and not isinstance(v, str) else str(v)
    text = re.sub(r"\{((?:[^{}]|\{[^{}]*\})+)\}", fill, wording)
    return re.sub(r"%\.(\d)f", lambda m: format(1.5, "." + m.group(1) + "f"), text)


def _cases():
    for kind, per_release in sorted(WORDING.items()):
        for version in RELEASES:
            for wording, raised in per_release.get(version, []):
                yield pytest.param(kind, version, wording, raised, id="%s-%s-%d" % (kind, version, len(wording)))


def _log(line, raised):
    head = ["[2026-05-09 09:16:40] server_args=ServerArgs(model_path='/m', tp_size=2, mem_fraction_static=0.85)",
            "[2026-05-09 09:16:44 TP0] Load weight begin. avail mem=46.62 GB"]
    if raised:                     # how an exception reaches the log: the scheduler's traceback, then sigquit
        return "\n".join(head + ["[2026-05-09 09:17:01 TP0] Scheduler hit an exception: Traceback (most recent call last):",
                                 '  File "/x/scheduler.py", line 3188, in run_scheduler_process',
                                 "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank)",
                                 "%s: %s" % (raised, line),
                                 "[2026-05-09 09:17:01] Received sigquit from a child process. It usually means the "
                                 "child failed."]) + "\n"
    return "\n".join(head + ["[2026-05-09 09:16:59 TP0] " + line]) + "\n"


FAILURES = {"kv_pool_oom": "kv_pool_oom", "unsupported_arch": "unsupported_model", "tp_not_divisible": "tp_mismatch"}


@pytest.mark.parametrize("kind,version,wording,raised", list(_cases()))
def test_every_release_wording_is_read(kind, version, wording, raised):
    line = render(wording, kind)
    r = SL.parse_log(_log(line, raised))
    facts = r["facts"]
    if kind in FAILURES:
        assert r["outcome"] == "failed" and r["failure"]["kind"] == FAILURES[kind], (line, r["failure"])
        if "mem_fraction_static=" in wording or "--mem-fraction-static={" in wording:
            assert facts["mem_fraction_static"] == 0.85
    elif kind == "load_weight_begin":
        assert facts["avail_mem_before_load_gb"] == 46.62
    elif kind == "load_weight_end":
        if "avail mem=" in wording:
            assert facts["avail_mem_after_load_gb"] == 31.5
            # from "mem usage=", or (0.4.0-0.4.3, which print none) the free memory the load took
            assert facts["weights_gb"] == 15.12
    elif kind == "kv_pool":
        if "#tokens" in wording:
            assert facts["kv_tokens"] == 123456
        if "KV size" in wording:              # MLA: one K+V size (also in k_size_gb, where 0.4.x readers look)
            assert facts["kv_size_gb"] == 15.0 and facts["k_size_gb"] == 15.0
        else:
            assert facts["k_size_gb"] == 7.5 and facts["v_size_gb"] == 7.5
    elif kind == "mamba_pool":
        # every state the line lists (conv, ssm and the speculative intermediates) adds up
        assert facts["mamba_cache_gb"] == pytest.approx(sum(float(x) for x in re.findall(r"([0-9.]+)GB", line)))
        if "max_mamba_cache_size" in wording:
            assert facts["max_mamba_cache_size"] == 48
    elif kind == "scheduler_summary":
        assert (facts["max_total_num_tokens"], facts["max_running_requests"], facts["context_len"]) == (
            123456, 2048, 131072)
    elif kind == "profiled_budget":
        assert facts["max_total_tokens_requested"] == 200000
        if "{self.max_total_num_tokens}" in wording:
            assert facts["profiled_max_total_num_tokens"] == 123456
        else:                                 # 0.5.23 (token_capacity 0 here): no pool at all
            assert r["failure"]["kind"] == "kv_pool_oom"
    elif kind == "cuda_graph_begin":
        assert r["phase"] in ("cuda_graph", "draft"), r["phase"]
    elif kind == "cuda_graph_end":
        if "mem usage=" in wording:
            assert facts.get("cuda_graph_mem_gb") == 0.62 or r["phase"] == "draft", facts
    elif kind == "ready":
        assert r["outcome"] == "ready"
    else:
        raise AssertionError("no expectation for line kind %s" % kind)


def test_the_table_covers_every_release_and_kind_the_parser_reads():
    assert sorted(WORDING) == sorted(("cuda_graph_begin", "cuda_graph_end", "kv_pool", "kv_pool_oom", "load_weight_begin",
                                      "load_weight_end", "mamba_pool", "profiled_budget", "ready", "scheduler_summary",
                                      "tp_not_divisible", "unsupported_arch"))
    for kind, per_release in WORDING.items():
        assert sorted(per_release) == sorted(RELEASES), kind
    # every release prints the lines a start-up is read by
    for kind in ("load_weight_begin", "load_weight_end", "scheduler_summary", "ready", "kv_pool_oom"):
        assert all(WORDING[kind][v] for v in RELEASES), kind
