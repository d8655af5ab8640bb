"""parse_log: each SGLang start-up story an operator can paste, and what it must say back."""
import json
import os
import random

import pytest

from unit_helpers import FIXTURES, fixture_text, load_module_util

SL = load_module_util("logs")

# fixture -> (outcome, phase, failure kind, rank)
CASES = {
    "ready_tp1_dense.log": ("ready", "ready", None, None),
    "ready_tp2_hybrid_nextn_ms.log": ("ready", "ready", None, None),
    "ready_then_request_error.log": ("ready", "ready", None, None),
    "starting_mid_load.log": ("starting", "load_weights", None, None),
    "kv_pool_oom_tp2_nextn_seed.log": ("failed", "memory_pool", "kv_pool_oom", "TP0"),
    "kv_pool_oom_0510_wording.log": ("failed", "memory_pool", "kv_pool_oom", None),
    "kv_pool_oom_truncated_mid_traceback.log": ("failed", "memory_pool", "kv_pool_oom", "TP0"),
    "kv_pool_oom_final_line_only.log": ("failed", "memory_pool", "kv_pool_oom", None),
    "kv_pool_oom_journald_ansi_crlf.log": ("failed", "memory_pool", "kv_pool_oom", "TP0"),
    "kv_pool_oom_stray_wrapped.log": ("failed", "memory_pool", "kv_pool_oom", "TP0"),
    "weight_load_oom.log": ("failed", "load_weights", "weight_load_oom", None),
    "cuda_graph_oom.log": ("failed", "cuda_graph", "cuda_graph_oom", None),
    "cuda_graph_failed_not_oom.log": ("failed", "cuda_graph", "other", None),
    "cuda_oom_draft.log": ("failed", "draft", "cuda_oom", "TP0"),
    "port_in_use.log": ("failed", "http", "port_in_use", None),
    "import_error_sgl_kernel.log": ("failed", "args", "import_error", None),
    "unsupported_arch_import_cause.log": ("failed", "load_weights", "import_error", "TP0"),
    "unsupported_model.log": ("failed", "load_weights", "unsupported_model", None),
    "nccl_error.log": ("failed", "dist_init", "nccl_error", "TP1"),
    "rendezvous_client_timeout.log": ("failed", "dist_init", "nccl_error", "TP1"),
    "rendezvous_store_timeout.log": ("failed", "dist_init", "nccl_error", "TP0"),
    "rendezvous_store_lost.log": ("failed", "dist_init", "nccl_error", "TP1"),
    "rendezvous_store_wait_timeout.log": ("failed", "dist_init", "nccl_error", "TP1"),
    "rank_lost_after_ready.log": ("failed", "ready", "nccl_error", "TP0"),
    "model_not_found_gated.log": ("failed", "args", "model_not_found", None),
    "model_not_found_path.log": ("failed", "args", "model_not_found", None),
    "tp_mismatch.log": ("failed", "load_weights", "tp_mismatch", "TP2"),
    "bad_argument.log": ("failed", "args", "bad_argument", None),
    "warmup_failed.log": ("failed", "warmup", "warmup_failed", None),
    "scheduler_dead_oom_killer.log": ("failed", "load_weights", "other", None),
    # recorded from the real SGLang 0.5.9 (CPU engine, the lab's tiny model): what a real launch logs
    "real_cpu_ready_capped.log": ("ready", "ready", None, None),
    "real_cpu_pool_f0.05_p1.log": ("ready", "ready", None, None),
    "real_cpu_pool_f0.3_p1.log": ("ready", "ready", None, None),
    "real_cpu_pool_f0.1_p16.log": ("failed", "warmup", "other", None),
    "real_cpu_pool_f0.2_p16.log": ("failed", "warmup", "other", None),
    "real_cpu_pool_f0.03_p64.log": ("failed", "warmup", "other", None),
    "real_cpu_kv_pool_oom.log": ("failed", "memory_pool", "kv_pool_oom", None),
    "real_cpu_kv_pool_oom_capped.log": ("failed", "memory_pool", "kv_pool_oom", None),
    "real_cpu_warmup_input_too_long.log": ("failed", "warmup", "warmup_failed", None),
    "real_cpu_tp2_rank_lost_after_ready.log": ("failed", "ready", "nccl_error", "TP0"),
}


def test_every_fixture_is_covered_by_a_case():
    on_disk = {f for f in os.listdir(os.path.join(FIXTURES, "sglang_logs")) if f.endswith(".log")}
    assert on_disk == set(CASES)


def test_every_failure_kind_of_the_contract_has_a_fixture():
    kinds = {c[2] for c in CASES.values() if c[2]}
    assert kinds == set(SL.KINDS)


def test_each_failure_kind_is_declared_once_and_every_reader_agrees_with_the_table():
    """#61 item 2: the kinds, their order of specificity, the phase each implies, the ones SGLang always dies of (the
    watch) and the memory ones (diagnose's replay) come from logs/kinds.py's TABLE; the module's documentation and
    role sglang_server's diagnose name the same, and every kind is either hinted by itself or by its message."""
    import re  # pylint: disable=import-outside-toplevel
    import yaml  # pylint: disable=import-outside-toplevel
    from unit_helpers import ROOT  # pylint: disable=import-outside-toplevel
    K = load_module_util("logs.kinds")
    assert SL.KINDS == K.KINDS == tuple(k.name for k in K.TABLE) and len(set(K.KINDS)) == len(K.KINDS)
    assert set(SL.DECISIVE) == {"kv_pool_oom", "bad_argument", "tp_mismatch"} and SL.MEMORY == K.MEMORY
    assert all(k.phase is None or k.phase in load_module_util("logs.rules").PHASES for k in K.TABLE)
    assert {k.name for k in K.TABLE if k.hint is None} == {"warmup_failed", "other"}     # hinted by their message
    # every classifier names a kind of the table
    named = set()
    for text in ("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
                 "torch.OutOfMemoryError: CUDA out of memory.", "OSError: [Errno 98] address already in use",
                 "ValueError: 5 is not divisible by 2", "ModuleNotFoundError: No module named 'x'"):
        kind, _message, _facts = K.classify(text, (), "args")
        named.add(kind)
    assert named <= set(K.KINDS) and None not in named
    with open(os.path.join(ROOT, "plugins", "modules", "sglang_log_facts.py")) as fh:
        doc = yaml.safe_load(re.search(r'RETURN = r"""(.*?)"""', fh.read(), re.S).group(1))
    documented = re.findall(r"C\(([a-z_]+)\)", doc["failure"]["contains"]["kind"]["description"])
    assert tuple(documented) == K.KINDS
    with open(os.path.join(ROOT, "roles", "sglang_server", "tasks", "diagnose.yml")) as fh:
        text = fh.read()
    assert "__sglang_server_dx.failure.kind in %s" % list(K.MEMORY) in text


