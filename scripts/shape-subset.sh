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
        claims:: deadlines:: workers:: auth:: readme_session::)
# The tests that write hundreds of tasks at once run last, two at a time: every write goes
# through LocalStack's one DynamoDB process, which holds one lock for each, and other tests'
# calls queue behind them past their functions' timeouts.
HEAVY=(shape:: dependencies::fan_)
SKIP=()
for t in "${HEAVY[@]}"; do SKIP+=(--skip "$t"); done
cargo test -p blackbox --test blackbox --locked -- --test-threads="$THREADS" "${SUBSET[@]}" "${SKIP[@]}"
cargo test -p blackbox --test blackbox --locked -- --test-threads=2 "${HEAVY[@]}"
