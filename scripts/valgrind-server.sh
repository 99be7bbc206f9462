#!/usr/bin/env bash
# valkey-server under valgrind memcheck, for `make test-valgrind`: one log per process in
# $ECHOMQ_VALGRIND_DIR, read afterwards by scripts/valgrind-report.sh. Debian's server is
# linked against jemalloc: memcheck takes over its malloc family (--soname-synonyms) and a
# small preloaded shim answers the jemalloc-only calls (see valgrind-jemalloc-shim.c).
set -e
dir="${ECHOMQ_VALGRIND_DIR:-/tmp/echomq-valgrind}"
here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$dir"
shim="$dir/libjemalloc-shim.so"
if [ ! -f "$shim" ]; then
  cc -shared -fPIC -O2 -o "$shim.tmp.$$" "$here/valgrind-jemalloc-shim.c"
  mv "$shim.tmp.$$" "$shim"
fi
export LD_PRELOAD="$shim${LD_PRELOAD:+:$LD_PRELOAD}"
exec valgrind --tool=memcheck --soname-synonyms='somalloc=*jemalloc*' \
  --leak-check=full --show-leak-kinds=definite,indirect --num-callers=40 \
  --log-file="$dir/valgrind-%p.log" \
  "${ECHOMQ_REAL_SERVER:-valkey-server}" "$@"