@pytest.mark.parametrize("name", sorted(CASES))
def test_fixture_outcome_phase_kind_rank(name):
    outcome, phase, kind, rank = CASES[name]
    r = SL.parse_log(fixture_text("sglang_logs", name))
    assert r["outcome"] == outcome
    assert r["phase"] == phase
    if kind is None:
        assert r["failure"] is None
    else:
        f = r["failure"]
        assert f["kind"] == kind
        assert f["rank"] == rank
        assert f["message"]
        assert f["hint"]
        assert set(f) >= {"kind", "message", "rank", "phase", "traceback", "hint"}
    json.dumps(r)  # facts must be plain data (Ansible returns them as JSON)


@pytest.mark.parametrize("name", ["rendezvous_client_timeout.log", "rendezvous_store_timeout.log",
                                  "rendezvous_store_wait_timeout.log"])
def test_a_multi_node_meeting_that_failed_is_named_as_such(name):
    f = SL.parse_log(fixture_text("sglang_logs", name))["failure"]
    assert f["message"].startswith(("torch.distributed.DistNetworkError", "torch.distributed.DistStoreError"))
    assert "never met at --dist-init-addr" in f["hint"] and "TCP connect" in f["hint"]
    assert "lost the connection" not in f["hint"]
    # an NCCL failure after the meeting keeps the NCCL hint
    assert "never met" not in SL.parse_log(fixture_text("sglang_logs", "nccl_error.log"))["failure"]["hint"]


def test_a_rank_that_lost_rank_0s_store_is_told_rank_0_went_away_with_its_address():
    r = SL.parse_log(fixture_text("sglang_logs", "rendezvous_store_lost.log"))
    f = r["failure"]
    # the exception line, not c10's C++ backtrace under it
    assert f["message"] == ("torch.distributed.DistNetworkError: recvValue failed on SocketImpl(fd=57, "
                            "addr=[10.0.3.101]:41822, remote=[10.0.3.100]:5000): Connection reset by peer")
    assert "rank 0's TCPStore at --dist-init-addr (10.0.3.100:5000) and lost the connection" in f["hint"]
    assert "stop every rank and start them together" in f["hint"] and "never met" not in f["hint"]


@pytest.mark.parametrize("cause", [
    "Failed to recv, got 0 bytes. Connection was likely closed. Did the remote server shutdown or crash?",
    "Failed to send, sent 0 bytes. Connection was likely closed. Did the remote server shutdown or crash?",
    "Connection reset by peer", "Broken pipe"])
@pytest.mark.parametrize("wrapped", [True, False], ids=["recvValue-wrapper", "bare"])
def test_every_way_torch_words_a_lost_store_gets_that_hint_without_an_address_it_was_not_given(cause, wrapped):
    text = fixture_text("sglang_logs", "rendezvous_store_lost.log").replace(", dist_init_addr='10.0.3.100:5000'", "")
    old = "recvValue failed on SocketImpl(fd=57, addr=[10.0.3.101]:41822, remote=[10.0.3.100]:5000): Connection reset by peer"
    new = ("recvValue failed on SocketImpl(fd=57, addr=[10.0.3.101]:41822, remote=[10.0.3.100]:5000): " if wrapped
           else "") + cause
    f = SL.parse_log(text.replace(old, new))["failure"]
    assert f["kind"] == "nccl_error" and f["message"] == "torch.distributed.DistNetworkError: " + new
    assert f["hint"].startswith("This rank had reached rank 0's TCPStore at --dist-init-addr and lost the connection")


def test_a_rank_ended_by_another_ranks_loss_after_start_up_is_told_it_is_the_echo_with_the_peer_address():
    f = SL.parse_log(fixture_text("sglang_logs", "rank_lost_after_ready.log"))["failure"]
    assert f["message"] == ("RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:538] Connection closed "
                            "by peer [10.0.3.101]:38142")
    assert f["hint"].startswith("Another rank of this server went away: Gloo's connection to the rank at 10.0.3.101 "
                                "closed.") and "the echo, not the cause" in f["hint"]
    assert "NCCL_P2P_DISABLE" not in f["hint"]


def test_the_real_rank_0_ended_by_rank_1s_loss_is_a_failure_after_ready_naming_the_peer():
    """Recorded from the real 0.5.9 (multinode scenario, rank 1 killed): once serving, the SIGQUIT line is the
    tokenizer manager's ("SIGQUIT received. signum=..."), not the start-up's "Received sigquit from a child process"
    the stand-in logged - read as a death after ready all the same."""
    r = SL.parse_log(fixture_text("sglang_logs", "real_cpu_tp2_rank_lost_after_ready.log"))
    f = r["failure"]
    assert r["outcome"] == "failed" and r["phase"] == "ready"
    assert f["message"].endswith("Read error [10.0.3.101]:34531: Connection reset by peer")
    assert f["hint"].startswith("Another rank of this server went away: Gloo's connection to the rank at 10.0.3.101 ")


