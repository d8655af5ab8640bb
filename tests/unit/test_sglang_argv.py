"""The one argv builder: the API key goes through SGLang's --config file, numbers are checked, binds classified."""
import pytest
import yaml

from unit_helpers import load_module_util

A = load_module_util("server.argv")
P = load_module_util("server")
L = load_module_util("logs")
F = load_module_util("host.files")


def test_the_key_goes_into_a_config_file_sglang_reads_and_argv_only_names_the_file():
    argv = A.server_argv("/v/bin/python", "/m", {"tp_size": 2}, config_file="/etc/sglang/q.yaml")
    assert argv[-2:] == ["--config", "/etc/sglang/q.yaml"]
    key = "k\"ey with 'quotes' $HOME: # and ünïcode"
    text = A.config_text({"api_key": key})
    # SGLang 0.5.9's ConfigArgumentMerger: yaml.safe_load, keys turned into --<key> verbatim (so the flag's name)
    assert yaml.safe_load(text) == {"api-key": key}


def test_config_file_must_be_yaml_as_sglang_demands_and_args_cannot_carry_config_or_secrets():
    with pytest.raises(A.ArgvError, match="only a .yaml or .yml"):
        A.server_argv("/p", "/m", {}, config_file="/etc/sglang/q.env")
    with pytest.raises(A.ArgvError, match="args.config"):
        A.server_argv("/p", "/m", {"config": "/tmp/x.yaml"})
    with pytest.raises(A.ArgvError, match="sglang_server_api_key"):
        A.server_argv("/p", "/m", {"api_key": "k"})
    with pytest.raises(A.ArgvError, match="control character"):
        A.config_text({"api_key": "a\nb"})


@pytest.mark.parametrize("args, message", [
    ({"mem_fraction_static": 1.2}, "args.mem_fraction_static=1.2: outside (0.0, 1.0)"),
    ({"mem_fraction_static": 0}, "args.mem_fraction_static=0: outside (0.0, 1.0)"),
    ({"mem_fraction_static": 1.0}, "outside (0.0, 1.0)"),
    ({"mem_fraction_static": "high"}, "must be a number in (0.0, 1.0)"),
    ({"mem_fraction_static": "1.5"}, "args.mem_fraction_static=1.5: outside (0.0, 1.0)"),
    ({"tp_size": 0}, "args.tp_size=0: outside [1, 1024]"),
    ({"tp_size": 2.5}, "must be a whole number"),
    ({"tp_size": True}, "must be a whole number"),
    ({"port": 70000}, "args.port=70000: outside [1, 65535]"),
    ({"context_length": -5}, "args.context_length=-5"),
])
def test_bad_numeric_args_are_named_with_value_and_range(args, message):
    problems = A.validate_args(args)
    assert problems and message in problems[0]
    with pytest.raises(A.ArgvError, match="args."):
        A.server_argv("/p", "/m", args)


def test_good_numeric_args_pass():
    assert A.validate_args({"mem_fraction_static": 0.85, "tp_size": 2, "chunked_prefill_size": -1,
                            "context_length": 262144, "served_model_name": "q", "port": 30000}) == []


@pytest.mark.parametrize("host, loopback", [("127.0.0.1", True), ("127.1.2.3", True), ("::1", True),
                                            ("[::1]", True), ("localhost", True), ("0.0.0.0", False),
                                            ("::", False), ("10.0.0.5", False), ("myhost", False)])
def test_loopback_binds(host, loopback):
    assert A.is_loopback(host) is loopback


@pytest.mark.parametrize("host, url", [("0.0.0.0", "http://127.0.0.1:30000"), ("", "http://127.0.0.1:30000"),
                                       ("127.0.0.1", "http://127.0.0.1:30000"), ("10.0.3.101", "http://10.0.3.101:30000"),
                                       ("::", "http://[::1]:30000"), ("fd00::5", "http://[fd00::5]:30000"),
                                       ("[fd00::5]", "http://[fd00::5]:30000")])
