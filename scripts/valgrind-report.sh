#!/usr/bin/env bash
# Reads the memcheck logs of `make test-valgrind` and fails on any error or leak whose stack
# passes through the module (libechomq). The server's own reports are listed, not judged.
set -euo pipefail
dir="${1:-${ECHOMQ_VALGRIND_DIR:-/tmp/echomq-valgrind}}"
shopt -s nullglob
logs=("$dir"/valgrind-*.log)
[ ${#logs[@]} -gt 0 ] || { echo "valgrind: no logs in $dir" >&2; exit 1; }
ours=0
for log in "${logs[@]}"; do
  # A record is a block of lines starting at "==pid== <kind>" and ending at a blank "==pid== ".
  found=$(awk '
    /== (Invalid|Conditional|Use of uninitialised|Mismatched|Syscall param|Source and destination)/ { rec=1; buf=$0; next }
    /== [0-9,]+ (\(.*\) )?bytes in [0-9,]+ blocks are (definitely|indirectly) lost/ { rec=1; buf=$0; next }
    rec && /==[0-9]+== $/ { if (buf ~ /libechomq/) print "RECORD " buf; rec=0; buf=""; next }
    rec { buf = buf "\n" $0 }' "$log")
  if [ -n "$found" ]; then
    printf '%s: %s\n' "$log" "$found" >&2
  fi
  n=$(printf '%s' "$found" | grep -c '^RECORD' || true)
  ours=$((ours + n))
done
summaries=$(grep -h "ERROR SUMMARY" "${logs[@]}" | sort | uniq -c)
echo "valgrind: ${#logs[@]} server processes checked"
echo "$summaries"
if [ "$ours" -gt 0 ]; then
  echo "valgrind: errors or leaks attributable to the module (see above)" >&2
  exit 1
fi
echo "valgrind: nothing attributable to the module"
printf '%s\n' "the last \`make test-valgrind\` ($(date -u +%Y-%m-%d)) ran ${#logs[@]} valkey-server processes under memcheck through the integration suites; no invalid access and no definite or indirect leak has a stack through the module." > "$dir/summary.txt"
