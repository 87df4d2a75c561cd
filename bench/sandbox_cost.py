"""Sandbox cost: kernel start time with and without the sandbox (median of
N starts each, interleaved so both see the same machine), and memory per
idle sandboxed kernel. Run: /usr/bin/python3 bench/sandbox_cost.py [N]"""
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "integration"))
from gbclient import start_gateway  # noqa: E402
from benchlib import descendants, pss_kb  # noqa: E402


def timed_start(gw):
    t = time.perf_counter()
    kid = gw.start_kernel()
    elapsed = time.perf_counter() - t
    gw.request("DELETE", f"/api/kernels/{kid}")
    return elapsed


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    sandboxed, bare = start_gateway(), start_gateway("--sandbox=none")
    try:
        for gw in (sandboxed, bare):  # warm the page cache once
            timed_start(gw)
        times = {"sandbox": [], "none": []}
        for _ in range(n):
            times["sandbox"].append(timed_start(sandboxed))
            times["none"].append(timed_start(bare))
        med = {k: statistics.median(v) * 1000 for k, v in times.items()}
        print(f"kernel start (POST /api/kernels until ready), median of {n}:")
        print(f"  sandboxed   {med['sandbox']:7.1f} ms")
        print(f"  --sandbox=none {med['none']:4.1f} ms")
        print(f"  sandbox overhead {med['sandbox'] - med['none']:+.1f} ms")

        kids = [sandboxed.start_kernel() for _ in range(10)]
        time.sleep(2)
        host = [p for p in descendants(sandboxed.proc.pid) if p != sandboxed.proc.pid]
        total_pss = sum(pss_kb(p) for p in host)
        cg_bytes = 0
        for root, dirs, files in os.walk("/sys/fs/cgroup/memory"):
            if os.path.basename(root) in kids and "memory.usage_in_bytes" in files:
                with open(os.path.join(root, "memory.usage_in_bytes")) as f:
                    cg_bytes += int(f.read())
        print("memory per idle sandboxed kernel (10 kernels):")
        print(f"  PSS of the sandbox processes  {total_pss / 10 / 1024:6.1f} MiB")
        if cg_bytes:
            print(f"  memory cgroup usage           {cg_bytes / 10 / 2**20:6.1f} MiB")
        for kid in kids:
            sandboxed.request("DELETE", f"/api/kernels/{kid}")
    finally:
        sandboxed.stop()
        bare.stop()


if __name__ == "__main__":
    main()
