"""How an rsync-over-ssh failure is named (hf_sources.RsyncSource._fail): ssh's own failure is recognised whether
rsync exits 255 or, having read the dead stream first, 12 (both seen on the same host-key refusal)."""
from unit_helpers import load_module_util

hf_sources = load_module_util("hf_sources")


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
