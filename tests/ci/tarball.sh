#!/usr/bin/env bash
# The collection's tarball as a release makes it. galaxy.yml names no address until the project has a public one
# (#62 item 4: never a placeholder in what ships); Galaxy's importer requires `repository`, so the release step gives
# it here, from one setting: GPUSERVE_REPOSITORY_URL (https). A GitHub address also gives `issues` and the docsite's
# docs/docsite/links.yml (edit_on_github). Nothing else of galaxy.yml is changed.
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
# On GitHub the address also gives the issue tracker and the docsite's "Edit on GitHub" (docs/docsite/links.yml):
# addresses of that repository, not invented ones. Elsewhere the tracker's address is not known: none is named.
if [[ "$url" =~ ^https://github\.com/([A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+)/?$ ]]; then
  slug="${BASH_REMATCH[1]%.git}"
  printf 'issues: https://github.com/%s/issues\n' "$slug" >> "$tmp/galaxy.yml"
  printf -- '---\n# written by the release step (tests/ci/tarball.sh) from GPUSERVE_REPOSITORY_URL\nedit_on_github:\n  repository: %s\n  branch: main\n  path_prefix: ""\n' \
    "$slug" > "$tmp/docs/docsite/links.yml"
fi
mkdir -p "$out"
(cd "$tmp" && "$root/.venv/bin/ansible-galaxy" collection build --force --output-path "$out")
