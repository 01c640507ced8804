#!/usr/bin/env bash
# The deployed shape on this machine: every function of infra/template.yaml its own process
# (the `lambda` binary, as SAM deploys it), behind a local HTTP API, stream pollers, schedules
# and the broker mapping, over LocalStack (started if needed) and RabbitMQ.
# Usage: bash scripts/deployed-shape.sh [--port 8080] [--data-dir .data-shape] [--speedup 1]
#        [--claim-mode lambda|lambda-short|service]
#        (every option: bash scripts/deployed-shape.sh --help; TCQ_PORT/TCQ_DATA_DIR work too)
# Stop it with Ctrl-C (or SIGTERM): every process it started stops.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/rabbitmq.sh
if ! bash localstack/localstack.sh status >/dev/null 2>&1; then
  bash localstack/localstack.sh start
fi
export AWS_ENDPOINT_URL="${AWS_ENDPOINT_URL:-http://127.0.0.1:4566}" AWS_REGION="${AWS_REGION:-us-east-1}" \
       AWS_DEFAULT_REGION="${AWS_DEFAULT_REGION:-us-east-1}" AWS_ACCESS_KEY_ID="${AWS_ACCESS_KEY_ID:-test}" \
       AWS_SECRET_ACCESS_KEY="${AWS_SECRET_ACCESS_KEY:-test}"
bash scripts/build-shape.sh
exec target/debug/deployed-shape "$@"
