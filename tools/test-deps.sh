#!/usr/bin/env bash
# What `make test` needs besides Go, checked before any test runs.
#
# Programs the tests run themselves (Debian packages):
#   nats-server  servers with TLS and accounts (tools/natstest, lab/deploy)
#   prometheus   promtool and a real Prometheus (lab/deploy)
#   chromium     the headless Temporal UI test (lab/e2e)
#   rabbitmq-server  the RabbitMQ source's own nodes (tools/rabbittest)
#   linux-perf   perf stat, which counts the bench's instructions (lab/bench)
# Services the tests connect to:
#   Postgres on 127.0.0.1:5432 (trust, user postgres)
#   NATS with JetStream on 127.0.0.1:4222
#   RabbitMQ on 127.0.0.1:5672 (guest/guest)
#
# As root with apt-get, missing packages are installed and stopped services
# started. Otherwise it stops at once and prints the one command to run.
# TEST_DEPS_DRY_RUN=1 only reports; TEST_DEPS_PATH replaces the folders
# searched for programs (both for lab/deploy's test of this script).
set -euo pipefail

dry=${TEST_DEPS_DRY_RUN:-}
search=${TEST_DEPS_PATH:-$PATH:/usr/sbin:/usr/local/sbin}
root=""
[ "$(id -u)" = 0 ] && root=1

have() { PATH="$search" command -v "$1" >/dev/null 2>&1; }

need=()
have nats-server || need+=(nats-server)
{ have promtool && have prometheus; } || need+=(prometheus)
have chromium || have chromium-browser || need+=(chromium)
have rabbitmq-server || need+=(rabbitmq-server)
have perf || need+=(linux-perf)

if [ ${#need[@]} -gt 0 ]; then
  cmd="apt-get update && apt-get install -y --no-install-recommends ${need[*]}"
  if [ -n "$dry" ] || [ -z "$root" ] || ! command -v apt-get >/dev/null; then
    echo "make test needs ${need[*]} (Debian packages). Install them with:" >&2
    echo "  sudo sh -c '$cmd'" >&2
    exit 1
  fi
  echo "test-deps: installing ${need[*]} (once)"
  # A policy-rc.d keeps the packages' services (prometheus) from starting:
  # the tests run their own.
  made_policy=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && made_policy=1
  fi
  trap '[ -n "$made_policy" ] && rm -f /usr/sbin/policy-rc.d' EXIT
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

if ! port_open 5432; then
  start="pg_ctlcluster --skip-systemctl-redirect \$(ls /etc/postgresql | head -n1) main start"
  if [ -n "$dry" ] || [ -z "$root" ] || ! command -v pg_ctlcluster >/dev/null; then
    echo "make test needs Postgres on 127.0.0.1:5432 (trust auth, user postgres). Start it with:" >&2
    echo "  sudo $start" >&2
    exit 1
  fi
  echo "test-deps: starting Postgres"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start
  for _ in $(seq 1 30); do port_open 5432 && break; sleep 1; done
  port_open 5432 || { echo "Postgres did not come up on 127.0.0.1:5432" >&2; exit 1; }
fi

if ! port_open 4222; then
  start="start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log"
  if [ -n "$dry" ] || [ -z "$root" ]; then
    echo "make test needs NATS with JetStream on 127.0.0.1:4222. Start it with:" >&2
    echo "  sudo $start" >&2
    exit 1
  fi
  echo "test-deps: starting NATS"
  mkdir -p /var/lib/nats-server
  $start
  for _ in $(seq 1 30); do port_open 4222 && break; sleep 1; done
  port_open 4222 || { echo "NATS did not come up on 127.0.0.1:4222" >&2; exit 1; }
fi

if ! port_open 5672; then
  start="rabbitmq-server -detached"
  if [ -n "$dry" ] || [ -z "$root" ] || ! command -v rabbitmq-server >/dev/null; then
    echo "make test needs RabbitMQ on 127.0.0.1:5672 (guest/guest). Start it with:" >&2
    echo "  sudo $start" >&2
    exit 1
  fi
  echo "test-deps: starting RabbitMQ"
  $start
  for _ in $(seq 1 60); do port_open 5672 && break; sleep 1; done
  port_open 5672 || { echo "RabbitMQ did not come up on 127.0.0.1:5672" >&2; exit 1; }
fi
