#!/usr/bin/python3
"""What scripts/test's suites did, from their result files, and which tests
they skipped, with why.

    results.py count SUITE KIND SKIPS FILE...
        Prints "PASSED FAILED SKIPPED" for one suite and appends each of its
        skipped tests to the file SKIPS, one a line: SUITE, TEST, REASON
        (tab-separated). KIND is pytest (pytest's JUnit XML), node (node's
        junit test reporter) or automake (make check's output, whose
        "SKIP: test N desc # SKIP reason" lines it reads; its counts come
        from test-suite.log, so it prints none). A file that cannot be read
        counts as one failure.
    results.py report SKIPS [--strict]
        Prints every skipped test of SKIPS by suite, each with its reason, and
        whether EXPECTED lists it; the last line is "SKIPS_RESULT skipped=N
        unexpected=M". --strict (CI): a skipped test EXPECTED does not list, or
        a line of EXPECTED that is not "SUITE TEST-GLOB REASON", is unexpected,
        and the exit status is 1 when any is.

EXPECTED is tests/expected-skips (or $GLOVEBOX_EXPECTED_SKIPS): the tests
that may skip in CI, each with why, as tests/e2b-upstream/expected-failures
lists failures. A whole suite that could not run is recorded as the test
"<suite>".
"""
import os
import re
import sys
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
EXPECTED = os.environ.get("GLOVEBOX_EXPECTED_SKIPS", os.path.join(HERE, "expected-skips"))


def glob_match(test, pattern):
    """* and ? match as in a shell; every other character, [ and ] of a
    parametrized test's name too, stands for itself."""
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, test, re.S) is not None


def one_line(text):
    return " ".join((text or "").split())[:300]


def junit_cases(path, kind):
    """(test id, outcome, reason) for each test case of a JUnit XML file."""
    root = ET.parse(path).getroot()

    def walk(node, suites):
        for child in node:
            if child.tag == "testsuite":
                # node's reporter nests a describe()'s tests in a testsuite of
                # its name; pytest's one testsuite is the run itself.
                yield from walk(child, suites + [child.get("name")] if kind == "node" else suites)
            elif child.tag == "testcase":
                if kind == "node":
                    test = " > ".join(suites + [child.get("name") or "?"])
                else:
                    test = f"{child.get('classname')}::{child.get('name')}"
                bad = child.find("failure")
                if bad is None:
                    bad = child.find("error")
                skipped = child.find("skipped")
                if bad is not None:
                    yield test, "failed", ""
                elif skipped is not None:
                    yield test, "skipped", one_line(skipped.get("message") or skipped.text)
                else:
                    yield test, "passed", ""

    yield from walk(root, [])


def automake_skips(path):
    """(test id, reason) for each SKIP line of make check's output."""
    with open(path, errors="replace") as f:
        for line in f:
            m = re.match(r"^SKIP: (\S+)(?: (\d+))?(.*?)(?: # SKIP(.*))?$", line.rstrip("\n"))
            if m:
                test = m.group(1) + (f" {m.group(2)}" if m.group(2) else "")
                yield test, one_line(m.group(4) or m.group(3) or "(no reason given)")


def count(suite, kind, skips_file, files):
    passed = failed = 0
    skipped = []
    for path in files:
        try:
            if kind == "automake":
                skipped += list(automake_skips(path))
                continue
            for test, outcome, reason in junit_cases(path, kind):
                if outcome == "passed":
                    passed += 1
                elif outcome == "failed":
                    failed += 1
                else:
                    skipped.append((test, reason or "(no reason given)"))
        except (OSError, ET.ParseError) as e:
            print(f"{suite}: no results in {path}: {e}", file=sys.stderr)
            failed += 1
    with open(skips_file, "a") as out:
        for test, reason in skipped:
            out.write(f"{suite}\t{test}\t{reason}\n")
    if kind != "automake":
        print(passed, failed, len(skipped))
    return 0


def read_expected(path):
    """([(suite, glob, reason)], [problem lines])."""
    entries, problems = [], []
    try:
        with open(path) as f:
            lines = f.readlines()
    except OSError as e:
        return [], [f"!! {path}: {e}"]
    for n, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(None, 2)
        if len(parts) < 3:
            problems.append(f"!! {path}:{n}: want 'SUITE TEST-GLOB REASON': {line}")
            continue
        entries.append(tuple(parts))
    return entries, problems


def report(skips_file, strict):
    rows = []
    try:
        with open(skips_file) as f:
            for line in f:
                parts = line.rstrip("\n").split("\t", 2)
                if len(parts) == 3:
                    rows.append(parts)
    except FileNotFoundError:
        pass
    expected, problems = read_expected(EXPECTED)
    unexpected = list(problems) if strict else []
    for line in problems:
        print(line)
    if rows:
        print(f"skipped tests ({len(rows)}), by suite, with why:")
    width = max([len(r[0]) for r in rows] + [8])
    for suite, test, reason in rows:
        why = next((e[2] for e in expected
                    if e[0] == suite and glob_match(test, e[1])), None)
        mark = "  "
        if why is None and strict:
            mark = "!!"
            unexpected.append(f"{suite} {test}")
        print(f"{mark} {suite:<{width}} {test}: {reason}")
        if why is None:
            print(f"   {'':<{width}} (not in {os.path.relpath(EXPECTED)})")
    if strict and unexpected:
        print(f"!! {len(unexpected)} skipped test(s) or lines of {os.path.relpath(EXPECTED)} "
              "not expected in CI: make each run here, or list it there with why")
    print(f"SKIPS_RESULT skipped={len(rows)} unexpected={len(unexpected)}")
    return 1 if unexpected else 0


def main(argv):
    if len(argv) >= 5 and argv[1] == "count" and argv[3] in ("pytest", "node", "automake"):
        return count(argv[2], argv[3], argv[4], argv[5:])
    if len(argv) in (3, 4) and argv[1] == "report" and argv[3:] in ([], ["--strict"]):
        return report(argv[2], argv[3:] == ["--strict"])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
