"""chart_svg and layout (plan/picture.py): the geometry from the plan's numbers, a well-formed SVG whose words are
escaped, and the parts drawn in the stacking order. The picture as a browser paints it: tests/integration/
test_plan_chart_render.py (headless Chromium)."""
import json
import os
import xml.etree.ElementTree as ET

from unit_helpers import ROOT, load_module_util

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
    assert "GPU 0 GPU <&> \"quoted\"" in texts
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
