#!/usr/bin/env bash
# Schemathesis at length: the black-box test openapi::schemathesis_finds_nothing_on_any_service
# with more examples per operation (every operation of every service, from its OpenAPI
# document, against one local server); prints operations, test cases, failures and wall time
# per service. The whole output is kept in target/schemathesis.log.
# Usage: bash scripts/schemathesis.sh [EXAMPLES [SEED]]   (defaults: 100, 20261126)
# Needs the venv of scripts/test.sh (target/py-venv with schemathesis), or TCQ_PYTHON.
set -euo pipefail
cd "$(dirname "$0")/.."
export TCQ_PYTHON="${TCQ_PYTHON:-$PWD/target/py-venv/bin/python}"
"$TCQ_PYTHON" -c 'import schemathesis' 2>/dev/null || {
  echo "no schemathesis in $TCQ_PYTHON: run scripts/test.sh once (it installs it)" >&2
  exit 1
}
export TCQ_SCHEMATHESIS_EXAMPLES="${1:-100}" TCQ_SCHEMATHESIS_SEED="${2:-20261126}"
echo "schemathesis, $TCQ_SCHEMATHESIS_EXAMPLES examples per operation, seed $TCQ_SCHEMATHESIS_SEED" \
  "($(date -u +%F), commit $(git rev-parse --short HEAD))"
log=target/schemathesis.log
status=0
cargo test -p blackbox --test blackbox --locked -- --exact \
  openapi::schemathesis_finds_nothing_on_any_service --nocapture >"$log" 2>&1 || status=$?
grep -E '^(service|queue|auth|scheduler|object|total) ' "$log" || true
[ "$status" -eq 0 ] || echo "failed: the failures are in $log" >&2
exit "$status"
