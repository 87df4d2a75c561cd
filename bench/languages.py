"""Start to first result, per language: the time from a client's
POST /api/kernels to the first output of its first cell over the kernel's
WebSocket, cold (a new sandbox and a new kernel process) and pooled (a warm
kernel of that kernelspec waiting in --pool). Each kernelspec installed
here is measured; a sandboxed glovebox from the build tree serves them.

usage: GLOVEBOX_BUILD=build /usr/bin/python3 bench/languages.py [N]
Prints a Markdown table (median and worst of N runs, seconds) and one JSON
line with every sample."""
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "integration"))
from gbclient import start_gateway  # noqa: E402

# What each language prints as its first result.
CELLS = {
    "python3": "print(6 * 7)",
    "bash": "echo $((6 * 7))",
    "ir": "cat(6 * 7)",
    "javascript": "console.log(6 * 7)",
    "jslab": "console.log(6 * 7)",
    "tslab": "const n: number = 6 * 7; console.log(n)",
}


def first_result(gw, name):
    t0 = time.perf_counter()
    status, model, _ = gw.request("POST", "/api/kernels", {"name": name})
    assert status == 201, model
    ch = gw.connect(model["id"])
    msg_id = ch.send("execute_request", {"code": CELLS[name], "silent": False,
                                         "store_history": True, "user_expressions": {},
                                         "allow_stdin": False})
    while True:
        m = ch.recv(60)
        if m["parent_header"].get("msg_id") == msg_id and m["msg_type"] in (
                "stream", "execute_result", "error"):
            break
    elapsed = time.perf_counter() - t0
    assert m["msg_type"] == "stream" and m["content"]["text"].strip() == "42", m
    ch.close()
    gw.request("DELETE", f"/api/kernels/{model['id']}")
    return elapsed


def pool_ready(gw, name):
    _, body, _ = gw.request("GET", "/api/status")
    return body["pool"]["kernelspecs"].get(name, {}).get("ready", 0)


def measure(names, n, pooled):
    args = []
    for name in names:
        args += ["--pool", f"{name}=1"] if pooled else []
    gw = start_gateway(*args)
    out = {}
    try:
        for name in names:
            samples = []
            for i in range(n + 1):  # the first run warms the page cache
                if pooled:
                    deadline = time.monotonic() + 120
                    while pool_ready(gw, name) < 1:
                        assert time.monotonic() < deadline, f"the {name} pool did not fill"
                        time.sleep(0.05)
                t = first_result(gw, name)
                if i:
                    samples.append(t)
            out[name] = samples
    finally:
        gw.stop()
    return out


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    gw = start_gateway()
    try:
        _, body, _ = gw.request("GET", "/api/kernelspecs")
    finally:
        gw.stop()
    names = [name for name in CELLS if name in body["kernelspecs"]]
    cold = measure(names, n, pooled=False)
    pooled = measure(names, n, pooled=True)
    print(f"| kernelspec | language | cold median | cold worst | pooled median | pooled worst |")
    print("|---|---|---|---|---|---|")
    for name in names:
        language = body["kernelspecs"][name]["spec"]["language"]
        c, p = cold[name], pooled[name]
        print(f"| {name} | {language} | {statistics.median(c):.3f} s | {max(c):.3f} s | "
              f"{statistics.median(p) * 1000:.0f} ms | {max(p) * 1000:.0f} ms |")
    print(json.dumps({"n": n, "cold": cold, "pooled": pooled}))


if __name__ == "__main__":
    main()
