"""Security round 3 (#58 item 1), against the real parsers: SGLang's (0.5.9's and 0.5.23's own ``add_cli_args`` and
0.5.9's ``ConfigArgumentMerger``, from the wheels the locks pin, imported the oracle's way) and sglang-router 0.3.2's
(the real package in .venv-router, and the role's launcher). Each attack is first shown to work on the real parser -
a prefix is taken as the option it begins, the command line wins over --config, the last repeated option wins - then
shown refused by the collection, and the argv the collection does build is parsed by the real parser to exactly what
was meant."""
import ast
import json
import os
import subprocess
import sys

import pytest

from ansible_helpers import ROOT

sys.path.insert(0, os.path.join(ROOT, "tests", "unit"))
sys.path.insert(0, os.path.join(ROOT, "tests", "oracle"))
from unit_helpers import load_module_util  # noqa: E402  pylint: disable=wrong-import-position
import options  # noqa: E402  pylint: disable=wrong-import-position

A = load_module_util("server.argv")
R = load_module_util("server.router")
ORACLE = os.path.join(ROOT, "tests", "oracle")
ROUTER_PYTHON = os.path.join(ROOT, ".venv-router", "bin", "python")
LAUNCHER = os.path.join(ROOT, "roles", "sglang_router", "files", "gpuserve-sglang-router")
KEY = "k-0123456789abcdef-key"

# SGLang's own parser (tests/oracle/options.py: the release's add_cli_args under the oracle's stand-ins) and config
# merger, as prepare_server_args uses them; prints the parsed api_key, host, port and tp_size of the argv given as JSON
# (argv[1]). The real PyYAML the merger reads the file with is imported first (a stand-in would read nothing).
SGLANG_PARSE = r"""
import sys
sys.path.append(%(site_packages)r)
import yaml
sys.path.pop()
""" + options.SGLANG_PARSER + r"""
argv = json.loads(sys.argv[1])
if "--config" in argv:
    merger = importlib.import_module("sglang.srt.server_args_config_parser").ConfigArgumentMerger(parser)
    argv = merger.merge_config_with_args(argv)
ns = parser.parse_args(argv)
assert sys.modules["yaml"] is yaml and hasattr(yaml, "safe_load")
# 0.5.9's --tensor-parallel-size/--tp-size keeps tensor_parallel_size (from_cli_args maps it), 0.5.23's tp_size
ns.tp_size = getattr(ns, "tp_size", getattr(ns, "tensor_parallel_size", None))
print(json.dumps({k: getattr(ns, k) for k in ("api_key", "host", "port", "tp_size", "model_path")}))
"""


def sglang_parse(release, argv):
    import yaml  # pylint: disable=import-outside-toplevel
    code = SGLANG_PARSE % {"here": ORACLE, "release": release,
                           "site_packages": os.path.dirname(os.path.dirname(os.path.abspath(yaml.__file__)))}
    out = subprocess.run([sys.executable, "-S", "-c", code, json.dumps(argv)], capture_output=True, text=True,
                         check=True, cwd=ROOT, timeout=300)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    path = tmp_path_factory.mktemp("sglang") / "q.yaml"
    path.write_text(A.config_text({"api_key": KEY}))   # the collection's own --config file
    return str(path)


def test_the_yaml_module_the_merger_needs_is_real(config):
    """The merger reads the file with PyYAML: the oracle's stand-ins must not answer for it (else the config's key
    would silently be missing and the attack below would prove nothing)."""
    assert sglang_parse("0.5.9", ["--model-path", "/m", "--config", config])["api_key"] == KEY


@pytest.mark.parametrize("release", ["0.5.9", "0.5.23"])
def test_the_attack_works_on_sglangs_own_parser_and_the_collection_refuses_it(release, config):
    # the real parser: --api-ke is --api-key, and the command line wins over the --config file's key
    hostile = ["--api-ke", "", "--hos", "0.0.0.0", "--model-path", "/m"]
    if release == "0.5.9":       # 0.5.9's merger (0.5.23 has its own --config path): the key from the file is lost
        assert sglang_parse(release, hostile + ["--config", config])["api_key"] == ""
    assert sglang_parse(release, hostile)["host"] == "0.0.0.0"
    # the collection: refused by name before any argv exists, the key's value never in the words
    for args in ({"api_ke": ""}, {"hos": "0.0.0.0"}, {"api_k": KEY}, {"tp": 2}):
        problems = A.validate_args(dict(args, host="127.0.0.1", port=30000), release)
        assert problems and KEY not in " ".join(problems), args
        with pytest.raises(A.ArgvError):
            A.server_argv("/p", "/m", dict(args, host="127.0.0.1", port=30000), config_file=config)


@pytest.mark.parametrize("release", ["0.5.9", "0.5.23"])
def test_the_argv_the_collection_builds_means_what_it_says_to_sglangs_parser(release, config):
    argv = A.server_argv("/p", "/m", {"tensor_parallel_size": 2, "host": "127.0.0.1", "port": 30001},
                         config_file=config if release == "0.5.9" else None)
    got = sglang_parse(release, argv[3:])
    assert (got["host"], got["port"], got["tp_size"], got["model_path"]) == ("127.0.0.1", 30001, 2, "/m")
    if release == "0.5.9":
        assert got["api_key"] == KEY


