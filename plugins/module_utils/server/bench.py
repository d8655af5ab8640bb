# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""SGLang's own serving benchmark (``python -m sglang.bench_serving``) run from the server's venv against the server,
and its record beside the launch record (#60 item 2): ``<state_dir>/<name>.bench.json``, the last run per target
(the server itself, or the router in front of it) with the one before, so a later run shows the change.

The dataset is ``random-ids`` (token ids drawn from the model's own tokenizer: no download - ``random`` samples
ShareGPT, which it downloads); the key goes in the environment (``OPENAI_API_KEY``, which bench_serving 0.5.9 sends
as a bearer token), never on argv. ``BenchRun(params, run).ensure()`` returns the module's result."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import shutil
import tempfile
import time

from ..host import Failed, read_json, write_json
from .argv import local_url

# (key of bench_serving's result line, the record's name, how it is said)
METRICS = (
    ("completed", "completed", "%d"),
    ("request_throughput", "request_throughput", "%.2f req/s"),
    ("output_throughput", "output_tokens_per_s", "%.1f output tok/s"),
    ("median_ttft_ms", "ttft_p50_ms", "TTFT p50 %.1f ms"),
    ("p99_ttft_ms", "ttft_p99_ms", "p99 %.1f ms"),
    ("median_itl_ms", "itl_p50_ms", "ITL p50 %.1f ms"),
    ("p99_itl_ms", "itl_p99_ms", "p99 %.1f ms"),
    ("duration", "duration_s", "%.1f s"),
)

BENCH_ARGUMENT_SPEC = dict(
    name=dict(type="str", required=True),
    state_dir=dict(type="path", default="/var/lib/gpuserve-sglang"),
    state=dict(type="str", default="run", choices=["run", "read"]),
    python=dict(type="path"),
    model_path=dict(type="path"),
    url=dict(type="str"),
    host=dict(type="str", default="127.0.0.1"),
    port=dict(type="int", default=30000),
    target=dict(type="str", default="server"),
    api_key=dict(type="str", no_log=True),
    num_prompts=dict(type="int", default=32),
    input_len=dict(type="int", default=128),
    output_len=dict(type="int", default=32),
    max_concurrency=dict(type="int", default=4),
    timeout=dict(type="int", default=600),
)


class BenchFailed(Failed):
    """The benchmark could not run or its requests failed: ``msg`` and the result so far."""


def bench_record_path(state_dir, name):
    return os.path.join(state_dir, "%s.bench.json" % name)


def bench_argv(python, url, model_path, num_prompts, input_len, output_len, max_concurrency, output_file):
    """bench_serving's command line: SGLang's native /generate, a bounded random-ids dataset, one JSON line out."""
    return [python, "-m", "sglang.bench_serving", "--backend", "sglang", "--base-url", url,
            "--model", model_path, "--tokenizer", model_path, "--dataset-name", "random-ids",
            "--num-prompts", str(num_prompts), "--random-input-len", str(input_len),
            "--random-output-len", str(output_len), "--random-range-ratio", "1.0",
            "--max-concurrency", str(max_concurrency), "--seed", "1", "--disable-tqdm",
            "--output-file", output_file]


def parse_bench(text):
    """The last JSON line bench_serving appended, as the record's metrics; None when there is none."""
    for line in reversed((text or "").strip().splitlines()):
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict) and "request_throughput" in doc:
            out = dict((name, doc.get(key)) for key, name, dummy in METRICS)
            # (0.5.9 writes no num_prompts: the requests asked are the module's own, BenchRun.measure)
            for key in ("max_concurrency", "random_input_len", "random_output_len"):
                out[key] = doc.get(key)
            return out
    return None


def bench_summary(target, run, before=None):
    """One line: the target, requests completed of asked, and each metric with its change from the run before."""
    parts = []
    for dummy, name, fmt in METRICS[1:]:
        value = run.get(name)
        if not isinstance(value, (int, float)):
            continue
        words = fmt % value
        old = (before or {}).get(name)
        if isinstance(old, (int, float)) and old:
            words += " (%+.0f %%)" % (100.0 * (value - old) / old)
        parts.append(words)
    return "%s: %s of %s requests, %s" % (target, run.get("completed"), run.get("num_prompts"), ", ".join(parts))


class BenchRun(object):
    """One module call: read the record, or run the benchmark and record it (``run``: the module's run_command)."""

    def __init__(self, params, run, check_mode=False):
        self.p = params
        self.run = run
        self.check_mode = check_mode
        self.path = bench_record_path(params["state_dir"], params["name"])

    def ensure(self):
        record = read_json(self.path) or {}
        if self.p["state"] == "read":
            return dict(changed=False, record=self.path, runs=record, lines=[
                bench_summary(t, r["last"], r.get("previous")) for t, r in sorted(record.items()) if r.get("last")])
        for key in ("python", "model_path"):
            if not self.p[key]:
                raise BenchFailed("%s is required with state=run (the server's venv interpreter and its model)" % key,
                                  {"changed": False})
        url = (self.p["url"] or local_url(self.p["host"], self.p["port"])).rstrip("/")
        if self.check_mode:
            return dict(changed=True, record=self.path, url=url, target=self.p["target"])
        run = self.measure(url)
        before = (record.get(self.p["target"]) or {}).get("last")
        if run["completed"] != run["num_prompts"]:
            raise BenchFailed("%s: %s of %s requests completed (%s): the server did not answer every request; see its "
                              "log" % (url, run["completed"], run["num_prompts"], self.p["target"]),
                              {"changed": False, "run": run})
        record[self.p["target"]] = {"last": run, "previous": before}
        write_json(self.path, record, indent=1)
        return dict(changed=True, record=self.path, url=url, target=self.p["target"], run=run, previous=before,
                    line=bench_summary(self.p["target"], run, before))

    def measure(self, url):
        p = self.p
        work = tempfile.mkdtemp(prefix="gpuserve-bench-")
        try:
            out_file = os.path.join(work, "result.jsonl")
            env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HOME": os.path.join(work, "hf"),
                   "OPENAI_API_KEY": p["api_key"] or ""}
            argv = bench_argv(p["python"], url, p["model_path"], p["num_prompts"], p["input_len"], p["output_len"],
                              p["max_concurrency"], out_file)
            t0 = time.time()
            rc, out, err = self.run(["timeout", str(p["timeout"])] + argv, environ_update=env, cwd=work)
            text = ""
            if os.path.exists(out_file):
                with open(out_file) as f:
                    text = f.read()
            run = parse_bench(text)
            if rc != 0 or run is None:
                raise BenchFailed("sglang.bench_serving against %s %s (rc=%d): %s" % (
                    url, "timed out after %d s" % p["timeout"] if rc == 124 else "failed", rc,
                    (err or out).strip()[-2000:]), {"changed": False})
            run.update(num_prompts=p["num_prompts"], at=int(t0), url=url, wall_s=round(time.time() - t0, 1))
            return run
        finally:
            shutil.rmtree(work, ignore_errors=True)
