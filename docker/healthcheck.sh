#!/bin/sh
# Healthy when the module answers EMQ.VERSION on this container's port.
reply="$(valkey-cli -p "${ECHOMQ_PORT:-6379}" ${VALKEY_PASSWORD:+--no-auth-warning -a "$VALKEY_PASSWORD"} EMQ.VERSION 2>/dev/null)"
case "$reply" in
  echomq:*) exit 0 ;;
  *) exit 1 ;;
esac
