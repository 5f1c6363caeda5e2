#!/usr/bin/env bash
# clang-format (.clang-format at the root) over every C++ and CUDA source in git.
#   scripts/format.sh           rewrites the files in place
#   scripts/format.sh --check   changes nothing; fails, naming the files, if one is not formatted
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if ! command -v clang-format >/dev/null; then
  if [ "$(id -u)" -eq 0 ] && [ "${CHORUS_SKIP_APT:-0}" != 1 ]; then
    apt-get install -y -q --no-install-recommends clang-format >/dev/null 2>&1 ||
      { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends clang-format >/dev/null; }
  else
    echo "format: clang-format is not installed (Debian: apt-get install clang-format)" >&2
    exit 1
  fi
fi
mapfile -t files < <(git ls-files '*.h' '*.cpp' '*.cu' '*.cuh' | grep -v '^tests/goldens/')
if [ "${1:-}" = --check ]; then
  bad=()
  for f in "${files[@]}"; do
    clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
  done
  if [ ${#bad[@]} -gt 0 ]; then
    echo "format: not formatted (run scripts/format.sh): ${bad[*]}" >&2
    exit 1
  fi
  echo "format: ${#files[@]} files formatted ($(clang-format --version))"
else
  clang-format -i "${files[@]}"
fi
