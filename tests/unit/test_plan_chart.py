"""chart_svg and layout (plan/picture.py): the geometry from the plan's numbers, a well-formed SVG whose words are
escaped, and the parts drawn in the stacking order. The picture as a browser paints it: tests/integration/
test_plan_chart_render.py (headless Chromium)."""
import json
import re
import os
import xml.etree.ElementTree as ET

from unit_helpers import ROOT, fixture_text, load_module_util

SM = load_module_util("plan")
A6000 = {"name": "NVIDIA RTX A6000", "memory_total_mib": 49140}
SEED = {"tp_size": 2, "mem_fraction_static": 0.85, "speculative_algorithm": "NEXTN", "speculative_num_steps": 3,
        "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4, "context_length": 262144}
NS = "{http://www.w3.org/2000/svg}"


def planned(args, gpus=(A6000, A6000)):
    with open(os.path.join(ROOT, "playbooks", "vars", "qwen3.6-27b.config.json")) as fh:
        config = json.load(fh)
    result, dummy = SM.plan_request(model_config=config, gpus=list(gpus), args=args, weights_bytes=55 * 10 ** 9,
                                    fail_on=(), chart=True)
    return result


def test_the_seeds_plan_is_laid_out_over_budget_in_the_stacking_order():
    r = planned(SEED)
    lay = SM.layout(r)
    g = r["per_gpu"][0]
    static = g["weights_gb"] + g["spec_reserve_gb"] + g["mamba_gb"]
    assert static < g["avail_mem_before_load_gb"]   # 42.42 < 46.69 GiB: the free memory is the scale's 600 pixels
    px = 600 / g["avail_mem_before_load_gb"]
    assert abs(lay["scale"] - px) < 1e-9
    gpu_bar = lay["bars"][0]
    assert [p[0] for p in gpu_bar["parts"]] == ["weights", "spec verify", "mamba state"]   # no KV cache: it is < 0
    assert gpu_bar["parts"][0][2:4] == (190, 190 + int(round(g["weights_gb"] * px)))
    assert gpu_bar["parts"][1][2] == gpu_bar["parts"][0][3] and gpu_bar["parts"][2][2] == gpu_bar["parts"][1][3]
    assert lay["budget_x"] == 190 + int(round(0.85 * g["avail_mem_before_load_gb"] * px))
    assert gpu_bar["headroom"][2:4] == (lay["budget_x"], 190 + 600)
    x0, x1, short = gpu_bar["over"]
    assert (x0, x1) == (lay["budget_x"], gpu_bar["parts"][2][3]) and short == -g["kv_gb"]
    assert [b["top"] for b in lay["bars"]] == [78, 78 + 34 + 26]


def test_a_plan_that_fits_has_its_kv_pool_and_nothing_over():
    r = planned({"tp_size": 2, "mem_fraction_static": 0.85, "context_length": 32768})
    gpu_bar = SM.layout(r)["bars"][1]
    assert [p[0] for p in gpu_bar["parts"]] == ["weights", "mamba state", "KV cache"]
    assert gpu_bar["over"] is None
    # the static parts end at the budget line (to the pixel): the headroom starts there
    assert abs(gpu_bar["parts"][-1][3] - gpu_bar["headroom"][2]) <= 1


def test_the_svg_is_well_formed_sized_and_its_words_escaped():
    r = planned(SEED, gpus=[{"name": "GPU <&> \"quoted\"", "memory_total_mib": 49140}] * 2)
    svg = r["chart_svg"]
    root = ET.fromstring(svg)
    assert root.tag == NS + "svg" and root.get("width") == "1000"
    assert int(root.get("height")) == 78 + 2 * 60 + 56 + 17 * len(
        [line for line in r["explain"] if line.startswith(("Outcome:", "  fix ", "  does not help:", "note:"))]) + 16
    texts = ["".join(t.itertext()) for t in root.iter(NS + "text")]
    assert "GPU 0" in texts and "GPU <&> \"quoted\"" in texts      # its number and name on two lines
    assert any(t.startswith("Outcome: kv_pool_oom") for t in texts)
    assert any(t.startswith("fix max_running_requests=32 -> context_truncated") for t in texts)
    assert "KV cache none (%.2f GiB short)" % -r["per_gpu"][0]["kv_gb"] in texts
    parts = [(rect.get("class"), float(rect.get("data-gib"))) for rect in root.iter(NS + "rect")
             if (rect.get("class") or "").startswith("part")]
    g = r["per_gpu"][0]
    assert parts[:4] == [("part headroom", g["headroom_gb"]), ("part weights", g["weights_gb"]),
                         ("part spec-verify", g["spec_reserve_gb"]), ("part mamba-state", g["mamba_gb"])]


def test_a_refused_launch_still_carries_its_picture():
    with open(os.path.join(ROOT, "playbooks", "vars", "qwen3.6-27b.config.json")) as fh:
        config = json.load(fh)
    try:
        SM.plan_request(model_config=config, gpus=[A6000, A6000], args=SEED, weights_bytes=55 * 10 ** 9, chart=True)
    except SM.PlanRefused as exc:
        assert exc.result["outcome"] == "kv_pool_oom"
        assert exc.result["chart_svg"].startswith("<svg ")
    else:
        raise AssertionError("the seed's launch was not refused")
    # without chart: no picture
    again, dummy = SM.plan_request(model_config=config, gpus=[A6000, A6000], args=SEED, weights_bytes=55 * 10 ** 9,
                                   fail_on=())
    assert "chart_svg" not in again


def test_the_readmes_picture_is_what_plan_yml_draws_today():
    """docs/images/plan-qwen3.6-27b-2x-a6000.svg (README) is plan.yml's chart with its defaults: regenerate it with
    ansible-playbook playbooks/plan.yml -e plan_chart=$PWD/docs/images/plan-qwen3.6-27b-2x-a6000.svg"""
    import yaml  # pylint: disable=import-outside-toplevel
    with open(os.path.join(ROOT, "playbooks", "plan.yml")) as fh:
        play = yaml.safe_load(fh)[0]["vars"]
    with open(os.path.join(ROOT, "playbooks", "vars", "qwen3.6-27b.config.json")) as fh:
        config = json.load(fh)
    result, dummy = SM.plan_request(model_config=config, gpu_profile=play["plan_gpu_profile"],
                                    gpu_count=play["plan_gpu_count"], args=play["plan_args"], fail_on=(), chart=True)
    with open(os.path.join(ROOT, "docs", "images", "plan-qwen3.6-27b-2x-a6000.svg")) as fh:
        assert fh.read() == result["chart_svg"], "the README's picture is stale: regenerate it (docstring)"


def test_a_gpu_name_too_long_for_the_left_margin_is_cut_not_clipped():
    """#60: "GPU 0 CPU (lab, --device cpu)" ran past the picture's left edge. The number and the name are two lines
    ending 10 px before the bar; a name longer than LABEL_CHARS is cut with an ellipsis (the full name is in the
    plan's per_gpu)."""
    r = planned({"tp_size": 2}, gpus=[{"name": "CPU (lab, --device cpu)", "memory_total_mib": 49140},
                                      {"name": "NVIDIA RTX PRO 6000 Blackwell Server Edition", "memory_total_mib": 49140}])
    root = ET.fromstring(r["chart_svg"])
    texts = {"".join(t.itertext()): t for t in root.iter(NS + "text")}
    assert "CPU (lab, --device cpu)" in texts
    cut = "NVIDIA RTX PRO 6000 Bla\u2026"
    assert cut in texts and len(cut) == 24
    for words in ("GPU 0", "GPU 1", "CPU (lab, --device cpu)", cut):
        t = texts[words]
        assert t.get("text-anchor") == "end" and int(t.get("x")) == 190 - 10 and t.get("font-size") == "12"
        assert 7 * len(words) <= 190 - 10 - 6, words          # even at 7 px a character, 6 px short of the left edge


def test_a_launch_that_died_is_drawn_as_it_died_not_as_its_replay_that_fits():
    """#60 item 3 on the real capped launch that died at a fraction of 0.0001: the logged numbers replay to a pool that
    fits, but the picture and the words lead with the death, plan the free memory SGLang saw (its own profile:
    -50666 tokens), and the fix is one that works from there; the replay is named as a replay."""
    import sys  # pylint: disable=import-outside-toplevel
    sys.path.insert(0, os.path.join(ROOT, "tests", "lab"))
    import tiny_llama  # pylint: disable=import-outside-toplevel
    facts = load_module_util("logs").parse_log(fixture_text("sglang_logs", "real_cpu_kv_pool_oom_capped.log"))["facts"]
    measured = {k: facts[k] for k in ("avail_mem_before_load_gb", "avail_mem_after_load_gb",
                                      "profiled_max_total_num_tokens")}
    config = json.loads(tiny_llama.files()["config.json"])
    args = {"mem_fraction_static": 0.0001, "max_total_tokens": 8192}
    r, dummy = SM.plan_request(model_config=config, gpus=[{"name": "CPU (lab, --device cpu)", "memory_total_mib": 24576}],
                               args=args, measured=measured, fail_on=(), launch_failure="kv_pool_oom", chart=True)
    assert r["outcome"] == "kv_pool_oom" and r["max_total_num_tokens"] == -50666     # what SGLang itself profiled
    assert r["launch_failure"] == "kv_pool_oom" and r["replay"]["outcome"] == "fits"
    assert r["replay"]["max_total_num_tokens"] > 0
    assert r["explain"][0].startswith("Launch: died of kv_pool_oom (SGLang's pool error) with 21.22 GiB free before "
                                      "loading and 21.22 GiB after (logged); SGLang's own profile came to -50666 tokens")
    assert r["explain"][1].startswith("Replay: the logged numbers alone give %d KV tokens - not what happened"
                                      % r["replay"]["max_total_num_tokens"])
    fixes = [line for line in r["explain"] if line.startswith("  fix ")]
    assert fixes and re.match(r"  fix mem_fraction_static=0\.\d+ -> fits, 8192 tokens", fixes[0]), fixes
    root = ET.fromstring(r["chart_svg"])
    texts = ["".join(t.itertext()) for t in root.iter(NS + "text")]
    assert texts[0] == ("Launch died: kv_pool_oom - LlamaForCausalLM, tp_size=1, mem_fraction_static=0.0001: no KV pool "
                        "as SGLang saw it")
    assert texts[1].startswith("SGLang 0.5.9, per GPU: 21.22 GiB free")
    assert not any("fits" in t and "KV tokens" in t for t in texts[:2])
    assert any(t.startswith("Launch: died of kv_pool_oom") for t in texts)
    assert any(t.startswith("Replay: the logged numbers alone give") for t in texts)
