"""The layout module for real through `ansible` on localhost: one call lays out directories and files, a re-run
changes nothing, check mode changes nothing, a diff shows what changes, and a secret stays out of every output
(also with -vvv and --diff). Accounts and systemctl are exercised for real inside the lab's containers (the
molecule scenarios of sglang_venv, sglang_server, hf_model and nvidia_driver); here they would act on this machine."""
import json
import os
import stat
import subprocess

from ansible_helpers import ROOT, VENV_BIN, ansible_env, run_module

TOKEN = "hf_" + "L4y0utT0ken" * 3


def spec(tmp_path, token=TOKEN, unit="[Service]\nExecStart=/opt/sglang/venv/bin/python -m sglang.launch_server\n"):
    return {"paths": [
        {"path": str(tmp_path / "etc" / "sglang"), "owner": "root", "group": "root", "mode": "0750"},
        {"path": str(tmp_path / "etc" / "sglang" / "hf-token"), "secret": token + "\n", "owner": "root",
         "group": "root", "mode": "0600"},
        {"path": str(tmp_path / "sglang-main.service"), "content": unit, "owner": "root", "group": "root",
         "mode": "0644"}],
        "probe": [str(tmp_path / "etc"), str(tmp_path / "nothing")]}


def test_one_call_lays_out_then_a_rerun_and_check_mode_change_nothing(tmp_path):
    first = run_module("gpuserve.sglang.layout", spec(tmp_path))
    assert first["changed"] is True, first
    assert first["changed_paths"] == [str(tmp_path / "etc" / "sglang"), str(tmp_path / "etc" / "sglang" / "hf-token"),
                                      str(tmp_path / "sglang-main.service")]
    assert first["present"] == {str(tmp_path / "etc"): True, str(tmp_path / "nothing"): False}
    token_file = tmp_path / "etc" / "sglang" / "hf-token"
    assert token_file.read_text() == TOKEN + "\n" and stat.S_IMODE(os.stat(token_file).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(tmp_path / "etc" / "sglang").st_mode) == 0o750
    again = run_module("gpuserve.sglang.layout", spec(tmp_path))
    assert again["changed"] is False and again["changed_paths"] == []
    checked = run_module("gpuserve.sglang.layout", spec(tmp_path, unit="[Service]\nExecStart=/other\n"), check=True)
    assert checked["changed"] is True and checked["changed_paths"] == [str(tmp_path / "sglang-main.service")]
    assert (tmp_path / "sglang-main.service").read_text().endswith("sglang.launch_server\n"), "check mode wrote"


def test_the_diff_shows_a_file_and_a_secret_is_in_no_output(tmp_path):
    run_module("gpuserve.sglang.layout", spec(tmp_path))
    changed = run_module("gpuserve.sglang.layout", spec(tmp_path, token=TOKEN + "2", unit="[Service]\nExecStart=/b\n"),
                         extra=("--diff",))
    assert changed["changed"] is True
    diffs = dict((d["before_header"], d) for d in changed["diff"])
    unit = diffs[str(tmp_path / "sglang-main.service")]
    assert unit["before"].endswith("sglang.launch_server\n") and unit["after"] == "[Service]\nExecStart=/b\n"
    assert diffs[str(tmp_path / "etc" / "sglang" / "hf-token")]["after"] == "(secret, changed)\n"
    assert TOKEN not in changed["_stdout"] + changed["_stderr"], "the token is in ansible's output"
    assert (tmp_path / "etc" / "sglang" / "hf-token").read_text() == TOKEN + "2\n"


def test_a_bad_entry_is_named_and_nothing_is_written(tmp_path):
    bad = spec(tmp_path)
    bad["paths"][1]["mode"] = "0644"
    result = run_module("gpuserve.sglang.layout", bad)
    assert result["failed"] is True and "paths[1]" in result["msg"] and "give nothing to others" in result["msg"]
    assert TOKEN not in result["_stdout"] + result["_stderr"]
    assert not (tmp_path / "etc").exists()


def test_with_vvv_and_diff_the_default_output_has_no_secret(tmp_path):
    """What an operator's terminal shows: the default callback, -vvv, --diff."""
    run_module("gpuserve.sglang.layout", spec(tmp_path))
    env = ansible_env(ANSIBLE_NOCOLOR="1")
    p = subprocess.run([os.path.join(VENV_BIN, "ansible"), "localhost", "-m", "gpuserve.sglang.layout", "-a",
                        json.dumps(spec(tmp_path, token=TOKEN + "3")), "--diff", "-vvv"],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=300, check=False)
    assert p.returncode == 0 and "(secret, changed)" in p.stdout, p.stdout[-2000:]
    assert TOKEN not in p.stdout + p.stderr, "the token is in ansible's output"