def test_the_local_url_follows_the_bind(host, url):
    # a server bound to one address refuses 127.0.0.1: the rollout's drain check asked loopback of a replica bound to
    # its bridge address (10.0.3.101) and waited its whole bound for an answer that could not come
    assert A.local_url(host, 30000) == url


def test_config_hash_changes_with_a_secret_but_is_keyed_by_the_salt():
    argv = ["/p", "-m", "sglang.launch_server"]
    one = P.config_hash(argv, {}, None, P.secret_digest({"api_key": "a"}, b"s" * 32))
    two = P.config_hash(argv, {}, None, P.secret_digest({"api_key": "b"}, b"s" * 32))
    other_salt = P.config_hash(argv, {}, None, P.secret_digest({"api_key": "a"}, b"t" * 32))
    assert len({one, two, other_salt}) == 3


def test_write_private_never_follows_a_planted_link(tmp_path):
    target = tmp_path / "victim"
    target.write_text("untouched")
    link = tmp_path / "key.yaml"
    link.symlink_to(target)
    load_module_util("host").write_private(str(link), "api-key: x\n")
    assert target.read_text() == "untouched"            # the link was replaced, not followed
    assert not link.is_symlink() and oct(link.stat().st_mode & 0o777) == "0o600"


def test_the_launch_marker_never_appends_through_a_planted_link(tmp_path):
    target = tmp_path / "passwd"
    target.write_text("root:x:0:0\n")
    log = tmp_path / "llama.log"
    log.symlink_to(target)
    with pytest.raises(OSError):
        load_module_util("server.process")._open_log_with_marker(str(log))       # pylint: disable=protected-access
    assert target.read_text() == "root:x:0:0\n"


@pytest.mark.parametrize("line, secret", [
    ("[2026-11-30 10:00:00] server_args=ServerArgs(model_path='/m', api_key='sk-abc123', port=30000)", "sk-abc123"),
    ("server_args=ServerArgs(admin_api_key=\"adm-9\", hf_token='hf_xyz')", "adm-9"),
    ("server_args=ServerArgs(admin_api_key=\"adm-9\", hf_token='hf_xyz')", "hf_xyz"),
    ("Downloading https://user:pa55word@mirror.example/x", "pa55word"),
    ("GET /x?token=abc999&y=1", "abc999"),
    ("Authorization: Bearer eyJhbGciOi.J9", "eyJhbGciOi.J9"),
])
def test_secrets_sglang_prints_are_redacted_from_every_parser_output(line, secret):
    assert secret not in L.redact(line) and L.REDACTED in L.redact(line)
    res = L.parse_log(line + "\nTraceback (most recent call last):\n  File \"x.py\", line 1, in f\n"
                      "RuntimeError: failed with " + line + "\n")
    assert secret not in repr(res)


def test_redaction_leaves_ordinary_fields_and_empty_keys_alone():
    line = "server_args=ServerArgs(tokenizer_path='/m', api_key=None, max_total_tokens=None, mem_fraction_static=0.85)"
    assert L.redact(line) == line
    assert L.parse_log(line)["facts"]["mem_fraction_static"] == 0.85


def test_a_launchs_args_are_read_back_from_its_argv_exactly():
    args = {"tp_size": 2, "mem_fraction_static": 0.85, "speculative_algorithm": "NEXTN", "speculative_num_steps": 3,
            "enable_torch_compile": True, "served_model_name": "qwen 27b", "cuda_graph_bs": [1, 2, 4]}
    argv = A.server_argv("/v/bin/python", "/srv/models/q", dict(args, host="0.0.0.0", port=30000),
                         config_file="/etc/sglang/q.yaml")
    assert A.args_from_argv(argv) == args


