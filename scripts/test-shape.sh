#!/usr/bin/env bash
# The whole black-box suite against the deployed shape (every function its own process over
# LocalStack; see docs/deployed-shape.md), with 5,000-task bursts. The test command runs a
# bounded subset of it (scripts/shape-subset.sh); this runs everything: first every test but
# the ones that write hundreds to thousands of tasks at once, then those (see below).
# Usage: bash scripts/test-shape.sh [test name filter ...]   (filters run in one pass)
set -euo pipefail
cd "$(dirname "$0")/.."
phase() { echo "== [${SECONDS} s] $*" >&2; }

# The official clients, Chromium and RabbitMQ, as the test command brings them up.
source scripts/test-tools.sh
OWN_LOCALSTACK=
if ! bash localstack/localstack.sh status >/dev/null 2>&1; then
  bash localstack/localstack.sh start
  trap 'bash localstack/localstack.sh stop' EXIT
  OWN_LOCALSTACK=1
else
  bash localstack/localstack.sh resources
fi
export AWS_ENDPOINT_URL=http://127.0.0.1:4566 AWS_REGION=us-east-1 AWS_DEFAULT_REGION=us-east-1 \
       AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test TCQ_LOCALSTACK=1 \
       TCQ_TEST_BACKEND=shape TCQ_SHAPE_BURST="${TCQ_SHAPE_BURST:-5000}"
bash scripts/build-shape.sh
TEST=(cargo test -p blackbox --test blackbox --locked --)
if [ $# -gt 0 ]; then
  "${TEST[@]}" --test-threads="${TEST_THREADS:-4}" "$@"
  exit
fi
# Two tests at a time (the machine's cores; at 4, calls queued in LocalStack past their
# functions' timeouts), then the tests that write hundreds to thousands of tasks at once one
# at a time: every write goes through LocalStack's one DynamoDB process, and beside another
# such test a createTask with a thousand dependencies, or a statuses call over 500 tasks,
# outlasted its function's 15 s (side by side, the two 5,000-task bursts also seeded at a
# fraction of their pace alone). The shape's other tests run with the rest: right after a
# 5,000-task burst, LocalStack's streams carried a fresh stack's first events only after more
# than a minute (every_function_is_its_own_process, 2026-11-27).
HEAVY=(shape::a_deadline_burst shape::expired_tasks shape::listings_page_by_bytes
       shape::a_request_over_lambdas_limit dependencies::fan_ workers::twenty_five_hundred_workers
       concurrency::twenty_workers_claim_five_hundred_tasks_exactly_once)
SKIP=()
for t in "${HEAVY[@]}"; do SKIP+=(--skip "$t"); done
# Every phase runs whatever an earlier one gave; the script fails if any did.
FAILED=()
run() { local what="$1"; shift; phase "$what"; "${TEST[@]}" "$@" || FAILED+=("$what"); }
run "every test but the heavy ones" --test-threads="${TEST_THREADS:-2}" "${SKIP[@]}"
# Each heavy test on a fresh LocalStack when this script started it: after a 5,000-task burst
# LocalStack's DynamoDB and streams stay busy with its writes and their stream records for
# many minutes (the deadline burst seeded 5,000 tasks in 386 s on a fresh one; the expiry
# burst right after it was still seeding after 28 minutes, 2026-11-27).
for t in "${HEAVY[@]}"; do
  if [ -n "$OWN_LOCALSTACK" ]; then
    bash localstack/localstack.sh stop
    bash localstack/localstack.sh start
  fi
  run "$t (hundreds to thousands of tasks at once, alone)" --test-threads=1 "$t"
done
if [ ${#FAILED[@]} -gt 0 ]; then
  phase "failed: ${FAILED[*]}"
  exit 1
fi
phase "done"