@pytest.mark.parametrize("words", ["Read error [10.0.3.101]:38142: Connection reset by peer",
                                   "writev [10.0.3.101]:38142: Broken pipe",
                                   "Socket closed [10.0.3.101]:38142"])
def test_every_gloo_wording_of_a_lost_peer_names_the_peer(words):
    text = fixture_text("sglang_logs", "rank_lost_after_ready.log")
    text = text.replace("Connection closed by peer [10.0.3.101]:38142", words)
    f = SL.parse_log(text)["failure"]
    assert f["kind"] == "nccl_error" and "the rank at 10.0.3.101 closed" in f["hint"], f


def test_a_reset_outside_torch_distributed_is_not_taken_for_a_lost_store():
    text = fixture_text("sglang_logs", "rendezvous_store_lost.log").replace(
        "torch.distributed.DistNetworkError: recvValue failed on SocketImpl(fd=57, addr=[10.0.3.101]:41822, "
        "remote=[10.0.3.100]:5000): Connection reset by peer", "ConnectionResetError: [Errno 104] Connection reset by peer")
    f = SL.parse_log(text)["failure"]
    assert "lost the connection" not in (f["hint"] or "")


def test_seed_failure_reports_the_error_not_the_sigquit_echo_with_numbers_in_the_hint():
    r = SL.parse_log(fixture_text("sglang_logs", "kv_pool_oom_tp2_nextn_seed.log"))
    f = r["failure"]
    assert "Not enough memory" in f["message"] and "sigquit" not in f["message"]
    assert r["facts"]["mem_fraction_static"] == 0.85
    assert r["facts"]["tp_size"] == 2
    # 0.85 x 46.62 = 39.63 GiB budget; 25.91 GiB of weights; 20.71 - 46.62*0.15 = 13.72 GiB rest (TP0)
    assert "0.85 x 46.62 = 39.63" in f["hint"]
    assert "25.91" in f["hint"]
    assert "context-length" in f["hint"] and "do not enter" in f["hint"]
    assert f["traceback"].rstrip().endswith("mem_fraction_static=0.85")
    assert "init_memory_pool" in f["traceback"]


def test_ready_dense_facts_are_exactly_what_sglang_logged():
    r = SL.parse_log(fixture_text("sglang_logs", "ready_tp1_dense.log"))
    assert r["facts"] == {
        "mem_fraction_static": 0.861, "tp_size": 1, "avail_mem_before_load_gb": 46.9,
        "avail_mem_after_load_gb": 31.83, "weights_gb": 15.07, "kv_tokens": 207346, "k_size_gb": 12.66,
        "v_size_gb": 12.66, "cuda_graph_mem_gb": 0.52, "max_total_num_tokens": 207346,
        "max_running_requests": 2048, "context_len": 131072,
    }
    assert set(r["facts_by_rank"]) == {"main"}


def test_hybrid_spec_facts_come_from_the_target_not_the_draft_worker():
    r = SL.parse_log(fixture_text("sglang_logs", "ready_tp2_hybrid_nextn_ms.log"))
    facts = r["facts"]
    # the draft worker logs 'Load weight end ... mem usage=1.57 GB' and 'K size: 0.28 GB' later: ignored
    assert facts["weights_gb"] == 25.91
    assert facts["k_size_gb"] == 4.56
    # conv 0.02 + ssm 0.56 + intermediate ssm 2.25 + intermediate conv 0.07
    assert facts["mamba_cache_gb"] == pytest.approx(2.90)
    assert facts["cuda_graph_mem_gb"] == 0.40 or facts["cuda_graph_mem_gb"] == 0.41
    assert r["facts_by_rank"]["TP0"]["avail_mem_after_load_gb"] == 20.71
    assert r["facts_by_rank"]["TP1"]["avail_mem_after_load_gb"] == 20.72
    assert facts["max_running_requests"] == 16


def test_truncated_traceback_inside_init_memory_pool_is_inferred_as_kv_pool_oom():
    r = SL.parse_log(fixture_text("sglang_logs", "kv_pool_oom_truncated_mid_traceback.log"))
    assert r["failure"]["kind"] == "kv_pool_oom"
    assert r["failure"]["inferred"] is True


def test_stray_wrapped_paste_recovers_the_value_and_the_weight_numbers():
    r = SL.parse_log(fixture_text("sglang_logs", "kv_pool_oom_stray_wrapped.log"))
    assert r["facts"]["mem_fraction_static"] == 0.85
    assert r["facts"]["weights_gb"] == 25.91
    assert r["failure"]["message"].endswith("mem_fraction_static=0.85")


def test_journald_ansi_crlf_are_stripped_before_matching():
    r = SL.parse_log(fixture_text("sglang_logs", "kv_pool_oom_journald_ansi_crlf.log"))
    assert r["facts"]["avail_mem_before_load_gb"] == 46.62
    assert "\x1b" not in r["failure"]["message"] and "\r" not in r["failure"]["message"]


def test_capture_failure_that_is_not_oom_is_not_called_a_memory_problem():
    r = SL.parse_log(fixture_text("sglang_logs", "cuda_graph_failed_not_oom.log"))
    assert r["failure"]["kind"] == "other"
    assert "illegal instruction" in r["failure"]["message"]


def test_architecture_not_supported_caused_by_an_import_failure_names_the_missing_module():
    r = SL.parse_log(fixture_text("sglang_logs", "unsupported_arch_import_cause.log"))
    assert r["failure"]["kind"] == "import_error"
    assert "'fla'" in r["failure"]["hint"]


def test_gated_repo_hint_names_the_http_status_and_the_token():
    r = SL.parse_log(fixture_text("sglang_logs", "model_not_found_gated.log"))
    assert "401" in r["failure"]["hint"] and "token" in r["failure"]["hint"]


def test_port_conflict_hint_names_the_port():
    r = SL.parse_log(fixture_text("sglang_logs", "port_in_use.log"))
    assert "30000" in r["failure"]["hint"]


