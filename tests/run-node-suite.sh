#!/usr/bin/env bash
# Runs one Node test suite (tests/node, tests/e2b, tests/browser): installs
# its locked npm packages when missing or stale, runs its test file (which
# starts its own glovebox) with node's test runner, and ends with
# "NODE_SUITE_RESULT passed=N failed=M"; exits non-zero on any failure.
# usage: run-node-suite.sh DIR TEST_FILE [SECONDS]
# GLOVEBOX_BUILD names the build directory (default: ../build from here);
# NODE_SUITE_JUNIT=FILE also writes node's JUnit XML there (scripts/test reads
# the skipped tests and their reasons from it).
set -u -o pipefail
dir=$1 file=$2 seconds=${3:-170}
cd "$(dirname "$0")/$dir" || exit 2

# npm ci only when node_modules is missing or older than the lock file.
stamp=node_modules/.package-lock.json
if [ ! -f "$stamp" ] || [ package-lock.json -nt "$stamp" ] || [ package.json -nt "$stamp" ]; then
        if ! npm ci --no-audit --no-fund; then
                echo "NODE_SUITE_RESULT passed=0 failed=1"
                exit 1
        fi
fi

log=$(mktemp)
trap 'rm -f "$log"' EXIT
reporters=(--test-reporter=spec --test-reporter-destination=stdout)
[ -n "${NODE_SUITE_JUNIT:-}" ] &&
        reporters+=(--test-reporter=junit "--test-reporter-destination=$NODE_SUITE_JUNIT")
timeout --kill-after=5 "$seconds" node "${reporters[@]}" "$file" 2>&1 | tee "$log"
rc=$?
# The spec reporter's summary lines: "ℹ pass N", "ℹ fail N".
passed=$(sed -n 's/^ℹ pass \([0-9][0-9]*\)$/\1/p' "$log" | tail -n 1)
failed=$(sed -n 's/^ℹ fail \([0-9][0-9]*\)$/\1/p' "$log" | tail -n 1)
if [ -z "$passed" ] || [ -z "$failed" ]; then
        # No summary: the runner died or timed out.
        passed=${passed:-0}
        failed=${failed:-1}
        [ "$failed" -gt 0 ] || failed=1
fi
if [ "$rc" -eq 0 ] && [ "$failed" -gt 0 ]; then
        rc=1
fi
if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then
        failed=1
fi
echo "NODE_SUITE_RESULT passed=$passed failed=$failed"
exit "$rc"
