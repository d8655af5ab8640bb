"""Benchmark (not a test): parse a 200 000-line SGLang log; report lines/s and peak memory.

Targets (issue 3): >= 200 000 lines/s on one core; the streaming path's memory independent of the
log's length. Run: .venv/bin/python tests/bench/bench_log_parser.py
"""
import os
import sys
import tempfile
import time
import tracemalloc

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "plugins"))
from module_utils import logs as sglang_log  # noqa: E402


def make_log(n):
    with open(os.path.join(ROOT, "tests", "fixtures", "sglang_logs", "ready_tp2_hybrid_nextn_ms.log")) as fh:
        start = fh.read().split("\n", 1)[1]
    body = ("[2026-11-20 09:20:%02d TP0] Decode batch, #running-req: 12, #full token: 20480, full token usage: 0.07, "
            "mamba num: 12, mamba usage: 0.75, cuda graph: True, gen throughput (token/s): 412.33, #queue-req: 0\n")
    access = '[2026-11-20 09:20:01] INFO:     127.0.0.1:50000 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
    lines = start.splitlines(True)
    i = 0
    while len(lines) < n:
        lines.append(body % (i % 60) if i % 3 else access)
        i += 1
    return "".join(lines[:n])


def main():
    n = 200000
    text = make_log(n)
    best = None
    for _round in range(3):
        t0 = time.perf_counter()
        r = sglang_log.parse_log(text)
        dt = time.perf_counter() - t0
        best = dt if best is None or dt < best else best
    assert r["outcome"] == "ready"
    print("parse_log: %d lines in %.3f s = %.0f lines/s (target >= 200000)" % (n, best, n / best))
    # streaming path: peak memory for 20k vs 200k lines must not grow with length
    peaks = {}
    for m in (20000, 200000):
        fd, path = tempfile.mkstemp()
        with os.fdopen(fd, "w") as fh:
            fh.write(make_log(m))
        tracemalloc.start()
        sglang_log.parse_file(path)
        peaks[m] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        os.unlink(path)
    print("parse_file peak memory: %d lines -> %.1f KiB, %d lines -> %.1f KiB (ratio %.2f, target ~1)"
          % (20000, peaks[20000] / 1024.0, 200000, peaks[200000] / 1024.0, peaks[200000] / float(peaks[20000])))


if __name__ == "__main__":
    main()
