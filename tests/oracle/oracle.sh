#!/usr/bin/env bash
# make oracle: for each release the planner knows (0.5.9, 0.5.23), fetch (once) and check its wheel, run the harness's
# self-test (planted mistakes must be caught), then every scenario; each release in its own process (both are
# "sglang"). Prints "oracle agreement <release> N/M" per release, then the total as the last line:
# "oracle agreement N/M". Fails when any release disagrees anywhere, or when the option tables of
# plugins/module_utils/server/options.py are not the parsers' own (tests/oracle/options.py check).
# python -S: no site-packages, so SGLang's imports of torch & co. meet the stand-ins of stubs.py, never a real one.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
py="$root/.venv/bin/python"
good=0 total=0 rc=0
for release in 0.5.9 0.5.23; do
  site="$("$py" "$root/tests/oracle/fetch.py" "$release")"
  "$py" -S "$root/tests/oracle/run_oracle.py" --release "$release" --site "$site" --self-test
  out="$(mktemp)"
  "$py" -S "$root/tests/oracle/run_oracle.py" --release "$release" --site "$site" | tee "$out" || rc=1
  line="$(grep -E "^oracle agreement $release [0-9]+/[0-9]+$" "$out" | tail -1)"
  rm -f "$out"
  [ -n "$line" ] || { echo "oracle: no agreement line for $release" >&2; exit 1; }
  n="${line##* }"
  good=$((good + ${n%/*})) total=$((total + ${n#*/}))
done
# the option tables the collection resolves argument names against (plugins/module_utils/server/options.py) are
# the parsers' own: each release's ServerArgs.add_cli_args and the router's RouterArgs, read again here
"$py" "$root/tests/oracle/options.py" check || rc=1
echo "oracle agreement $good/$total"
exit "$rc"
