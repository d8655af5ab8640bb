#!/usr/bin/env bash
# The collection's tarball as a release makes it. galaxy.yml names no address until the project has a public one
# (#62 item 4: never a placeholder in what ships); Galaxy's importer requires `repository`, so the release step gives
# it here, from one setting: GPUSERVE_REPOSITORY_URL (https). Nothing else of galaxy.yml is changed.
#   GPUSERVE_REPOSITORY_URL=https://... tests/ci/tarball.sh OUTDIR [COLLECTION_TREE]
# COLLECTION_TREE: a tree tests/ci/collection-tree.sh laid out (default: lay one out now).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="${1:?usage: tarball.sh OUTDIR [COLLECTION_TREE]}"
url="${GPUSERVE_REPOSITORY_URL:-}"
case "$url" in
  https://?*) ;;
  *) echo "tarball: set GPUSERVE_REPOSITORY_URL to the repository's https address (galaxy.yml names none; Galaxy" \
          "requires one)" >&2; exit 2 ;;
esac
tree="${2:-$("$root/tests/ci/collection-tree.sh")}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cp -a "$tree/." "$tmp/"
rm -rf "$tmp/.git"
printf 'repository: %s\n' "$url" >> "$tmp/galaxy.yml"
mkdir -p "$out"
(cd "$tmp" && "$root/.venv/bin/ansible-galaxy" collection build --force --output-path "$out")
