#!/usr/bin/env bash
# The sglang_venv lock files: resolve the pinned SGLang release against the real package index.
#   tests/ci/lock.sh write 0.5.9   regenerate roles/sglang_venv/files/locks/sglang-0.5.9.lock
#   tests/ci/lock.sh check         resolve every lock again and fail when one differs (stale or unresolvable)
# The resolution is reproducible: packages published after the date on the .in file's `exclude-newer:` line
# are ignored (move that date forward to take newer unpinned dependencies, then `write`).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
dir="$root/roles/sglang_venv/files/locks"
uv="${UV:-$root/.venv/bin/uv}"
mode="${1:-check}"

compile() {  # compile VERSION OUT
  local v="$1" out="$2" newer
  newer="$(sed -n 's/^# exclude-newer: *//p' "$dir/sglang-$v.in")"
  [ -n "$newer" ] || { echo "lock: $dir/sglang-$v.in has no '# exclude-newer: <RFC 3339 date>' line" >&2; return 2; }
  (cd "$dir" && UV_PYTHON_DOWNLOADS=never "$uv" pip compile --quiet "sglang-$v.in" --universal --python-version 3.10 --generate-hashes \
     --exclude-newer "$newer" --custom-compile-command "tests/ci/lock.sh write $v" -o "$out")
}

case "$mode" in
  write)
    v="${2:?usage: tests/ci/lock.sh write VERSION}"
    compile "$v" "$dir/sglang-$v.lock"
    echo "lock: wrote $dir/sglang-$v.lock ($(grep -cE '^[a-z0-9]' "$dir/sglang-$v.lock") pins)";;
  check)
    tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
    for in in "$dir"/sglang-*.in; do
      v="$(basename "$in" .in)"; v="${v#sglang-}"
      compile "$v" "$tmp/sglang-$v.lock"
      if ! diff -u "$dir/sglang-$v.lock" "$tmp/sglang-$v.lock" >"$tmp/diff"; then
        head -40 "$tmp/diff"
        echo "lock: sglang-$v.lock is stale: run tests/ci/lock.sh write $v and commit it" >&2; exit 1
      fi
      echo "lock: sglang-$v.lock resolves unchanged ($(grep -cE '^[a-z0-9]' "$dir/sglang-$v.lock") pins)"
    done;;
  *) echo "usage: tests/ci/lock.sh write VERSION | check" >&2; exit 2;;
esac
