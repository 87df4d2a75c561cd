"""Glovebox against Jupyter Server 1.23.3, side by side in one run, same
machine, same ipykernel, same client code; the floor is the same kernel
talked to over ZMQ directly (jupyter_client). Prints a Markdown table and
writes it, with the raw numbers, to $GLOVEBOX_BUILD/bench/.

usage: /usr/bin/python3 bench/compare.py [--quick] [--only NAME,...]
  NAMES: defaults, kernelcpu, burst, start, e2b, roundtrip, held, stdout, png, concurrent, refill,
         density, cpu, zygote
  --quick: fewer repetitions and a density of 60 (a smoke run)
Environment: BENCH_DENSITY (default 300) sandboxed kernels held at once;
BENCH_ZYGOTE_DENSITY (default 300) zygote kernels with numpy, pandas and
matplotlib imported held at once."""
import argparse
import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "integration"))
from gbclient import children, cmdline  # noqa: E402
from benchlib import (BUILD, DirectKernel, Glovebox, JupyterServer,  # noqa: E402
                      bare_first_result, descendants, pss_kb)

ROWS = []
RAW = {}


def pct(values, p):
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(p / 100 * (len(s) - 1))))]


def ms(x):
    return f"{x * 1000:.1f} ms" if x >= 0.01 else f"{x * 1000:.2f} ms"


def row(measure, gb, js, floor="", ratio=None, note=""):
    ROWS.append((measure, gb, js, floor, ratio, note))
    print(f"  {measure}: Glovebox {gb} | Jupyter Server {js} | floor {floor} "
          f"| ratio {ratio or ''} {note}", flush=True)


def ratio(a, b):
    return f"{a / b:.2f}×" if b else "–"


def log(text):
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


# ---- 1. start to first result -------------------------------------------------

def first_result(server):
    t0 = time.perf_counter()
    kid = server.start_kernel()
    ch = server.connect(kid)
    out = ch.execute("1+1")
    took = time.perf_counter() - t0
    assert any(m["msg_type"] == "execute_result" for m in out), out
    ch.close()
    return took, kid


def bench_start(n):
    log("start to first result")
    gb, js = Glovebox(), JupyterServer()
    cold = {"gb": [], "js": [], "bare": []}
    try:
        for server in (gb, js):  # page cache, imports
            server.delete_kernel(first_result(server)[1])
        for _ in range(n):
            for key, server in (("gb", gb), ("js", js)):
                took, kid = first_result(server)
                cold[key].append(took)
                server.delete_kernel(kid)
            cold["bare"].append(bare_first_result())
    finally:
        gb.stop()
        js.stop()
    warm = []
    gbp = Glovebox(pool=2)
    try:
        for _ in range(n + 1):
            gbp.wait_pool(2)
            took, kid = first_result(gbp)
            warm.append(took)
            gbp.delete_kernel(kid)
        warm = warm[1:]
    finally:
        gbp.stop()
    RAW["start"] = {"cold": cold, "warm": warm}
    med = {k: statistics.median(v) for k, v in cold.items()}
    row("start to first result, cold (p50)", ms(med["gb"]), ms(med["js"]),
        f"bare ipykernel {ms(med['bare'])}", ratio(med["gb"], med["js"]),
        f"Glovebox − bare = {ms(med['gb'] - med['bare'])}")
    row("start to first result, warm pool (p50 / p99)",
        f"{ms(statistics.median(warm))} / {ms(pct(warm, 99))}",
        f"{ms(med['js'])} (no pool)", "", ratio(statistics.median(warm), med["js"]))


# ---- 1b. the E2B Python SDK's first steps ---------------------------------------

SDK = os.environ.get("E2B_PYTHON_SDK",
                     os.path.join(os.path.dirname(__file__), "..", "..", "shared", "e2b-python",
                                  "site"))


def sdk_first_steps(server, n, pool=0):
    """Sandbox.create() and the first run_code(), timed by the SDK's own
    process (bench/e2b_python.py), which needs the SDK first on its path."""
    env = dict(os.environ, PYTHONPATH=os.path.abspath(SDK), E2B_VALIDATE_API_KEY="false")
    cmd = [sys.executable, os.path.join(os.path.dirname(__file__), "e2b_python.py"),
           server.base, server.token, str(n)] + ([str(pool)] if pool else [])
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    if done.returncode:
        raise RuntimeError("bench/e2b_python.py failed: " + done.stderr[-2000:])
    return json.loads(done.stdout)


def bench_e2b(n):
    log("E2B Python SDK: create and first run_code")
    results = {}
    for label, pool in (("cold", 0), ("pool", 2)):
        gb = Glovebox(pool=pool or None)
        try:
            # Glovebox's own API on the same server, in the same run: the
            # path without the SDK.
            direct = []
            for _ in range(n):
                if pool:
                    gb.wait_pool(pool)
                took, kid = first_result(gb)
                direct.append(took)
                gb.delete_kernel(kid)
            results[label] = dict(sdk_first_steps(gb, n, pool), direct=direct)
        finally:
            gb.stop()
    RAW["e2b_python"] = results
    for label, what in (("cold", "no pool"), ("pool", "warm pool of 2")):
        r = results[label]
        create, first = statistics.median(r["create"]), statistics.median(r["first_run"])
        total = [a + b for a, b in zip(r["create"], r["first_run"])]
        row(f"E2B Python SDK: create + first run_code, {what} (p50)",
            f"{ms(create)} + {ms(first)} = {ms(statistics.median(total))}",
            "(no E2B API)", f"REST + WebSocket {ms(statistics.median(r['direct']))}", None,
            f"p95 total {ms(pct(total, 95))}")


