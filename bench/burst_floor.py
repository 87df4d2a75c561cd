"""What a burst of creates costs besides its kernels: N creates at once,
each with its own limits and no pool (one gateway as it runs with
--zygote, its stock of sandboxes drained by the burst), of two kernelspecs
in turn:

- python3: the zygote's IPython kernel, as a user gets it;
- floor: bench/floor_kernel.c, a kernel in C that runs no code (it answers
  every execute_request with the result "floor"), exec'd in its sandbox
  like any kernelspec's program. Its burst is what the same creates cost
  with the least a kernel can do: the client, the gateway, the
  kernel-host, each sandbox and its init, an exec and a ZeroMQ kernel's
  sockets.

For each burst: start to first result p50 and p95, and the machine's CPU
per create (/proc/stat, from the first request to the last result) split
into the client (this process), the gateway, the kernel-host (with the
helpers it reaped), the zygote, the sandboxes' inits, the kernels (a
kernel's process forked ahead into a sandbox of the stock from the burst's
start), and the rest (the kernel's own threads: kworkers, RCU, softirqs;
processes ended meanwhile, such as those forked ahead into sandboxes the
floor kernel took). Rounds alternate the two kinds.

usage: /usr/bin/python3 bench/burst_floor.py [N] [ROUNDS] [GATEWAY FLAG...]   (prints JSON)
  e.g. bench/burst_floor.py 50 3 --sandbox-stock 60: every sandbox made ahead"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
from benchlib import Glovebox  # noqa: E402
from compare import proc_cpu  # noqa: E402
from gbclient import children, cmdline  # noqa: E402

ZYGOTE = "python3:numpy,pandas,matplotlib.pyplot"
LIMITS = {"memory_mb": 768, "pids": 128}
HZ = os.sysconf("SC_CLK_TCK")


def pct(values, p):
    s = sorted(values)
    return s[min(len(s) - 1, int(len(s) * p / 100))]


def floor_kernelspec(root):
    """The floor kernel built into a kernelspec directory of root (which
    every sandbox sees read-only at its path); None when it cannot be."""
    spec = os.path.join(root, "floor")
    os.makedirs(spec)
    os.chmod(root, 0o755)
    os.chmod(spec, 0o755)
    cmd = ["cc", "-O2", "-Wno-deprecated-declarations", "-o", os.path.join(spec, "floor_kernel"),
           os.path.join(HERE, "floor_kernel.c"), "-lzmq", "-ljansson", "-lcrypto"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        print(f"floor kernel not built: {done.stderr.strip()}", file=sys.stderr)
        return None
    with open(os.path.join(spec, "kernel.json"), "w") as f:
        json.dump({"argv": ["{resource_dir}/floor_kernel", "-f", "{connection_file}"],
                   "display_name": "A kernel that runs no code", "language": "floor"}, f)
    return root


def first_result(gb, name):
    """Seconds from the create to its first execute_result, and the id."""
    t0 = time.perf_counter()
    status, model = gb.request("POST", "/api/kernels", {"name": name, "limits": LIMITS})
    if status != 201:
        raise RuntimeError(f"POST /api/kernels ({name}) answered {status}")
    ch = gb.connect(model["id"])
    out = ch.execute("1+1")
    took = time.perf_counter() - t0
    ch.close()
    if not any(m["msg_type"] == "execute_result" for m in out):
        raise RuntimeError(f"{name}: no result: {out}")
    return took, model["id"]


def busy():
    """CPU seconds the machine has run anything (user, nice, system, irq,
    softirq), all cores."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (v[0] + v[1] + v[2] + v[5] + v[6]) / HZ


def tree(pid):
    out = []
    for c in children(pid):
        out += [c] + tree(c)
    return out


