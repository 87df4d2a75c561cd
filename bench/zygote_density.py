"""Holds as many idle zygote kernels as memory allows (up to N), each having
imported numpy, pandas and matplotlib, and reports how many answer `1+1`
at the end and their PSS (kernels, sandboxes, zygote, gateway). Stops
starting kernels when MemAvailable falls below a floor, so that a shared
machine is never pushed into its OOM killer.

usage: GLOVEBOX_BUILD=build /usr/bin/python3 bench/zygote_density.py N [FLOOR_MIB]"""
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
from benchlib import Glovebox, descendants, pss_kb  # noqa: E402

CODE = "import numpy, pandas, matplotlib.pyplot\n1+1"


def available_mib():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) // 1024
    return 0


def main():
    n = int(sys.argv[1])
    floor = int(sys.argv[2]) if len(sys.argv) > 2 else 6144
    server = Glovebox("--zygote", "python3:numpy,pandas,matplotlib.pyplot")
    kids, lock, stop = [], threading.Lock(), threading.Event()
    t0 = time.perf_counter()

    def starter():
        while not stop.is_set():
            with lock:
                if len(kids) >= n:
                    return
                kids.append(None)
                slot = len(kids) - 1
            if available_mib() < floor:
                stop.set()
                return
            try:
                kid = server.start_kernel()
                ch = server.connect(kid)
                ch.execute(CODE)
                ch.close()
                kids[slot] = kid
            except Exception as e:  # noqa: BLE001
                print("start failed:", repr(e), file=sys.stderr)

    try:
        threads = [threading.Thread(target=starter) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        took = time.perf_counter() - t0
        held = [k for k in kids if k]
        time.sleep(5)
        pss = sum(pss_kb(p) for p in descendants(server.proc.pid))
        alive, failures = 0, []
        for kid in held:
            try:
                ch = server.connect(kid)
                alive += any(m["msg_type"] == "execute_result" for m in ch.execute("1+1"))
                ch.close()
            except Exception as e:  # noqa: BLE001 - counted, and the first ones shown
                failures.append(f"{kid[:8]}: {e!r}")
        out = {"asked": n, "held": len(held), "alive": alive, "pss_mib": pss / 1024,
               "pss_per_session_mib": pss / 1024 / max(1, alive), "seconds": took,
               "stopped_by_memory_floor": stop.is_set(), "available_mib_at_end": available_mib(),
               "failures": failures[:5], "gateway_alive": server.proc.poll() is None}
        print(json.dumps(out))
    finally:
        server.stop()
        server.log.seek(0)
        log = server.log.read().decode(errors="replace").splitlines()
        keep = [line for line in log if (" warn " in line or " error " in line) and
                "cannot ask for sandbox" not in line]
        print("\n".join(keep[:40]), file=sys.stderr)


if __name__ == "__main__":
    main()