# ---- 2. round trip ---------------------------------------------------------------

def with_kernels(fn):
    gb, js = Glovebox(), JupyterServer()
    direct = DirectKernel()
    chans = []
    try:
        targets = {}
        for key, server in (("gb", gb), ("js", js)):
            ch = server.connect(server.start_kernel())
            chans.append(ch)
            targets[key] = ch
        targets["floor"] = direct
        return fn(targets)
    finally:
        for ch in chans:
            ch.close()
        direct.close()
        gb.stop()
        js.stop()



def bench_roundtrip(n):
    log("execute round trip")

    def run(targets):
        times = {k: [] for k in targets}
        for t in targets.values():
            for _ in range(20):
                t.execute("pass")
        for _ in range(n // 50):  # interleaved blocks: all see the same machine
            for key, t in targets.items():
                for _ in range(50):
                    t0 = time.perf_counter()
                    t.execute("pass")
                    times[key].append(time.perf_counter() - t0)
        return times

    times = with_kernels(run)
    RAW["roundtrip"] = times
    p = {k: (statistics.median(v), pct(v, 99)) for k, v in times.items()}
    row("execute round trip, `pass` (p50 / p99)", f"{ms(p['gb'][0])} / {ms(p['gb'][1])}",
        f"{ms(p['js'][0])} / {ms(p['js'][1])}", f"{ms(p['floor'][0])} / {ms(p['floor'][1])}",
        ratio(p["gb"][0], p["js"][0]),
        f"Glovebox − floor = {(p['gb'][0] - p['floor'][0]) * 1000:+.2f} ms")


def bench_roundtrip_held(held, n):
    """The round trip of `pass` on one kernel, alone and with `held` idle
    kernels beside it, Glovebox (zygote kernels, cheap to hold) and
    Jupyter Server in one run: what each idle kernel costs the server's
    turn of its loop."""
    log(f"execute round trip beside {held} idle kernels")
    res = {}
    for key, make in (("gb", lambda: Glovebox("--zygote", ZYGOTE)), ("js", JupyterServer)):
        server = make()
        try:
            ch = server.connect(server.start_kernel())
            try:
                for _ in range(20):
                    ch.execute("pass")

                def timed():
                    times = []
                    c0 = server.cpu_seconds()
                    for _ in range(n):
                        t0 = time.perf_counter()
                        ch.execute("pass")
                        times.append(time.perf_counter() - t0)
                    return statistics.median(times), (server.cpu_seconds() - c0) / n

                alone = timed()
                kids, errors = hold(server, held)
                if errors:
                    raise RuntimeError(f"{server.name}: {len(errors)} kernels failed to start")
                time.sleep(5)
                res[key] = {"alone": alone, "held": timed()}
            finally:
                ch.close()
        finally:
            server.stop()
    RAW["roundtrip_held"] = res
    gb, js = res["gb"], res["js"]
    row(f"execute round trip, `pass`, beside {held} idle kernels (p50; alone)",
        f"{ms(gb['held'][0])}; {ms(gb['alone'][0])}", f"{ms(js['held'][0])}; {ms(js['alone'][0])}",
        "", ratio(gb["held"][0], js["held"][0]),
        f"server CPU per round trip beside them / alone: Glovebox "
        f"{gb['held'][1] * 1e6:.0f} / {gb['alone'][1] * 1e6:.0f} µs, Jupyter Server "
        f"{js['held'][1] * 1e6:.0f} / {js['alone'][1] * 1e6:.0f} µs (10 ms ticks)")


# ---- 3. stdout throughput, 4. a 1 MB PNG ----------------------------------------

STDOUT_CODE = ("import sys\nline = 'x' * 1023 + '\\n'\n"
               "for _ in range({n}):\n    sys.stdout.write(line)\nsys.stdout.flush()")
PNG_SETUP = ("import io, numpy as np, matplotlib\nmatplotlib.use('agg')\n"
             "import matplotlib.image as mpimg\nfrom IPython.display import Image, display\n"
             "buf = io.BytesIO()\n"
             "mpimg.imsave(buf, np.random.default_rng(0).integers(0, 255, (600, 580, 3), "
             "dtype=np.uint8), format='png')\npng = buf.getvalue()\nprint(len(png))")


def bench_stdout(mb, reps):
    log(f"stdout throughput, {mb} MB")
    code = STDOUT_CODE.format(n=mb * 1024)

    def run(targets):
        rates = {k: [] for k in targets}
        for _ in range(reps):
            for key, t in targets.items():
                t0 = time.perf_counter()
                out = t.execute(code)
                took = time.perf_counter() - t0
                got = sum(len(m["content"]["text"]) for m in out if m["msg_type"] == "stream")
                assert got == mb * 1024 * 1024, (key, got)
                rates[key].append(got / took / 1e6)
        return rates

    rates = with_kernels(run)
    RAW["stdout"] = rates
    med = {k: statistics.median(v) for k, v in rates.items()}
    row(f"stdout streaming, {mb} MB (MB/s, p50)", f"{med['gb']:.1f}", f"{med['js']:.1f}",
        f"{med['floor']:.1f}", ratio(med["gb"], med["js"]),
        f"Glovebox = {med['gb'] / med['floor'] * 100:.0f} % of floor")


def bench_png(reps):
    log("1 MB PNG display_data")

    def run(targets):
        times = {k: [] for k in targets}
        for t in targets.values():
            out = t.execute(PNG_SETUP)
            size = int(next(m["content"]["text"] for m in out
                            if m["msg_type"] == "stream" and m["content"]["name"] == "stdout"))
            assert size > 1_000_000, size
        for _ in range(reps):
            for key, t in targets.items():
                t0 = time.perf_counter()
                out = t.execute("display(Image(data=png))")
                times[key].append(time.perf_counter() - t0)
                assert any(len(m["content"].get("data", {}).get("image/png", "")) > 1_300_000
                           for m in out), key
        return times

    times = with_kernels(run)
    RAW["png"] = times
    med = {k: statistics.median(v) for k, v in times.items()}
    row("1 MB PNG display_data delivered (p50)", ms(med["gb"]), ms(med["js"]), ms(med["floor"]),
        ratio(med["gb"], med["js"]))


# ---- 5. concurrent creates -------------------------------------------------------

def concurrent_first_results(server, n, start=first_result):
    """n creates at once, each start(server) -> (seconds, kernel id);
    returns (times, failures) and deletes the kernels."""
    barrier = threading.Barrier(n)
    results, failures, kids = [], [], []

    def one():
        barrier.wait()
        try:
            took, kid = start(server)
            results.append(took)
            kids.append(kid)
        except Exception as e:  # noqa: BLE001 - any failure counts
            failures.append(repr(e))

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for kid in kids:
        server.delete_kernel(kid)
    return results, failures


CONCURRENT_BURSTS = 3


def bench_concurrent(n):
    """n creates at once, each with its own limits, from a full pool of n:
    Glovebox as it runs with no flags (its zygote) but for the pool's size,
    CONCURRENT_BURSTS bursts, each once the pool is full again (the row
    gives the one whose p95 is the median, and every burst's p95); Jupyter
    Server, which has no pool, once."""
    log(f"{n} concurrent session creates from a full pool, {CONCURRENT_BURSTS} bursts")
    gb = Glovebox(pool=n, defaults=True)
    bursts = []
    try:
        for _ in range(CONCURRENT_BURSTS):
            gb.wait_pool(n)
            bursts.append(concurrent_with_limits(gb, n, "1+1"))
    finally:
        gb.stop()
    js = JupyterServer()
    try:
        j, jf = concurrent_with_limits(js, n, "1+1")
    finally:
        js.stop()
    RAW["concurrent"] = {"gb": [b[0] for b in bursts], "gb_failures": [b[1] for b in bursts],
                         "js": j, "js_failures": jf}

    def fmt(v, f):
        return (f"{ms(statistics.median(v))} / {ms(pct(v, 95))}, {len(f)} failed"
                if v else f"all {len(f)} failed")
    done = sorted((b for b in bursts if b[0]), key=lambda b: pct(b[0], 95))
    g, gf = done[len(done) // 2] if done else bursts[0]
    each = ", ".join(ms(pct(b[0], 95)) for b in bursts if b[0])
    row(f"{n} concurrent creates with their own limits to first result (p50 / p95)",
        fmt(g, gf) + f" (pool of {n}, zygote; p95 of each burst: {each})",
        fmt(j, jf), "", ratio(pct(g, 95), pct(j, 95)) if g and j else "–")


# ---- 6. density -----------------------------------------------------------------

def hold(server, n, parallel=4):
    kids, lock, errors = [], threading.Lock(), []

    def starter():
        while True:
            with lock:
                if len(kids) + len(errors) >= n:
                    return
                kids.append(None)
                slot = len(kids) - 1
            try:
                kids[slot] = server.start_kernel()
            except Exception as e:  # noqa: BLE001
                with lock:
                    errors.append(repr(e))

    threads = [threading.Thread(target=starter) for _ in range(parallel)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [k for k in kids if k], errors


def memory_of(server):
    pids = descendants(server.proc.pid)
    return sum(pss_kb(p) for p in pids), server.rss_kb()


def bench_density(n_gb, n_js):
    log(f"density: {n_gb} sandboxed kernels")
    out = {}
    for key, server, n in (("gb", Glovebox(), n_gb), ("js", JupyterServer(), n_js)):
        try:
            rss0 = server.rss_kb()
            t0 = time.perf_counter()
            kids, errors = hold(server, n)
            took = time.perf_counter() - t0
            time.sleep(5)
            total, rss = memory_of(server)
            alive = 0
            for kid in kids:  # every one still answers
                ch = server.connect(kid)
                out_ = ch.execute("1+1")
                alive += any(m["msg_type"] == "execute_result" for m in out_)
                ch.close()
            rss_after = server.rss_kb()
            out[key] = {"n": n, "started": len(kids), "errors": errors, "alive": alive,
                        "seconds": took, "pss_kb": total, "server_rss_kb": rss,
                        "server_rss_per_session_kb": (rss_after - rss0) / max(1, len(kids))}
            log(f"  {server.name}: {alive}/{n} answer; {total / 1024:.0f} MiB PSS in all")
        finally:
            server.stop()
    RAW["density"] = out
    g, j = out["gb"], out["js"]
    per_g, per_j = g["pss_kb"] / max(1, g["alive"]) / 1024, j["pss_kb"] / max(1, j["alive"]) / 1024
    row("idle sessions held (all answering `1+1`)",
        f"{g['alive']} of {g['n']} sandboxed", f"{j['alive']} of {j['n']} (unconfined)", "",
        None, f"24 GiB / PSS per session ≈ {24 * 1024 / per_g:.0f} Glovebox sessions")
    row("memory per idle session (PSS, kernel + sandbox + server share)", f"{per_g:.1f} MiB",
        f"{per_j:.1f} MiB", "", ratio(per_g, per_j))
    row("server RSS per session", f"{g['server_rss_per_session_kb']:.0f} KiB",
        f"{j['server_rss_per_session_kb']:.0f} KiB", "",
        ratio(g["server_rss_per_session_kb"], j["server_rss_per_session_kb"]))


# ---- 6b. zygotes ------------------------------------------------------------------

ZYGOTE = "python3:numpy,pandas,matplotlib.pyplot"
DATA_SCIENCE = "import numpy, pandas, matplotlib.pyplot\n1+1"


def first_result_of(server, code, body=None):
    t0 = time.perf_counter()
    status, model = server.request("POST", "/api/kernels", body or {"name": "python3"})
    if status != 201:
        raise RuntimeError(f"{server.name}: POST /api/kernels answered {status}")
    ch = server.connect(model["id"])
    out = ch.execute(code)
    took = time.perf_counter() - t0
    assert any(m["msg_type"] == "execute_result" for m in out), out
    ch.close()
    return took, model["id"]


def concurrent_with_limits(server, n, code):
    body = {"name": "python3", "limits": {"memory_mb": 768, "pids": 128}}
    return concurrent_first_results(server, n, lambda srv: first_result_of(srv, code, body))


def hold_answering(server, n, code, parallel=4):
    """n kernels that each ran code; returns (kernels answering 1+1 at the
    end, PSS of the server and all its descendants, seconds to start)."""
    t0 = time.perf_counter()
    kids, errors = hold(server, n, parallel)
    for kid in kids:
        ch = server.connect(kid)
        ch.execute(code)
        ch.close()
    took = time.perf_counter() - t0
    time.sleep(5)
    total, _ = memory_of(server)
    alive = 0
    for kid in kids:
        ch = server.connect(kid)
        alive += any(m["msg_type"] == "execute_result" for m in ch.execute("1+1"))
        ch.close()
    return alive, total, took, errors


def bench_zygote(n, conc, density, density_cold):
    """Cold starts (no pool) with and without a zygote of ZYGOTE, beside
    Jupyter Server and a bare ipykernel; creates with per-request limits;
    PSS per idle session that imported numpy, pandas and matplotlib."""
    log(f"zygote ({ZYGOTE}): cold starts, {conc} concurrent creates, {density} sessions")
    res = {"cold": {}, "data_science": {}, "concurrent": {}, "density": {}}
    servers = (("gb", lambda: Glovebox()), ("gbz", lambda: Glovebox("--zygote", ZYGOTE)),
               ("js", lambda: JupyterServer()))
    for key, make in servers:
        server = make()
        try:
            server.delete_kernel(first_result_of(server, DATA_SCIENCE)[1])  # zygote ready
            for label, code in (("cold", "1+1"), ("data_science", DATA_SCIENCE)):
                times = []
                for _ in range(n):
                    took, kid = first_result_of(server, code)
                    times.append(took)
                    server.delete_kernel(kid)
                res[label][key] = times
            if key != "js":
                res["concurrent"][key] = concurrent_with_limits(server, conc, "1+1")
        finally:
            server.stop()
    res["cold"]["bare"] = [bare_first_result() for _ in range(n)]
    for key, make, count in (("gbz", lambda: Glovebox("--zygote", ZYGOTE), density),
                             ("gb", lambda: Glovebox(), density_cold)):
        server = make()
        try:
            alive, pss, took, errors = hold_answering(server, count, DATA_SCIENCE)
            res["density"][key] = {"n": count, "alive": alive, "pss_kb": pss, "seconds": took,
                                   "errors": errors[:5]}
            log(f"  {key}: {alive}/{count} answer, {pss / 1024:.0f} MiB PSS in all, "
                f"{took:.0f} s to start them")
        finally:
            server.stop()
    RAW["zygote"] = res
    c, d = res["cold"], res["data_science"]
    med = {k: statistics.median(v) for k, v in c.items()}
    row("start to first result `1+1`, no pool (p50): zygote / no zygote",
        f"{ms(med['gbz'])} / {ms(med['gb'])}", ms(med["js"]), f"bare ipykernel {ms(med['bare'])}",
        ratio(med["gbz"], med["js"]), f"zygote {ZYGOTE}")
    dm = {k: statistics.median(v) for k, v in d.items()}
    row("start to first result importing numpy+pandas+matplotlib, no pool (p50): "
        "zygote / no zygote", f"{ms(dm['gbz'])} / {ms(dm['gb'])}", ms(dm["js"]), "",
        ratio(dm["gbz"], dm["js"]))
    cz, cg = res["concurrent"]["gbz"], res["concurrent"]["gb"]

    def fmt(v, f):
        return (f"{ms(statistics.median(v))} / {ms(pct(v, 95))}, {len(f)} failed"
                if v else f"all {len(f)} failed")
    row(f"{conc} concurrent creates with per-request limits, no pool (p50 / p95)",
        f"zygote {fmt(*cz)}; no zygote {fmt(*cg)}", "–", "", None)
    dz, dg = res["density"]["gbz"], res["density"]["gb"]
    per_z = dz["pss_kb"] / max(1, dz["alive"]) / 1024
    per_g = dg["pss_kb"] / max(1, dg["alive"]) / 1024
    row("PSS per idle session that imported numpy+pandas+matplotlib: zygote / no zygote",
        f"{per_z:.1f} MiB ({dz['alive']} of {dz['n']} answering) / {per_g:.1f} MiB "
        f"({dg['alive']} of {dg['n']})", "", "", ratio(per_z, per_g),
        f"24 GiB / {per_z:.1f} MiB ≈ {24 * 1024 / per_z:.0f} sessions (extrapolated)")


# ---- 7. gateway CPU per relayed message -----------------------------------------

def print_messages(n):
    return f"for i in range({n}):\n    print(i, flush=True)"


def relay_cpu(server, n):
    ch = server.connect(server.start_kernel())
    try:
        ch.execute(print_messages(100))
        c0 = server.cpu_seconds()
        out = ch.execute(print_messages(n))
        c1 = server.cpu_seconds()
    finally:
        ch.close()
    msgs = sum(1 for m in out if m["msg_type"] == "stream") + 4  # + input, reply, 2 statuses
    return (c1 - c0) / msgs, msgs


def callgrind_instructions(n):
    """Total instructions of a gateway that relays one cell printing n
    lines (started, cell run, stopped), under callgrind."""
    out = os.path.join(BUILD, "bench", f"callgrind.{n}.out")
    gb = Glovebox(runner=["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"])
    try:
        ch = gb.connect(gb.start_kernel())
        got = ch.execute(print_messages(n))
        ch.close()
    finally:
        gb.stop()
    with open(out) as f:
        totals = re.search(r"^(?:totals|summary): (\d+)", f.read(), re.M)
    return int(totals.group(1)), sum(1 for m in got if m["msg_type"] == "stream")


def bench_cpu(n):
    log(f"gateway CPU per relayed message ({n} messages)")
    per = {}
    for key, server in (("gb", Glovebox()), ("js", JupyterServer())):
        try:
            per[key], msgs = relay_cpu(server, n)
        finally:
            server.stop()
    i1, m1 = callgrind_instructions(n // 10)
    i2, m2 = callgrind_instructions(n)
    per_msg = (i2 - i1) / (m2 - m1)
    RAW["cpu"] = {"seconds_per_message": per, "callgrind": [[i1, m1], [i2, m2]]}
    row("server CPU per relayed message", f"{per['gb'] * 1e6:.1f} µs",
        f"{per['js'] * 1e6:.1f} µs", "", ratio(per["gb"], per["js"]),
        f"callgrind: {per_msg:,.0f} instructions per message in the gateway")


# ---- CPU per kernel, request to first result ----------------------------------


def proc_cpu(pid, children=True):
    """CPU seconds of pid: its threads' run time to the nanosecond
    (schedstat), and, with children, the user + system time of the children
    it reaped (clock ticks: only that is kept of them)."""
    total = 0.0
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0]) / 1e9
        if children:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        pass
    return total


def gb_kernel_cpu(server, n, stock=0):
    """CPU seconds per kernel from request to first result, everything but
    the gateway: the kernel-host (and its reaped helpers), its zygotes, and
    each sandbox's init and kernel (read at the first result, before the
    kernel goes). Serial, one kernel at a time; the mean of n, and the
    means of its parts: the kernel-host and zygotes, the sandbox's init,
    the kernel. With a stock (--sandbox-stock), each request finds it full
    and claims a sandbox made ahead, with its kernel's process forked ahead
    into it, whose making is not in the request's path: it is measured
    apart (ahead: the kernel-host's and zygotes' CPU from the first result
    until the stock is full again, and the new sandbox's init and process
    forked ahead, one per request; until 2026-12-06's night it also added
    what the process that became the kernel had spent before the request,
    which counted each waiting process twice)."""
    host = next(p for p in children(server.proc.pid) if b"kernel-host" in cmdline(p))

    def host_side():
        zygotes = [p for p in children(host) if b"zygote" in cmdline(p)]
        return proc_cpu(host) + sum(proc_cpu(p) for p in zygotes)

    def tree(pid):
        out = []
        for c in children(pid):
            out += [c] + tree(c)
        return out

    def forked_ahead(pid):
        return cmdline(pid).startswith(b"glovebox-kernel-ahead")

    def stocked():
        """The inits of sandboxes made ahead: nothing in them but (where
        the stock forks them) a kernel's process forked ahead."""
        return [p for p in children(host) if b"glovebox-init" in cmdline(p)
                and all(forked_ahead(c) for c in children(p))]

    def stock_full():
        """Each of the stock's sandboxes made, and where the stock forks
        kernels ahead (any of them has one), each with its process: the
        zygote forks it after the kernel-host has made the sandbox."""
        deadline = time.time() + 30
        while True:
            made = stocked()
            with_process = [p for p in made if children(p)]
            if len(made) >= stock and len(with_process) in (0, len(made)):
                break
            if time.time() > deadline:
                raise RuntimeError("the stock of sandboxes did not fill")
            time.sleep(0.01)
        time.sleep(0.1)

    parts = {"host": 0.0, "init": 0.0, "kernel": 0.0, "ahead": 0.0}
    for _ in range(n):
        stock_full()
        before = set(tree(host))
        waiting = {p: proc_cpu(p, children=False) for p in before if forked_ahead(p)}
        h0 = host_side()
        _, kid = first_result(server)
        # At once: listing the processes takes long enough for the stock's
        # refill to begin meanwhile (100 ms after the last request).
        h1 = host_side()
        parts["host"] += h1 - h0
        # Whatever is new under the kernel-host: the sandbox's init, the
        # kernel (init's child, or elsewhere in older layouts), helpers;
        # or the process forked ahead that became the kernel.
        now = set(tree(host))
        new = [p for p in now - before if b"zygote" not in cmdline(p)]
        for p in new:
            init = b"glovebox-init" in cmdline(p)
            # An init with nothing in it but a process forked ahead, and
            # such a process, are a sandbox made ahead meanwhile.
            made_ahead = forked_ahead(p) or (init and all(forked_ahead(c) for c in children(p)))
            part = "ahead" if made_ahead else "init" if init else "kernel"
            parts[part] += proc_cpu(p, children=False)
        # What the process that became the kernel spent before the request
        # (its after-fork work, its copies) was counted as made ahead when
        # it was new, below, in an earlier round: not again here.
        for p, spent in waiting.items():
            if p in now and not forked_ahead(p):
                parts["kernel"] += proc_cpu(p, children=False) - spent
        # The kernel's sandbox, whose init's CPU (the kernel's with it) the
        # kernel-host's count of its reaped children takes once it is
        # reaped: waited for below, before the next request.
        inits = [p for p in children(host) if b"glovebox-init" in cmdline(p)
                 and not all(forked_ahead(c) for c in children(p))]
        if stock:
            stock_full()
            parts["ahead"] += host_side() - h1
            made = set(stocked())
            parts["ahead"] += sum(proc_cpu(p, children=False) for p in tree(host)
                                  if p not in before and p not in new
                                  and (p in made or forked_ahead(p)))
        server.delete_kernel(kid)
        deadline = time.time() + 30
        while any(os.path.exists(f"/proc/{p}") for p in inits) and time.time() < deadline:
            time.sleep(0.01)
    parts = {k: v / n for k, v in parts.items()}
    return sum(v for k, v in parts.items() if k != "ahead"), parts


def js_kernel_cpu(server, n):
    """The same for Jupyter Server: the server process and its kernel."""
    total = 0.0
    for _ in range(n):
        before = set(children(server.proc.pid))
        s0 = proc_cpu(server.proc.pid, children=False)
        _, kid = first_result(server)
        kernels = set(children(server.proc.pid)) - before
        total += (proc_cpu(server.proc.pid, children=False) - s0 +
                  sum(proc_cpu(k) for k in kernels))
        server.delete_kernel(kid)
    return total / n


def kernel_floor(n):
    """bench/kernel_floor.py: five kernels forked from the zygote's imports,
    outside any sandbox, from ipykernel's whole start to the floor, a loop
    with no framework."""
    out = subprocess.run(["/usr/bin/python3", os.path.join(os.path.dirname(__file__),
                                                           "kernel_floor.py"), str(n)],
                         capture_output=True, text=True, timeout=600, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench_kernel_cpu(n):
    """The headline that does not depend on the machine's load: CPU spent
    per kernel from request to first result, cold and from a zygote, beside
    Jupyter Server's (server and kernel) and the floor: a kernel loop with
    no framework forked from the zygote's imports (bench/kernel_floor.py)."""
    log("CPU per kernel, request to first result")
    res = {}
    stock = 4
    for key, make in (("gb", lambda: Glovebox("--sandbox-stock", "0")),
                      ("gbz", lambda: Glovebox("--zygote", ZYGOTE, "--sandbox-stock", "0")),
                      ("gbzs", lambda: Glovebox("--zygote", ZYGOTE, "--sandbox-stock", str(stock))),
                      ("js", lambda: JupyterServer())):
        server = make()
        try:
            # The page cache, the zygote ready; with a stock, its first
            # processes forked ahead (before the zygote had its list of the
            # pages a start writes: kernel-host/zygote_pages.h) used up.
            for _ in range(stock + 2 if key == "gbzs" else 1):
                server.delete_kernel(first_result(server)[1])
            if key == "js":
                res[key] = js_kernel_cpu(server, n)
            else:
                res[key] = gb_kernel_cpu(server, n, stock if key == "gbzs" else 0)
        finally:
            server.stop()
    res["floor"] = kernel_floor(n)
    RAW["kernel_cpu"] = res
    (gbz, parts), (gb, _), (gbzs, sparts) = res["gbz"], res["gb"], res["gbzs"]
    floor = res["floor"]
    row("CPU per kernel, request to first result (mean): zygote / no zygote",
        f"{ms(gbz)} / {ms(gb)}", ms(res["js"]),
        f"kernel loop without a framework {ms(floor['lean']['cpu'])}"
        + (f", in C {ms(floor['c-loop']['cpu'])}" if "c-loop" in floor else ""),
        ratio(gbz, res["js"]),
        f"zygote: kernel-host and zygote {ms(parts['host'])}, the sandbox's init "
        f"{ms(parts['init'])}, the kernel {ms(parts['kernel'])}; forked from the zygote's "
        f"imports outside a sandbox (bench/kernel_floor.py): ipykernel's start "
        f"{ms(floor['ipykernel']['cpu'])}, the zygote's kernel in its own loop "
        f"{ms(floor['zygote']['cpu'])} (without its C wire {ms(floor['zygote-session']['cpu'])}, "
        f"in ipykernel's application {ms(floor['zygote-application']['cpu'])}), "
        f"ipykernel's application and kernel prebuilt {ms(floor['prebuilt']['cpu'])}; "
        "Jupyter Server: server and kernel; sandboxes made each on request (--sandbox-stock 0)")
    row("the same with sandboxes made ahead (--sandbox-stock 4, the default): in the "
        "request's path / made ahead", f"{ms(gbzs)} / {ms(sparts['ahead'])}", ms(res["js"]),
        "", ratio(gbzs, res["js"]),
        f"in the request's path: kernel-host and zygote {ms(sparts['host'])}, a sandbox's "
        f"init made for it {ms(sparts['init'])}, the kernel {ms(sparts['kernel'])}; made "
        "ahead, once the link is quiet: the kernel-host's and zygote's CPU until the stock is "
        "full again, the new sandbox's init and kernel's process forked ahead (its copies of "
        "the pages a start writes with it)")


def bench_burst(n, rounds):
    """bench/burst_floor.py: n creates at once with their own limits and no
    pool, of the zygote's kernel and of a kernel that runs no code (in C),
    in turn: what a burst costs besides its kernels; with the default stock
    of sandboxes made ahead (4), and with one as large as the burst (each
    sandbox with its kernel's process forked ahead)."""
    RAW["burst"] = {}
    for label, flags in (("default stock", []),
                         (f"--sandbox-stock {n + 10}", ["--sandbox-stock", str(n + 10)])):
        log(f"{n} concurrent creates, own limits, no pool, {label}, beside a kernel that "
            "runs no code")
        out = subprocess.run(["/usr/bin/python3",
                              os.path.join(os.path.dirname(__file__), "burst_floor.py"), str(n),
                              str(rounds), *flags],
                             capture_output=True, text=True, timeout=1800, check=True)
        res = json.loads(out.stdout.strip().splitlines()[-1])
        RAW["burst"][label] = res
        if "skipped" in res:
            log(f"  skipped: {res['skipped']}")
            return
        z, f = res["python3"], res["floor"]

        def cpu(r):
            c = r["cpu_ms_per_create"]
            return (f"{c['all']:.1f} ms of CPU per create: client {c['client']:.1f}, gateway "
                    f"{c['gateway']:.1f}, kernel-host {c['kernel-host']:.1f}, zygote "
                    f"{c['zygote']:.1f}, inits {c['inits']:.1f}, kernels {c['kernels']:.1f}")
        row(f"{n} concurrent creates with per-request limits, no pool, {label} (p50 / p95, "
            f"median of {rounds} bursts)", f"{ms(z['p50_ms'] / 1000)} / "
            f"{ms(z['p95_ms'] / 1000)}, {z['failures']} failed", "–",
            f"a kernel that runs no code: {ms(f['p50_ms'] / 1000)} / {ms(f['p95_ms'] / 1000)}",
            None, f"zygote kernel: {cpu(z)}; the kernel that runs no code "
            f"(bench/floor_kernel.c): {cpu(f)}")


def bench_refill(n, rounds):
    """bench/pool_refill.py: a CPU-bound cell of about 2 s in a kernel of
    its own, on a quiet gateway and while the pool starts n kernels behind
    it (pooled sandboxes wait at the least CPU weight until handed out);
    medians of rounds."""
    import pool_refill
    log(f"a CPU-bound cell while the pool refills {n} kernels")
    quiet, busy = pool_refill.rounds_of(BUILD, n, rounds)
    RAW["refill"] = {"n": n, "rounds": rounds, "quiet_s": quiet, "refilling_s": busy}
    row(f"a CPU-bound cell (about 2 s) while the pool refills {n} kernels (median of {rounds})",
        f"{busy:.2f} s against {quiet:.2f} s quiet", "(no pool)", "", None,
        f"{busy / quiet:.2f}× its time on a quiet gateway")


FIRST_PLOT = ("import matplotlib.pyplot as plt\n"
              "plt.plot([1, 4, 9, 16]); plt.title('first plot'); plt.show()")


def first_plot(server):
    """Seconds from a fresh kernel's first plot cell sent to its PNG."""
    kid = server.start_kernel()
    ch = server.connect(kid)
    try:
        t0 = time.perf_counter()
        out = ch.execute(FIRST_PLOT)
        took = time.perf_counter() - t0
        assert any("image/png" in m["content"].get("data", {}) for m in out), out
    finally:
        ch.close()
        server.delete_kernel(kid)
    return took


def bench_defaults(n):
    """Glovebox with no flags (as root: a zygote of numpy, pandas and
    matplotlib.pyplot and a pool of 2), beside Jupyter Server."""
    log("with no flags")
    own = {"name": "python3", "env": {"BENCH_OWN": "1"}, "limits": {"memory_mb": 1024}}
    gb, js = Glovebox(defaults=True), JupyterServer()
    res = {"own": [], "pooled": [], "plot": [], "js_plot": [], "js_start": []}
    try:
        gb.wait_pool(2)
        gb.delete_kernel(first_result_of(gb, "1+1", own)[1])  # page cache
        js.delete_kernel(first_result(js)[1])
        for _ in range(n):
            took, kid = first_result_of(gb, "1+1", own)
            res["own"].append(took)
            gb.delete_kernel(kid)
            gb.wait_pool(2)
            took, kid = first_result(gb)
            res["pooled"].append(took)
            gb.delete_kernel(kid)
            took, kid = first_result(js)
            res["js_start"].append(took)
            js.delete_kernel(kid)
            gb.wait_pool(2)
            res["plot"].append(first_plot(gb))
            res["js_plot"].append(first_plot(js))
        gb.wait_pool(2)
        res["sdk"] = sdk_first_steps(gb, n, 2)
    finally:
        gb.stop()
        js.stop()
    RAW["defaults"] = res
    med = {k: statistics.median(v) for k, v in res.items() if k != "sdk"}
    total = [a + b for a, b in zip(res["sdk"]["create"], res["sdk"]["first_run"])]
    row("no flags: start to first result, the request's own env and limits (p50)",
        ms(med["own"]), ms(med["js_start"]), "", ratio(med["own"], med["js_start"]),
        "a pooled kernel, given them as it is claimed")
    row("no flags: start to first result from the pool (p50)", ms(med["pooled"]),
        ms(med["js_start"]), "", ratio(med["pooled"], med["js_start"]), "")
    row("no flags: E2B Python SDK create + first run_code (p50 / p95)",
        f"{ms(statistics.median(total))} / {ms(pct(total, 95))}", "(no E2B API)", "", None, "")
    row("no flags: first matplotlib plot in a fresh kernel, cell to PNG (p50)", ms(med["plot"]),
        ms(med["js_plot"]), "", ratio(med["plot"], med["js_plot"]),
        "pyplot imported by the zygote")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only",
                    default="defaults,kernelcpu,burst,start,e2b,roundtrip,held,stdout,png,"
                    "concurrent,refill,density,cpu,zygote")
    args = ap.parse_args()
    only = set(args.only.split(","))
    q = args.quick
    density = int(os.environ.get("BENCH_DENSITY", "60" if q else "300"))
    os.makedirs(os.path.join(BUILD, "bench"), exist_ok=True)
    started = time.time()
    steps = [("defaults", lambda: bench_defaults(3 if q else 10)),
             ("kernelcpu", lambda: bench_kernel_cpu(5 if q else 20)),
             ("burst", lambda: bench_burst(10 if q else 50, 1 if q else 3)),
             ("start", lambda: bench_start(3 if q else 10)),
             ("e2b", lambda: bench_e2b(3 if q else 10)),
             ("roundtrip", lambda: bench_roundtrip(100 if q else 500)),
             ("held", lambda: bench_roundtrip_held(20 if q else 100, 100 if q else 300)),
             ("stdout", lambda: bench_stdout(10 if q else 50, 1 if q else 3)),
             ("png", lambda: bench_png(5 if q else 30)),
             ("concurrent", lambda: bench_concurrent(10 if q else 50)),
             ("refill", lambda: bench_refill(5 if q else 20, 1 if q else 3)),
             ("density", lambda: bench_density(density, 10 if q else 20)),
             ("cpu", lambda: bench_cpu(2000 if q else 20000)),
             ("zygote", lambda: bench_zygote(3 if q else 10, 10 if q else 50,
                                             int(os.environ.get("BENCH_ZYGOTE_DENSITY",
                                                                "20" if q else "300")),
                                             5 if q else 20))]
    for name, fn in steps:
        if name in only:
            fn()
    date = datetime.date.today().isoformat()
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                if l.startswith("model name")), platform.processor())
    lines = [f"Measured {date} on {os.cpu_count()} cores ({cpu}), "
             f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB, "
             f"Debian ipykernel 6.17, Jupyter Server 1.23.3 (IOPub rate limits off); "
             f"Glovebox kernels sandboxed{' (quick run)' if q else ''}; "
             f"{time.time() - started:.0f} s in all.", "",
             "| Measure | Glovebox | Jupyter Server | Floor | Glovebox / Jupyter Server | Note |",
             "|---|---|---|---|---|---|"]
    for measure, gb, js, floor, r, note in ROWS:
        lines.append(f"| {measure} | {gb} | {js} | {floor} | {r or ''} | {note} |")
    table = "\n".join(lines)
    print("\n" + table)
    with open(os.path.join(BUILD, "bench", "results.md"), "w") as f:
        f.write(table + "\n")
    with open(os.path.join(BUILD, "bench", "results.json"), "w") as f:
        json.dump({"date": date, "rows": ROWS, "raw": RAW}, f, indent=1)


if __name__ == "__main__":
    main()
