#!/usr/bin/env bash
# The collection's docsite, built as Ansible's docsite builds a collection's pages (#62 item 1): antsibull-docs
# renders every plugin's, role's and extra doc's page to RST, Sphinx builds the HTML with Ansible's theme, warnings as
# errors (a broken reference, a malformed page). From .venv-docs (tests/ci/locks/docs.lock).
#   tests/ci/docsite.sh COLLECTION_TREE      (build/collections/ansible_collections/gpuserve/sglang)
# The HTML is left in build/docsite/html.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
coll="${1:?usage: tests/ci/docsite.sh COLLECTION_TREE}"
out="$root/build/docsite"
rm -rf "$out"
mkdir -p "$out/rst"
chmod 0700 "$out/rst"     # antsibull-docs wants its destination writable by its owner alone
collections="$(cd "$coll/../../.." && pwd)"
export PATH="$root/.venv-docs/bin:$PATH" ANSIBLE_COLLECTIONS_PATH="$collections"
# Ansible's own labels the pages link to, as a Sphinx inventory (v2: a header, then zlib-compressed lines)
python3 - "$root/tests/ci/docsite/ansible-labels.txt" "$out/ansible_devel.inv" <<'PY'
import sys, zlib
lines = []
for line in open(sys.argv[1]):
    if line.strip() and not line.startswith("#"):
        name, role, uri = line.split()
        lines.append("%s %s 1 %s -\n" % (name, role, uri))
with open(sys.argv[2], "wb") as fh:
    fh.write(b"# Sphinx inventory version 2\n# Project: Ansible\n# Version: devel\n"
             b"# The remainder of this file is compressed using zlib.\n" + zlib.compress("".join(lines).encode()))
PY
antsibull-docs --config-file "$root/tests/ci/docsite/antsibull-docs.cfg" collection --use-current --cleanup everything \
  --dest-dir "$out/rst" gpuserve.sglang
cp "$root/tests/ci/docsite/index.rst" "$out/rst/index.rst"
GPUSERVE_ANSIBLE_INVENTORY="$out/ansible_devel.inv" \
  sphinx-build -M html "$out/rst" "$out/build" -c "$root/tests/ci/docsite" -q -W --keep-going
echo "docsite: built $(find "$out/build/html" -name '*.html' | wc -l) pages in build/docsite/build/html, no warning"
