"""#60 item 2, the role's part: the sglang_server role's entry point benchmark through ansible-playbook, the server and
the router measured, each result printed with its change, the record kept by module sglang_benchmark, the key
never on argv or in the output. The interpreter is a stand-in that writes the line the real bench_serving 0.5.9
writes (keys read off a real run: no num_prompts among them) and records its own argv and environment: the real bench_serving runs against
the real server in the lab (tests/lab/molecule/real)."""
import json
import os
import stat

from ansible_helpers import run_playbook

KEY = "sk-bench-playbook-key-0123456789"
ROUTER_KEY = "sk-bench-router-key-0123456789"
FAKE = r"""#!/usr/bin/env python3
import json, os, sys
argv = sys.argv[1:]
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "calls.jsonl"), "a") as f:
    f.write(json.dumps({"argv": argv, "key": os.environ.get("OPENAI_API_KEY", "")}) + "\n")
n = int(argv[argv.index("--num-prompts") + 1])
rate = 5.0 if "30080" in argv[argv.index("--base-url") + 1] else 4.0
with open(argv[argv.index("--output-file") + 1], "a") as out:
    out.write(json.dumps({"max_concurrency": 2, "random_input_len": 16, "random_output_len": 4,
                          "completed": n, "duration": 1.5, "request_throughput": rate, "output_throughput": 4 * rate,
                          "median_ttft_ms": 20.0, "p99_ttft_ms": 40.0, "median_itl_ms": 5.0, "p99_itl_ms": 9.0}) + "\n")
"""


def said(p):
    """What a run printed, as one line (the yaml result format folds long strings over lines)."""
    return " ".join(p.stdout.split())


def test_the_benchmark_entry_point_measures_the_server_and_the_router_and_keeps_the_result(tmp_path):
    fake = tmp_path / "venv" / "python"
    fake.parent.mkdir()
    fake.write_text(FAKE)
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    state = tmp_path / "state"
    state.mkdir()
    role = {"name": "gpuserve.sglang.sglang_server", "tasks_from": "benchmark"}
    play = {"hosts": "localhost", "connection": "local", "gather_facts": False,
            "vars": {"sglang_server_name": "tiny", "sglang_server_state_dir": str(state),
                     "sglang_server_python": str(fake), "sglang_server_model_path": str(tmp_path),
                     "sglang_server_api_key": KEY, "sglang_server_benchmark_prompts": "6",
                     "sglang_server_benchmark_router_url": "http://127.0.0.1:30080",
                     "sglang_server_benchmark_router_api_key": ROUTER_KEY},
            "tasks": [{"name": "bench", "ansible.builtin.include_role": role}]}
    first = run_playbook([play], tmp_path)
    assert first.returncode == 0, first.stdout[-3000:]
    assert "sglang-tiny: server: 6 of 6 requests, 4.00 req/s, 16.0 output tok/s, TTFT p50 20.0 ms" in said(first)
    assert "sglang-tiny: router: 6 of 6 requests, 5.00 req/s" in said(first)
    second = run_playbook([play], tmp_path)
    assert "server: 6 of 6 requests, 4.00 req/s (+0 %)" in said(second), said(second)[-3000:]
    calls = [json.loads(line) for line in (fake.parent / "calls.jsonl").read_text().splitlines()]
    assert [c["key"] for c in calls] == [KEY, ROUTER_KEY] * 2                 # each target's own key, in the env
    assert all(KEY not in " ".join(c["argv"]) and ROUTER_KEY not in " ".join(c["argv"]) for c in calls)
    urls = [c["argv"][c["argv"].index("--base-url") + 1] for c in calls[:2]]
    assert urls == ["http://127.0.0.1:30000", "http://127.0.0.1:30080"]
    for p in (first, second):
        assert KEY not in p.stdout + p.stderr and ROUTER_KEY not in p.stdout + p.stderr
    record = json.loads((state / "tiny.bench.json").read_text())
    assert sorted(record) == ["router", "server"] and record["server"]["previous"]["completed"] == 6
    assert os.stat(str(state / "tiny.bench.json")).st_mode & 0o777 == 0o644
    check = run_playbook([play], tmp_path, check=True)
    assert check.returncode == 0 and "server: checked, nothing was run" in said(check), said(check)[-2000:]
    assert len((fake.parent / "calls.jsonl").read_text().splitlines()) == 4
