"""Security round 3 (#58 item 4): the textfile writers. host/files.py and host/exposition.py wrote (and, with metrics
turned off, unlinked) under the node exporter's textfile directory by path; on Debian it sits under
/var/lib/prometheus, which the prometheus account owns and can swap for a link - root then wrote or removed a file
of that name wherever the link pointed. The directory is now reached from / one component at a time without following
a link, and the file written, renamed and unlinked relative to its descriptor."""
import os

import pytest

from unit_helpers import load_module_util

X = load_module_util("host.exposition")
LAYOUT = load_module_util("host.layout")


def _tree(tmp_path):
    base = tmp_path / "var-lib-prometheus"
    real = base / "node-exporter"
    real.mkdir(parents=True)
    elsewhere = tmp_path / "etc-cron.d"
    elsewhere.mkdir()
    return base, real, elsewhere


def test_a_textfile_is_written_atomically_and_readable_by_the_exporter(tmp_path):
    _base, real, _elsewhere = _tree(tmp_path)
    X.write_textfile(str(real / "gpuserve_nvidia.prom"), "a 1\n")
    assert (real / "gpuserve_nvidia.prom").read_text() == "a 1\n"
    assert oct(os.stat(str(real / "gpuserve_nvidia.prom")).st_mode & 0o777) == "0o644"
    assert sorted(os.listdir(str(real))) == ["gpuserve_nvidia.prom"]          # no temporary left


def test_a_directory_swapped_for_a_link_is_refused_and_nothing_written_where_it_points(tmp_path):
    base, real, elsewhere = _tree(tmp_path)
    os.rename(str(real), str(base / "old"))
    os.symlink(str(elsewhere), str(real))                   # the account that owns base swapped it
    with pytest.raises(X.TextfileDirError, match="node-exporter is a link"):
        X.write_textfile(str(real / "gpuserve_nvidia.prom"), "a 1\n")
    assert os.listdir(str(elsewhere)) == []


def test_a_link_higher_up_is_refused_too(tmp_path):
    base, _real, elsewhere = _tree(tmp_path)
    (elsewhere / "node-exporter").mkdir()
    os.rename(str(base), str(tmp_path / "moved"))
    os.symlink(str(elsewhere), str(base))
    with pytest.raises(X.TextfileDirError, match="var-lib-prometheus is a link"):
        X.write_textfile(str(base / "node-exporter" / "x.prom"), "a 1\n")
    assert os.listdir(str(elsewhere / "node-exporter")) == []


def test_a_directory_anyone_may_write_is_refused_unless_roots_and_sticky(tmp_path):
    _base, real, _elsewhere = _tree(tmp_path)
    os.chmod(str(real), 0o777)
    with pytest.raises(X.TextfileDirError, match="may be written by anyone"):
        X.write_textfile(str(real / "x.prom"), "a 1\n")
    if os.geteuid() == 0:                                    # root's and sticky, as /tmp: no one swaps another's entry
        os.chmod(str(real), 0o1777)
        X.write_textfile(str(real / "x.prom"), "a 1\n")
        assert (real / "x.prom").read_text() == "a 1\n"


def test_a_link_planted_at_the_files_name_is_replaced_on_write_and_removed_not_followed(tmp_path):
    _base, real, elsewhere = _tree(tmp_path)
    victim = elsewhere / "root-owned"
    victim.write_text("keep\n")
    os.symlink(str(victim), str(real / "x.prom"))
    assert X.remove_textfile(str(real / "x.prom")) is True
    assert victim.read_text() == "keep\n" and not os.path.lexists(str(real / "x.prom"))
    os.symlink(str(victim), str(real / "x.prom"))
    X.write_textfile(str(real / "x.prom"), "a 1\n")
    assert victim.read_text() == "keep\n" and not os.path.islink(str(real / "x.prom"))
    assert X.remove_textfile(str(real / "x.prom")) is True and X.remove_textfile(str(real / "x.prom")) is False
    assert X.remove_textfile(str(tmp_path / "no-such-dir" / "x.prom")) is False


def test_the_layouts_removal_never_unlinks_through_a_swapped_directory(tmp_path):
    """Metrics turned off: the roles remove the .prom file with gpuserve.sglang.layout (state absent)."""
    base, real, elsewhere = _tree(tmp_path)
    (elsewhere / "gpuserve_nvidia.prom").write_text("someone else's\n")
    os.rename(str(real), str(base / "old"))
    os.symlink(str(elsewhere), str(real))
    with pytest.raises(LAYOUT.LayoutError, match="cannot be opened without following a link"):
        LAYOUT._absent({"path": str(real / "gpuserve_nvidia.prom")}, False, [], [])  # pylint: disable=protected-access
    assert (elsewhere / "gpuserve_nvidia.prom").read_text() == "someone else's\n"
