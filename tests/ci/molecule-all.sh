#!/usr/bin/env bash
# The molecule scenarios, one after the other in one lab: the lab's own scenarios, then each role's. Fails at the
# first failing scenario.
#   molecule-all.sh        every scenario, in the lab of slot 0 (`make molecule`)
#   molecule-all.sh a      every scenario not in lane b, in slot 0   } make test runs the two lanes side by side,
#   molecule-all.sh b      the scenarios listed in LANE_B, in slot 1 } each in a lab of its own (tests/lab/lab.py)
# A new scenario lands in lane a by itself; LANE_B holds about 30 % of the scenarios' time, since lane b runs
# after the pytest lane in tests/ci/run-all.sh (times from a clean-clone run, in seconds; the two lanes ended
# within a minute of each other in e14b28f's run).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
lane="${1:-all}"
LANE_B=(tests/lab:real              # the real SGLang 0.5.9 and 0.5.23: about 1200 beside the other lane (the
                                     # venvs' 4.5 and 5.5 GB, seven real start-ups, the runbooks, the upgrade)
        roles/sglang_server:default  # 223: to lane b too - in the run of 3248446 lane a took 3271 s, lane b about
                                     # 2880 s (pytest 1008, real about 1350, the router 239)
        roles/lxc_gpu_passthrough:default   # 107 and 36: to lane b when multinode gained the real replicas (about
        roles/lxc_gpu_passthrough:raw       # 360 more in lane a) and every lab build its own download (no uv cache)
        roles/hf_model:default              # 133 and 73: to lane b when multinode gained the prefill/decode pair -
        roles/pve_container:default)        # in the run of a072288 lane a took 4015 s, the pytest lane with lane b 3645
# roles/sglang_router:default (207 s) moved to lane a when tests/lab:deploy (419 s) was folded into multinode: in the
# run of 9afbbdd lane a took 3929 s, lane b about 4230 (pytest 1375, real about 1700)
# roles/sglang_router:default (239 s) moved to lane a when the real scenario gained the upgrade to the real 0.5.23
# tests/lab:rollout (327 s) and roles/lxc_gpu_passthrough:default and :raw (93, 68 s) moved to lane a when the real
# scenario came to lane b
# roles/nvidia_driver:apt (123 s since it also moves the pin up and down and fills CT 100) runs in lane a: with it
# lane b (after the pytest lane) ended about 160 s after lane a in the run of d9eb135, without it they end close
if [ -n "${MOLECULE_LANE_B:-}" ]; then read -r -a LANE_B <<< "$MOLECULE_LANE_B"; fi   # its own list (tests)
case "$lane" in
  all|a) export GPUSERVE_LAB_SLOT=0 ;;
  b) export GPUSERVE_LAB_SLOT=1 ;;
  *) echo "molecule-all.sh: lane '$lane': give all, a or b" >&2; exit 2 ;;
esac
export GPUSERVE_ROOT="$root" ANSIBLE_COLLECTIONS_PATH="$root/build/collections" PATH="$root/.venv/bin:$PATH"
export ANSIBLE_NOCOLOR=1 NO_COLOR=1 ANSIBLE_FORCE_COLOR=0
eval "$(python3 "$root/tests/lab/lab.py" env)"
in_lane_b() {
  local s
  for s in "${LANE_B[@]}"; do [ "$s" = "$1" ] && return 0; done
  return 1
}
# a renamed scenario runs in lane a; LANE_B must not name what is gone (lane b would shrink unseen)
[ "$lane" = all ] || for key in "${LANE_B[@]}"; do
  [ -f "$root/${key%%:*}/molecule/${key##*:}/molecule.yml" ] || { echo "molecule-all.sh: LANE_B names $key: no such scenario" >&2; exit 2; }
done
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
    key="${d#"$root"/}:$name"
    case "$lane" in
      a) ! in_lane_b "$key" || continue ;;
      b) in_lane_b "$key" || continue ;;
    esac
    if [ "$name" = full ] && [ "${LAB_FULL:-0}" != 1 ]; then
      echo "--- skipping molecule scenario full in ${d#"$root"/} (several GB; LAB_FULL=1 runs it)"
      continue
    fi
    echo "--- molecule test -s $name in ${d#"$root"/} (lab slot $GPUSERVE_LAB_SLOT)"
    t0=$SECONDS
    (cd "$d" && molecule -c "$root/tests/lab/molecule/base.yml" test -s "$name")
    echo "--- molecule scenario $name in ${d#"$root"/} passed in $((SECONDS - t0)) s"
  done
done
