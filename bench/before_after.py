"""Two builds of Glovebox side by side in one run, interleaved: a change's
before and after (a refactor must leave them within noise). Measures the
execute round trip, stdout streaming, the start to first result from a
warm pool and the CPU a kernel from a zygote costs up to its first result,
each on both builds in alternating blocks, so both see the same machine at
the same time.

usage: /usr/bin/python3 bench/before_after.py BEFORE_BUILD AFTER_BUILD [--quick]
Prints a Markdown table: medians (and p99 of the round trip), and the
after/before ratio."""
import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
import benchlib  # noqa: E402
from benchlib import Glovebox  # noqa: E402
from compare import ZYGOTE, first_result, gb_kernel_cpu  # noqa: E402


class Build(Glovebox):
    """A Glovebox of a given build directory."""

    def __init__(self, build, *args, pool=None):
        saved = benchlib.BUILD
        benchlib.BUILD = build
        # Two gateways at once: a state directory each.
        self.state = tempfile.mkdtemp(prefix="bench-state-")
        try:
            super().__init__("--state-dir", self.state, *args, pool=pool)
        finally:
            benchlib.BUILD = saved

    def stop(self):
        super().stop()
        shutil.rmtree(self.state, ignore_errors=True)


def pct(values, p):
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(p / 100 * (len(s) - 1))))]


def roundtrips(chans, blocks):
    times = {k: [] for k in chans}
    for ch in chans.values():
        for _ in range(20):
            ch.execute("pass")
    for _ in range(blocks):
        for key, ch in chans.items():
            for _ in range(50):
                t0 = time.perf_counter()
                ch.execute("pass")
                times[key].append(time.perf_counter() - t0)
    return times


STDOUT = ("import sys\nline = 'x' * 1023 + '\\n'\n"
          "for _ in range(8 * 1024):\n    sys.stdout.write(line)\nsys.stdout.flush()")


def stdout_rates(chans, reps):
    rates = {k: [] for k in chans}
    for _ in range(reps):
        for key, ch in chans.items():
            t0 = time.perf_counter()
            out = ch.execute(STDOUT)
            took = time.perf_counter() - t0
            got = sum(len(m["content"]["text"]) for m in out if m["msg_type"] == "stream")
            assert got == 8 * 1024 * 1024, (key, got)
            rates[key].append(got / took / 1e6)
    return rates


def warm_starts(servers, reps):
    took = {k: [] for k in servers}
    for _ in range(reps):
        for key, server in servers.items():
            server.wait_pool(2)
            t0 = time.perf_counter()
            kid = server.start_kernel()
            ch = server.connect(kid)
            out = ch.execute("1+1")
            took[key].append(time.perf_counter() - t0)
            assert any(m["msg_type"] == "execute_result" for m in out), out
            ch.close()
            server.delete_kernel(kid)
    return took


def row(measure, values, fmt):
    """A table row: fmt(build, median) of each build's values, then the
    ratio of the medians, after / before."""
    med = {k: statistics.median(v) for k, v in values.items()}
    return (measure, *(fmt(k, med[k]) for k in ("before", "after")),
            f"{med['after'] / med['before']:.2f}×")


def in_ms(_, seconds):
    return f"{seconds * 1000:.1f} ms"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    builds = {"before": os.path.abspath(args.before), "after": os.path.abspath(args.after)}
    rows = []

    servers = {k: Build(b) for k, b in builds.items()}
    try:
        chans = {k: s.connect(s.start_kernel()) for k, s in servers.items()}
        rt = roundtrips(chans, 4 if args.quick else 20)
        rates = stdout_rates(chans, 3 if args.quick else 10)
        for ch in chans.values():
            ch.close()
    finally:
        for s in servers.values():
            s.stop()
    rows.append(row("execute round trip, `pass` (p50 / p99)", rt,
                    lambda k, m: f"{m * 1000:.2f} / {pct(rt[k], 99) * 1000:.2f} ms"))
    rows.append(row("stdout streaming, 8 MB (MB/s, p50)", rates, lambda k, m: f"{m:.1f}"))

    servers = {k: Build(b, pool=2) for k, b in builds.items()}
    try:
        took = warm_starts(servers, 5 if args.quick else 20)
    finally:
        for s in servers.values():
            s.stop()
    rows.append(row("start to first result from a warm pool (p50)", took, in_ms))

    servers = {k: Build(b, "--zygote", ZYGOTE) for k, b in builds.items()}
    try:
        for server in servers.values():
            server.delete_kernel(first_result(server)[1])  # page cache
        cpu = {k: [] for k in builds}
        for _ in range(2 if args.quick else 6):
            for key, server in servers.items():
                cpu[key].append(gb_kernel_cpu(server, 5)[0])
    finally:
        for s in servers.values():
            s.stop()
    rows.append(row("CPU per kernel from a zygote, request to first result (median of means of 5)",
                    cpu, in_ms))

    print(f"\n| measure | before ({builds['before']}) | after ({builds['after']}) | after/before |")
    print("|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")


if __name__ == "__main__":
    main()