def test_oom_killer_death_carries_the_exit_code():
    r = SL.parse_log(fixture_text("sglang_logs", "scheduler_dead_oom_killer.log"))
    assert r["failure"]["exit_code"] == -9
    assert "OOM killer" in r["failure"]["hint"]


def test_cuda_oom_hint_carries_the_allocation_numbers():
    r = SL.parse_log(fixture_text("sglang_logs", "cuda_oom_draft.log"))
    assert "2.37 GiB" in r["failure"]["hint"] and "1.1 GiB free" in r["failure"]["hint"]
    assert "draft" in r["failure"]["hint"]


def test_ms_timestamps_and_dp_tp_prefixes_are_understood():
    text = ("[2026-01-01 00:00:00.123 DP1 TP3] Load weight begin. avail mem=70.00 GB\n"
            "[2026-01-01 00:00:01.456 DP1 TP3] Load weight end. elapsed=1.00 s, type=X, dtype=torch.bfloat16, "
            "avail mem=60.00 GB, mem usage=10.00 GB.\n")
    r = SL.parse_log(text)
    assert r["facts_by_rank"]["DP1 TP3"]["weights_gb"] == 10.0
    assert r["outcome"] == "starting" and r["phase"] == "memory_pool"


def test_empty_and_none_are_starting_with_no_facts():
    for text in ("", None, "\n\n"):
        r = SL.parse_log(text)
        assert r["outcome"] == "starting" and r["failure"] is None and r["facts"] == {}


def test_non_text_input_is_a_clear_type_error():
    with pytest.raises(TypeError, match="text must be a str"):
        SL.parse_log(b"bytes")


def test_hostile_input_never_raises_and_never_evaluates():
    rnd = random.Random(1234)
    alphabet = "[]()'\"=:.,\\ \t\x1b\r\n0123456789TPDGBabcdefTracebackError{}%$`;"
    for _round in range(200):
        text = "".join(rnd.choice(alphabet) for _pos in range(rnd.randint(0, 400)))
        r = SL.parse_log(text)
        assert r["outcome"] in ("ready", "failed", "starting")
    evil = "RuntimeError: __import__('os').system('touch /tmp/pwned') Not enough memory"
    SL.parse_log(evil)
    assert not os.path.exists("/tmp/pwned")


def test_memory_stays_bounded_for_an_endless_traceback_and_huge_lines():
    p = SL.LogParser()
    p.feed("[2026-01-01 00:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):\n")
    for i in range(20000):
        p.feed('  File "/x/y%d.py", line %d, in f%d\n' % (i, i, i))
    p.feed("X" * 10_000_000 + "\n")
    assert len(p._tb.frames) <= 64 and len(p._tb.text) <= SL.TRACEBACK_TAIL
    for i in range(2000):
        p.feed("RuntimeError: CUDA error: out of memory %d\n" % i)
    r = p.result()
    assert len(p.failures) <= 16
    assert len(r["failure"]["traceback"]) < 20000


def test_parse_file_streams_from_an_offset(tmp_path):
    old = fixture_text("sglang_logs", "kv_pool_oom_tp2_nextn_seed.log")
    new = fixture_text("sglang_logs", "ready_tp1_dense.log")
    path = tmp_path / "sglang.log"
    path.write_text(old + new)
    offset = len(old.encode())
    assert SL.parse_file(str(path))["outcome"] == "failed"
    assert SL.parse_file(str(path), offset=offset)["outcome"] == "ready"


def test_last_launch_is_after_the_last_marker_or_a_later_restart_without_one(tmp_path):
    log = tmp_path / "q.log"
    oom = fixture_text("sglang_logs", "kv_pool_oom_tp2_nextn_seed.log")
    ready = fixture_text("sglang_logs", "ready_tp1_dense.log")
    log.write_text("# gpuserve launch aaaaaaaaaaaa at 2026-11-30 09:00:00\n" + oom +
                   "# gpuserve launch bbbbbbbbbbbb at 2026-11-30 10:00:00 (systemd sglang-q.service)\n" + ready)
    last = SL.last_launch(str(log))
    assert last["id"] == "bbbbbbbbbbbb" and last["at"] == "2026-11-30 10:00:00" and last["by"] == "marker"
    res = SL.parse_file(str(log), last["offset"])
    assert res["outcome"] == "ready" and res["failure"] is None
    # systemd restarted SGLang after a crash: no marker, but a second server_args line starts a new launch
    log.write_text("# gpuserve launch cccccccccccc at 2026-11-30 11:00:00\n" + ready + oom)
    again = SL.last_launch(str(log))
    assert again["by"] == "server_args" and again["id"] == "cccccccccccc"
    assert SL.parse_file(str(log), again["offset"])["failure"]["kind"] == "kv_pool_oom"


WRAPPERS = {
    "docker compose": lambda line: "sglang-1  | " + line,
    "kubectl --prefix": lambda line: "[pod/sglang-7d9f/sglang] " + line,
    "ray": lambda line: "(pid=4242) " + line,
    "ray worker": lambda line: "(SchedulerWorker pid=4242, ip=10.1.2.3) " + line,
    "orchestrator iso": lambda line: "2026-11-20T09:17:21.123Z INFO    sglang_launcher.run: " + line,
}


@pytest.mark.parametrize("wrapper", sorted(WRAPPERS))
@pytest.mark.parametrize("fixture", ["kv_pool_oom_tp2_nextn_seed.log", "ready_tp1_dense.log"])
def test_a_log_wrapped_by_another_tool_reads_like_the_clean_log(wrapper, fixture):
    clean = fixture_text("sglang_logs", fixture)
    wrapped = "\n".join(WRAPPERS[wrapper](line) for line in clean.splitlines())
    a, b = SL.parse_log(clean), SL.parse_log(wrapped)
    assert b["outcome"] == a["outcome"] and b["phase"] == a["phase"] and b["facts"] == a["facts"]
    assert (b["failure"] or {}).get("kind") == (a["failure"] or {}).get("kind")