@pytest.mark.parametrize("args, helper", [
    ({}, False), ({"nnodes": 2, "node_rank": 0}, False), ({"nnodes": 2, "node_rank": 1}, True),
    ({"nnodes": 1, "node_rank": 1}, False), ({"nnodes": "3", "node_rank": "2"}, True), ({"nnodes": "x"}, False),
    (None, False),
])
def test_a_rank_other_than_0_of_several_nodes_serves_no_api(args, helper):
    assert A.helper_rank(args) is helper


# Security round 2 (#42 item 1): a list value turned into raw argv words let a value smuggle a flag of its own;
# SGLang's argparse keeps the last --host, so the bind guard and the key rule were bypassed.
@pytest.mark.parametrize("args, needle", [
    ({"log_level": ["info", "--host", "0.0.0.0"]}, "args.log_level='--host'"),
    ({"log_level": ["info", "--api-key=secret"]}, "args.log_level='--api-key=secret'"),
    ({"served_model_name": "-x"}, "args.served_model_name='-x'"),
    ({"served_model_name": "q\nExecStartPre=+/bin/true"}, "control character"),
    ({"chunked_prefill_size": "-1"}, "args.chunked_prefill_size='-1'"),
    ({"log_level": [["info"]]}, "args.log_level: a list item cannot be a list"),
    ({"--host": "0.0.0.0"}, "args key '--host' is not an SGLang ServerArgs name"),
])
def test_a_value_word_that_would_be_a_flag_is_refused_before_argv_exists(args, needle):
    problems = A.validate_args(args)
    assert problems and needle in problems[0], problems
    with pytest.raises(A.ArgvError) as exc:
        A.server_argv("/p", "/m", args)
    assert needle in str(exc.value)


def test_negative_numbers_and_ordinary_lists_still_reach_argv_as_words():
    argv = A.server_argv("/p", "/m", {"chunked_prefill_size": -1, "cuda_graph_bs": [1, 2, 4],
                                      "served_model_name": "qwen-3"})
    assert argv[3:] == ["--chunked-prefill-size", "-1", "--cuda-graph-bs", "1", "2", "4",
                        "--served-model-name", "qwen-3", "--model-path", "/m"]
    assert A.validate_args({"json_model_override_args": '{"rope_scaling": {"factor": -1}}'}) == []


@pytest.mark.parametrize("value, needle", [
    ("Z", "api_key is 1 characters long: use at least 16"),
    ("0123456789abcde", "api_key is 15 characters long"),
    ("0123456789abcdef\n", "api_key holds a control character"),
])
def test_a_short_key_is_refused_naming_the_variable_never_the_key(value, needle):
    problem = F.secret_problem("api_key", value)
    assert problem and needle in problem
    assert value.strip() not in problem.replace("api_key", "")


def test_a_key_of_16_characters_or_none_is_fine():
    assert F.secret_problem("api_key", "0123456789abcdef") is None
    assert F.secret_problem("api_key", None) is None and F.secret_problem("api_key", "") is None


@pytest.mark.parametrize("key", ["ab'cd\"ef-TAILSECRET", "q\"uo'te\\'s-TAILSECRET", "only'single-TAILSECRET"])
def test_a_key_holding_both_quotes_is_redacted_whole_as_sglangs_repr_prints_it(key):
    """#42 item 7: Python's repr of a key with both ' and " escapes the quote ('ab\\'cd"ef'); the rule stopped at the
    escaped quote and printed the rest of the key."""
    line = "server_args=ServerArgs(model_path='/m', api_key=%r, port=30000)" % key
    out = L.redact(line)
    assert "TAILSECRET" not in out and out.endswith(", port=30000)"), out
    assert "TAILSECRET" not in L.redact("token=%r" % key)


