"""Which release a plan is for (plan/release.py): read from the sglang installed in real venvs (made here with
python -m venv, the package installed by pip from a wheel written by tests/lab/make_wheel.py), a release the planner
was not proved for refused by name, and nothing planned then (plan_request)."""
import json
import os
import subprocess
import sys

import pytest

from unit_helpers import FIXTURES, ROOT, load_module_util

SM = load_module_util("plan")
sys.path.insert(0, os.path.join(ROOT, "tests", "lab"))
import make_wheel  # noqa: E402  (tests/lab/make_wheel.py, by path)

A6000 = {"name": "NVIDIA RTX A6000", "memory_total_mib": 49140}


def venv(tmp_path, name, *releases):
    """A real venv at tmp_path/name with sglang==<release> installed by pip for each release given (0, 1 or more)."""
    home = tmp_path / name
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(home)], check=True)
    site = home / "lib" / ("python%d.%d" % sys.version_info[:2]) / "site-packages"
    assert site.is_dir(), site
    for release in releases:
        wheel = make_wheel.make_wheel(str(tmp_path / "wheels"), "sglang", release)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-index",
                        "--no-deps", "--upgrade", "--target", str(site), wheel], check=True)
    return str(home / "bin" / "python"), str(site)


def test_the_release_installed_in_the_venv_is_the_plans(tmp_path):
    python, site = venv(tmp_path, "v", "0.5.9")
    assert SM.installed_release(python) == ("0.5.9", os.path.join(site, "sglang-0.5.9.dist-info"))
    release, source = SM.resolve_release(None, python)
    assert release == "0.5.9"
    assert source == "installed (%s)" % os.path.join(site, "sglang-0.5.9.dist-info")
    # asking for the release that is installed is the same plan
    assert SM.resolve_release("0.5.9", python) == (release, source)


def test_a_release_not_proved_is_refused_by_name(tmp_path):
    python, dummy = venv(tmp_path, "v", "0.5.22")
    with pytest.raises(SM.PlanError) as exc:
        SM.resolve_release(None, python)
    msg = str(exc.value)
    assert msg.startswith("SGLang 0.5.22: this planner's arithmetic is proved for SGLang 0.5.9, 0.5.23 only")
    assert "nothing was planned" in msg and "sglang_venv_sglang_version: 0.5.9" in msg
    assert "sglang_server_plan: false" in msg
    # asked for, with nothing installed: the same refusal
    with pytest.raises(SM.PlanError, match=r"^SGLang 0\.5\.22: "):
        SM.resolve_release("0.5.22")
    # both releases the oracle proves are planned
    assert SM.KNOWN_RELEASES == ("0.5.9", "0.5.23")
    assert SM.resolve_release("0.5.23") == ("0.5.23", "asked for (release)")


def test_plan_itself_refuses_a_release_it_has_no_rules_for():
    """plan() called directly (not through resolve_release) with a release it has no rules for: refused by name,
    never 0.5.9's arithmetic under another release's name; its rules are exactly the releases it knows."""
    memory = load_module_util("plan.memory")
    assert sorted(memory.RULES) == sorted(SM.KNOWN_RELEASES)
    with open(os.path.join(FIXTURES, "model_configs", "llama-3.1-8b.json")) as fh:
        config = json.load(fh)
    assert SM.plan(config, [A6000], {"tp_size": 1}, release="0.5.23")["outcome"] == "fits"
    with pytest.raises(SM.PlanError, match=r"^release=0\.5\.22: the planner knows SGLang 0\.5\.23, 0\.5\.9 only .*"
                                           r"nothing was planned$"):
        SM.plan(config, [A6000], {"tp_size": 1}, release="0.5.22")


def test_a_release_asked_for_that_is_not_the_one_installed_is_refused(tmp_path):
    python, site = venv(tmp_path, "v", "0.5.9")
    with pytest.raises(SM.PlanError) as exc:
        SM.resolve_release("0.5.23", python)
    assert str(exc.value).startswith("release=0.5.23 but %s has sglang 0.5.9 installed (%s)" % (
        python, os.path.join(site, "sglang-0.5.9.dist-info")))


def test_no_sglang_installed_plans_the_default(tmp_path):
    python, dummy = venv(tmp_path, "empty")
    assert SM.installed_release(python) == (None, None)
    assert SM.resolve_release(None, python) == (
        SM.DEFAULT_RELEASE, "the default (no sglang installed beside %s)" % python)
    assert SM.resolve_release() == (SM.DEFAULT_RELEASE, "the default")
    assert SM.resolve_release("0.5.9") == ("0.5.9", "asked for (release)")
    assert SM.DEFAULT_RELEASE in SM.KNOWN_RELEASES


def test_two_sglang_in_one_environment_are_refused(tmp_path):
    python, site = venv(tmp_path, "v", "0.5.9")
    # a second dist-info beside the first (a copy left by an interrupted upgrade): which runs is unknown
    os.rename(os.path.join(site, "sglang-0.5.9.dist-info"), os.path.join(site, "sglang-0.5.8.dist-info"))
    venv(tmp_path, "v", "0.5.9")
    with pytest.raises(SM.PlanError, match=r"more than one sglang .*sglang-0\.5\.8\.dist-info.*sglang-0\.5\.9"):
        SM.installed_release(python)


