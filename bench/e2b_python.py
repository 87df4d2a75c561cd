"""The E2B Python SDK's first steps against a Glovebox: Sandbox.create(),
then the first run_code() answered, each timed, N times in a row.

usage: PYTHONPATH=<the SDK's site/> /usr/bin/python3 bench/e2b_python.py URL KEY N [POOL]
With POOL, waits before each create until the warm pool holds POOL kernels.
Prints one JSON object: {"create": [s...], "first_run": [s...]}. bench/compare.py
runs it against Glovebox with and without a warm pool."""
import json
import os
import sys
import time
import urllib.request


def pool_ready(url, key):
    req = urllib.request.Request(f"{url}/api/status", headers={"Authorization": f"token {key}"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.load(resp)["pool"]["kernelspecs"]["python3"]["ready"]


def wait_pool(url, key, n, timeout=300):
    deadline = time.monotonic() + timeout
    while pool_ready(url, key) < n:
        if time.monotonic() > deadline:
            raise RuntimeError("the pool did not fill")
        time.sleep(0.1)


def main():
    url, key, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    pool = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    os.environ.update(E2B_API_URL=f"{url}/e2b", E2B_SANDBOX_URL=f"{url}/e2b", E2B_API_KEY=key)
    from e2b_code_interpreter import Sandbox

    out = {"create": [], "first_run": []}
    for i in range(n + 1):  # the first round warms imports and the page cache
        if pool:
            wait_pool(url, key, pool)
        t0 = time.perf_counter()
        sbx = Sandbox.create()
        t1 = time.perf_counter()
        text = sbx.run_code("1 + 1").text
        t2 = time.perf_counter()
        assert text == "2", text
        sbx.kill()
        if i:
            out["create"].append(t1 - t0)
            out["first_run"].append(t2 - t1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
