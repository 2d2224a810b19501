#!/usr/bin/env bash
# Lints deploy/*.sh, tests/deploy/*.sh, scripts/gpu_check*.sh and tests/cli/*.sh with shellcheck
# (every severity, following `source`).
# Without shellcheck it says so and exits 77, which CTest reports as skipped; scripts/setup.sh
# installs it, so that only happens on machines set up otherwise.
# Prints "N passed, M failed" (one per script); exits non-zero when any script has findings.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
if ! command -v shellcheck >/dev/null 2>&1; then
  echo "SKIP: shellcheck is not installed (scripts/setup.sh installs it)"
  exit 77
fi
shellcheck --version | sed -n 's/^version: /shellcheck /p'
passed=0
failed=0
for f in "$root"/deploy/*.sh "$root"/tests/deploy/*.sh "$root"/scripts/gpu_check*.sh \
  "$root"/tests/cli/*.sh; do
  if shellcheck -x "$f"; then
    passed=$((passed + 1))
    echo "PASS ${f#"$root"/}"
  else
    failed=$((failed + 1))
    echo "FAIL ${f#"$root"/}"
  fi
done
echo "$passed passed, $failed failed"
((failed == 0 && passed > 0))
