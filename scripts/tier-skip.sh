#!/usr/bin/env bash
# tier-skip.sh <tier> <what is missing>: called where a tier cannot run. On CI (CI=true), when
# .ci/tiers lists <tier> for this machine's kind (ECHOMQ_MACHINE, else the file's first kind),
# it fails (exit 1), naming what is missing; otherwise it says the tier is skipped (exit 0).
set -euo pipefail
tier="${1:?usage: tier-skip.sh <tier> <what is missing>}"
shift
why="$*"
tiers="$(dirname "$0")/../.ci/tiers"
kind="${ECHOMQ_MACHINE:-$(awk '!/^#/ && NF {print $1; exit}' "$tiers")}"
if [ "${CI:-}" = true ] && awk -v k="$kind" -v t="$tier" '
  !/^#/ && $1 == k { for (i = 2; i <= NF; i++) if ($i == t) has = 1 }
  END { exit !has }' "$tiers"; then
  echo "echomq: the $tier tier cannot run here: $why. CI on a $kind machine must run it (.ci/tiers); failing." >&2
  exit 1
fi
echo "echomq: the $tier tier skipped: $why"
