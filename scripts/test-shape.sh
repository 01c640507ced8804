#!/usr/bin/env bash
# The whole black-box suite against the deployed shape (every function its own process over
# LocalStack; see README's "Deployed shape"), with 5,000-task bursts. The test command runs a
# bounded subset of it (scripts/shape-subset.sh); this runs everything: first every test but
# the ones that write hundreds to thousands of tasks at once, then those (see below).
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
# The tests that write hundreds to thousands of tasks at once run after the others, and the
# two 5,000-task bursts one at a time after those: every write goes through LocalStack's one
# DynamoDB process, and beside a burst other tests' calls queue past their functions' timeouts
# (side by side, the two bursts seeded at a fraction of their pace alone and a thousand-task
# fan-out beside them got a gateway 500).
BURSTS=(shape::a_deadline_burst_resolves_within_two_scheduled_invocations
        shape::expired_tasks_are_deleted_within_two_scheduled_invocations)
# The listing of a thousand 6 KB tasks runs alone too: beside a burst its pages (hundreds of
# reads each) waited past their function's timeout on LocalStack.
LISTING=shape::listings_page_by_bytes_with_6_kb_definitions
HEAVY=(shape:: dependencies::fan_ workers::twenty_five_hundred_workers
       concurrency::twenty_workers_claim_five_hundred_tasks_exactly_once)
SKIP=()
for t in "${HEAVY[@]}"; do SKIP+=(--skip "$t"); done
# Every phase runs whatever an earlier one gave; the script fails if any did.
FAILED=()
run() { local what="$1"; shift; phase "$what"; "${TEST[@]}" "$@" || FAILED+=("$what"); }
run "every test but the heavy ones" --test-threads="${TEST_THREADS:-4}" "${SKIP[@]}"
NOT_ALONE=()
for t in "${BURSTS[@]}" "$LISTING"; do NOT_ALONE+=(--skip "$t"); done
run "hundreds to thousands of tasks at once" --test-threads=2 "${HEAVY[@]}" "${NOT_ALONE[@]}"
for t in "${BURSTS[@]}" "$LISTING"; do run "alone: $t" --exact "$t"; done
if [ ${#FAILED[@]} -gt 0 ]; then
  phase "failed: ${FAILED[*]}"
  exit 1
fi
phase "done"