def test_a_level_and_file_after_sglangs_bracket_is_dropped_keeping_the_rank():
    line = ("[2026-11-20 09:17:21 TP0] ERROR scheduler.py:3188: Scheduler hit an exception: Traceback (most recent "
            "call last):")
    clean = line.replace("ERROR scheduler.py:3188: ", "")
    assert load_module_util("logs.rules")._strip(line) == load_module_util("logs.rules")._strip(clean)  # pylint: disable=protected-access


def test_counters_that_say_token_are_not_taken_for_secrets():
    line = ("[2026-11-20 09:20:01 TP0] Decode batch. #running-req: 1, #token: 45, token usage: 0.00, "
            "max_total_num_tokens=207346, gen throughput (token/s): 31.2")
    assert SL.redact(line) == line
    assert SL.redact("server_args=ServerArgs(token='hf_abc', hf_token=\"hf_x\")") == \
        "server_args=ServerArgs(token='<redacted>', hf_token=\"<redacted>\")"


@pytest.mark.parametrize("line", [
    "Access to model meta-llama/Llama-3.1-8B is restricted. You must have access to it and be authenticated to access "
    "it. Please log in.",
    "Cannot access gated repo for url https://huggingface.co/meta-llama/Llama-3.1-8B/resolve/main/config.json.",
])
def test_a_bare_hub_access_line_without_an_exception_class_is_model_not_found(line):
    r = SL.parse_log("[2026-11-20 09:16:40] server_args=ServerArgs(model_path='meta-llama/Llama-3.1-8B')\n" + line)
    assert r["outcome"] == "failed" and r["failure"]["kind"] == "model_not_found"


def test_gloo_transport_failures_are_nccl_errors_even_inside_a_graph_capture_failure():
    wrapped = ("[2026-11-20 09:16:44 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
               '  File "/x/cuda_graph_runner.py", line 1, in capture\n'
               "Exception: Capture cuda graph failed: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] "
               "Connection closed by peer [10.0.0.2]:12345\n")
    assert SL.parse_log(wrapped)["failure"]["kind"] == "nccl_error"
    bare = ("[2026-11-20 09:16:44 TP1] RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] "
            "Connection closed by peer [10.0.0.2]:12345")
    assert SL.parse_log(bare)["failure"]["kind"] == "nccl_error"


def test_the_shard_progress_bar_means_the_weights_are_loading():
    r = SL.parse_log("Loading safetensors checkpoint shards:  40% Completed | 6/15 [00:12<00:18,  2.31s/it]")
    assert r["phase"] == "load_weights" and r["failure"] is None


def test_when_ranks_print_the_same_fact_facts_hold_rank_0s_even_if_another_rank_printed_first():
    log = ("[2026-11-20 09:17:00 TP1] Load weight end. type=Qwen3ForCausalLM, dtype=torch.bfloat16, avail mem=20.80 GB, "
           "mem usage=25.90 GB.\n"
           "[2026-11-20 09:17:00 TP0] Load weight end. type=Qwen3ForCausalLM, dtype=torch.bfloat16, avail mem=20.71 GB, "
           "mem usage=25.91 GB.\n")
    r = SL.parse_log(log)
    assert r["facts"]["weights_gb"] == 25.91 and r["facts"]["avail_mem_after_load_gb"] == 20.71
    assert r["facts_by_rank"]["TP1"]["weights_gb"] == 25.90


def test_a_user_cap_above_the_profiled_count_is_a_fact_and_a_non_positive_profile_is_the_pool_failing():
    ok = SL.parse_log("[2026-11-20 09:17:30 TP0] max_total_tokens=500000 is larger than the profiled value 207346. "
                      "Use the profiled value instead.")
    assert ok["facts"]["max_total_tokens_requested"] == 500000
    assert ok["facts"]["profiled_max_total_num_tokens"] == 207346 and ok["failure"] is None
    bad = SL.parse_log("[2026-11-20 09:17:30 TP0] max_total_tokens=500000 is larger than the profiled value -96686. "
                       "Use the profiled value instead.")
    assert bad["failure"]["kind"] == "kv_pool_oom" and bad["facts"]["profiled_max_total_num_tokens"] == -96686
    # the draft model's own profile (after the second weight load) never decides the target's pool
    draft = SL.parse_log("[2026-11-20 09:17:00 TP0] Load weight begin. avail mem=46.62 GB\n"
                         "[2026-11-20 09:17:10 TP0] Load weight begin. avail mem=20.10 GB\n"
                         "[2026-11-20 09:17:30 TP0] max_total_tokens=4096 is larger than the profiled value 0. "
                         "Use the profiled value instead.")
    assert draft["failure"] is None and "profiled_max_total_num_tokens" not in draft["facts"]


def test_the_swa_pool_cap_wording_of_later_releases_is_the_memory_pool_failure():
    # sglang 0.5.23 srt/model_executor/pool_configurator.py
    line = ("[2026-11-20 09:17:30 TP0] RuntimeError: SWA pool cap (65536 tokens, 3.00 GiB) leaves no room for the full "
            "KV pool within the available 2.10 GiB. Reduce --max-running-requests, lower SGLANG_SWA_EVICTION_INTERVAL, "
            "or increase --mem-fraction-static.")
    assert SL.parse_log(line)["failure"]["kind"] == "kv_pool_oom"
    newer = ("[2026-11-20 09:17:30 TP0] RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
             "Current value: mem_fraction_static=0.85")
    r = SL.parse_log(newer)
    assert r["failure"]["kind"] == "kv_pool_oom" and r["facts"]["mem_fraction_static"] == 0.85


def cut(*frames, before=""):
    """A scheduler traceback pasted without its exception line."""
    body = "".join('  File "/opt/sglang/.venv/lib/python3.11/site-packages/sglang/srt/%s", line 1, in %s\n'
                   "    call()\n" % f for f in frames)
    return before + "[2026-11-20 09:17:21 TP0] Scheduler hit an exception: Traceback (most recent call last):\n" + body


