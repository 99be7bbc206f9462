# Sourced by scripts that fetch from Debian's archive: `debian_mirror <codename>` prints the
# Debian mirror this machine's apt already uses for that suite (deb822 or one-line sources),
# or nothing. EchoMQ never names a mirror of its own.
debian_mirror() {
  local codename="$1" f uri
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    uri=$(awk '/^URIs:/{u=$2} /^Suites:/{ if ($0 ~ /(^| )'"$codename"'( |$)/ && u!="") {print u; exit} }' "$f")
    [ -n "$uri" ] && { echo "$uri"; return; }
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    uri=$(awk '$1=="deb" { for (i=2;i<=NF;i++) if ($i !~ /^\[/ ) { if ($(i+1)=="'"$codename"'") {print $i; exit} break } }' "$f")
    [ -n "$uri" ] && { echo "$uri"; return; }
  done
}
