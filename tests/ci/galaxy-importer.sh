#!/usr/bin/env bash
# What Galaxy and Automation Hub run on an uploaded tarball: galaxy-importer (in .venv-docs), on the tarball the
# release step builds (tests/ci/tarball.sh), with no container: ansible-test off, ansible-lint on (#62 item 2). Fails
# on the importer's failure and on any warning or error line it prints.
#   tests/ci/galaxy-importer.sh [COLLECTION_TREE]
# The repository address is the release step's setting, GPUSERVE_REPOSITORY_URL; the project has no public one yet,
# so this check's tarball (never shipped) names a reserved .invalid host unless the setting is given.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
export GPUSERVE_REPOSITORY_URL="${GPUSERVE_REPOSITORY_URL:-https://no-public-repository-yet.invalid/gpuserve/sglang}"
dist="$root/build/ci/galaxy-importer"
rm -rf "$dist"
mkdir -p "$dist"
"$root/tests/ci/tarball.sh" "$dist" "$@" >/dev/null
printf '[galaxy-importer]\nRUN_ANSIBLE_TEST = False\nRUN_ANSIBLE_LINT = True\n' > "$dist/importer.cfg"
tarball="$(ls "$dist"/gpuserve-sglang-*.tar.gz)"
echo "galaxy-importer: $(basename "$tarball") (repository: $GPUSERVE_REPOSITORY_URL)"
rc=0
(cd "$dist" && GALAXY_IMPORTER_CONFIG="$dist/importer.cfg" PATH="$root/.venv-docs/bin:$PATH" \
   "$root/.venv-docs/bin/python" -m galaxy_importer.main "$tarball") > "$dist/importer.log" 2>&1 || rc=$?
cat "$dist/importer.log"
if [ "$rc" -ne 0 ]; then
  echo "galaxy-importer: failed (rc=$rc)" >&2; exit 1
fi
if grep -Eiq '(^|[^a-z])(warning|error)' "$dist/importer.log"; then
  echo "galaxy-importer: passed with warnings or errors (above); Galaxy shows them on the collection's page" >&2; exit 1
fi
echo "galaxy-importer: passed, no warning"
