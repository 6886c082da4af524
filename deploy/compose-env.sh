#!/bin/sh
# Writes the .env that docker-compose.yml reads: fresh random local secrets
# (Postgres, the two NATS users, the payload codec key and the codec server's
# token, Grafana's admin password, RabbitMQ's user), the simulators' fake provider keys and
# the host ports of Postgres, NATS and RabbitMQ.
#
#   deploy/compose-env.sh [FILE]     (make compose-env; FILE defaults to .env
#                                     next to docker-compose.yml)
#
# The file is created mode 0600 and never overwritten: Postgres and Grafana
# keep the password they were first started with in their data volumes, and
# payloads already in Temporal need the codec key that encrypted them. To
# start over, `docker compose down -v` and delete the file.
#
# lab/deploy/compose_test.go runs this script and loads the stack with
# what it writes.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/../.env}

if [ -e "$out" ]; then
	echo "$out exists; keeping it (delete it and run 'docker compose down -v' to start over)" >&2
	exit 0
fi

# hex N: N random bytes as 2N lowercase hex digits.
hex() {
	od -An -tx1 -N "$1" /dev/urandom | tr -d ' \n'
}

# secret: 24 random bytes as a password that needs no quoting anywhere it
# goes (a postgres:// URL, a NATS config variable, a shell). The leading
# letter keeps NATS from reading an all-digit value as a number.
secret() {
	printf 's%s' "$(hex 24)"
}

umask 077
tmp="$out.tmp.$$"
trap 'rm -f "$tmp"' EXIT
{
	echo "# Local secrets for docker-compose.yml, written by deploy/compose-env.sh on $(date -u +%Y-%m-%dT%H:%M:%SZ)."
	echo "# Generated for this machine only: do not commit, do not reuse elsewhere."
	echo "LOCAL_POSTGRES_PASSWORD=$(secret)"
	echo "LOCAL_NATS_WORKER_PASSWORD=$(secret)"
	echo "LOCAL_NATS_PUBLISHER_PASSWORD=$(secret)"
	# id:base64 of 32 random bytes (AES-256); the ID names the key in each payload.
	echo "LOCAL_CODEC_KEYS=local-$(date -u +%Y%m%d):$(head -c 32 /dev/urandom | base64 | tr -d '\n')"
	echo "LOCAL_CODEC_TOKEN=$(secret)"
	echo "LOCAL_GRAFANA_ADMIN_PASSWORD=$(secret)"
	echo "LOCAL_RABBITMQ_PASSWORD=$(secret)"
	echo "# Not secrets: the simulators accept any test-shaped key."
	echo "LOCAL_STRIPE_API_KEY=sk_test_local_simulator"
	echo "LOCAL_SENDGRID_API_KEY=SG.local-simulator"
	echo "# Not secrets: the host ports (on 127.0.0.1) of the stack's Postgres, NATS and RabbitMQ;"
	echo "# change them where those already run on the host (the shell's environment wins)."
	echo "COMPOSE_POSTGRES_PORT=5432"
	echo "COMPOSE_NATS_PORT=4222"
	echo "COMPOSE_RABBITMQ_PORT=5672"
} >"$tmp"
chmod 600 "$tmp"
mv "$tmp" "$out"
trap - EXIT
echo "wrote $out" >&2
