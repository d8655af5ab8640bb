"""sglang_venv in the lab's CT 100: the venv path is a symlink to one complete build, sealed (root's), made by a build
account apart from the service account; the real sglang 0.5.9 imports from it; uv is the pinned one and root's."""
import json

testinfra_hosts = ["ansible://ct100"]


def test_venv_is_a_symlink_to_a_complete_build(host):
    link = host.file("/opt/sglang/venv")
    assert link.is_symlink
    target = link.linked_to
    assert target.startswith("/opt/sglang/venv.builds/")
    marker = json.loads(host.file(target + "/.gpuserve-build.json").content_string)
    assert marker["build"] == target.rsplit("/", 1)[1]
    assert marker["packages_no_deps"] == ["sglang==0.5.9"]
    # nothing else in the store: no half-built directories left by the refusals
    assert host.run("ls /opt/sglang/venv.builds").stdout.split() == [marker["build"]]


def test_the_build_is_roots_and_read_only_to_the_service_account(host):
    """Root runs the venv's interpreter (model download, verify): the service account must not be able to change
    a byte of it, nor swap the build under the symlink."""
    assert host.file("/opt/sglang/venv/pyvenv.cfg").user == "root"
    for d in ("/opt/sglang/venv.builds", "/opt/sglang"):
        assert host.file(d).user == "root" and not host.file(d).mode & 0o022
    foreign = host.run("find /opt/sglang/venv.builds ! -user root -print -quit")
    assert foreign.rc == 0 and foreign.stdout.strip() == ""
    writable = host.run("find /opt/sglang/venv.builds ! -type l -perm /022 -print -quit")
    assert writable.rc == 0 and writable.stdout.strip() == ""
    touch = host.run("runuser -u sglang -- touch /opt/sglang/venv/lib/x")
    assert touch.rc != 0 and "Permission denied" in touch.stderr


def test_real_sglang_imports_at_the_pinned_version_with_the_lock_versions(host):
    out = host.run("runuser -u sglang -- /opt/sglang/venv/bin/python -c %s",
                   "import sglang, numpy, flash_attn; print(sglang.__version__, numpy.__version__, flash_attn.__version__)")
    assert out.rc == 0, out.stderr
    sglang_v, numpy_v, fa_v = out.stdout.split()
    assert sglang_v == "0.5.9"
    assert numpy_v == "2.4.6"  # the lock's numpy for Python 3.11
    assert fa_v == "2.8.3+cu12torch2.9cxx11abiTRUE"


def test_uv_is_pinned_roots_and_the_service_account_cannot_replace_it(host):
    """#42 item 4: the build account runs uv for its builds, which root seals and later runs; a uv it could
    replace would poison them. uv, its environment and every directory above are root's, writable by root only."""
    out = host.run("/opt/sglang/tools/uv/bin/uv --version")
    assert out.rc == 0 and out.stdout.split()[:2] == ["uv", "0.9.30"]
    for path in ("/opt/sglang/tools", "/opt/sglang/tools/uv", "/opt/sglang/tools/uv/bin", "/opt/sglang/tools/uv/bin/uv"):
        f = host.file(path)
        assert f.user == "root" and f.group == "root" and not f.mode & 0o022, path
    swap = host.run("runuser -u sglang -- cp /bin/true /opt/sglang/tools/uv/bin/uv")
    assert swap.rc != 0 and "Permission denied" in swap.stderr
    assert host.file("/opt/sglang/tools/locks/uv-0.9.30.txt").contains("--hash=sha256:")
    assert host.user("sglang").shell == "/usr/sbin/nologin"


def test_the_build_ran_as_a_build_account_apart_whose_cache_the_service_account_cannot_write(host):
    """#58 item 2: uv ran as sglang-build (its own uid, group and home, 0700), so its cache - what the next build
    installs from - lies where the service account cannot write, and the serving account's own home holds no cache."""
    build, serve = host.user("sglang-build"), host.user("sglang")
    assert build.uid != serve.uid and build.shell == "/usr/sbin/nologin"
    assert not set(build.gids) & set(serve.gids), (build.gids, serve.gids)
    assert build.home == "/var/lib/sglang-build" and serve.home == "/var/lib/sglang"
    home = host.file(build.home)
    assert home.user == "sglang-build" and home.mode == 0o700
    cached = host.run("find /var/lib/sglang-build/.cache/uv -maxdepth 4 -path '*/wheels-v*/sglang' -print -quit")
    assert cached.rc == 0 and cached.stdout.strip(), cached.stderr     # the build's wheels came through this cache
    assert not host.file("/var/lib/sglang/.cache/uv").exists
    poison = host.run("runuser -u sglang -- touch /var/lib/sglang-build/.cache/uv/planted")
    assert poison.rc != 0 and "Permission denied" in poison.stderr


def test_the_serving_account_attacking_a_build_in_progress_changes_nothing(host):
    """#58 item 2 through the role, on the real build path: while the flash-attn source build ran (a build of its own,
    about 12 s of compiling), the serving account tried the issue's attacks on it (tests/lab/probes/
    build_attacker.py): a hard link of its own file into every directory of the unsealed build and into the stores,
    each of the build's files opened for writing, a file planted in the build account's uv cache, and a uv.toml in
    its home asking for symlinks into the cache (root planted the same in /etc/uv/uv.toml). Every attempt was refused,
    none held a descriptor, and the sealed build in service has no link into a cache and no file with a second link."""
    report = json.loads(host.file("/tmp/gpuserve-attacker.json").content_string)
    print("the serving account's attacks on the build while it was made (%s s, %d passes): tried %s; refused %s; "
          "worked %s" % (report["seconds"], report["passes"], report["tried"], report["refused"], report["succeeded"]))
    build_uid = host.user("sglang-build").uid
    assert report["uid"] == host.user("sglang").uid
    seen = [path for path, uid in report["builds_seen"].items()
            if path.startswith("/opt/sglang/venv-fa-source.builds/") and uid == build_uid]
    assert seen, report            # the attacker saw the build while it was made (the build account's, not sealed)
    assert report["succeeded"] == [] and report["held"] == 0, report
    assert report["tried"].get("link", 0) > len(seen) and report["tried"].get("open_for_writing", 0) > 0, report
    assert report["tried"].get("plant_in_cache", 0) > 0, report
    refused = set(report["refused"])
    assert {"link EACCES", "open_for_writing EACCES", "plant_in_cache EACCES"} <= refused, refused
    assert host.file("/var/lib/sglang/.config/uv/uv.toml").contains("symlink")
    target = host.file("/opt/sglang/venv-fa-source").linked_to
    links = host.run("find %s/lib -type l -print -quit", target)
    assert links.rc == 0 and links.stdout.strip() == "", links.stdout      # copy mode: no link into a cache
    shared = host.run("find %s -type f -links +1 -print -quit", target)
    assert shared.rc == 0 and shared.stdout.strip() == "", shared.stdout
