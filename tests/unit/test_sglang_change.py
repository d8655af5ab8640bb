"""A change that would fail does not take the server down (#42 item 9): the launch's arguments parsed by the venv's own
SGLang parser before anything is written or stopped, and the last good unit/env/config kept and put back."""
import os
import sys

import pytest

from unit_helpers import ROOT, load_module_util

C = load_module_util("server.change")
STANDIN = os.path.join(ROOT, "tests", "lab", "sglang_standin")   # a venv's sglang: its srt/server_args.py
# the account the check runs as must reach the interpreter: the system's, as the lab's stand-in "venv" is
PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
LAUNCH = [PY, "-m", "sglang.launch_server", "--model-path", "/srv/models/m", "--host", "127.0.0.1",
          "--port", "30000"]


def check(*args, env=None):
    return C.check_args(LAUNCH + list(args), dict({"PYTHONPATH": STANDIN}, **(env or {})), user="nobody")


def test_a_misspelt_argument_is_refused_with_argparses_own_words_before_anything_runs():
    """The lab's typo: speculative_algo_typo: 1 rewrote the unit, stopped the healthy server, and SGLang's argparse
    refused the launch (exit status 2) - the server stayed down."""
    failure, note = check("--speculative-algo-typo", "1")
    assert note is None
    assert failure["kind"] == "bad_argument" and failure["phase"] == "args"
    assert failure["message"] == "launch_server.py: error: unrecognized arguments: --speculative-algo-typo 1"
    assert "running server keeps serving" in failure["hint"]


def test_an_invalid_choice_or_type_is_refused_and_full_names_and_aliases_pass():
    failure, _note = check("--speculative-algorithm", "MTP")
    assert "argument --speculative-algorithm: invalid choice: 'MTP'" in failure["message"]
    failure, _note = check("--tp-size", "two")
    assert "argument --tp-size/--tensor-parallel-size: invalid int value: 'two'" in failure["message"]
    assert check("--tensor-parallel-size", "2", "--speculative-algorithm", "NEXTN", "--context-length", "8192") == (
        None, None)


# Security round 3 (#58 item 1): argparse takes any unambiguous prefix of an option as that option, and the command
# line wins over --config - `--api-ke ''` switched the key off, `--hos 0.0.0.0` after the role's --host rebound it.
@pytest.mark.parametrize("args, needle", [
    (("--api-ke", ""), "--api-ke is not an option of this release's parser (it would be taken as --api-key)"),
    (("--tp", "2"), "--tp is not an option of this release's parser (it would be taken as --tp-size)"),
    (("--hos", "0.0.0.0"), "--hos is not an option of this release's parser (it would be taken as --host)"),
    (("--api-key=k-0123456789abcdef",), "--api-key (api_key) is a secret: it never goes on the command line"),
    (("--host", "0.0.0.0"), "--host (host) is given twice: the collection sets it itself"),
    (("--model", "/elsewhere"), "--model (model_path) is given twice"),
])
def test_a_prefix_a_secret_or_an_own_option_again_is_refused_by_the_installed_parser(args, needle):
    failure, note = check(*args)
    assert note is None and failure["kind"] == "bad_argument", (failure, note)
    assert needle in failure["message"], failure["message"]
    assert "k-0123456789abcdef" not in failure["message"]


def test_the_config_file_is_never_read_by_the_check(tmp_path):
    secret = tmp_path / "q.yaml"
    secret.write_text("api-key: \"k-0123456789abcdef\"\n")
    os.chmod(str(secret), 0o600)                          # root's: the service account could not read it anyway
    assert check("--config", str(secret)) == (None, None)


def test_a_venv_without_that_parser_is_not_checked_and_says_so(tmp_path):
    failure, note = C.check_args([PY, "-m", "sglang.launch_server", "--model-path", "/m"],
                                 {"PYTHONPATH": str(tmp_path)}, user="nobody")
    assert failure is None and "the launch's arguments were not checked" in note and "ModuleNotFoundError" in note


def test_the_last_good_files_are_kept_and_put_back_with_their_modes(tmp_path):
    unit, env, config = tmp_path / "sglang-q.service", tmp_path / "q.env", tmp_path / "q.yaml"
    unit.write_text("ExecStart=good\n")
    env.write_text("A=1\n")
    os.chmod(str(env), 0o600)
    paths = {"unit": str(unit), "env": str(env), "config": str(config)}          # no key: no config file
    good = C.LastGood(str(tmp_path / "state"), "q")
    assert good.save("hash-good", ["python", "-m", "sglang.launch_server"], "L1", paths) is True
    assert good.save("hash-good", [], "L1", paths) is False                      # kept already
    assert oct(os.stat(os.path.join(good.dir, "env")).st_mode & 0o777) == "0o600"
    unit.write_text("ExecStart=bad\n")
    env.write_text("A=2\n")
    config.write_text("api-key: x\n")
    rec = good.put_back()
    assert rec["config_hash"] == "hash-good" and rec["launch_id"] == "L1"
    assert unit.read_text() == "ExecStart=good\n" and env.read_text() == "A=1\n" and not config.exists()
    assert oct(os.stat(str(env)).st_mode & 0o777) == "0o600"
    assert C.LastGood(str(tmp_path / "other"), "q").put_back() is None