# Security round 3 (#58 item 1): SGLang's parser is a plain argparse.ArgumentParser(): any unambiguous prefix of an
# option is that option, and the command line wins over --config. {host: 0.0.0.0, api_ke: ""} launched with
# --api-ke '' and served without a key; {api_k: "..."} put the key on argv. Names resolve against the option tables
# the parsers themselves hold (module options, generated by tests/oracle/options.py): exact, never a prefix.
@pytest.mark.parametrize("args, needle", [
    ({"api_ke": ""}, "args.api_ke: SGLang 0.5.9's and 0.5.23's parsers take --api-ke as --api-key (any unambiguous prefix of an "
                     "option is that option): a secret never goes on the command line"),
    ({"api_k": "k-0123456789abcdef"}, "args.api_k: SGLang 0.5.9's and 0.5.23's parsers take --api-k as --api-key"),
    ({"admin_api": "x"}, "args.admin_api: SGLang 0.5.9's and 0.5.23's parsers take --admin-api as --admin-api-key"),
    ({"ssl_keyfile_pass": "x"}, "--ssl-keyfile-pass as --ssl-keyfile-password"),
    ({"hos": "0.0.0.0"}, "args.hos: SGLang 0.5.9's and 0.5.23's parsers take --hos as --host (any unambiguous prefix of an option "
                         "is that option): the bind address is the role's own (sglang_server_host)"),
    ({"model": "/elsewhere"}, "args.model: SGLang 0.5.9's and 0.5.23's parsers take --model: give the model through model_path"),
    ({"conf": "/tmp/x.yaml"}, "args.conf: SGLang 0.5.9's and 0.5.23's parsers take --conf as --config"),
    ({"config": "/tmp/x.yaml"}, "args.config: SGLang 0.5.9's and 0.5.23's parsers take --config: the collection writes"),
    ({"tp": 2}, "args.tp: --tp is not an option of SGLang 0.5.9 or 0.5.23 - its parser would take it as --tp-size; "
                "give an option's full name (snake_case, e.g. tp_size)"),
])
def test_a_name_the_parser_would_take_as_another_option_is_refused(args, needle):
    problems = A.validate_args(dict(args, host="0.0.0.0", port=30000))
    assert problems and needle in problems[0], problems
    assert "k-0123456789abcdef" not in " ".join(problems)
    with pytest.raises(A.ArgvError):
        A.server_argv("/p", "/m", args)


def test_a_release_given_is_the_one_judged():
    assert A.validate_args({"tp_size": 2}, "0.5.9") == []
    assert "args.tp_sise: --tp-sise is not an option of SGLang 0.5.9; give an option's full name" in A.validate_args(
        {"tp_sise": 2}, "0.5.9")[0]
    # no release known: a name no option begins with is left to the parser that launches (its own words; a newer
    # release's option passes), a prefix of one never
    assert A.validate_args({"tp_sise": 2}) == []
    # an option 0.5.23 added is not one of 0.5.9's: named for the release that launches
    only_new = sorted(set(A.option_table("server", "0.5.23")) - set(A.option_table("server", "0.5.9")))
    name = next(o for o in only_new if not any(p.startswith(o) for p in A.option_table("server", "0.5.9")))[2:]
    key = name.replace("-", "_")
    assert A.validate_args({key: 1}, "0.5.23") == [] or "must be" in A.validate_args({key: 1}, "0.5.23")[0]
    assert "is not an option of SGLang 0.5.9" in A.validate_args({key: 1}, "0.5.9")[0]


def test_full_names_and_aliases_pass_and_the_secret_names_are_the_parsers():
    assert A.validate_args({"tensor_parallel_size": 2, "tp_size": 2, "host": "h", "port": 1}) == []
    assert A.secret_names(["api_k", "api_key", "admin_api", "tp_size", "ssl_keyfile_pass", "hf_token"]) == [
        "admin_api", "api_k", "api_key", "hf_token", "ssl_keyfile_pass"]
    # --redis is a prefix of three router options: argparse refuses it as ambiguous, so it reaches no secret
    assert A.secret_names(["redis", "redis_u", "oracle_pass", "host", "control_plane_api"], "router") == [
        "control_plane_api", "oracle_pass", "redis_u"]


