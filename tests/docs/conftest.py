import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

from mdlib import EXAMPLES  # noqa: E402


def pytest_terminal_summary(terminalreporter):
    if not EXAMPLES:
        return
    count = {}
    for _, _, outcome, _ in EXAMPLES:
        count[outcome] = count.get(outcome, 0) + 1
    tr = terminalreporter
    tr.write_sep("-", "examples of README.md and docs/")
    tr.write_line(", ".join(f"{n} {outcome}" for outcome, n in sorted(count.items())))
    for page, line, outcome, why in EXAMPLES:
        if outcome != "run":
            tr.write_line(f"  {outcome}: {page}:{line}: {why}")
