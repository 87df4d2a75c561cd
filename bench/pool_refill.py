"""A CPU-bound cell while the warm pool refills: its time on a quiet
gateway against its time while the pool starts N kernels (default 20)
behind it, side by side in one run (issue 26's target: at most 1.1x).
Pooled sandboxes run with the least CPU weight until handed out
(HOSTMSG_SANDBOX_PRIORITY); a second build given as PEER (a build without
it, e.g. main's before) runs the same rounds for comparison.

Each round: a kernel outside the pool (its own env) runs the cell once on
the quiet gateway (pool full), then the pool's N kernels are taken, and
the cell runs again at once while N new ones start (the taken ones are
shut down after it).
Median of ROUNDS (default 3).

Run: /usr/bin/python3 bench/pool_refill.py [N] [ROUNDS] [PEER_BUILD]"""
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "integration"))
import gbclient  # noqa: E402

# About two seconds of one core here; the same code in every round.
CELL = "sum(i * i for i in range(44_000_000))"


def pool_status(gw):
    code, body, _ = gw.request("GET", "/api/status")
    assert code == 200, body
    return body["pool"]["kernelspecs"]["python3"]


def wait_full(gw, n, timeout=600):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pool_status(gw)["ready"] >= n:
            return
        time.sleep(0.2)
    raise RuntimeError(f"the pool never filled: {pool_status(gw)}")


def timed_cell(ch):
    t0 = time.monotonic()
    reply, _ = ch.execute(CELL, timeout=120)
    assert reply["content"]["status"] == "ok", reply
    return time.monotonic() - t0


def rounds_of(build, n, rounds):
    gw = gbclient.Gateway(os.path.abspath(os.path.join(build, "glovebox")),
                          ["--pool", f"python3={n}", "--max-kernels", str(4 * n + 8)])
    quiet, busy = [], []
    try:
        wait_full(gw, n)
        # Its own env: a kernel of its own, never one of the pool's.
        code, model, _ = gw.request("POST", "/api/kernels", {"name": "python3",
                                                              "env": {"BENCH": "1"}})
        assert code == 201, model
        ch = gw.connect(model["id"])
        timed_cell(ch)  # warm: the first cell of a kernel costs more
        for _ in range(rounds):
            wait_full(gw, n)
            time.sleep(1)
            quiet.append(timed_cell(ch))
            taken = []
            for _ in range(n):
                code, k, _ = gw.request("POST", "/api/kernels", {"name": "python3"})
                assert code == 201, k
                taken.append(k["id"])
            # The cell runs while the pool starts n new ones; the taken ones
            # go after it (their ends are not the refill's cost).
            busy.append(timed_cell(ch))
            for kid in taken:
                gw.request("DELETE", f"/api/kernels/{kid}")
        ch.close()
    finally:
        gw.stop()
    return statistics.median(quiet), statistics.median(busy)


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    builds = [("this build", os.environ.get("GLOVEBOX_BUILD", gbclient.BUILD))]
    if len(sys.argv) > 3:
        builds.append(("peer", sys.argv[3]))
    print(f"| build | cell, quiet (s) | cell while {n} refill (s) | ratio |")
    print("|---|---|---|---|")
    for name, build in builds:
        quiet, busy = rounds_of(build, n, rounds)
        print(f"| {name} | {quiet:.2f} | {busy:.2f} | {busy / quiet:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