def test_the_collections_own_flags_are_last_on_argv_so_nothing_follows_them():
    argv = A.server_argv("/p", "/m", {"trust_remote_code": True, "tp_size": 2, "host": "127.0.0.1", "port": 1},
                         config_file="/etc/s/q.yaml")
    assert argv[3:] == ["--tp-size", "2", "--trust-remote-code", "--host", "127.0.0.1", "--port", "1", "--model-path", "/m",
                        "--config", "/etc/s/q.yaml"]


def test_a_number_given_as_text_on_the_command_line_is_taken():
    """#60 item 6: -e sglang_server_port=22 is text, as every -e key=value is; it was refused as "args.port='22'
    must be a whole number"."""
    assert A.validate_args({"host": "127.0.0.1", "port": "22", "tp_size": "2", "mem_fraction_static": "0.8"}) == []
    assert A.server_argv("/p", "/m", {"host": "h", "port": "22"})[-4:-2] == ["--port", "22"]
    assert A.numeric_args({"port": "22", "mem_fraction_static": "0.85", "served_model_name": "7", "tp_size": "2x"}) == {
        "port": 22, "mem_fraction_static": 0.85, "served_model_name": "7", "tp_size": "2x"}
    assert "args.tp_size='2x': must be a whole number" in A.validate_args({"tp_size": "2x"})[0]


# ---- prefill/decode (#59 item 3): the role's three settings, and the operator's args kept off them

def test_disaggregation_settings_are_checked_and_named_by_their_variables():
    P = A.disaggregation_problems
    assert P("", "fake", "x") == [] and P(None, None, None) == []            # a plain server: nothing to check
    assert P("prefill", "mooncake", 8998) == [] and P("decode", "nixl", "8998", {"tp_size": 2}) == []
    assert P("prefill", "mooncake_tcp", 8998, release="0.5.23") == []
    assert P("middle", "mooncake", 8998) == [
        "sglang_server_disaggregation_mode='middle': prefill, decode, or empty (a plain server)"]
    fake = P("prefill", "fake", 8998)
    assert len(fake) == 1 and fake[0].startswith("sglang_server_disaggregation_transfer_backend=fake moves no KV")
    assert P("decode", "mooncake_tcp", 8998, release="0.5.9") == [
        "sglang_server_disaggregation_transfer_backend='mooncake_tcp': one of mooncake, nixl, ascend, mori (SGLang 0.5.9)"]
    assert P("prefill", "mooncake", 0)[0].startswith("sglang_server_disaggregation_bootstrap_port=0: a TCP port")


def test_the_operators_args_cannot_reach_the_flags_the_role_sets_for_prefill_and_decode():
    """Also abbreviated: SGLang's parser takes --disaggregation-m for --disaggregation-mode (its only option so)."""
    found = A.disaggregation_problems("", "mooncake", 8998, {"disaggregation_m": "prefill", "tp_size": 2,
                                                             "disaggregation_transfer_backend": "fake"}, "0.5.9")
    assert found == [
        "sglang_server_args.disaggregation_m: SGLang 0.5.9's parser takes --disaggregation-m as --disaggregation-mode: "
        "prefill/decode is the role's - set sglang_server_disaggregation_mode",
        "sglang_server_args.disaggregation_transfer_backend: SGLang 0.5.9's parser takes "
        "--disaggregation-transfer-backend: prefill/decode is the role's - set "
        "sglang_server_disaggregation_transfer_backend"]
    assert A.disaggregation_args("", "mooncake", 8998) == {}
    assert A.disaggregation_args("decode", "mooncake", "8998") == {
        "disaggregation_mode": "decode", "disaggregation_transfer_backend": "mooncake",
        "disaggregation_bootstrap_port": 8998}