def burst(gb, name, n):
    host = next(p for p in children(gb.proc.pid) if b"kernel-host" in cmdline(p))

    def zygotes():
        return sum(proc_cpu(p) for p in children(host) if b"zygote" in cmdline(p))

    def parts():
        t = os.times()
        return {"client": t.user + t.system, "gateway": proc_cpu(gb.proc.pid, children=False),
                "kernel-host": proc_cpu(host), "zygote": zygotes(), "all": busy()}

    barrier = threading.Barrier(n)
    times, kids, failures = [], [], []

    def one():
        barrier.wait()
        try:
            took, kid = first_result(gb, name)
            times.append(took)
            kids.append(kid)
        except Exception as e:  # noqa: BLE001 - counted
            failures.append(repr(e))

    before = set(tree(host))
    # Kernels' processes forked ahead into the stock: those that become
    # kernels in the burst count from here on.
    waiting = {p: proc_cpu(p, children=False) for p in before
               if cmdline(p).startswith(b"glovebox-kernel-ahead")}
    p0 = parts()
    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    p1 = parts()
    # Read while the kernels live: each sandbox's init and its kernel.
    new = [p for p in set(tree(host)) - before if b"zygote" not in cmdline(p)]
    cpu = {k: p1[k] - p0[k] for k in p0}
    cpu["inits"] = sum(proc_cpu(p, children=False) for p in new
                       if b"glovebox-init" in cmdline(p))
    cpu["kernels"] = sum(proc_cpu(p, children=False) for p in new
                         if b"glovebox-init" not in cmdline(p)) + \
        sum(proc_cpu(p, children=False) - spent for p, spent in waiting.items()
            if b"ipykernel" in cmdline(p))
    cpu["rest"] = cpu["all"] - sum(v for k, v in cpu.items() if k != "all")
    for kid in kids:
        gb.delete_kernel(kid)
    per = {k: v / n * 1000 for k, v in cpu.items()}
    res = {"p50_ms": statistics.median(times) * 1000 if times else None,
           "p95_ms": pct(times, 95) * 1000 if times else None,
           "failures": failures, "cpu_ms_per_create": per}
    print(f"  {name}: p50 {res['p50_ms']:.0f} ms, p95 {res['p95_ms']:.0f} ms, "
          f"{len(failures)} failed; CPU per create {per['all']:.1f} ms: "
          + ", ".join(f"{k} {v:.1f}" for k, v in per.items() if k != "all"),
          file=sys.stderr, flush=True)
    return res


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    flags = sys.argv[3:]
    stock = int(flags[flags.index("--sandbox-stock") + 1]) if "--sandbox-stock" in flags else 4
    root = tempfile.mkdtemp(prefix="glovebox-burst-floor-")
    try:
        if floor_kernelspec(root) is None:
            print(json.dumps({"skipped": "the floor kernel could not be built"}))
            return
        gb = Glovebox("--kernelspec-path", root, "--zygote", ZYGOTE, *sys.argv[3:])
        runs = {"floor": [], "python3": []}
        try:
            for name in runs:  # the zygote ready, the stock of that shape made
                gb.delete_kernel(first_result(gb, name)[1])
            for _ in range(rounds):
                for name in runs:
                    # The stock full again (a second per 10 sandboxes made
                    # ahead, one at a time), the machine quiet.
                    time.sleep(3 + stock / 10)
                    runs[name].append(burst(gb, name, n))
        finally:
            gb.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)

    def summary(rs):
        ok = [r for r in rs if r["p95_ms"] is not None]
        return {"p50_ms": statistics.median(r["p50_ms"] for r in ok),
                "p95_ms": statistics.median(r["p95_ms"] for r in ok),
                "cpu_ms_per_create": {k: statistics.median(r["cpu_ms_per_create"][k] for r in ok)
                                      for k in ok[0]["cpu_ms_per_create"]},
                "failures": sum(len(r["failures"]) for r in rs), "bursts": rs}
    print(json.dumps({"n": n, "rounds": rounds, "flags": flags,
                      **{name: summary(rs) for name, rs in runs.items()}}), flush=True)


if __name__ == "__main__":
    main()
