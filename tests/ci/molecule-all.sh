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
# No re-run: a scenario that fails fails CI. (The former re-run covered paramiko's "exited with result
# -1", which paramiko returns for a command ended by a signal; the transport is OpenSSH now, which
# reports such an end as an error.)
for d in "${dirs[@]}"; do
  for s in "$d"/molecule/*/molecule.yml; do
    name="$(basename "$(dirname "$s")")"
    if [ "$name" = full ] && [ "${LAB_FULL:-0}" != 1 ]; then
      echo "--- skipping molecule scenario full in ${d#"$root"/} (several GB; LAB_FULL=1 runs it)"
      continue
    fi
    echo "--- molecule test -s $name in ${d#"$root"/}"
    t0=$SECONDS
    (cd "$d" && molecule -c "$root/tests/lab/molecule/base.yml" test -s "$name")
    echo "--- molecule scenario $name in ${d#"$root"/} passed in $((SECONDS - t0)) s"
  done
done
