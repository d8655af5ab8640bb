"""tests/ci/lock.sh check against the real package index (as CI runs it), on a copy of the router's lock: the lock
resolves unchanged; a lock missing a package, or pinning what its .in does not allow, is stale. The lock's pins are
uv's preferences (as `write` has them): a newer release the index shows only later, dated before exclude-newer
(a mirror filling in old releases), does not make a good lock stale - the check turned red that way once. (On
2026-12-02 the index showed uvicorn 0.55.0, dated 2026-11-28, before the cutoff: a fresh resolution picks it for
Python >= 3.11, the router's lock keeps 0.54.0 and resolves unchanged.)"""
import os
import re
import shutil
import subprocess

from ansible_helpers import ROOT

NAME = "sglang-router-0.3.2"
SRC = os.path.join(ROOT, "roles", "sglang_router", "files", "locks")


def check(locks):
    env = dict(os.environ, LOCK_DIRS=str(locks), UV=os.path.join(ROOT, ".venv", "bin", "uv"))
    return subprocess.run(["bash", os.path.join(ROOT, "tests", "ci", "lock.sh"), "check"], capture_output=True,
                          text=True, env=env, timeout=300, check=False)


def copy(tmp_path):
    locks = tmp_path / "locks"
    locks.mkdir()
    for ext in (".in", ".lock", ".tags"):
        shutil.copy(os.path.join(SRC, NAME + ext), locks / (NAME + ext))
    return locks


def test_the_lock_resolves_unchanged(tmp_path):
    p = check(copy(tmp_path))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "lock: %s.lock resolves unchanged (31 pins)" % NAME in p.stdout


def test_a_lock_missing_a_package_is_stale(tmp_path):
    locks = copy(tmp_path)
    lock = locks / (NAME + ".lock")
    # the orjson block: its pin line, its hashes and its "# via" lines, up to the next pin
    lock.write_text(re.sub(r"(?ms)^orjson==.*?(?=^[a-z])", "", lock.read_text()))
    assert "orjson==" not in lock.read_text()
    p = check(locks)
    assert p.returncode == 1
    assert "+orjson==" in p.stdout and "lock: %s.lock is stale: run tests/ci/lock.sh write %s " % (NAME, NAME) in p.stderr


def test_a_pin_its_in_file_does_not_allow_is_stale(tmp_path):
    locks = copy(tmp_path)
    lock = locks / (NAME + ".lock")
    lock.write_text(lock.read_text().replace("\nsglang-router==0.3.2 ", "\nsglang-router==0.3.1 "))
    p = check(locks)
    assert p.returncode == 1
    assert "-sglang-router==0.3.1" in p.stdout and "+sglang-router==0.3.2" in p.stdout


def test_a_tags_record_that_is_missing_or_stale_is_named(tmp_path):
    """The record beside the lock (the tags of every file it pins) is written and checked with it."""
    locks = copy(tmp_path)
    tags = locks / (NAME + ".tags")
    tags.write_text(tags.read_text().replace("py3-none-any", "py3-none-any sdist", 1))
    p = check(locks)
    assert p.returncode == 1 and "lock: %s.tags is stale or missing: run tests/ci/lock.sh write %s" % (NAME, NAME) in p.stderr
    tags.unlink()
    p = check(locks)
    assert p.returncode == 1 and "lock: %s.tags is stale or missing" % NAME in p.stderr