def test_debian_dist_packages_are_read(tmp_path):
    prefix = tmp_path / "prefix"
    dist = prefix / "lib" / "python3" / "dist-packages" / "sglang-0.5.9.dist-info"
    dist.mkdir(parents=True)
    (prefix / "bin").mkdir()
    python = str(prefix / "bin" / "python3")
    assert SM.installed_release(python) == ("0.5.9", str(dist))


def model_config():
    with open(os.path.join(FIXTURES, "model_configs", "qwen3.6-27b.json")) as fh:
        return json.load(fh)


def test_plan_request_plans_the_installed_release(tmp_path):
    python, site = venv(tmp_path, "v", "0.5.9")
    result, dummy = SM.plan_request(model_config=model_config(), gpus=[A6000, A6000], args={"tp_size": 2},
                                    weights_bytes=55 * 10 ** 9, fail_on=(), python=python)
    assert result["release"] == "0.5.9"
    assert result["release_source"] == "installed (%s)" % os.path.join(site, "sglang-0.5.9.dist-info")
    assert len(result["per_gpu"]) == 2


def test_plan_request_refuses_an_unknown_release_and_plans_nothing(tmp_path):
    python, dummy = venv(tmp_path, "v", "0.5.22")
    with pytest.raises(SM.PlanRefused) as exc:
        SM.plan_request(model_config=model_config(), gpus=[A6000, A6000], args={"tp_size": 2},
                        weights_bytes=55 * 10 ** 9, python=python)
    assert exc.value.msg.startswith("SGLang 0.5.22: ")
    assert exc.value.result == {"release": None}
    assert "per_gpu" not in exc.value.result


def test_0_5_23_is_planned_with_its_own_arithmetic_in_its_own_words(tmp_path):
    """#47 item 1: a venv with sglang 0.5.23 is planned by 0.5.23's rules (tests/oracle proves them: `make oracle`
    prints oracle agreement 0.5.23 N/M): on the A6000 (48 GiB, 4096-token chunk, decode graph of 32) 0.5.23 reserves
    its prefill graph too, so its automatic fraction is lower than 0.5.9's; 0.5.9's words for the args are refused
    with 0.5.23's; what the plan cannot know is refused by name."""
    python, dummy = venv(tmp_path, "v", "0.5.23")
    common = dict(model_config=model_config(), gpus=[A6000, A6000], weights_bytes=55 * 10 ** 9, fail_on=())
    new, dummy = SM.plan_request(args={"tp_size": 2}, python=python, **common)
    old, dummy = SM.plan_request(args={"tp_size": 2}, release="0.5.9", **common)
    assert new["release"] == "0.5.23" and old["release"] == "0.5.9"
    # 0.5.9: 512 + 1.5 x 4096 + 2 x 32 + 256 = 6976 MiB; 0.5.23 adds its prefill graph's 50 sizes x 8 MiB (Qwen3.5
    # keeps its prefill graph: multimodal_breakable_cuda_graph_supported_model_archs)
    assert (old["reserved_mib"], new["reserved_mib"]) == (6976, 6976 + 400)
    assert new["mem_fraction_static"] < old["mem_fraction_static"]
    assert new["max_total_num_tokens"] < old["max_total_num_tokens"]
    # 0.5.23's default mamba strategy keeps the extra buffer: 5 state slots per running request, not 3
    assert new["max_running_requests"] == new["max_mamba_cache_size"] // 5 < old["max_running_requests"]
    with pytest.raises(SM.PlanRefused, match=r"args\.cuda_graph_max_bs: SGLang 0\.5\.23 has no --cuda-graph-max-bs "
                                             r"\(it is --cuda-graph-max-bs-decode there\)"):
        SM.plan_request(args={"tp_size": 2, "cuda_graph_max_bs": 16}, python=python, **common)
    words, dummy = SM.plan_request(args={"tp_size": 2, "cuda_graph_max_bs_decode": 16}, python=python, **common)
    assert words["cuda_graph_max_bs"] == 16
    with pytest.raises(SM.PlanRefused, match=r"speculative_draft_model_path: SGLang 0\.5\.23 sizes the draft "
                                             r"model's KV inside the target's pool"):
        SM.plan_request(args={"tp_size": 2, "speculative_algorithm": "EAGLE",
                              "speculative_draft_model_path": str(tmp_path / "no-draft")}, python=python, **common)
    draft = tmp_path / "draft"
    draft.mkdir()
    (draft / "config.json").write_text(json.dumps(dict(model_config(), num_hidden_layers=1)))
    eagle, dummy = SM.plan_request(args={"tp_size": 2, "speculative_algorithm": "EAGLE",
                                         "speculative_draft_model_path": str(draft)}, python=python, **common)
    assert eagle["cell_size_bytes"] > new["cell_size_bytes"]       # the draft's layer rides in every token
    with pytest.raises(SM.PlanRefused, match=r"pipeline stages on SGLang 0\.5\.23 are not planned yet"):
        SM.plan_request(args={"tp_size": 1, "pp_size": 2}, python=python, **common)
    with pytest.raises(SM.PlanRefused, match=r"goal=throughput: choosing the args is proved for SGLang 0\.5\.9 only"):
        SM.plan_request(args={}, goal="throughput", python=python, **common)
