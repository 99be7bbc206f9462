#!/usr/bin/env bash
# Installs what EchoMQ needs to build and test: a C compiler and the C library's headers (Rust
# links through cc, and build scripts compile C), libclang-dev (bindgen), valkey-server and
# valkey-tools, python3-redis (the documented loops run with stock redis-py), python3-venv (the venv the Python
# client is tested and type-checked in, target/py), and on request redis-server
# (--with-redis, the Redis 7 tier), docker-compose and openssl (--with-compose, the docker
# tier, whose TLS node gets certificates scripts/tls-certs.sh makes with openssl) and
# iptables (--with-iptables, the faults harness, which cuts links with it) and chromium with
# chromium-driver (--with-browser, the console's browser tests), and node-redis with tsc
# (--with-node, the Node.js client's tests and type check; Node.js 18 or later as installed,
# which apt keeps rather than replacing it, or Debian's nodejs 18 where there is none), and
# prometheus with promtool (--with-prometheus, the console's metrics test scrapes with it).
# Idempotent: does nothing when everything is already present.
set -euo pipefail

want_redis=0
want_compose=0
want_iptables=0
want_browser=0
want_node=0
want_prometheus=0
for arg in "$@"; do
  case "$arg" in
    --with-redis) want_redis=1 ;;
    --with-compose) want_compose=1 ;;
    --with-iptables) want_iptables=1 ;;
    --with-browser) want_browser=1 ;;
    --with-node) want_node=1 ;;
    --with-prometheus) want_prometheus=1 ;;
  esac
done

# bindgen needs libclang itself (libclang.so), not just the C++ interface library.
have_clang() {
  if command -v dpkg-query >/dev/null 2>&1; then
    dpkg-query -W -f='${Status}' libclang-dev 2>/dev/null | grep -q "ok installed" && return 0
  fi
  ls /usr/lib/llvm-*/lib/libclang.so /usr/lib/*/libclang.so /usr/lib/libclang.so >/dev/null 2>&1
}
# Rust links through cc; a linker alone is not enough without the C library's startup files.
have_cc() { command -v cc >/dev/null 2>&1 && [ -e /usr/include/stdlib.h ]; }
have_valkey() { command -v valkey-server >/dev/null 2>&1 && command -v valkey-cli >/dev/null 2>&1; }
have_redis() { command -v redis-server >/dev/null 2>&1; }
# The queues suite runs the loop docs/commands.md shows with the stock redis-py client.
have_pyredis() { [ -x /usr/bin/python3 ] && /usr/bin/python3 -c "import redis" >/dev/null 2>&1; }

missing=()
have_cc || missing+=(gcc libc6-dev)
have_clang || missing+=(libclang-dev)
have_valkey || missing+=(valkey-server)
have_pyredis || missing+=(python3-redis)
# `python3 -m venv` with pip in it (Debian splits ensurepip out into python3-venv).
have_venv() { /usr/bin/python3 -c "import ensurepip, venv" >/dev/null 2>&1; }
have_venv || missing+=(python3-venv)
[ $want_redis = 1 ] && ! have_redis && missing+=(redis-server)
[ $want_compose = 1 ] && ! command -v docker-compose >/dev/null 2>&1 && missing+=(docker-compose)
[ $want_compose = 1 ] && ! command -v openssl >/dev/null 2>&1 && missing+=(openssl)
[ $want_iptables = 1 ] && ! command -v iptables >/dev/null 2>&1 && missing+=(iptables)
if [ $want_browser = 1 ]; then
  command -v chromium >/dev/null 2>&1 || missing+=(chromium)
  command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
fi
if [ $want_prometheus = 1 ]; then
  { command -v prometheus && command -v promtool; } >/dev/null 2>&1 || missing+=(prometheus)
fi
# Debian's node-redis (v4) lands in /usr/share/nodejs, found through NODE_PATH.
have_node_redis() { [ -e /usr/share/nodejs/redis/package.json ]; }
if [ $want_node = 1 ]; then
  if command -v node >/dev/null 2>&1 && ! node -e 'process.exit(+process.versions.node.split(".")[0] >= 18 ? 0 : 1)'; then
    echo "echomq: the Node.js client needs node >= 18; this machine has: $(node --version)" >&2; exit 1
  fi
  have_node_redis || missing+=(node-redis)
  command -v tsc >/dev/null 2>&1 || missing+=(node-typescript)
fi
[ ${#missing[@]} -eq 0 ] && exit 0

if ! command -v apt-get >/dev/null 2>&1; then
  echo "echomq: this machine has no apt-get; please install: ${missing[*]} (valkey-server >= 8.0 with valkey-cli, and libclang for bindgen)" >&2
  exit 1
fi

SUDO=""
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "echomq: need root (or sudo) to install: ${missing[*]}" >&2; exit 1
  fi
fi

. /etc/os-release
codename="${VERSION_CODENAME:-}"

# shellcheck source=scripts/debian-mirror.sh
. "$(dirname "$0")/debian-mirror.sh"

export DEBIAN_FRONTEND=noninteractive
apt_opts=()
if [ "${ID:-}" = debian ] && [ "$codename" = bookworm ] && ! have_valkey; then
  # Debian 12 ships valkey only in bookworm-backports.
  if ! grep -rqs "bookworm-backports" /etc/apt/sources.list /etc/apt/sources.list.d/; then
    mirror=$(debian_mirror "$codename")
    if [ -z "$mirror" ]; then
      echo "echomq: could not find the Debian mirror in apt's sources; add bookworm-backports by hand" >&2
      exit 1
    fi
    echo "echomq: adding bookworm-backports from $mirror"
    printf 'Types: deb\nURIs: %s\nSuites: bookworm-backports\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' "$mirror" \
      | $SUDO tee /etc/apt/sources.list.d/echomq-backports.sources >/dev/null
  fi
  apt_opts=(-t bookworm-backports)
fi

echo "echomq: installing ${missing[*]}"
$SUDO apt-get update -qq
pkgs=()
for p in "${missing[@]}"; do
  case $p in
    valkey-server) pkgs+=(valkey-server valkey-tools) ;;
    *) pkgs+=("$p") ;;
  esac
done
# valkey from backports where needed; the rest from the main archive.
valkey_pkgs=(); other_pkgs=()
for p in "${pkgs[@]}"; do case $p in valkey-*) valkey_pkgs+=("$p");; *) other_pkgs+=("$p");; esac; done
[ ${#other_pkgs[@]} -gt 0 ] && $SUDO apt-get install -y -qq --no-install-recommends "${other_pkgs[@]}"
[ ${#valkey_pkgs[@]} -gt 0 ] && $SUDO apt-get install -y -qq --no-install-recommends "${apt_opts[@]}" "${valkey_pkgs[@]}"
# The packaged service would hold port 6379; EchoMQ starts its own servers.
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
  $SUDO systemctl disable --now valkey-server >/dev/null 2>&1 || true
  # Likewise the packaged Prometheus's port 9090: the metrics test starts its own.
  [ $want_prometheus = 1 ] && { $SUDO systemctl disable --now prometheus >/dev/null 2>&1 || true; }
fi
have_valkey || { echo "echomq: valkey-server still missing after install" >&2; exit 1; }
