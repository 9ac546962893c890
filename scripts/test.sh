#!/usr/bin/env bash
# The whole test suite: bootstrap what is missing, type-check, lint, run every test, and end
# with one line "N passed, N failed" counted from vitest's JSON report.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh --test || exit 1

status=0
echo "== typecheck"; npx tsc -p tsconfig.json --noEmit || status=1
echo "== lint"; npx biome lint src test scripts lab bin || status=1

mkdir -p .test-results
rm -f .test-results/vitest.json
echo "== tests"
npx vitest run --reporter=default --reporter=json --outputFile.json=.test-results/vitest.json "$@"
vitest_status=$?

node scripts/test-summary.mjs .test-results/vitest.json
summary_status=$?
if [ $vitest_status -ne 0 ] || [ $summary_status -ne 0 ]; then status=1; fi
exit $status
