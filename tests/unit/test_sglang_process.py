"""sglang_process helpers that need no process: systemd quoting and the EnvironmentFile body."""
import pytest

from unit_helpers import load_module_util

SP = load_module_util("sglang_process")


def test_exec_line_quotes_every_word_and_doubles_specifiers_and_dollars():
    argv = ["/opt/sglang/venv/bin/python", "-m", "sglang.launch_server", "--served-model-name",
            "it's \"q\" $HOME %h `x` back\\slash\nline"]
    assert SP.systemd_exec_line(argv) == (
        '"/opt/sglang/venv/bin/python" "-m" "sglang.launch_server" "--served-model-name" '
        '"it\'s \\"q\\" $$HOME %%h `x` back\\\\slash\\nline"')


def test_exec_line_escapes_other_control_characters():
    assert SP.systemd_exec_line(["a\x01b", "tab\tc"]) == '"a\\x01b" "tab\\tc"'


def test_environment_file_is_sorted_quoted_and_refuses_what_it_cannot_hold():
    body = SP.environment_file({"NCCL_SOCKET_IFNAME": 'k"$x`\\', "HF_TOKEN": "hf_abc"})
    assert body == 'HF_TOKEN="hf_abc"\nNCCL_SOCKET_IFNAME="k\\"\\$x\\`\\\\"\n'
    with pytest.raises(ValueError, match="contains a line break"):
        SP.environment_file({"A": "x\ny"})
    with pytest.raises(ValueError, match="'1BAD' is not a valid environment variable name"):
        SP.environment_file({"1BAD": "x"})
