#!/usr/bin/env bash
# The oldest ansible-core the collection claims (#62 item 5): meta/runtime.yml's requires_ansible is ">=<floor>", and
# the toolchain (.venv, dev.lock) runs the newest release the index serves; this runs the rest again with the floor
# (.venv-core-floor, tests/ci/locks/core-floor.lock): the unit tests that use ansible-core (`-m controller`: the pct
# connection's option registration, the action and filter plugins; the others do not import it), plan.yml,
# ansible-test sanity of that release on the collection tree, and the lab's smoke scenario - the pct connection for
# real, to a container through the node's pct (molecule from the toolchain, every ansible command it runs from the
# floor). Fails when the claim and the floor differ.
#   tests/ci/core-floor.sh [LAB_SLOT]     (default 1: run-all.sh runs it in the pytest lane, before lane b's lab)
# Releases older than the floor are not claimed: docs/testing.md says what fails on them.
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root" || exit 1
venv="$root/.venv-core-floor"
floor="$(sed -n 's/^ansible-core==\([^ ]*\).*/\1/p' tests/ci/locks/core-floor.lock)"
claimed="$(sed -n 's/^requires_ansible: *">=\([0-9.]*\)".*/\1/p' meta/runtime.yml)"
if [ -z "$floor" ] || [ "$floor" != "$claimed" ]; then
  echo "core-floor: meta/runtime.yml claims ansible-core >=${claimed:-?}, tests/ci/locks/core-floor.lock pins ${floor:-?}:" \
       "test the release you claim (lock it in core-floor.in) or claim the one tested" >&2
  exit 1
fi
have="$("$venv/bin/python" -c 'from ansible.release import __version__; print(__version__)')" || exit 1
[ "$have" = "$floor" ] || { echo "core-floor: $venv has ansible-core $have, not $floor (tests/ci/bootstrap.sh)" >&2; exit 1; }
coll="$root/build/collections/ansible_collections/gpuserve/sglang"
export ANSIBLE_COLLECTIONS_PATH="$root/build/collections" ANSIBLE_CONFIG="$root/ansible.cfg"
export ANSIBLE_NOCOLOR=1 NO_COLOR=1 ANSIBLE_FORCE_COLOR=0
rc=0
run() {   # run NAME CMD...: one check, its time, and on with the next when it fails
  local t0=$SECONDS
  echo "=== ansible-core $floor: $1"
  shift
  if "$@"; then echo "--- passed in $((SECONDS - t0)) s"; else echo "--- FAILED after $((SECONDS - t0)) s"; rc=1; fi
}
# the floor's bin first: ansible, ansible-playbook, ansible-doc and ansible-test are the floor's; molecule and
# testinfra (not in the floor's venv) come from the toolchain behind it
export PATH="$venv/bin:$root/.venv/bin:$PATH"
for tool in ansible ansible-playbook ansible-test pytest; do
  [ "$(command -v "$tool")" = "$venv/bin/$tool" ] || { echo "core-floor: $tool is not the floor's" >&2; exit 1; }
done
echo "core-floor: $(ansible-playbook --version | sed -n 1p) from $venv"
run "unit tests that use ansible-core" "$venv/bin/python" -m pytest -q -p no:cacheprovider -m controller tests/unit
run "plan.yml (the main job)" ansible-playbook playbooks/plan.yml -e plan_expect_failure=true
run "ansible-test sanity" bash -c "cd '$coll' && '$venv/bin/ansible-test' sanity --python 3.11 --requirements"
# shellcheck disable=SC2016  # the lab's env is read in the inner shell, with the slot set for it
run "the lab's smoke scenario (the pct connection to CT 100 through the node's pct)" \
  env GPUSERVE_LAB_SLOT="${1:-1}" GPUSERVE_ROOT="$root" bash -c \
  'eval "$(python3 tests/lab/lab.py env)" && cd tests/lab && molecule -c molecule/base.yml test -s smoke'
exit "$rc"
