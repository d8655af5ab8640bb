#!/usr/bin/env bash
# The lock files: resolve the pinned SGLang release (sglang_venv) and the pinned router (sglang_router) against the
# real package index.
#   tests/ci/lock.sh write 0.5.9                 regenerate roles/sglang_venv/files/locks/sglang-0.5.9.lock
#   tests/ci/lock.sh write sglang-router-0.3.2   regenerate roles/sglang_router/files/locks/sglang-router-0.3.2.lock
#   tests/ci/lock.sh write dev                   regenerate tests/ci/locks/dev.lock (the test toolchain: .venv; also
#                                                hub, hflib, targets: the other venvs `make test` makes)
#   tests/ci/lock.sh check                       resolve every lock again and fail when one differs (stale or unresolvable)
# Beside each SGLang and router lock, NAME.tags: the tags of every file it pins (tests/ci/lock_tags.py, from the index's
# file names of the lock's sha256s), which the sglang_venv preflight checks the container's Python, glibc and machine
# against. The toolchain's locks (tests/ci/locks) are installed on this machine only: they have no .tags.
# The .in file's `# resolve:` line, when there is one, replaces the default `--universal --python-version 3.10`
# (a release that ships only for one platform and Python, as 0.5.23's cp311 manylinux_2_34 wheel, cannot be universal).
# The resolution is reproducible: packages published after the date on the .in file's `exclude-newer:` line
# are ignored, and the lock's own pins are uv's preferences (write and check alike), so a version that appears on
# the index later with an older date does not move a pin. To take newer unpinned dependencies: move that date
# forward, delete the lock, then `write`.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
toolchain="$root/tests/ci/locks"
dirs=("$root/roles/sglang_venv/files/locks" "$root/roles/sglang_router/files/locks" "$toolchain")
if [ -n "${LOCK_DIRS:-}" ]; then read -r -a dirs <<< "$LOCK_DIRS"; fi   # other lock dirs (tests)
uv="${UV:-$root/.venv/bin/uv}"
mode="${1:-check}"

dir_of() {  # the lock dir that holds NAME.in
  local d
  for d in "${dirs[@]}"; do [ -f "$d/$1.in" ] && { echo "$d"; return; }; done
  echo "${dirs[0]}"
}

compile() {  # compile NAME OUT   (NAME: sglang-0.5.9, sglang-router-0.3.2, ...; NAME.in in one of the lock dirs)
  local name="$1" out="$2" newer dir
  dir="$(dir_of "$name")"
  [ -f "$dir/$name.in" ] || { echo "lock: no $name.in in ${dirs[*]}" >&2; return 2; }
  newer="$(sed -n 's/^# exclude-newer: *//p' "$dir/$name.in")"
  [ -n "$newer" ] || { echo "lock: $dir/$name.in has no '# exclude-newer: <RFC 3339 date>' line" >&2; return 2; }
  local resolve
  resolve="$(sed -n 's/^# resolve: *//p' "$dir/$name.in")"
  [ -n "$resolve" ] || resolve="--universal --python-version 3.10"
  local cmd
  cmd="tests/ci/lock.sh write $(write_arg "$name")"
  # shellcheck disable=SC2086  # $resolve is a list of uv options
  (cd "$dir" && UV_PYTHON_DOWNLOADS=never "$uv" pip compile --quiet "$name.in" $resolve --generate-hashes \
     --exclude-newer "$newer" --custom-compile-command "$cmd" -o "$out")
  [ "$dir" != "$toolchain" ] || return 0
  # the same pins again as a PEP 751 pylock (it names each file): the tags of the files the lock pins
  local pylock
  pylock="$(mktemp -d)/pylock.toml"
  # shellcheck disable=SC2086
  (cd "$dir" && UV_PYTHON_DOWNLOADS=never "$uv" pip compile --quiet "$out" $resolve --exclude-newer "$newer" \
     --format pylock.toml -o "$pylock")
  python3 "$root/tests/ci/lock_tags.py" "$out" "$pylock" "${out%.lock}.tags" >/dev/null
  rm -rf "$(dirname "$pylock")"
}

write_arg() {  # the argument of write that makes NAME's lock: sglang-0.5.9 is 0.5.9; sglang-router-0.3.2 and dev are themselves
  case "$1" in sglang-router-*) echo "$1";; sglang-*) echo "${1#sglang-}";; *) echo "$1";; esac
}

