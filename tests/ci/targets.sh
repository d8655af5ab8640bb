#!/usr/bin/env bash
# module_utils run on the targets - the Proxmox node (PVE 8: Debian 12, Python 3.11; PVE 9: Debian 13, Python 3.13)
# and the containers (Ubuntu 22.04: 3.10, 24.04: 3.12, Debian 12: 3.11) - with their system python3, not the
# controller's. `make test` runs the unit tests on the controller's 3.11; this runs them again, every unit test that
# does not need ansible-core (`-m "not controller"`, tests/unit/unit_helpers.py), under each target Python found here,
# after compiling every module and module_util with warnings as errors (an escape sequence 3.12 warns about).
# Interpreters: pythonX.Y on PATH, pyenv's versions, or uv's (installed by uv when it can fetch one). A version not
# found is named in the output and not run.
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root" || exit 1
versions=(3.10 3.12 3.13)
lock=tests/ci/locks/targets.lock   # pytest and PyYAML at the toolchain's versions, every package by its hash
ran=() missing=() rc=0

find_python() {   # an interpreter that runs and is the version asked for, or nothing
  local v="$1" c
  for c in "$(command -v "python$v" 2>/dev/null)" "$HOME"/.pyenv/versions/"$v".*/bin/"python$v" \
           "$(.venv/bin/uv python find --no-python-downloads "$v" 2>/dev/null)"; do
    [ -n "$c" ] && [ -x "$c" ] && "$c" -c "import sys; sys.exit(sys.version_info[:2] != tuple(map(int, '$v'.split('.'))))" \
      2>/dev/null && { echo "$c"; return 0; }
  done
  return 1
}

for v in "${versions[@]}"; do
  py="$(find_python "$v")" || { .venv/bin/uv python install -q "$v" >/dev/null 2>&1 && py="$(find_python "$v")"; } || {
    missing+=("$v"); echo "=== Python $v: not found on this machine (nor installable by uv): not run"; continue; }
  env_dir="build/ci/targets/py$v"
  stamp="$(sha256sum "$lock" | cut -d' ' -f1) $py"
  if [ ! -x "$env_dir/bin/pytest" ] || [ "$(cat "$env_dir/.installed" 2>/dev/null)" != "$stamp" ]; then
    rm -rf "$env_dir"
    if ! { "$py" -m venv "$env_dir" && "$env_dir/bin/pip" install -q --disable-pip-version-check --require-hashes \
           --only-binary :all: -r "$lock"; }; then
      echo "=== Python $v ($py): its venv could not be made"; rc=1; continue
    fi
    echo "$stamp" > "$env_dir/.installed"
  fi
  python3 tests/ci/locked.py venv "$env_dir" "$lock" || { rc=1; continue; }
  echo "=== Python $v ($py): compile plugins/modules and plugins/module_utils, then the unit tests"
  if "$env_dir/bin/python" -W error -c '
import sys
for path in sys.argv[1:]:
    with open(path, encoding="utf-8") as f:
        compile(f.read(), path, "exec")' plugins/module_utils/*/*.py plugins/modules/*.py \
     && "$env_dir/bin/pytest" -q -p no:cacheprovider -m "not controller" tests/unit; then
    ran+=("$v")
  else
    rc=1
  fi
done
echo "targets' Pythons: passed ${ran[*]:-none}${missing:+; not found here: ${missing[*]}}"
exit "$rc"