@pytest.mark.parametrize("frames, kind, evidence", [
    ([("managers/scheduler.py", "run_scheduler_process"), ("distributed/parallel_state.py", "init_distributed_environment")],
     "nccl_error", "frame init_distributed_environment"),
    ([("model_loader/loader.py", "load_model"), ("model_loader/utils.py", "get_model_architecture")],
     "unsupported_model", "frame get_model_architecture"),
    ([("model_loader/loader.py", "load_model"), ("models/qwen3.py", "__init__"), ("utils/common.py", "make_layers")],
     "weight_load_oom", "frame make_layers in common.py"),
    ([("managers/scheduler.py", "run_scheduler_process"), ("model_loader/loader.py", "load_weights")],
     "other", "frame load_weights"),
])
def test_a_traceback_cut_before_its_exception_is_inferred_from_its_deepest_frame_and_says_so(frames, kind, evidence):
    r = SL.parse_log(cut(*frames))
    f = r["failure"]
    assert f["kind"] == kind and f["inferred"] is True and f["evidence"] == evidence
    assert f["hint"].startswith("Inferred (the traceback was cut")


def test_a_cut_scheduler_traceback_after_the_weights_loaded_and_before_any_pool_line_is_the_pool():
    before = ("[2026-11-20 09:17:00 TP0] Load weight end. type=Qwen3ForCausalLM, dtype=torch.bfloat16, avail mem=20.71 GB, "
              "mem usage=25.91 GB.\n")
    r = SL.parse_log(cut(("managers/scheduler.py", "run_scheduler_process"), ("managers/scheduler.py", "__init__"),
                         ("managers/scheduler.py", "init_tp_model_worker"), before=before))
    assert r["failure"]["kind"] == "kv_pool_oom" and r["failure"]["inferred"] is True
    assert r["failure"]["evidence"] == "phase: weights loaded, no KV pool line"


IMPORT_WARNING = ("[2026-11-20 09:16:41] Ignore import error when loading sglang.srt.models.qwen3_5: "
                  "No module named 'flash_attn_interface'\n")


def test_a_cut_traceback_after_a_model_module_import_failure_is_import_error():
    r = SL.parse_log(IMPORT_WARNING + cut(("managers/scheduler.py", "run_scheduler_process"),
                                          ("model_loader/loader.py", "load_model")))
    assert r["failure"]["kind"] == "import_error" and r["failure"]["inferred"] is True
    assert "flash_attn_interface" in r["failure"]["message"]


def test_a_benign_import_warning_never_overrides_a_failure_after_the_weights_loaded():
    loaded = ("[2026-11-20 09:17:00 TP0] Load weight end. type=Qwen3ForCausalLM, dtype=torch.bfloat16, avail mem=20.71 "
              "GB, mem usage=25.91 GB.\n")
    frames = (("managers/scheduler.py", "run_scheduler_process"), ("model_loader/loader.py", "load_weights"))
    r = SL.parse_log(IMPORT_WARNING + loaded + cut(*frames))
    assert r["failure"]["kind"] == "other"


@pytest.mark.parametrize("fixture", ["kv_pool_oom_tp2_nextn_seed.log", "ready_tp1_dense.log", "weight_load_oom.log"])
def test_real_logs_cut_anywhere_garbled_or_interleaved_never_raise(fixture):
    """Truncation at random points, byte garbage, NUL bytes, latin-1 mixed into UTF-8, two logs interleaved."""
    rnd = random.Random(hash(fixture) & 0xffff)
    text = fixture_text("sglang_logs", fixture)
    other = fixture_text("sglang_logs", "ready_tp1_dense.log").splitlines()
    for _round in range(60):
        cut_at = rnd.randint(0, len(text))
        variant = text[:cut_at]
        if _round % 3 == 0:
            variant += "".join(chr(rnd.randint(0, 0x2FF)) for _c in range(rnd.randint(1, 200)))
        if _round % 4 == 0:
            variant = variant.replace("\n", "\x00\n", rnd.randint(0, 5))
        if _round % 5 == 0:
            mine = variant.splitlines()
            variant = "\n".join(x for pair in zip(mine, other) for x in pair)
        r = SL.parse_log(variant)
        assert r["outcome"] in ("ready", "failed", "starting")
        assert (r["failure"] is None) or r["failure"]["kind"] in SL.KINDS
    mixed = text.encode("utf-8") + "café ÿ".encode("latin-1") + b"\xff\xfe\x00garbage\n"
    assert SL.parse_log(mixed.decode("utf-8", "replace"))["outcome"] in ("ready", "failed", "starting")


# --- tracebacks as operators paste them (#18 item 5) ---
_HEAD = ("[2026-05-09 09:16:44 TP0] Load weight begin. avail mem=46.62 GB\n[2026-05-09 09:16:59 TP0] Load weight end. "
         "type=Qwen3_5ForConditionalGeneration, dtype=torch.bfloat16, avail mem=20.71 GB, mem usage=25.91 GB.\n")
_OOM = ("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: "
        "self.server_args.mem_fraction_static=0.85\n")


def test_frames_pasted_flush_left_are_still_frames_and_their_source_lines_are_not_the_message():
    text = _HEAD + ("Traceback (most recent call last):\n"
                    'File "/v/sglang/srt/managers/scheduler.py", line 3188, in run_scheduler_process\n'
                    "scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank)\n"
                    'File "/v/sglang/srt/model_executor/model_runner_kv_cache_mixin.py", line 420, in init_memory_pool\n'
                    "raise RuntimeError(\n" + _OOM)
    r = SL.parse_log(text)
    assert r["failure"]["kind"] == "kv_pool_oom" and r["facts"]["mem_fraction_static"] == 0.85
    assert r["failure"]["message"].startswith("Not enough memory") and not r["failure"].get("inferred")


