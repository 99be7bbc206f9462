#!/usr/bin/env bash
# Test certificates for EchoMQ over TLS: a CA, a server certificate for 127.0.0.1 and
# localhost, and a client certificate, as PEM files in <dir> (ca.pem, server.pem, server.key,
# client.pem, client.key), each valid for 30 days. The keys are left readable by any user so a
# container's server, whatever user it runs as, can read them: these are for tests and trials,
# never for production. Usage: tls-certs.sh <dir>
set -euo pipefail
dir="${1:?usage: tls-certs.sh <dir>}"
mkdir -p "$dir"
cd "$dir"
quiet() { "$@" >/dev/null 2>&1 || { "$@"; exit 1; }; }
quiet openssl req -x509 -new -nodes -newkey rsa:2048 -days 30 -subj "/CN=EchoMQ test CA" \
  -keyout ca.key -out ca.pem
for name in server client; do
  quiet openssl req -new -nodes -newkey rsa:2048 -subj "/CN=EchoMQ test $name" \
    -keyout "$name.key" -out "$name.csr"
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n' > "$name.ext"
  quiet openssl x509 -req -in "$name.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days 30 \
    -extfile "$name.ext" -out "$name.pem"
  rm -f "$name.csr" "$name.ext"
done
rm -f ca.key ca.srl
chmod 0644 ./*.pem ./*.key
echo "tls-certs: ca.pem, server.pem/.key and client.pem/.key in $dir"
