#!/bin/sh
# Healthy when the module answers EMQ.VERSION on this container's port (over TLS, with the
# client certificate when there is one, when ECHOMQ_TLS_DIR is set).
set --
if [ -n "${ECHOMQ_TLS_DIR:-}" ]; then
  set -- --tls --cacert "$ECHOMQ_TLS_DIR/ca.pem"
  if [ -r "$ECHOMQ_TLS_DIR/client.pem" ]; then
    set -- "$@" --cert "$ECHOMQ_TLS_DIR/client.pem" --key "$ECHOMQ_TLS_DIR/client.key"
  else
    set -- "$@" --cert "$ECHOMQ_TLS_DIR/server.pem" --key "$ECHOMQ_TLS_DIR/server.key"
  fi
fi
reply="$(valkey-cli "$@" -p "${ECHOMQ_PORT:-6379}" ${VALKEY_PASSWORD:+--no-auth-warning -a "$VALKEY_PASSWORD"} EMQ.VERSION 2>/dev/null)"
case "$reply" in
  echomq:*) exit 0 ;;
  *) exit 1 ;;
esac
