"""Plan next to reality: real SGLang 0.5.9 launches (CPU engine, recorded in tests/fixtures/sglang_logs/real_cpu_*)
replayed through plan() with the numbers each launch logged (tests/lab/replay_launches.py, README's figure)."""
import glob
import json
import os
import sys

import pytest

from unit_helpers import FIXTURES, ROOT, fixture_text, load_module_util

sys.path.insert(0, os.path.join(ROOT, "tests", "lab"))
import replay_launches  # noqa: E402  pylint: disable=wrong-import-position
import tiny_llama  # noqa: E402  pylint: disable=wrong-import-position

SM = load_module_util("plan")
SL = load_module_util("logs")
POOLS = sorted(glob.glob(os.path.join(FIXTURES, "sglang_logs", "real_cpu_pool_*.log")))


def test_at_least_three_uncapped_launches_with_other_fractions_and_page_sizes():
    rows = [replay_launches.replay(p) for p in POOLS]
    assert len({r["mem_fraction_static"] for r in rows}) >= 3 and {r["page_size"] for r in rows} >= {1, 16, 64}


@pytest.mark.parametrize("path", POOLS, ids=os.path.basename)
def test_the_replay_of_a_real_launch_is_sglangs_pool_up_to_what_the_cpu_moved(path):
    """The arithmetic is SGLang's (rest = free after load - free before load x (1 - fraction), over the cell, down to
    a page): what stays is the machine's free memory moving between the logged reading and SGLang's own reading when
    it profiles (its tokenizer and detokenizer still importing) - always a drop, 20-55 MiB in these recordings - and
    the log's rounding to 0.01 GB (at most 10 MiB)."""
    r = replay_launches.replay(path)
    assert r["sglang"] % r["page_size"] == 0 and r["planned"] % r["page_size"] == 0
    assert r["planned"] >= r["sglang"]
    assert r["difference_mib"] <= 64


def test_a_capped_launch_replays_to_exactly_its_pool():
    """--max-total-tokens below what memory holds: the plan is the cap, as SGLang allocated it, token for token."""
    facts = SL.parse_log(fixture_text("sglang_logs", "real_cpu_ready_capped.log"))["facts"]
    config = json.loads(tiny_llama.files()["config.json"])
    plan = SM.plan(config, [{"name": "cpu", "memory_total_mib": 24576}],
                   {"mem_fraction_static": facts["mem_fraction_static"], "max_total_tokens": 8192},
                   measured={k: facts[k] for k in ("avail_mem_before_load_gb", "avail_mem_after_load_gb")})
    assert plan["max_total_num_tokens"] == facts["max_total_num_tokens"] == 8192
    assert plan["context_length"] == facts["context_len"] == 2048
