# Sourced by scripts/test.sh and scripts/test-shape.sh (from the repository's root): brings up
# what the black-box tests use besides LocalStack, and exports where each is.
# The official Python client, for the black-box tests that drive a worker with it;
# schemathesis, run from our OpenAPI documents by openapi::; cfn-lint, for scripts/test.sh.
VENV="${TCQ_VENV:-target/py-venv}"
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
"$VENV/bin/pip" install --quiet --disable-pip-version-check taskcluster cfn-lint schemathesis==4.32.5
export TCQ_PYTHON="$(cd "$VENV" && pwd)/bin/python"
# The official npm client, for the object upload/download helpers' test (tests/node).
command -v npm >/dev/null || { echo "npm is required (Node.js 18+)" >&2; exit 1; }
npm ci --prefix tests/node --no-audit --no-fund --loglevel=error
export TCQ_NODE_CLIENT="$PWD/tests/node"
# The CDK app (infra/cdk), which infra:: synthesises and compares with the SAM template.
npm ci --prefix infra/cdk --no-audit --no-fund --loglevel=error
export TCQ_CDK_APP="$PWD/infra/cdk"
# The web inspector (ui/): Debian's Chromium for its browser tests and its npm packages
# (TypeScript, Vite, playwright-core).
command -v chromium >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }
npm ci --prefix ui --no-audit --no-fund --loglevel=error
export TCQ_CHROMIUM="$(command -v chromium)"
# RabbitMQ, for the tests that consume the queue's events from real exchanges.
bash scripts/rabbitmq.sh
