"""Security round 3 (#58 item 2), the accounts' part: the venv is built by a dedicated build account that shares no
uid, group or home with the account that serves it, and whose uv cache the serving account cannot write (a serving
account that could poison the cache or the build's settings would have root seal what it planted). The checks are
pure (venv/accounts.py), tested here on pwd-like entries and stat results, and on the real file system."""
import collections
import os
import stat

from unit_helpers import load_module_util

A = load_module_util("venv.accounts")

Pw = collections.namedtuple("Pw", "pw_name pw_uid pw_gid pw_dir")
St = collections.namedtuple("St", "st_mode st_uid st_gid")
BUILD = Pw("sglang-build", 991, 991, "/var/lib/sglang-build")
SERVE = Pw("sglang", 990, 990, "/var/lib/sglang")
GROUPS = {991: {991}, 990: {990, 44}}          # the service account is in video (44) too


def groups_of(pw):
    return GROUPS.get(pw.pw_uid, {pw.pw_gid})


def tree(entries):
    """lstat over a dict path -> (type bits | mode, uid, gid); a missing path raises as os.lstat does."""
    def lstat(path):
        if path not in entries:
            raise FileNotFoundError(path)
        mode, uid, gid = entries[path]
        return St(mode, uid, gid)
    return lstat


ROOTS = {"/": (stat.S_IFDIR | 0o755, 0, 0), "/var": (stat.S_IFDIR | 0o755, 0, 0),
         "/var/lib": (stat.S_IFDIR | 0o755, 0, 0), "/tmp": (stat.S_IFDIR | 0o1777, 0, 0)}
HOME = dict(ROOTS, **{"/var/lib/sglang-build": (stat.S_IFDIR | 0o700, 991, 991),
                      "/var/lib/sglang-build/.cache": (stat.S_IFDIR | 0o755, 991, 991),
                      "/var/lib/sglang-build/.cache/uv": (stat.S_IFDIR | 0o755, 991, 991)})


def problems(build=BUILD, serve=SERVE, cache="/var/lib/sglang-build/.cache/uv", entries=None):
    return A.account_problems(build, serve, groups_of, cache, tree(HOME if entries is None else entries))


def test_a_build_account_apart_with_its_own_cache_passes():
    assert problems() == []
    # the cache not made yet: its home is the build account's, 0700
    assert problems(entries={k: v for k, v in HOME.items() if not k.endswith((".cache", "/uv"))}) == []


def test_the_serving_account_as_its_own_build_account_is_refused():
    same = problems(build=SERVE)
    assert any("owner=sglang and run_as=sglang are the same uid (990)" in p for p in same), same
    assert any("root" in p for p in problems(build=Pw("root", 0, 0, "/root")))


def test_a_shared_group_is_refused_by_number():
    GROUPS[992] = {992, 44}
    try:
        found = problems(build=Pw("builder", 992, 992, "/var/lib/builder"),
                         entries=dict(ROOTS, **{"/var/lib/builder": (stat.S_IFDIR | 0o700, 992, 992)}),
                         cache="/var/lib/builder/.cache/uv")
    finally:
        del GROUPS[992]
    assert found == ["owner=builder and run_as=sglang share the group(s) 44: give the build account a group of its "
                     "own and no other"]


def test_a_home_inside_the_serving_accounts_is_refused():
    inside = Pw("sglang-build", 991, 991, "/var/lib/sglang/build")
    found = problems(build=inside, cache=None)
    assert found and "overlap" in found[0] and "/var/lib/sglang/build" in found[0]
    # a sibling whose name merely starts the same is apart
    assert problems(build=Pw("b", 991, 991, "/var/lib/sglang-build"), cache=None) == []


def test_a_cache_the_serving_account_can_write_is_refused():
    """The four ways: it owns the cache, a group of its may write it, anyone may (the lab's shared 1777 cache), or a
    parent it can write lets it swap the cache for its own."""
    cache = "/srv/uv"
    for srv, uv in [((0o755, 0), (0o755, 990)), ((0o755, 0), (0o775, 0, 44)), ((0o755, 0), (0o1777, 0)),
                    ((0o777, 0), (0o755, 991))]:
        entries = dict(ROOTS, **{"/srv": (stat.S_IFDIR | srv[0], srv[1], 0),
                                 cache: (stat.S_IFDIR | uv[0], uv[1], uv[2] if len(uv) > 2 else 0)})
        found = problems(cache=cache, entries=entries)
        assert len(found) == 1 and found[0].startswith("the uv cache /srv/uv can be written by run_as=sglang"), found


def test_a_cache_under_a_sticky_directory_counts_only_once_it_exists():
    """/tmp (1777, root's) guards an entry that exists and is not the serving account's; a cache not made yet under
    it could be made first by the serving account."""
    made = dict(ROOTS, **{"/tmp/uv": (stat.S_IFDIR | 0o700, 991, 991)})
    assert problems(cache="/tmp/uv", entries=made) == []
    missing = problems(cache="/tmp/uv", entries=ROOTS)
    assert len(missing) == 1 and "(/tmp: owner uid 0, mode 1777)" in missing[0]


def test_a_symbolic_link_on_the_caches_path_is_refused():
    entries = dict(ROOTS, **{"/srv": (stat.S_IFLNK | 0o777, 0, 0)})
    found = problems(cache="/srv/uv", entries=entries)
    assert found == ["the uv cache's path /srv/uv is a symbolic link at /srv: give a cache directory by its real path"]


def test_where_uv_keeps_its_cache():
    assert A.uv_cache_dir({}, "/var/lib/b") == "/var/lib/b/.cache/uv"
    assert A.uv_cache_dir({"XDG_CACHE_HOME": "/c"}, "/var/lib/b") == "/c/uv"
    assert A.uv_cache_dir({"UV_CACHE_DIR": "/u", "XDG_CACHE_HOME": "/c"}, "/var/lib/b") == "/u"
    assert A.uv_cache_dir({"UV_NO_CACHE": "1"}, "/var/lib/b") is None


def test_on_the_real_file_system(tmp_path):
    """os.lstat itself: a directory of this test's account is writable by it, and the check says so."""
    me = Pw("me", os.geteuid(), os.getegid(), str(tmp_path / "me"))
    other = Pw("other", os.geteuid() + 1 if os.geteuid() else 1, 65534, str(tmp_path / "other"))
    GROUPS[me.pw_uid], GROUPS[other.pw_uid] = {me.pw_gid}, {other.pw_gid}
    try:
        cache = tmp_path / "cache"
        cache.mkdir(mode=0o755)

        def cache_problems(build, serve):
            return [p for p in A.account_problems(build, serve, groups_of, str(cache)) if "uv cache" in p]
        assert len(cache_problems(other, me)) == 1          # the serving account (this test's) owns the cache
        assert cache_problems(me, other) == []              # the other account reaches none of it
    finally:
        GROUPS.pop(me.pw_uid, None)
        GROUPS.pop(other.pw_uid, None)
