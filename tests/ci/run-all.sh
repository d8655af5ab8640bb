#!/usr/bin/env bash
# Every check, failing fast; a summary at the end. Called by `make test` (and so by .ci/run).
# After lint, sanity, the docs lint, Galaxy's importer and the lab images (the five side by side), two lanes run side by side on the machine's two cores, each with a lab of
# its own (tests/lab/lab.py slots 0 and 1):
#   lab lane (foreground):       plan.yml, then molecule lane a (most scenarios)
#   pytest lane (background):    locks, the planner oracle, unit + integration, the unit tests again under the
#                                targets' Pythons, the oldest ansible-core claimed (core-floor.sh: its own
#                                ansible-test, run while no other runs), then molecule lane b
# The pytest lane's output is kept in build/ci/pytest-lane.log and printed when both are done. The lanes share no
# state: the integration tests use loopback servers on free ports, never a lab; the two labs have their own
# host, address, Hub port and state directory; build/collections and the images are only read.
# A failing step ends its own lane at once; the other lane's result is printed too; `make test` fails.
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
    return 1
  fi
}
finish() {   # the other lane's output and result, then the summary; exit status 0 only when every step passed
  local rc=$1
  if [ -n "${lane_pid:-}" ]; then
    wait "$lane_pid" || rc=1
    echo "=== pytest lane (ran beside the lab lane; its output follows)"
    cat "$lane_dir/pytest-lane.log"
    mapfile -t lane_summary < "$lane_dir/pytest-lane.summary"
    [ "${#lane_summary[@]}" -gt 0 ] || lane_summary=("FAIL  pytest lane (no result: ended early)")
    summary+=("${lane_summary[@]}")
  fi
  # last, what the whole run installed: every venv it made (ansible-test's sanity venvs too) holds only its lock's pins
  step "nothing installed outside a lock (tests/ci/locked.py all)" python3 tests/ci/locked.py all || rc=1
  printf '%s\n' "--- summary" "${summary[@]}"
  [ "$rc" -eq 0 ] && printf '%s\n' "${summary[@]}" | grep -q '^FAIL' && rc=1
  [ "$rc" -eq 0 ] && echo "not exercised here: NVIDIA GPUs, the driver, CUDA, Proxmox itself, SGLang on CUDA (see README)"
  exit "$rc"
}
coll="$(tests/ci/collection-tree.sh)"
lane_dir="$root/build/ci"
mkdir -p "$lane_dir"
# ansible-lint and the lab images beside ansible-test sanity (one ansible-test at a time: they share
# ~/.ansible/test; lint and the images touch neither it nor each other); each one's output is printed after it
# shellcheck disable=SC2030,SC2031  # a side step's summary is its subshell's own, handed back through its file
side() {   # side NAME CMD...: the step in the background, its output and summary line in build/ci/side-<n>.*
  local n="$1"; shift
  ( summary=(); step "$@"; rc=$?; printf '%s\n' "${summary[@]}" > "$lane_dir/side-$n.summary"; exit "$rc" ) \
    > "$lane_dir/side-$n.log" 2>&1
}
# shellcheck disable=SC2031  # (the same: the summary comes back from the file)
side_end() {   # side_end PID N: wait, print its output, add its summary; non-zero when it failed
  local rc=0
  wait "$1" || rc=1
  cat "$lane_dir/side-$2.log"
  mapfile -t -O "${#summary[@]}" summary < "$lane_dir/side-$2.summary"
  return "$rc"
}
side lint "ansible-lint (production profile)" ansible-lint --offline &
lint_pid=$!
side images "lab: remove labelled leftovers, build images (cached by recipe hash)" \
  bash -c "python3 tests/lab/lab.py clean && python3 tests/lab/lab.py images" &
images_pid=$!
# the docsite's own check of every plugin's and role's documentation (antsibull-docs, in .venv-docs with its own
# ansible-core; #62 item 1): references between options and return values, the markup, the roles' argument specs
# then the docsite itself, built as Ansible's docsite builds a collection (antsibull-docs + Sphinx, warnings as errors)
side docs "antsibull-docs lint-collection-docs --plugin-docs, then the docsite build (tests/ci/docsite.sh)" \
  bash -c "(cd '$coll' && PATH='$root/.venv-docs/bin':\$PATH '$root/.venv-docs/bin/antsibull-docs' lint-collection-docs --plugin-docs .) \
           && tests/ci/docsite.sh '$coll'" &
docs_pid=$!
side importer "galaxy-importer on the release tarball (ansible-lint on, ansible-test off)" \
  tests/ci/galaxy-importer.sh "$coll" &
importer_pid=$!
step "ansible-test sanity" bash -c "cd '$coll' && ansible-test sanity --python 3.11 --requirements"; sanity=$?
side_end "$lint_pid" lint; lint=$?
side_end "$images_pid" images; images=$?
side_end "$docs_pid" docs; docs=$?
side_end "$importer_pid" importer; importer=$?
[ "$sanity$lint$images$docs$importer" = 00000 ] || finish 1

: > "$lane_dir/pytest-lane.summary"
(
  summary=()
  lane() { step "$@" || { printf '%s\n' "${summary[@]}" > "$lane_dir/pytest-lane.summary"; exit 1; }; }
  lane "sglang_venv locks resolve unchanged against the real index" tests/ci/lock.sh check
  lane "planner oracle (SGLang 0.5.9's and 0.5.23's own code, >= 2000 scenarios each)" tests/oracle/oracle.sh
  lane "pytest unit + integration" pytest -q -p no:cacheprovider tests/unit tests/integration
  lane "module_utils under the targets' Pythons (3.10, 3.12, 3.13)" tests/ci/targets.sh
  lane "the oldest ansible-core claimed: its unit tests, plan.yml, sanity, the lab's smoke (tests/ci/core-floor.sh)" \
    tests/ci/core-floor.sh 1
  lane "molecule scenarios, lane b (lab slot 1)" tests/ci/molecule-all.sh b
  printf '%s\n' "${summary[@]}" > "$lane_dir/pytest-lane.summary"
) > "$lane_dir/pytest-lane.log" 2>&1 &
lane_pid=$!

# the motivating case: the plan predicts the pool error (plan_expect_failure: that is what it shows)
step "plan.yml (the main job)" ansible-playbook playbooks/plan.yml -e plan_expect_failure=true || finish 1
step "molecule scenarios, lane a (lab slot 0: the lab's smoke and the rest)" tests/ci/molecule-all.sh a || finish 1
finish 0
