#!/usr/bin/env bash
# The deployed shape's bounded subset, as the test command runs it: the black-box tests of
# the capabilities the deployed shape exercises differently (stream triggers, schedules,
# function instances and their limits, the gateway), each against every function of
# infra/template.yaml run as its own process over LocalStack and RabbitMQ, with 300-task
# bursts. Tests configured alike share a stack (tests/src/stacks.rs).
# Needs LocalStack and RabbitMQ up and the AWS_* variables set (scripts/test.sh and
# scripts/test-shape.sh do both); TCQ_SHAPE_RAN=<file> lists the tests that ran.
set -euo pipefail
cd "$(dirname "$0")/.."
export TCQ_TEST_BACKEND=shape TCQ_SHAPE_BURST="${TCQ_SHAPE_BURST:-300}"
THREADS="${TEST_THREADS:-4}"
bash scripts/build-shape.sh
SUBSET=(lifecycle:: dependencies:: task_groups:: artifacts:: events:: scheduler:: claimwork::
        claims:: deadlines:: workers:: auth:: readme_session:: claim_modes:: metrics:: priority::)
# The claim routes' tests, again in the template's other claim modes (ClaimMode): served by
# the claim service (tc-queue, as its ECS service runs it) and by functions that wait at most
# ClaimWaitSeconds. The whole subset in one mode: TCQ_SHAPE_CLAIM_MODE=service bash $0.
CLAIMS=(claimwork:: claims:: workers:: claim_modes:: priority::a_lowest)
# The tests that write hundreds of tasks at once run last, two at a time: every write goes
# through LocalStack's one DynamoDB process, which holds one lock for each, and other tests'
# calls queue behind them past their functions' timeouts.
# The broker outage, the crash loop and the aging tests start stacks of their own and load
# LocalStack: beside the claim tests they slowed cold starts until a claimWork waiter's 20 s
# ran out (claimwork::claim_work_at_its_concurrency…, one CI run of 2916b35).
HEAVY=(shape:: dependencies::fan_ amqp::events_outlast reliability::a_crash_loop_in_the_deployed
       priority::a_lowest priority::without_aging lambda_secrets::a_rotated task_groups::a_group_too)
SKIP=()
for t in "${HEAVY[@]}"; do SKIP+=(--skip "$t"); done
cargo test -p blackbox --test blackbox --locked -- --test-threads="$THREADS" "${SUBSET[@]}" "${SKIP[@]}"
if [ -z "${TCQ_SHAPE_CLAIM_MODE:-}" ]; then
  for mode in service lambda-short; do
    TCQ_SHAPE_CLAIM_MODE=$mode cargo test -p blackbox --test blackbox --locked -- --test-threads="$THREADS" "${CLAIMS[@]}"
  done
fi
cargo test -p blackbox --test blackbox --locked -- --test-threads=2 "${HEAVY[@]}"
# The claim service reads the rotated tokens itself too.
if [ -z "${TCQ_SHAPE_CLAIM_MODE:-}" ]; then
  TCQ_SHAPE_CLAIM_MODE=service cargo test -p blackbox --test blackbox --locked -- lambda_secrets::a_rotated
fi
