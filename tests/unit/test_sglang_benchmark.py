"""#60 item 2: SGLang's own bench_serving run from the server's venv, its result kept beside the launch record
(module sglang_benchmark, plugins/module_utils/server/bench.py). Here the command line, the reading of the line
bench_serving 0.5.9 appends (its keys, from its source: run_benchmark's ``result`` dict), the record with the run before
and the change, and the refusals - with a fake bench_serving that writes what the real one writes; the lab runs the
real one against the real server (tests/lab/molecule/real)."""
import json
import os

import pytest

from unit_helpers import load_module_util

S = load_module_util("server")
KEY = "sk-bench-test-key-0123456789"


def bench_line(completed=32, rps=6.1, tok=195.2, ttft=85.0, itl=12.5):
    """Keys bench_serving 0.5.9 writes to --output-file (a subset of them; read off a real run in the lab: it writes
    no num_prompts, the requests asked are the module's own)."""
    return json.dumps({"backend": "sglang", "dataset_name": "random-ids", "max_concurrency": 4,
                       "random_input_len": 128, "random_output_len": 32, "duration": 5.2, "completed": completed,
                       "request_throughput": rps, "output_throughput": tok, "median_ttft_ms": ttft,
                       "p99_ttft_ms": ttft * 3, "median_itl_ms": itl, "p99_itl_ms": itl * 4})


class FakeBench(object):
    """The module's run_command: records each call; writes ``line`` to bench_serving's --output-file."""

    def __init__(self, line, rc=0):
        self.line, self.rc, self.calls = line, rc, []

    def __call__(self, argv, environ_update=None, cwd=None):
        self.calls.append((argv, dict(environ_update or {})))
        if self.line is not None:
            with open(argv[argv.index("--output-file") + 1], "a") as f:
                f.write(self.line + "\n")
        return self.rc, "", "Traceback: boom" if self.rc else ""


def params(tmp_path, **kw):
    p = dict(name="tiny", state_dir=str(tmp_path), state="run", python="/opt/sglang/venv/bin/python",
             model_path="/srv/models/tiny", url=None, host="0.0.0.0", port=30000, target="server", api_key=KEY,
             num_prompts=32, input_len=128, output_len=32, max_concurrency=4, timeout=600)
    p.update(kw)
    return p


def test_the_command_line_is_sglangs_own_bounded_and_never_holds_the_key(tmp_path):
    fake = FakeBench(bench_line())
    r = S.BenchRun(params(tmp_path), fake).ensure()
    argv, env = fake.calls[0]
    assert argv[:2] == ["timeout", "600"] and argv[2:5] == ["/opt/sglang/venv/bin/python", "-m", "sglang.bench_serving"]
    assert argv[argv.index("--base-url") + 1] == "http://127.0.0.1:30000"          # a wildcard bind: loopback
    assert argv[argv.index("--dataset-name") + 1] == "random-ids"                   # no ShareGPT download
    for flag, value in (("--num-prompts", "32"), ("--max-concurrency", "4"), ("--random-input-len", "128"),
                        ("--random-output-len", "32"), ("--tokenizer", "/srv/models/tiny")):
        assert argv[argv.index(flag) + 1] == value, flag
    assert KEY not in " ".join(argv) and env["OPENAI_API_KEY"] == KEY and env["HF_HUB_OFFLINE"] == "1"
    assert r["changed"] is True and r["run"]["completed"] == 32 and r["previous"] is None
    assert r["line"] == ("server: 32 of 32 requests, 6.10 req/s, 195.2 output tok/s, TTFT p50 85.0 ms, p99 255.0 ms, "
                         "ITL p50 12.5 ms, p99 50.0 ms, 5.2 s")


def test_a_later_run_shows_the_change_and_status_reads_both(tmp_path):
    S.BenchRun(params(tmp_path), FakeBench(bench_line())).ensure()
    r = S.BenchRun(params(tmp_path), FakeBench(bench_line(rps=6.71, tok=175.0))).ensure()
    assert r["previous"]["request_throughput"] == 6.1
    assert "6.71 req/s (+10 %)" in r["line"] and "175.0 output tok/s (-10 %)" in r["line"]
    assert "TTFT p50 85.0 ms (+0 %)" in r["line"]
    record = S.bench_record_path(str(tmp_path), "tiny")
    assert record == os.path.join(str(tmp_path), "tiny.bench.json") and KEY not in open(record).read()
    router = S.BenchRun(params(tmp_path, target="router", url="http://10.0.3.1:30080/"), FakeBench(bench_line()))
    assert router.ensure()["url"] == "http://10.0.3.1:30080"
    read = S.BenchRun(params(tmp_path, state="read", python=None, model_path=None), None).ensure()
    assert read["changed"] is False and sorted(read["runs"]) == ["router", "server"]
    assert read["lines"][1] == r["line"] and read["lines"][0].startswith("router: 32 of 32 requests")


def test_requests_that_did_not_complete_fail_and_keep_the_record(tmp_path):
    S.BenchRun(params(tmp_path), FakeBench(bench_line())).ensure()
    before = open(S.bench_record_path(str(tmp_path), "tiny")).read()
    said = r"http://127.0.0.1:30000: 30 of 32 requests completed \(server\): the server did not answer every request"
    with pytest.raises(S.BenchFailed, match=said):
        S.BenchRun(params(tmp_path), FakeBench(bench_line(completed=30))).ensure()
    assert open(S.bench_record_path(str(tmp_path), "tiny")).read() == before


def test_a_bench_that_dies_or_times_out_is_said_with_its_words(tmp_path):
    said = r"sglang.bench_serving against http://127.0.0.1:30000 failed \(rc=1\): Traceback: boom"
    with pytest.raises(S.BenchFailed, match=said):
        S.BenchRun(params(tmp_path), FakeBench(None, rc=1)).ensure()
    with pytest.raises(S.BenchFailed, match=r"timed out after 600 s \(rc=124\)"):
        S.BenchRun(params(tmp_path), FakeBench(None, rc=124)).ensure()
    assert not os.path.exists(S.bench_record_path(str(tmp_path), "tiny"))


def test_check_mode_runs_and_writes_nothing(tmp_path):
    fake = FakeBench(bench_line())
    r = S.BenchRun(params(tmp_path), fake, check_mode=True).ensure()
    assert r["changed"] is True and fake.calls == [] and not os.listdir(str(tmp_path))
    with pytest.raises(S.BenchFailed, match="python is required with state=run"):
        S.BenchRun(params(tmp_path, python=None), fake).ensure()


def test_the_last_line_of_several_is_read_and_other_output_ignored():
    text = "not json\n" + bench_line(rps=1.0) + "\n" + bench_line(rps=2.0) + "\n"
    assert S.parse_bench(text)["request_throughput"] == 2.0
    assert S.parse_bench("") is None and S.parse_bench('{"other": 1}') is None
