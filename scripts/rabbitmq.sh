#!/usr/bin/env bash
# Makes sure a RabbitMQ broker accepts AMQP on 127.0.0.1:5672 (guest/guest) for the event
# tests: installs Debian's rabbitmq-server if it is missing, starts it if it is not running.
set -euo pipefail

up() { (exec 3<>/dev/tcp/127.0.0.1/5672) 2>/dev/null; }
up && exit 0

if ! command -v rabbitmq-server >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rabbitmq-server
fi
echo "starting RabbitMQ on 127.0.0.1:5672"
RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 ERL_EPMD_ADDRESS=127.0.0.1 rabbitmq-server -detached
for _ in $(seq 1 90); do
  up && exit 0
  sleep 1
done
echo "RabbitMQ did not come up on 127.0.0.1:5672" >&2
exit 1
