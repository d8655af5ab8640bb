#!/usr/bin/env bash
# Every molecule scenario, one after the other (they share the lab host's fixed address): the lab's
# own smoke scenario, then each role's scenarios. Fails at the first failing scenario.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
export GPUSERVE_ROOT="$root" ANSIBLE_COLLECTIONS_PATH="$root/build/collections" PATH="$root/.venv/bin:$PATH"
export ANSIBLE_NOCOLOR=1 NO_COLOR=1 ANSIBLE_FORCE_COLOR=0
eval "$(python3 "$root/tests/lab/lab.py" env)"
dirs=("$root/tests/lab")
for d in "$root"/roles/*/; do
  [ -d "$d/molecule" ] && dirs+=("${d%/}")
done
for d in "${dirs[@]}"; do
  echo "--- molecule test --all in ${d#"$root"/}"
  (cd "$d" && molecule -c "$root/tests/lab/molecule/base.yml" test --all)
done
