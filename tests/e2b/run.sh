#!/usr/bin/env bash
# Runs the E2B SDK test against a glovebox it starts itself.
# GLOVEBOX_BUILD names the build directory (default /work/main/build).
# Ends with "E2B_RESULT passed=N failed=M"; exits non-zero on any failure.
set -u -o pipefail
cd "$(dirname "$0")" || exit 2

# npm ci only when node_modules is missing or older than the lock file.
stamp=node_modules/.package-lock.json
if [ ! -f "$stamp" ] || [ package-lock.json -nt "$stamp" ] || [ package.json -nt "$stamp" ]; then
        if ! npm ci --no-audit --no-fund; then
                echo "E2B_RESULT passed=0 failed=1"
                exit 1
        fi
fi

log=$(mktemp)
trap 'rm -f "$log"' EXIT
timeout --kill-after=5 170 node --test-reporter=spec e2b.test.mjs 2>&1 | tee "$log"
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
echo "E2B_RESULT passed=$passed failed=$failed"
exit "$rc"
