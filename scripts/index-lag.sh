#!/usr/bin/env bash
# The whole black-box suite on the embedded backend with every secondary index (and every
# eventually consistent read) behind its writes, as DynamoDB's may be: nothing the queue does
# may rely on an index being current. The test command runs a bounded subset this way.
# Usage: bash scripts/index-lag.sh [LAG_MS (1000)] [-- cargo test filters and flags]
# About 7 minutes on 2 cores after the build (2026-11-28).
set -euo pipefail
cd "$(dirname "$0")/.."
LAG="${1:-1000}"
shift $(( $# > 0 ? 1 : 0 ))
[ "${1:-}" = "--" ] && shift
THREADS="${TEST_THREADS:-4}"
# The binaries some tests start as processes.
cargo build --workspace --all-targets --locked
source scripts/test-tools.sh
TCQ_INDEX_LAG_MS="$LAG" cargo test -p blackbox --test blackbox --locked -- \
  --test-threads="$THREADS" "$@"
