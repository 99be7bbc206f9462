#!/usr/bin/env bash
# make docker-test: the integration suite against the dockerized single node, then cluster
# smoke tests against the compose cluster; everything is torn down, on success or failure.
set -euo pipefail
cd "$(dirname "$0")/.."
compose=(docker-compose -f docker/compose.yml -p echomq-test)
port="${ECHOMQ_DOCKER_PORT:-16379}"
tls_port="${ECHOMQ_DOCKER_TLS_PORT:-16380}"
certs="$PWD/target/docker-tls"
export ECHOMQ_TLS_CERTS="$certs" ECHOMQ_TLS_PORT="$tls_port"
cleanup() { ECHOMQ_PORT="$port" "${compose[@]}" --profile cluster --profile tls down -v --remove-orphans >/dev/null 2>&1 || true; }
trap cleanup EXIT
cleanup

wait_healthy() { # <container> <seconds>
  local i
  for ((i = 0; i < $2 * 5; i++)); do
    [ "$(docker inspect --format '{{.State.Health.Status}}' "$1" 2>/dev/null)" = healthy ] && return 0
    sleep 0.2
  done
  docker logs "$1" | tail -20 >&2
  return 1
}

echo "docker-test: single node on 127.0.0.1:$port"
ECHOMQ_PORT="$port" "${compose[@]}" up -d valkey
wait_healthy "$(ECHOMQ_PORT="$port" "${compose[@]}" ps -q valkey)" 60
ECHOMQ_EXTERNAL="127.0.0.1:$port" cargo test --test enqueue --test grammar --test interop --test menqueue \
  --test delayed --test claim --test blocking_claim --test lease --test cancel_requeue --test events --test concurrency

echo "docker-test: the same image over TLS only on 127.0.0.1:$tls_port, with certificates made for this run"
rm -rf "$certs"
bash scripts/tls-certs.sh "$certs"
ECHOMQ_PORT="$port" "${compose[@]}" --profile tls up -d valkey-tls
wait_healthy "$(ECHOMQ_PORT="$port" "${compose[@]}" ps -q valkey-tls)" 60
ECHOMQ_TLS_EXTERNAL="127.0.0.1:$tls_port" cargo test -p emq --test tls -- --ignored

echo "docker-test: cluster on 127.0.0.1:7001-7006"
ECHOMQ_PORT="$port" "${compose[@]}" --profile cluster up -d
creator="$(ECHOMQ_PORT="$port" "${compose[@]}" ps -q cluster-create)"
for ((i = 0; i < 300; i++)); do
  [ "$(docker inspect --format '{{.State.Status}}' "$creator")" = exited ] && break
  sleep 0.2
done
code="$(docker inspect --format '{{.State.ExitCode}}' "$creator")"
[ "$code" = 0 ] || { docker logs "$creator" >&2; echo "docker-test: cluster create failed" >&2; exit 1; }
# Every node agrees the cluster is up before the tests start (gossip takes a moment).
for port in 7001 7002 7003 7004 7005 7006; do
  for ((i = 0; i < 300; i++)); do
    valkey-cli -p "$port" CLUSTER INFO 2>/dev/null | grep -q '^cluster_state:ok' && break
    sleep 0.2
  done
  valkey-cli -p "$port" CLUSTER INFO | grep -q '^cluster_state:ok' || { echo "docker-test: node $port never saw the cluster up" >&2; exit 1; }
done
ECHOMQ_CLUSTER_PORTS=7001,7002,7003,7004,7005,7006 cargo test --test docker_cluster -- --ignored
echo "docker-test: passed"
