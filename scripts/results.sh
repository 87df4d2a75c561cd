# Sourced by scripts/test (after lib.sh, with PY set): each suite's counts,
# its skipped tests with why (tests/results.py reads the result files), and
# the summary at the end. STRICT_SKIPS=1 (--ci): a skipped test that
# tests/expected-skips does not list is a failure.

PASSED=0
FAILED=0
SKIPPED=0
SUMMARY=()
FAILURE_NOTES=()

# Every skipped test of this run, one a line: suite, test, why.
SKIPS_FILE=$BUILD/skipped-tests.tsv
mkdir -p "$BUILD" && : >"$SKIPS_FILE"

# A suite that could not run on this host at all, with why.
skip() { # name reason
    printf '%s\t<%s>\t%s\n' "$1" "$1" "$2" >>"$SKIPS_FILE"
    SKIPPED=$((SKIPPED + 1))
    SUMMARY+=("$(printf '%-12s skipped: %s' "$1" "$2")")
}

record() { # name passed failed [skipped]
    local p=$2 f=$3 s=${4:-0}
    # A suite that ran nothing proved nothing (a missing tool, an install
    # that failed, every test skipped): it fails.
    if [ "$p" -eq 0 ] && [ "$f" -eq 0 ]; then
        f=1
        FAILURE_NOTES+=("!! $1: no test ran and passed ($s skipped): a suite that runs nothing fails")
    fi
    PASSED=$((PASSED + p))
    FAILED=$((FAILED + f))
    SKIPPED=$((SKIPPED + s))
    local skips=""
    [ "$s" -ne 0 ] && skips=", $s skipped"
    SUMMARY+=("$(printf '%-12s %4d passed, %d failed%s' "$1" "$p" "$f" "$skips")")
}

# Sets R_PASSED, R_FAILED and R_SKIPPED from a suite's result files and adds
# its skipped tests to SKIPS_FILE. KIND: pytest, node or automake.
results() { # name kind file...
    local name=$1 kind=$2
    shift 2
    read -r R_PASSED R_FAILED R_SKIPPED < <("$PY" "$ROOT/tests/results.py" count \
        "$name" "$kind" "$SKIPS_FILE" "$@")
    R_PASSED=${R_PASSED:-0} R_FAILED=${R_FAILED:-1} R_SKIPPED=${R_SKIPPED:-0}
}

# Prints the skipped tests by suite, with why; with --ci, each one
# tests/expected-skips does not list counts as a failure.
report_skips() {
    local out unexpected
    out=$("$PY" "$ROOT/tests/results.py" report "$SKIPS_FILE" ${STRICT_SKIPS:+--strict})
    grep -v '^SKIPS_RESULT' <<<"$out"
    unexpected=$(sed -n 's/^SKIPS_RESULT .*unexpected=\([0-9]*\).*/\1/p' <<<"$out")
    [ -z "$unexpected" ] && unexpected=1
    FAILED=$((FAILED + unexpected))
    [ "$unexpected" -ne 0 ] && SUMMARY+=("$(printf '%-12s %4d unexpected skips (--ci: see above)' \
        skips "$unexpected")")
}

# The failed tests in a JUnit XML file, each with the start of its message,
# for the end of the log where a log cut to its tail still shows them.
junit_failures() {
    "$PY" - "$1" <<'PYEOF'
import sys, xml.etree.ElementTree as ET
try:
    root = ET.parse(sys.argv[1]).getroot()
except Exception as e:
    print("!! unreadable JUnit file %s: %s" % (sys.argv[1], e)); sys.exit()
for case in root.iter("testcase"):
    for bad in list(case.findall("failure")) + list(case.findall("error")):
        text = (bad.get("message") or "") + "\n" + (bad.text or "")
        lines = [l for l in text.splitlines() if l.strip()]
        print("!! %s::%s" % (case.get("classname"), case.get("name")))
        for l in lines[:3] + ["..."] + lines[-12:] if len(lines) > 15 else lines:
            print("   " + l[:300])
PYEOF
}

# Prints the failures' notes, the skipped tests, one line per suite and
# "N passed, M failed, K skipped" last; fails when anything failed.
finish() {
    local note
    for note in "${FAILURE_NOTES[@]}"; do
        printf '%s\n' "$note"
    done
    report_skips
    printf '%s\n' "${SUMMARY[@]}"
    echo "$PASSED passed, $FAILED failed, $SKIPPED skipped"
    [ "$FAILED" -eq 0 ]
}
