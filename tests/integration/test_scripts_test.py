"""scripts/test's account of a run (issue 25, item 22): every skipped test is
printed with its suite and why, a suite that ran nothing fails, and with --ci
(.ci/run) a skipped test tests/expected-skips does not list fails the run.
These drive scripts/results.sh, the functions scripts/test sums its suites
with, on result files that real pytest and node runs wrote."""
import os
import re
import shutil
import subprocess
import tempfile

import pytest

ROOT = os.path.realpath(os.path.join(os.path.dirname(__file__), "..", ".."))


@pytest.fixture
def work():
    d = tempfile.mkdtemp(prefix="glovebox-results-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def pytest_junit(work, body):
    """The JUnit XML of a real pytest run of a test file holding body."""
    with open(os.path.join(work, "test_demo.py"), "w") as f:
        f.write("import pytest\n\n" + body)
    xml = os.path.join(work, "junit.xml")
    subprocess.run(["/usr/bin/python3", "-m", "pytest", "-q", "-p", "no:cacheprovider",
                    f"--junitxml={xml}", "test_demo.py"], cwd=work,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
    return xml


def sum_up(work, script, strict=False, expected=None):
    """Runs script after sourcing scripts/results.sh as scripts/test does,
    then finish: (exit status, output)."""
    env = dict(os.environ, ROOT=ROOT, BUILD=work, PY="/usr/bin/python3",
               STRICT_SKIPS="1" if strict else "")
    if expected is not None:
        path = os.path.join(work, "expected-skips")
        with open(path, "w") as f:
            f.write(expected)
        env["GLOVEBOX_EXPECTED_SKIPS"] = path
    run = subprocess.run(["bash", "-c", 'set -uo pipefail; . "$ROOT/scripts/results.sh"\n'
                          + script + "\nfinish"], env=env, cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    return run.returncode, run.stderr + run.stdout


def last_line(out):
    return out.strip().splitlines()[-1]


SKIPS_ALL = '''
def test_one():
    pytest.skip("needs a tool this host lacks")

@pytest.mark.skipif(True, reason="not on this kernel")
def test_two():
    pass
'''

ONE_OF_EACH = '''
def test_runs():
    assert True

def test_skips():
    pytest.skip("needs a tool this host lacks")
'''


def test_a_suite_whose_every_test_skipped_fails_and_says_why(work):
    xml = pytest_junit(work, SKIPS_ALL)
    rc, out = sum_up(work, f'results demo pytest "{xml}"\n'
                     'record demo "$R_PASSED" "$R_FAILED" "$R_SKIPPED"')
    assert rc != 0, out
    assert "demo: no test ran and passed (2 skipped)" in out, out
    assert re.search(r"demo +test_demo::test_one: needs a tool this host lacks", out), out
    assert re.search(r"demo +test_demo::test_two: not on this kernel", out), out
    assert last_line(out) == "0 passed, 1 failed, 2 skipped", out


def test_a_suite_without_a_result_file_fails(work):
    rc, out = sum_up(work, f'results demo pytest "{work}/none.xml"\n'
                     'record demo "$R_PASSED" "$R_FAILED" "$R_SKIPPED"')
    assert rc != 0, out
    assert last_line(out) == "0 passed, 1 failed, 0 skipped", out


def test_skips_are_printed_with_why_and_counted(work):
    xml = pytest_junit(work, ONE_OF_EACH)
    rc, out = sum_up(work, f'results demo pytest "{xml}"\n'
                     'record demo "$R_PASSED" "$R_FAILED" "$R_SKIPPED"')
    assert rc == 0, out
    assert re.search(r"demo +test_demo::test_skips: needs a tool this host lacks", out), out
    assert re.search(r"^demo +1 passed, 0 failed, 1 skipped$", out, re.M), out
    assert last_line(out) == "1 passed, 0 failed, 1 skipped", out


def test_in_ci_a_skip_not_listed_fails_and_a_listed_one_does_not(work):
    xml = pytest_junit(work, ONE_OF_EACH)
    script = (f'results demo pytest "{xml}"\n'
              'record demo "$R_PASSED" "$R_FAILED" "$R_SKIPPED"')
    rc, out = sum_up(work, script, strict=True, expected="")
    assert rc != 0, out
    assert re.search(r"^!! demo +test_demo::test_skips: needs a tool", out, re.M), out
    assert last_line(out) == "1 passed, 1 failed, 1 skipped", out

    listed = "# why it may skip\ndemo  test_demo::test_sk*  the tool is not in CI\n"
    rc, out = sum_up(work, script, strict=True, expected=listed)
    assert rc == 0, out
    assert last_line(out) == "1 passed, 0 failed, 1 skipped", out
    # Outside CI the skip is printed all the same, and fails nothing.
    rc, out = sum_up(work, script, expected="")
    assert rc == 0 and "test_demo::test_skips: needs a tool" in out, out


def test_in_ci_a_malformed_expected_line_fails(work):
    xml = pytest_junit(work, ONE_OF_EACH)
    rc, out = sum_up(work, f'results demo pytest "{xml}"\n'
                     'record demo "$R_PASSED" "$R_FAILED" "$R_SKIPPED"',
                     strict=True, expected="demo  test_demo::test_sk*  not in CI\ndemo lonely\n")
    assert rc != 0 and "want 'SUITE TEST-GLOB REASON'" in out, out


def test_a_whole_suite_skipped_is_a_skip_ci_must_expect(work):
    rc, out = sum_up(work, 'skip uml "this kernel cannot boot the guest"', strict=True,
                     expected="")
    assert rc != 0 and re.search(r"!! uml +<uml>: this kernel cannot boot", out), out


def test_node_tests_skipped_are_read_from_nodes_junit_reporter(work):
    node = shutil.which("node")
    assert node, "scripts/test installs nodejs"
    with open(os.path.join(work, "demo.test.mjs"), "w") as f:
        f.write("import test, { describe } from 'node:test';\n"
                "test('runs', () => {});\n"
                "test('skips', (t) => { t.skip('kernelspec tslab is not installed'); });\n"
                "describe('group', () => { test('inner', { skip: 'not here' }, () => {}); });\n")
    xml = os.path.join(work, "node.xml")
    subprocess.run([node, "--test-reporter=junit", f"--test-reporter-destination={xml}",
                    "demo.test.mjs"], cwd=work, stdout=subprocess.DEVNULL, timeout=120)
    rc, out = sum_up(work, f'results demo node "{xml}"\n'
                     'record demo 1 0 "$R_SKIPPED"')
    assert rc == 0, out
    assert re.search(r"demo +skips: kernelspec tslab is not installed", out), out
    assert re.search(r"demo +group > inner: not here", out), out
    assert last_line(out) == "1 passed, 0 failed, 2 skipped", out


def test_make_checks_skips_are_read_from_its_output(work):
    log = os.path.join(work, "unit-output.log")
    with open(log, "w") as f:
        f.write("PASS: tests/unit/test-a 1 - fine\n"
                "SKIP: tests/unit/test-b 2 - loop devices # SKIP needs /dev/loop-control\n")
    rc, out = sum_up(work, f'results unit automake "{log}"\nrecord unit 1 0 1')
    assert rc == 0, out
    assert re.search(r"unit +tests/unit/test-b 2: needs /dev/loop-control", out), out


def test_the_expected_skips_file_reads_and_names_suites_scripts_test_runs(work):
    rc, out = sum_up(work, "", strict=True)
    assert rc == 0, out
    with open(os.path.join(ROOT, "scripts", "test")) as f:
        suites = re.search(r'^SUITES=\$\{SUITES:-"([^"]*)"\}', f.read(), re.M).group(1).split()
    with open(os.path.join(ROOT, "tests", "expected-skips")) as f:
        named = [line.split()[0] for line in f if line.strip() and not line.startswith("#")]
    assert named and set(named) <= set(suites), (named, suites)
