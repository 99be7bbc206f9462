#!/bin/sh
# Starts valkey-server with the EchoMQ config; extra arguments (e.g. --port 7001) follow it.
# ECHOMQ_TLS_DIR (a directory holding ca.pem, server.pem and server.key) serves TLS only, on
# ECHOMQ_PORT (default 6379), asking clients for a certificate the CA signed unless
# ECHOMQ_TLS_AUTH_CLIENTS says otherwise (no or optional); replication and the cluster bus
# then speak TLS too.
set -e
if [ -n "${ECHOMQ_TLS_DIR:-}" ]; then
  tls="$ECHOMQ_TLS_DIR"
  for f in ca.pem server.pem server.key; do
    [ -r "$tls/$f" ] || { echo "echomq: ECHOMQ_TLS_DIR=$tls has no readable $f" >&2; exit 1; }
  done
  set -- --port 0 --tls-port "${ECHOMQ_PORT:-6379}" \
    --tls-cert-file "$tls/server.pem" --tls-key-file "$tls/server.key" \
    --tls-ca-cert-file "$tls/ca.pem" --tls-auth-clients "${ECHOMQ_TLS_AUTH_CLIENTS:-yes}" \
    --tls-replication yes --tls-cluster yes "$@"
fi
if [ -n "${VALKEY_PASSWORD:-}" ]; then
  set -- "$@" --requirepass "$VALKEY_PASSWORD"
fi
exec valkey-server /etc/echomq/valkey.conf "$@"
