#!/usr/bin/env bash
# Builds a local stand-in for the official valkey/valkey:8.0 image, for machines whose Docker
# engine cannot pull from a registry: a FROM-scratch image assembled from this machine's
# Debian packages (valkey-server, valkey-tools, dash and the libraries they and the module
# link), with valkey-server and valkey-cli on PATH. Usage: docker-base.sh <tag> <module.so>
set -euo pipefail
tag="${1:?image tag}"
module="${2:?path to libechomq.so}"
bash "$(dirname "$0")/install-deps.sh"

root="$(mktemp -d)"
trap 'rm -rf "$root"' EXIT

# A file and every shared library it loads, at their own paths.
add() {
  local f
  for f in "$@"; do
    install -D -m 0755 "$(readlink -f "$f")" "$root$f"
    ldd "$f" 2>/dev/null | awk '/=> \// {print $3} /^[[:space:]]*\// {print $1}' | while read -r lib; do
      [ -e "$root$lib" ] || install -D -m 0755 "$(readlink -f "$lib")" "$root$lib"
    done
  done
}

add "$(command -v valkey-server)" "$(command -v valkey-cli)" /bin/sh
# The module's own dependencies (libgcc_s, libc), resolved now so the image has them.
ldd "$module" | awk '/=> \// {print $3}' | while read -r lib; do
  [ -e "$root$lib" ] || install -D -m 0755 "$(readlink -f "$lib")" "$root$lib"
done
mkdir -p "$root/data" "$root/tmp" "$root/etc" "$root/usr/local/bin"
chmod 1777 "$root/tmp"
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n' > "$root/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' > "$root/etc/group"
tar -C "$root" -c . | docker import \
  --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin' \
  --change 'WORKDIR /data' \
  --change 'CMD ["valkey-server"]' \
  - "$tag" >/dev/null
echo "docker: built local base image $tag from this machine's Debian packages"
