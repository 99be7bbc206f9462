#!/usr/bin/env bash
# build-valkey.sh <dir>: builds the newest Valkey in Debian's archive (its unstable suite), from
# Debian's source package, into <dir>/bin (valkey-server, valkey-cli), for
# `make test-valkey-latest`: the suites against the newest Valkey beside Debian 12's 8.0.
#
# The source comes from the Debian mirror apt already uses: the suite's InRelease is checked
# against the machine's Debian archive keyring, the Sources index against InRelease, and the
# upstream tarball against the index. A build is kept in <dir> and reused for the same version.
#
# Exits 0 with the binaries in place; 3, which callers treat as a tier to skip (scripts/tier-skip.sh:
# a failure on CI where .ci/tiers lists the tier), when no such server can be had here: no apt sources naming a Debian mirror, no network to it, a file that
# does not verify (nothing unverified is built), or a build that fails (a newer Valkey than
# this machine's compiler can build). Anything else is a failure.
set -euo pipefail

dir="${1:?usage: build-valkey.sh <dir>}"
suite=unstable
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
cd "$(dirname "$0")"

skip() { echo "build-valkey: $*" >&2; exit 3; }

. /etc/os-release
# shellcheck source=scripts/debian-mirror.sh
. ./debian-mirror.sh
mirror="$(debian_mirror "${VERSION_CODENAME:-}")"
[ -n "$mirror" ] || skip "apt's sources name no Debian mirror for ${VERSION_CODENAME:-this system}"
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
[ -f "$keyring" ] || skip "no Debian archive keyring ($keyring) to check the archive with"

missing=()
for tool in curl gpgv xz make cc; do command -v "$tool" >/dev/null 2>&1 || missing+=("$tool"); done
if [ ${#missing[@]} -gt 0 ]; then
  pkgs=()
  for tool in "${missing[@]}"; do
    case $tool in xz) pkgs+=(xz-utils) ;; cc) pkgs+=(gcc libc6-dev) ;; *) pkgs+=("$tool") ;; esac
  done
  echo "build-valkey: installing ${pkgs[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${pkgs[@]}"
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fetch() { curl -fsS --retry 2 -m 300 -o "$2" "$mirror/$1"; }

fetch "dists/$suite/InRelease" "$work/InRelease" || skip "cannot fetch $mirror/dists/$suite/InRelease"
gpgv --keyring "$keyring" --output "$work/Release" "$work/InRelease" 2>"$work/gpgv.log" || {
  cat "$work/gpgv.log" >&2
  skip "$suite's InRelease from $mirror does not verify against $keyring"
}
sha_of() { # <file listed in Release> -> its SHA256
  awk -v f="$1" '/^SHA256:/ {s=1; next} /^[^ ]/ {s=0} s && $3 == f {print $1; exit}' "$work/Release"
}
sources_sha="$(sha_of main/source/Sources.xz)"
[ -n "$sources_sha" ] || skip "no main/source/Sources.xz in $suite's Release"
fetch "dists/$suite/main/source/Sources.xz" "$work/Sources.xz" || skip "cannot fetch $suite's Sources index"
echo "$sources_sha  $work/Sources.xz" | sha256sum -c --quiet - || skip "Sources.xz does not match Release"

# The valkey stanza: its version, directory and the upstream tarball's checksum and name.
xz -dc "$work/Sources.xz" | awk '
  /^Package: / { p = ($2 == "valkey") }
  p && /^Version: / { print "version", $2 }
  p && /^Directory: / { print "directory", $2 }
  p && /^Checksums-Sha256:/ { c = 1; next }
  p && c && /^ / { if ($3 ~ /\.orig\.tar\./) print "tarball", $1, $3; next }
  { c = 0 }
' >"$work/stanza"
version="$(awk '$1=="version" {print $2; exit}' "$work/stanza")"
directory="$(awk '$1=="directory" {print $2; exit}' "$work/stanza")"
read -r tar_sha tarball < <(awk '$1=="tarball" {print $2, $3; exit}' "$work/stanza") || true
[ -n "$version" ] && [ -n "$directory" ] && [ -n "${tarball:-}" ] || skip "$suite has no valkey source package"

if [ -x "$dir/bin/valkey-server" ] && [ "$(cat "$dir/VERSION" 2>/dev/null)" = "$version" ]; then
  echo "build-valkey: Valkey $version already built in $dir"
  exit 0
fi
echo "build-valkey: building Valkey $version from $mirror/$directory/$tarball"
fetch "$directory/$tarball" "$work/$tarball" || skip "cannot fetch $tarball"
echo "$tar_sha  $work/$tarball" | sha256sum -c --quiet - || skip "$tarball does not match the Sources index"
mkdir "$work/src"
tar -xf "$work/$tarball" -C "$work/src" --strip-components=1
make -C "$work/src" -j"$(nproc)" BUILD_TLS=no USE_SYSTEMD=no >"$work/build.log" 2>&1 || {
  tail -40 "$work/build.log" >&2
  skip "the build of Valkey $version failed on this machine"
}
rm -rf "$dir/bin" && mkdir -p "$dir/bin"
cp "$work/src/src/valkey-server" "$work/src/src/valkey-cli" "$dir/bin/"
echo "$version" >"$dir/VERSION"
"$dir/bin/valkey-server" --version