def router_parse(argv):
    code = ("import json, sys; from sglang_router.launch_router import parse_router_args; "
            "a = parse_router_args(json.loads(sys.argv[1])); print(json.dumps([a.host, a.port, a.api_key]))")
    out = subprocess.run([ROUTER_PYTHON, "-c", code, json.dumps(argv)], capture_output=True, text=True, check=True,
                         timeout=120)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_attack_works_on_the_routers_own_parser_and_the_collection_refuses_it(tmp_path):
    if not os.path.exists(ROUTER_PYTHON):
        pytest.fail("%s is missing: run tests/ci/bootstrap.sh (make deps)" % ROUTER_PYTHON)
    # before: the role's own flags first, an extra `hos` after them - the real parser binds on all addresses
    assert router_parse(["--host", "127.0.0.1", "--port", "30080", "--hos", "0.0.0.0"])[0] == "0.0.0.0"
    assert router_parse(["--api-k", "", "--host", "127.0.0.1"])[2] == ""
    # the collection refuses it by name, in the role's preflight filter and in the argument builder
    with pytest.raises(R.RouterError, match="takes --hos as --host"):
        R.router_argv("127.0.0.1", 30080, "cache_aware", [], extra={"hos": "0.0.0.0"})
    # and the launcher on the node refuses an args file carrying one (a file written by other means), starting nothing
    args = tmp_path / "args.json"
    for words, needle in ((["--hos", "0.0.0.0", "--host", "127.0.0.1"], "--hos is not an option of the router's "
                           "parser (it would be taken as --host)"),
                          (["--redis-url", "redis://:pw@h/0"], "--redis-url (redis_url) is a secret"),
                          (["--host", "127.0.0.1", "--host", "0.0.0.0"], "--host (host) is given twice")):
        args.write_text(json.dumps(words))
        out = subprocess.run([ROUTER_PYTHON, LAUNCHER, "--args", str(args)], capture_output=True, text=True,
                             timeout=60, check=False)
        assert out.returncode != 0 and needle in out.stderr, out.stderr


def test_the_routers_argv_from_the_collection_means_what_it_says_to_its_parser():
    argv = R.router_argv("127.0.0.1", 30080, "round_robin", ["http://127.0.0.1:30001"],
                         extra={"health_check_interval_secs": 5, "disable_retries": True})
    assert router_parse(argv)[:2] == ["127.0.0.1", 30080]


def test_the_launchers_secrets_are_the_collections():
    with open(LAUNCHER) as fh:
        tree = ast.parse(fh.read())
    found = [ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
             and [getattr(x, "id", None) for x in n.targets] == ["SECRETS"]]
    assert found == [A.ROUTER_SECRETS]


def test_pd_mode_from_the_collection_is_what_the_real_router_parses_and_its_launcher_takes(tmp_path):
    """PD mode (#59 item 3): the argv the collection builds for two prefill servers (each with its bootstrap port) and
    two decode servers is parsed by sglang-router 0.3.2's own parse_router_args to exactly those servers, and the
    role's launcher takes --prefill and --decode once per server (append options: a repeat adds, it does not win)
    while still refusing any other option given twice."""
    prefill = [{"url": "http://10.0.3.100:30000/", "bootstrap_port": 8998}, {"url": "http://10.0.3.102:30000",
                                                                             "bootstrap_port": 8999}]
    decode = ["http://10.0.3.101:30000", "http://10.0.3.103:30000"]
    argv = R.router_argv("127.0.0.1", 30080, "round_robin", [], extra={"health_check_interval_secs": 5},
                         prefill=prefill, decode=decode)
    code = ("import json, sys; from sglang_router.launch_router import parse_router_args; "
            "a = parse_router_args(json.loads(sys.argv[1])); "
            "print(json.dumps([a.pd_disaggregation, [list(p) for p in a.prefill_urls], a.decode_urls, a.worker_urls]))")
    out = subprocess.run([ROUTER_PYTHON, "-c", code, json.dumps(argv)], capture_output=True, text=True, check=True,
                         timeout=120)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [
        True, [["http://10.0.3.100:30000", 8998], ["http://10.0.3.102:30000", 8999]], decode, []]
    check = ("import json, runpy, sys; ns = runpy.run_path(sys.argv[2], run_name='launcher'); "
             "print(json.dumps(ns['option_problem'](json.loads(sys.argv[1]))))")
    for words, expected in ((argv, None),
                            (argv + ["--policy", "random"], "--policy (policy) is given twice: the last would win")):
        out = subprocess.run([ROUTER_PYTHON, "-c", check, json.dumps(words), LAUNCHER], capture_output=True,
                             text=True, check=True, timeout=120)
        assert json.loads(out.stdout.strip().splitlines()[-1]) == expected
    # and the collection refuses what the router in PD mode cannot route, by name
    with pytest.raises(R.RouterError, match="PD mode needs at least one of each"):
        R.router_argv("127.0.0.1", 30080, "round_robin", [], prefill=prefill, decode=[])
    with pytest.raises(R.RouterError, match="routes only its prefill and decode servers"):
        R.router_argv("127.0.0.1", 30080, "round_robin", ["http://10.0.3.104:30000"], prefill=prefill, decode=decode)
    # PD mode's flags are the role's: an extra arg cannot add a server or switch the mode on, by name or abbreviated
    with pytest.raises(R.RouterError, match="extra 'prefill' is not a router flag in snake_case the role leaves"):
        R.router_argv("127.0.0.1", 30080, "round_robin", [], extra={"prefill": ["http://10.0.3.105:30000"]})
    with pytest.raises(R.RouterError, match="takes --pd-disagg as --pd-disaggregation"):
        R.router_argv("127.0.0.1", 30080, "round_robin", ["http://10.0.3.104:30000"], extra={"pd_disagg": True})
