#!/usr/bin/env bash
# Every check, in order, failing fast; a summary at the end. Called by `make test` (and so by .ci/run).
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root" || exit 1
export ANSIBLE_COLLECTIONS_PATH="$root/build/collections" ANSIBLE_CONFIG="$root/ansible.cfg"
export PATH="$root/.venv/bin:$PATH"
summary=()
step() {
  local name="$1"; shift
  local t0=$SECONDS
  echo "=== $name: $*"
  if "$@"; then
    summary+=("PASS  $name ($((SECONDS - t0)) s)")
  else
    summary+=("FAIL  $name ($((SECONDS - t0)) s)")
    printf '%s\n' "--- summary" "${summary[@]}"
    exit 1
  fi
}
coll="$(tests/ci/collection-tree.sh)"
step "ansible-lint (production profile)" ansible-lint --offline
step "ansible-test sanity" bash -c "cd '$coll' && ansible-test sanity --python 3.11 --requirements"
step "sglang_venv locks resolve unchanged against the real index" tests/ci/lock.sh check
step "planner oracle (SGLang 0.5.9's own code, >= 2000 scenarios)" tests/oracle/oracle.sh
step "pytest unit + integration" pytest -q -p no:cacheprovider tests/unit tests/integration
step "plan.yml (the main job)" ansible-playbook playbooks/plan.yml
step "lab: remove labelled leftovers, build images (cached by recipe hash)" \
  bash -c "python3 tests/lab/lab.py clean && python3 tests/lab/lab.py images"
step "molecule scenarios (lab smoke + roles)" tests/ci/molecule-all.sh
printf '%s\n' "--- summary" "${summary[@]}"
echo "not exercised here: NVIDIA GPUs, the driver, CUDA, Proxmox itself, SGLang on CUDA (see README)"