name_of() {  # write's argument: 0.5.9 is sglang-0.5.9; sglang-router-0.3.2 and a toolchain lock (dev) are themselves
  case "$1" in sglang-*) echo "$1";; *) if [ -f "$toolchain/$1.in" ]; then echo "$1"; else echo "sglang-$1"; fi;; esac
}

case "$mode" in
  write)
    name="$(name_of "${2:?usage: tests/ci/lock.sh write VERSION | sglang-router-VERSION}")"
    dir="$(dir_of "$name")"
    compile "$name" "$dir/$name.lock"
    echo "lock: wrote $dir/$name.lock ($(grep -cE '^[a-z0-9]' "$dir/$name.lock") pins)$([ "$dir" = "$toolchain" ] || echo " and $name.tags")";;
  check)
    tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
    for in in $(for d in "${dirs[@]}"; do ls "$d"/*.in; done); do
      dir="$(dirname "$in")"; name="$(basename "$in" .in)"
      # the lock as uv's preferences, as `write` has them: the check asks whether its pins still resolve from the
      # .in against the index (none gone, none missing, no constraint broken) - not whether the index has since
      # gained a newer version dated before exclude-newer (a mirror filling in old releases adds those)
      cp "$dir/$name.lock" "$tmp/$name.lock"
      compile "$name" "$tmp/$name.lock"
      if ! diff -u "$dir/$name.lock" "$tmp/$name.lock" >"$tmp/diff"; then
        head -40 "$tmp/diff"
        echo "lock: $name.lock is stale: run tests/ci/lock.sh write $(write_arg "$name") and commit it" >&2; exit 1
      fi
      if [ "$dir" != "$toolchain" ] && ! diff -u "$dir/$name.tags" "$tmp/$name.tags" >"$tmp/diff"; then
        head -40 "$tmp/diff"
        echo "lock: $name.tags is stale or missing: run tests/ci/lock.sh write $(write_arg "$name") and commit it" >&2; exit 1
      fi
      echo "lock: $name.lock resolves unchanged ($(grep -cE '^[a-z0-9]' "$dir/$name.lock") pins)"
    done
    # the hash-pinned files outside a lock (flash-attn's sdist, built from source; Mooncake's transfer engine and
    # msgpack, for prefill/decode; the uv releases of the uv floor test): each pinned sha256 must be one the index
    # states for a file of that name and version
    for req in $(for d in "${dirs[@]}"; do ls "$d"/flash-attn-*.txt "$d"/mooncake-*.txt "$d"/uv-floor.txt 2>/dev/null; done); do
      python3 - "$req" "${UV_INDEX_URL:-https://pypi.org/simple}" <<'PY'
import json, re, sys, urllib.request
req, index = sys.argv[1], sys.argv[2].rstrip("/")
text = re.sub(r"\\\n", " ", open(req).read())
pins = re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)((?:\s+--hash=sha256:[0-9a-f]{64})+)", text, re.M)
if not pins:
    sys.exit("lock: %s pins nothing by hash" % req)
for name, version, hashes in pins:
    doc = json.load(urllib.request.urlopen(urllib.request.Request(
        "%s/%s/" % (index, name), headers={"Accept": "application/vnd.pypi.simple.v1+json"}), timeout=60))
    def of_release(filename):   # name-version-... (a wheel) or name-version.tar.gz (an sdist), names normalized
        stem = re.sub(r"\.(tar\.gz|zip)$", "", filename)
        parts = stem.split("-")
        return len(parts) > 1 and re.sub(r"[-_.]+", "_", parts[0]).lower() == re.sub(r"[-_.]+", "_", name).lower() \
            and parts[1] == version
    stated = {f["hashes"].get("sha256"): f["filename"] for f in doc["files"] if of_release(f["filename"])}
    for digest in re.findall(r"sha256:([0-9a-f]{64})", hashes):
        if digest not in stated:
            sys.exit("lock: %s pins sha256 %s for %s==%s, which the index states for none of its files"
                     % (req, digest, name, version))
        print("lock: %s: %s matches the index's sha256" % (req.rsplit("/", 1)[-1], stated[digest]))
PY
    done;;
  *) echo "usage: tests/ci/lock.sh write VERSION | sglang-router-VERSION | check" >&2; exit 2;;
esac
