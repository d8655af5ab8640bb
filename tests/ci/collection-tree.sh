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
echo "$dest"
