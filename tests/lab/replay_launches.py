"""Replay real SGLang 0.5.9 launches through the planner with the numbers each launch logged, next to the KV tokens
SGLang allocated (README's "plan next to reality" figure):

    python3 tests/lab/replay_launches.py [LOG ...]     (default: tests/fixtures/sglang_logs/real_cpu_pool_*.log)

Each log is a real launch on the CPU engine without a pool cap (recorded with tests/lab/tiny_llama.py's model, whose
config.json is the planner's input). The launch's own arguments (mem_fraction_static, page_size) come from its
server_args line; the free memory before and after loading from its "Load weight" lines. Standard library only.

On a CPU the free memory is the machine's (psutil's MemAvailable): SGLang reads it again when it profiles the pool,
about a second after the logged reading, while its tokenizer and detokenizer processes are still importing - so the
two readings differ by tens of MiB, and the log rounds both to 0.01 GB. `difference MiB` is that gap, in memory.
"""
import glob
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "plugins"))
sys.path.insert(0, HERE)
from module_utils import logs as sglang_log  # noqa: E402  pylint: disable=wrong-import-position
from module_utils import plan as sglang_memory  # noqa: E402  pylint: disable=wrong-import-position
import tiny_llama  # noqa: E402  pylint: disable=wrong-import-position

DEFAULT = os.path.join(ROOT, "tests", "fixtures", "sglang_logs", "real_cpu_pool_*.log")
_ARG = r"\b%s=([0-9.]+|None)"


def launch_args(text):
    """mem_fraction_static and page_size as the launch's server_args line has them."""
    line = next(ln for ln in text.splitlines() if "server_args=ServerArgs(" in ln)
    out = {}
    for key, cast in (("mem_fraction_static", float), ("page_size", int)):
        mm = re.search(_ARG % key, line)
        if mm and mm.group(1) != "None":
            out[key] = cast(mm.group(1))
    return out


def replay(path, config=None):
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    facts = sglang_log.parse_log(text)["facts"]
    args = launch_args(text)
    config = config or json.loads(tiny_llama.files()["config.json"])
    measured = {k: facts[k] for k in ("avail_mem_before_load_gb", "avail_mem_after_load_gb")}
    gpus = [{"name": "cpu", "memory_total_mib": 1024 * 24}]     # unused: the measured numbers replace it
    plan = sglang_memory.plan(config, gpus, args, measured=measured)
    planned, actual = plan["max_total_num_tokens"], facts["max_total_num_tokens"]
    cell = plan["cell_size_bytes"]
    return {"log": os.path.basename(path), "mem_fraction_static": args.get("mem_fraction_static"),
            "page_size": args.get("page_size", 1), "free_before_gb": measured["avail_mem_before_load_gb"],
            "planned": planned, "sglang": actual, "difference": planned - actual,
            "difference_mib": round((planned - actual) * cell / 2.0 ** 20, 1),
            "relative": round((planned - actual) / float(actual), 5)}


def main(argv):
    paths = argv or sorted(glob.glob(DEFAULT))
    head = ("launch", "fraction", "page", "free GB", "planned", "SGLang", "diff MiB", "diff %")
    print("%-30s %8s %5s %9s %12s %12s %9s %8s" % head)
    for path in paths:
        r = replay(path)
        print("%-30s %8s %5d %9.2f %12d %12d %9s %8.2f" % (
            r["log"], r["mem_fraction_static"], r["page_size"], r["free_before_gb"], r["planned"], r["sglang"],
            r["difference_mib"], 100 * r["relative"]))


if __name__ == "__main__":
    main(sys.argv[1:])
