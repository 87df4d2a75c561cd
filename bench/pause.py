"""Pause and resume time of an E2B sandbox holding MiB of files in
/home/user (default 100), against E2B's published ~4 s per GiB to pause and
~1 s to resume. Median of N rounds (default 3); each round pauses
(POST /e2b/sandboxes/{id}/pause until its 204) and resumes
(POST .../connect until its 201, the kernel ready and the files back).
Run: /usr/bin/python3 bench/pause.py [MiB] [N]"""
import json
import os
import statistics
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "integration"))
from gbclient import start_gateway  # noqa: E402


def call(gw, method, path, body=None, headers=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(gw.base + path, data=data, method=method)
    req.add_header("X-API-Key", gw.token)
    req.add_header("Content-Type", "application/json")
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    with urllib.request.urlopen(req, timeout=600) as resp:
        text = resp.read()
        return resp.status, (json.loads(text) if text else None)


def run_code(gw, sandbox, code):
    headers = {"E2b-Sandbox-Id": sandbox["sandboxID"], "E2b-Sandbox-Port": "49999",
               "X-Access-Token": sandbox["envdAccessToken"]}
    req = urllib.request.Request(gw.base + "/e2b/execute", method="POST",
                                 data=json.dumps({"code": code}).encode())
    for k, v in dict(headers, **{"Content-Type": "application/json"}).items():
        req.add_header(k, v)
    with urllib.request.urlopen(req, timeout=600) as resp:
        lines = [json.loads(line) for line in resp.read().splitlines() if line.strip()]
    errors = [m for m in lines if m.get("type") == "error"]
    if errors:
        raise RuntimeError(errors[0])
    return [m for m in lines if m.get("type") == "result"]


def main():
    mib = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    state = tempfile.mkdtemp(prefix="bench-pause-")
    gw = start_gateway("--state-dir", state)
    pauses, resumes = [], []
    try:
        _, sbx = call(gw, "POST", "/e2b/sandboxes", {"timeout": 3600})
        # Incompressible files, ten of them, as an agent's downloads would be.
        run_code(gw, sbx, f"import os\nfor i in range(10):\n"
                          f"    open(f'/home/user/blob{{i}}', 'wb').write(os.urandom({mib} * 104858))")
        for _ in range(rounds):
            t = time.perf_counter()
            call(gw, "POST", f"/e2b/sandboxes/{sbx['sandboxID']}/pause", {"memory": False})
            pauses.append(time.perf_counter() - t)
            t = time.perf_counter()
            call(gw, "POST", f"/e2b/sandboxes/{sbx['sandboxID']}/connect", {"timeout": 3600})
            resumes.append(time.perf_counter() - t)
        sizes = run_code(gw, sbx,
                         "import os\nsum(os.path.getsize(f'/home/user/blob{i}') for i in range(10))")
        kept = int(sizes[0]["text"])
        call(gw, "DELETE", f"/e2b/sandboxes/{sbx['sandboxID']}")
    finally:
        gw.stop()
    pause, resume = statistics.median(pauses), statistics.median(resumes)
    gib = mib / 1024
    print(f"pause and resume of a sandbox with {mib} MiB of files in /home/user, "
          f"median of {rounds} (files back after each: {kept} bytes)")
    print(f"  pause   {pause * 1000:8.0f} ms  ({pause / gib:5.2f} s per GiB; E2B publishes ~4 s per GiB)")
    print(f"  resume  {resume * 1000:8.0f} ms  (E2B publishes ~1 s)")
    print("  (files only: the kernel's memory is not kept)")


if __name__ == "__main__":
    main()
