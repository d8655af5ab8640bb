#!/usr/bin/env bash
# make oracle: fetch (once) and check the sglang==0.5.9 wheel, the harness's self-test, then every scenario.
# python -S: no site-packages, so SGLang's imports of torch & co. meet the stand-ins of stubs.py, never a real one.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
py="$root/.venv/bin/python"
site="$("$py" "$root/tests/oracle/fetch.py")"
"$py" -S "$root/tests/oracle/run_oracle.py" --site "$site" --self-test
exec "$py" -S "$root/tests/oracle/run_oracle.py" --site "$site"
