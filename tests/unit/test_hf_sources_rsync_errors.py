"""How an rsync-over-ssh failure is named (hf_sources.RsyncSource._fail): ssh's own failure is recognised whether
rsync exits 255 or, having read the dead stream first, 12 (both seen on the same host-key refusal)."""
import pytest

from unit_helpers import load_module_util

hf_sources = load_module_util("hub.sources")


class Ended(object):
    def __init__(self, code):
        self.returncode = code


def fail(code, stderr):
    src = hf_sources.RsyncSource("copy@oldnode", "/srv/models/m", key_file="/etc/k", known_hosts_file="/etc/kh")
    return src._fail(Ended(code), stderr.encode(), "reading its manifest")  # pylint: disable=protected-access


HOST_KEY = ("Host key verification failed.\r\n"
            "rsync: connection unexpectedly closed (0 bytes received so far) [Receiver]\n"
            "rsync error: error in rsync protocol data stream (code 12) at io.c(285) [Receiver=3.5.0]\n"
            "some later line\n")


def test_a_host_key_refusal_is_an_ssh_failure_whatever_rsync_exits_with():
    for code in (255, 12):
        e = fail(code, HOST_KEY)
        assert e.kind == "network" and "ssh to copy@oldnode failed while reading its manifest" in str(e)
        assert "Host key verification failed." in str(e) and "hf_model_source_known_hosts" in str(e)


def test_missing_files_and_other_rsync_errors_are_named_apart():
    e = fail(23, "rsync: [sender] link_stat \"/srv/models/m/x\" failed: No such file or directory (2)\n")
    assert e.kind == "not_found" and "is hf_model_source_host_dir the directory hf_model wrote there?" in str(e)
    e = fail(12, "rsync error: error in rsync protocol data stream (code 12)\n")
    assert e.kind == "network" and "rsync ended with code 12" in str(e) and "run again to resume" in str(e)


hf_hub = load_module_util("hub.snapshot")


def test_a_refusal_no_retry_mends_is_not_retried_a_link_that_may_come_back_is():
    refused = [HOST_KEY,
               "copy@oldnode: Permission denied (publickey).\r\nrsync: connection unexpectedly closed\n",
               "@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @\n",
               "ssh: Could not resolve hostname oldnode: Name or service not known\r\n"]
    for text in refused:
        e = fail(255, text)
        assert e.kind == "network" and e.permanent and not hf_hub.transient(e), text
    for text in ("ssh: connect to host oldnode port 22: Connection refused\r\n",
                 "ssh: connect to host oldnode port 22: Connection timed out\r\n",
                 "ssh: Could not resolve hostname oldnode: Temporary failure in name resolution\r\n",
                 "rsync error: error in rsync protocol data stream (code 12)\n"):
        e = fail(255 if "ssh:" in text else 12, text)
        assert not e.permanent and hf_hub.transient(e), text


def test_with_retries_says_a_permanent_refusal_at_once_and_retries_a_transient_one():
    calls = []

    def refused():
        calls.append(1)
        raise fail(255, HOST_KEY)
    policy = {"count": 5, "backoff": 0.0}
    with pytest.raises(hf_sources.HubError) as e:
        hf_hub.with_retries(refused, "manifest", policy)
    assert "retries)" not in str(e.value) and len(calls) == 1
    calls.clear()

    def link_down():
        calls.append(1)
        raise fail(255, "ssh: connect to host oldnode port 22: Connection refused\r\n")
    with pytest.raises(hf_sources.HubError) as e:
        hf_hub.with_retries(link_down, "manifest", policy)
    assert "(after 5 retries)" in str(e.value) and len(calls) == 6