@pytest.mark.parametrize("fragment", [
    # starts mid-frame (no Traceback header)
    '  File "/x/model_runner.py", line 390, in initialize\n    self.init_memory_pool(min_per_gpu_memory)\n'
    '  File "/x/model_runner_kv_cache_mixin.py", line 420, in init_memory_pool\n    raise RuntimeError(\n' + _OOM,
    # starts on a source line
    '    self.init_memory_pool(min_per_gpu_memory)\n'
    '  File "/x/model_runner_kv_cache_mixin.py", line 420, in init_memory_pool\n    raise RuntimeError(\n' + _OOM,
])
def test_a_headless_fragment_is_read_as_a_traceback(fragment):
    r = SL.parse_log(fragment)
    assert r["outcome"] == "failed" and r["failure"]["kind"] == "kv_pool_oom"
    assert r["facts"]["mem_fraction_static"] == 0.85


def test_a_headless_fragment_cut_before_its_exception_is_inferred_from_its_deepest_frame():
    r = SL.parse_log('    self.init_memory_pool(min_per_gpu_memory)\n'
                     '  File "/x/model_runner_kv_cache_mixin.py", line 420, in init_memory_pool\n')
    assert r["failure"]["kind"] == "kv_pool_oom" and r["failure"]["inferred"] is True
    assert "init_memory_pool" in r["failure"]["evidence"]


@pytest.mark.parametrize("after", [
    "\n$ nvidia-smi\nFri May  9 09:20:01 2026\n| NVIDIA-SMI 570.153.02    Driver Version: 570.153.02    CUDA Version: 12.8 |\n",
    "root@ct129:~# tail -n 5 /var/log/sglang.log\n",                 # no blank line in between
    "\nsome other program: it says things\n",
])
def test_another_programs_output_after_a_cut_traceback_ends_it_and_is_never_its_message(after):
    text = _HEAD + ("[2026-05-09 09:17:01 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
                    '  File "/x/scheduler.py", line 3188, in run_scheduler_process\n'
                    "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank)\n"
                    '  File "/x/model_runner.py", line 390, in initialize\n'
                    "    self.init_memory_pool(min_per_gpu_memory)\n" + after)
    f = SL.parse_log(text)["failure"]
    assert f["kind"] == "kv_pool_oom" and f["inferred"] is True         # from the frame, not from the paste
    assert "NVIDIA-SMI" not in f["message"] and "root@" not in f["message"] and "other program" not in f["message"]


def test_after_the_exception_and_a_blank_line_other_output_is_not_a_continuation_but_a_chain_still_is():
    chained = _HEAD + ("Traceback (most recent call last):\n  File \"/x/a.py\", line 1, in f\n    g()\n"
                       "KeyError: 'x'\n\nDuring handling of the above exception, another exception occurred:\n\n"
                       "Traceback (most recent call last):\n  File \"/x/model_runner_kv_cache_mixin.py\", line 420, "
                       "in init_memory_pool\n    raise RuntimeError(\n" + _OOM)
    assert SL.parse_log(chained)["failure"]["kind"] == "kv_pool_oom"
    pasted = _HEAD + ("Traceback (most recent call last):\n  File \"/x/a.py\", line 1, in f\n    g()\n"
                      "ValueError: bad thing\n\nwhoami\nroot\n")
    f = SL.parse_log(pasted)["failure"]
    assert f["message"] == "ValueError: bad thing" or f["message"].endswith("bad thing")
    assert "whoami" not in f["message"] and "root" not in f["message"]


def test_a_wrapped_line_is_joined_but_never_across_a_blank_line():
    wrapped = _HEAD + ("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: "
                       "self.server_\nargs.mem_fraction_static=0.85\n")
    assert SL.parse_log(wrapped)["facts"]["mem_fraction_static"] == 0.85
    apart = _HEAD + ("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: "
                     "self.server_\n\nargs.mem_fraction_static=0.85\n")
    r = SL.parse_log(apart)
    assert r["failure"]["kind"] == "kv_pool_oom" and "mem_fraction_static" not in r["facts"]


def test_a_kv_allocation_line_with_a_field_added_before_the_count_is_read_field_by_field():
    text = ("[2026-05-09 09:16:59 TP0] KV Cache is allocated. dtype: torch.float8_e4m3fn, #tokens: 412345, "
            "K size: 9.44 GB, V size: 9.44 GB, layers: 64\n")
    facts = SL.parse_log(text)["facts"]
    assert (facts["kv_tokens"], facts["k_size_gb"], facts["v_size_gb"]) == (412345, 9.44, 9.44)


def test_the_0_3_x_unsupported_architecture_error_is_unsupported_model():
    # sglang 0.3.6 model_loader: f"Unsupported architectures: {model_arch}. Supported list: {...}" (ValueError)
    r = SL.parse_log("Traceback (most recent call last):\n  File \"/x/model_loader.py\", line 1, in load_model_cls_srt\n"
                     "ValueError: Unsupported architectures: FooForCausalLM. Supported list: ['LlamaForCausalLM']\n")
    assert r["failure"]["kind"] == "unsupported_model"


def test_real_launches_read_as_sglang_resolved_them():
    """The real 0.5.9 on the CPU engine: its device, its resolved fraction, pool, request limit and context."""
    facts = SL.parse_log(fixture_text("sglang_logs", "real_cpu_ready_capped.log"))["facts"]
    assert facts["device"] == "cpu" and facts["mem_fraction_static"] == 0.742
    assert (facts["max_total_num_tokens"], facts["max_running_requests"], facts["context_len"]) == (8192, 4096, 2048)
    assert facts["avail_mem_before_load_gb"] == 21.43 and facts["weights_gb"] == 0.0


