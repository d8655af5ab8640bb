"""Security round 3 (#58 item 2), the seal's part: what the account that built a venv could leave in it for root.
A hard link into the build made the seal re-own a file outside it (the router's key became root's 0600: the router
could not start); a descriptor opened before the seal kept writing after it; a link could point root's imports
anywhere; a poisoned file came out sealed. Each is reproduced here on real files and refused."""
import os
import pwd
import subprocess
import sys
import time

import pytest

from unit_helpers import load_module_util

S = load_module_util("venv.seal")


def _build(tmp_path):
    build = tmp_path / "store" / "b1"
    (build / "bin").mkdir(parents=True)
    (build / "lib").mkdir()
    (build / "pyvenv.cfg").write_text("home = %s\n" % os.path.dirname(os.path.realpath(sys.executable)))
    os.symlink(os.path.realpath(sys.executable), str(build / "bin" / "python"))
    (build / "lib" / "mod.py").write_text("x = 1\n")
    return build


@pytest.mark.skipif(os.geteuid() != 0, reason="re-owning files needs root")
def test_a_hard_link_to_a_file_outside_the_build_is_refused_before_it_is_reowned(tmp_path):
    nobody = pwd.getpwnam("nobody")
    build = _build(tmp_path)
    outside = tmp_path / "router.key"
    outside.write_text("k" * 24)
    os.chown(str(outside), nobody.pw_uid, nobody.pw_gid)
    os.chmod(str(outside), 0o600)
    os.link(str(outside), str(build / "lib" / "planted.py"))
    with pytest.raises(S.SealError, match="planted.py has 2 hard links"):
        S.seal(str(build))
    st = os.stat(str(outside))
    assert (st.st_uid, st.st_mode & 0o777) == (nobody.pw_uid, 0o600)      # the router's key is still the router's


def test_a_link_leaving_the_build_is_named_and_the_interpreter_links_are_not(tmp_path):
    build = _build(tmp_path)
    assert S.links_leaving(str(build)) == []
    os.symlink("/etc", str(build / "lib" / "elsewhere"))
    os.symlink("../lib/mod.py", str(build / "bin" / "inside"))
    assert S.links_leaving(str(build)) == ["%s -> /etc" % (build / "lib" / "elsewhere")]


def test_a_descriptor_held_open_for_writing_is_named_and_a_reader_is_not(tmp_path):
    build = _build(tmp_path)
    target = str(build / "lib" / "mod.py")
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; f = open(sys.argv[1], 'a'); "
                               "print('open', flush=True); time.sleep(60)", target], stdout=subprocess.PIPE, text=True)
    reader = subprocess.Popen([sys.executable, "-c", "import sys, time; f = open(sys.argv[1]); "
                               "print('open', flush=True); time.sleep(60)", target], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "open" and reader.stdout.readline().strip() == "open"
        found = S.open_writers(str(build), own_pid=os.getpid())
        assert [f.split(" (")[0] for f in found] == ["pid %d" % holder.pid] and found[0].endswith(": " + target), found
    finally:
        for p in (holder, reader):
            p.kill()
            p.wait()
    deadline = time.time() + 5
    while S.open_writers(str(build)) and time.time() < deadline:
        time.sleep(0.05)
    assert S.open_writers(str(build)) == []


def test_a_file_changed_after_install_is_caught_by_its_record(tmp_path):
    site = tmp_path / "b" / "lib" / "python3.11" / "site-packages"
    (site / "alpha").mkdir(parents=True)
    (site / "alpha-1.0.dist-info").mkdir()
    (site / "alpha" / "__init__.py").write_text("x = 1\n")
    (site / "alpha" / "a,b.json").write_text("{}\n")
    digest = S._urlsafe_sha256(str(site / "alpha" / "__init__.py"))  # pylint: disable=protected-access
    comma = S._urlsafe_sha256(str(site / "alpha" / "a,b.json"))  # pylint: disable=protected-access
    (site / "alpha-1.0.dist-info" / "RECORD").write_text(
        "alpha/__init__.py,sha256=%s,6\n\"alpha/a,b.json\",sha256=%s,3\nalpha/gone.py,sha256=abc,1\n"
        "alpha-1.0.dist-info/RECORD,,\n" % (digest, comma))
    assert S.record_mismatches(str(tmp_path / "b")) == []
    (site / "alpha" / "__init__.py").write_text("import os; os.system('id')\n")        # poisoned
    assert S.record_mismatches(str(tmp_path / "b")) == [
        "lib/python3.11/site-packages/alpha/__init__.py: recorded sha256=%s, found %s" % (
            digest, S._urlsafe_sha256(str(site / "alpha" / "__init__.py")))]  # pylint: disable=protected-access


def test_a_path_two_packages_ship_matches_either_record(tmp_path):
    """The real 0.5.9 lock installs two packages with a top-level build_backend.py: the later install's file stands,
    and it is what one of the two RECORDs says - not a poisoned file."""
    site = tmp_path / "b" / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    (site / "build_backend.py").write_text("second = 2\n")
    second = S._urlsafe_sha256(str(site / "build_backend.py"))  # pylint: disable=protected-access
    for name, digest in (("one-1.0", "Zm9yLW9uZS1vbmx5"), ("two-1.0", second)):
        (site / (name + ".dist-info")).mkdir()
        (site / (name + ".dist-info") / "RECORD").write_text("build_backend.py,sha256=%s,11\n" % digest)
    assert S.record_mismatches(str(tmp_path / "b")) == []
    (site / "build_backend.py").write_text("poisoned = 1\n")
    assert len(S.record_mismatches(str(tmp_path / "b"))) == 1


def test_a_wheels_own_bytecode_compiled_again_at_install_is_not_compared(tmp_path):
    """0.5.23's lock ships numpy with .pyc files in its RECORD; uv --compile-bytecode writes them anew."""
    site = tmp_path / "b" / "lib" / "python3.11" / "site-packages"
    (site / "p" / "__pycache__").mkdir(parents=True)
    (site / "p-1.0.dist-info").mkdir()
    (site / "p" / "__pycache__" / "m.cpython-311.pyc").write_bytes(b"compiled here")
    (site / "p-1.0.dist-info" / "RECORD").write_text("p/__pycache__/m.cpython-311.pyc,sha256=d2hlZWwtZmlsZQ,9\n")
    assert S.record_mismatches(str(tmp_path / "b")) == []
