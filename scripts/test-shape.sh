#!/usr/bin/env bash
# The whole black-box suite against the deployed shape (every function its own process over
# LocalStack; see README's "Deployed shape"), with 5,000-task bursts. The test command runs a
# bounded subset of it (scripts/shape-subset.sh); this runs everything: first every test but
# the ones that write thousands of tasks at once, then those, two at a time (each write goes
# through LocalStack's one DynamoDB process, and other tests' calls would queue behind them).
# Usage: bash scripts/test-shape.sh [test name filter ...]   (filters run in one pass)
set -euo pipefail
cd "$(dirname "$0")/.."
phase() { echo "== [${SECONDS} s] $*" >&2; }

# The official clients, Chromium and RabbitMQ, as the test command brings them up.
source scripts/test-tools.sh
if ! bash localstack/localstack.sh status >/dev/null 2>&1; then
  bash localstack/localstack.sh start
  trap 'bash localstack/localstack.sh stop' EXIT
else
  bash localstack/localstack.sh resources
fi
export AWS_ENDPOINT_URL=http://127.0.0.1:4566 AWS_REGION=us-east-1 AWS_DEFAULT_REGION=us-east-1 \
       AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test TCQ_LOCALSTACK=1 \
       TCQ_TEST_BACKEND=shape TCQ_SHAPE_BURST="${TCQ_SHAPE_BURST:-5000}"
cargo build --locked -p functions --bin lambda
TEST=(cargo test -p blackbox --test blackbox --locked --)
if [ $# -gt 0 ]; then
  "${TEST[@]}" --test-threads="${TEST_THREADS:-4}" "$@"
  exit
fi
HEAVY=(shape:: dependencies::fan_ workers::twenty_five_hundred_workers
       concurrency::twenty_workers_claim_five_hundred_tasks_exactly_once)
SKIP=()
for t in "${HEAVY[@]}"; do SKIP+=(--skip "$t"); done
# Every phase runs whatever an earlier one gave; the script fails if any did.
FAILED=()
run() { local what="$1"; shift; phase "$what"; "${TEST[@]}" "$@" || FAILED+=("$what"); }
run "every test but the bursts" --test-threads="${TEST_THREADS:-4}" "${SKIP[@]}"
# The listing of a thousand 6 KB tasks runs alone, after them: beside a 5,000-task burst its
# pages (hundreds of reads each) waited past their function's timeout on LocalStack.
LISTING=shape::listings_page_by_bytes_with_6_kb_definitions
run "the bursts" --test-threads=2 "${HEAVY[@]}" --skip "$LISTING"
run "the listing of 6 MB of definitions" --exact "$LISTING"
if [ ${#FAILED[@]} -gt 0 ]; then
  phase "failed: ${FAILED[*]}"
  exit 1
fi
phase "done"
