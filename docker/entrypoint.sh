#!/bin/sh
# Starts valkey-server with the EchoMQ config; extra arguments (e.g. --port 7001) follow it.
set -e
if [ -n "${VALKEY_PASSWORD:-}" ]; then
  set -- "$@" --requirepass "$VALKEY_PASSWORD"
fi
exec valkey-server /etc/echomq/valkey.conf "$@"