@pytest.mark.parametrize("name", ["real_cpu_kv_pool_oom.log", "real_cpu_kv_pool_oom_capped.log"])
def test_the_real_pool_error_is_the_message_with_the_fraction_in_its_digits(name):
    """The seed's error, for real: the message is 0.5.9's own line (not the 'profiled value' line before it when a
    cap was given), and the hint's numbers keep a fraction of 0.0001 (it was printed as 0)."""
    r = SL.parse_log(fixture_text("sglang_logs", name))
    f = r["failure"]
    assert f["message"] == ("Not enough memory. Please try to increase --mem-fraction-static. Current value: "
                            "self.server_args.mem_fraction_static=0.0001")
    assert "= 0.0001 x " in f["hint"] and "of the machine's memory (--device cpu)" in f["hint"]
    assert "_RuntimeError" not in f["traceback"] and "init_memory_pool" in f["traceback"]   # the traceback kept
    if "capped" in name:
        assert r["facts"]["profiled_max_total_num_tokens"] == -50666
        assert ("SGLang's own profile of that room came to -50666 tokens: the pool is short by 50667 tokens before "
                "even one fits.") in f["hint"]
        assert "The cap --max-total-tokens 8192 does not help" in f["hint"]
    else:
        assert "--max-total-tokens" not in f["hint"].split("Raise")[0]


def test_a_profiled_pool_below_zero_alone_is_still_the_pool_error():
    """A log cut right after 0.5.9's 'larger than the profiled value' line: that line stands for the error."""
    text = fixture_text("sglang_logs", "real_cpu_kv_pool_oom_capped.log")
    cut = text[:text.index("\n", text.index("is larger than the profiled value")) + 1]
    f = SL.parse_log(cut)["failure"]
    assert f["kind"] == "kv_pool_oom" and "profiled value -50666" in f["message"]


def test_a_real_warm_up_longer_than_the_pool_names_both_lengths():
    f = SL.parse_log(fixture_text("sglang_logs", "real_cpu_warmup_input_too_long.log"))["failure"]
    assert f["kind"] == "warmup_failed" and f["phase"] == "warmup"
    assert f["message"].startswith('AssertionError: {"error":{"message":"Input length (29 tokens) exceeds the maximum '
                                   'allowed length (10 tokens).')
    assert "_execute_server_warmup" in f["traceback"]
    assert f["hint"].startswith("A request of 29 tokens (the server's own warm-up) is longer than this launch takes "
                                "(10 tokens)")
    assert "max_total_num_tokens=16" in f["hint"] and "Raise --max-total-tokens" in f["hint"]


def test_a_paged_pool_on_the_cpu_engine_names_triton_and_the_page_size():
    f = SL.parse_log(fixture_text("sglang_logs", "real_cpu_pool_f0.1_p16.log"))["failure"]
    assert f["message"] == "RuntimeError: 0 active drivers ([]). There should only be one."
    assert "Use --page-size 1 on the CPU engine" in f["hint"]


def test_a_stop_is_told_from_a_failure_though_both_exit_137():
    """0.5.9 on SIGTERM drains, says 'Gracefully exiting' and kills itself (137, systemd: signal 9), as a failed start
    ends: the real logs say which."""
    stopped = SL.parse_log(fixture_text("sglang_logs", "real_cpu_ready_capped.log"))
    assert stopped["outcome"] == "ready" and stopped["stopped"] is True and stopped["failure"] is None
    died = SL.parse_log(fixture_text("sglang_logs", "real_cpu_kv_pool_oom.log"))
    assert died["outcome"] == "failed" and died["stopped"] is False


def test_parse_file_reads_one_launch_of_several(tmp_path):
    first = fixture_text("sglang_logs", "real_cpu_kv_pool_oom.log")
    second = fixture_text("sglang_logs", "real_cpu_ready_capped.log")
    log = tmp_path / "tiny.log"
    log.write_text(first + second)
    one = SL.parse_file(str(log), 0, until=len(first.encode()))
    assert one["outcome"] == "failed" and one["failure"]["kind"] == "kv_pool_oom"
    assert "max_total_num_tokens" not in one["facts"]          # nothing of the launch after it
    both = SL.parse_file(str(log), len(first.encode()))
    assert both["outcome"] == "ready" and both["facts"]["max_total_num_tokens"] == 8192


def test_a_log_that_ends_after_the_weights_loaded_infers_the_pool_error_with_its_numbers():
    """Died after 'Load weight end', before the KV cache: SGLang was sizing its memory pool. Inferred, and said so."""
    lines = fixture_text("sglang_logs", "kv_pool_oom_tp2_nextn_seed.log").split("\n")
    end = max(i for i, line in enumerate(lines) if "Load weight end" in line)
    text = "\n".join(lines[:end + 1]) + "\n[2026-11-20 09:17:40] Received sigquit from a child process.\n"
    f = SL.parse_log(text)["failure"]
    assert f["kind"] == "kv_pool_oom" and f["inferred"] is True and f["phase"] == "memory_pool"
    assert f["hint"].startswith("Inferred (the process died without a logged cause; evidence: the log ends after "
                                "'Load weight end' (46.62 GiB free before loading, 20.71 GiB after) and before the KV "
                                "cache was allocated). The static budget is mem_fraction_static x free memory = 0.85 x")
    # the same cut while still starting (no death) is not a failure
    assert SL.parse_log("\n".join(lines[:end + 1]) + "\n")["outcome"] == "starting"


def test_a_fraction_python_prints_with_an_exponent_is_read_whole():
    """SGLang prints the fraction as Python's repr: below 1e-4 with an exponent (mem_fraction_static=1e-05), which was
    read as 1."""
    line = ("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: "
            "self.server_args.mem_fraction_static=1e-05")
    res = SL.parse_log("Traceback (most recent call last):\n  File \"x.py\", line 1, in f\n" + line + "\n")
    assert res["failure"]["kind"] == "kv_pool_oom" and res["facts"]["mem_fraction_static"] == 1e-05
    res = SL.parse_log("server_args=ServerArgs(model_path='/m', mem_fraction_static=1.2e-05, tp_size=1)\n")
    assert res["facts"]["mem_fraction_static"] == 1.2e-05
