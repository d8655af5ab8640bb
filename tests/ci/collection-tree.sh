#!/usr/bin/env bash
# Lay the collection out as ansible_collections/gpuserve/sglang (what ansible-test and the
# ansible_collections.* imports need): a copy of the files git knows, refreshed on every call.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
dest="$root/build/collections/ansible_collections/gpuserve/sglang"
rm -rf "$dest"
mkdir -p "$dest"
cd "$root"
git ls-files -co --exclude-standard -z | while IFS= read -r -d '' f; do
  [ -e "$f" ] || continue
  mkdir -p "$dest/$(dirname "$f")"
  cp -p "$f" "$dest/$f"
done
# ansible-test lists a collection's files with git; give the copy its own repository so the
# enclosing checkout (which ignores build/) does not hide them.
git -C "$dest" init -q
git -C "$dest" add -A
echo "$dest"
