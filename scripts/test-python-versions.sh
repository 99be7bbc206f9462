#!/usr/bin/env bash
# The Python client's suite on the oldest Python it declares, 3.9, in a venv of its own under
# target/ (the package and its test tools from PyPI): redis-py 7.0, the newest for 3.9, where the
# 3.11 of make test has 8.2. 3.10 (redis-py 8.1) is not run, to keep CI under 45 minutes. An interpreter is python3.X
# on PATH, or one of pyenv's versions ($PYENV_ROOT, else ~/.pyenv, pyenv on PATH or not):
# Debian 12's own python3 is 3.11 (make test), and its archive has neither. A version with no
# interpreter is skipped, saying so, except on CI where .ci/tiers says the machine has it.
set -euo pipefail
cd "$(dirname "$0")/.."
module="${ECHOMQ_MODULE:-$PWD/target/release/libechomq.so}"

find_python() {
  local v="$1" p
  if p="$(command -v "python$v" 2>/dev/null)" && "$p" -c 'import sys' >/dev/null 2>&1; then
    echo "$p"; return 0
  fi
  local root="${PYENV_ROOT:-${HOME:-}/.pyenv}"
  command -v pyenv >/dev/null 2>&1 && root="$(pyenv root)"
  for p in "$root"/versions/"$v".*/bin/python; do
    [ -x "$p" ] && "$p" -c 'import sys' >/dev/null 2>&1 && { echo "$p"; return 0; }
  done
  return 1
}

for v in 3.9; do
  if ! python="$(find_python "$v")"; then
    bash scripts/tier-skip.sh python-versions "no Python $v here (python$v on PATH, or pyenv's versions in ${PYENV_ROOT:-${HOME:-}/.pyenv})"
    continue
  fi
  venv="target/py$v"
  if [ ! -e "$venv/.installed" ] || [ clients/python/pyproject.toml -nt "$venv/.installed" ]; then
    rm -rf "$venv"
    "$python" -m venv "$venv"
    "$venv/bin/pip" install --quiet --upgrade pip
    "$venv/bin/pip" install --quiet -e 'clients/python[dev]'
    touch "$venv/.installed"
  fi
  echo "echomq: the Python client's tests on $("$venv/bin/python" --version)"
  (cd clients/python && ECHOMQ_MODULE="$module" "../../$venv/bin/pytest" -q tests)
done
