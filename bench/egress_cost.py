"""What egress costs a sandbox's start: kernel starts (POST /api/kernels
until ready) without and with {"network": true}, interleaved, median of N
each, and the kernel-host's own time for the network (veth pair, nft
table, resolver), from its log. Needs root, nftables and dnsmasq-base; the
"internet" is tests/sandbox/testnet.py's network namespaces.
Run: /usr/bin/python3 bench/egress_cost.py [N]"""
import os
import re
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "sandbox"))
from gbclient import start_gateway  # noqa: E402
import testnet  # noqa: E402


def sandbox_times(log):
    """From the log: the time from each kernel's "starting" to its sandbox's
    "ready", in order (the starts are sequential)."""
    def ms(stamp):
        h, m, s = stamp.split(":")
        return (int(h) * 3600 + int(m) * 60 + float(s)) * 1000
    out, started = [], None
    for line in log.splitlines():
        if re.match(r"^\S+ glovebox info  \[\w+\] starting ", line):
            started = ms(line.split()[0])
        elif " sandbox " in line and line.rstrip().endswith(")") and " ready (init pid" in line \
                and started is not None:
            out.append(ms(line.split()[0]) - started)
            started = None
    return out


def timed_start(gw, network):
    body = {"name": "python3"}
    if network:
        body["network"] = True
    t = time.perf_counter()
    status, model, _ = gw.request("POST", "/api/kernels", body)
    elapsed = time.perf_counter() - t
    assert status == 201, model
    gw.request("DELETE", f"/api/kernels/{model['id']}")
    time.sleep(0.2)  # let the sandbox go before the next start
    return elapsed


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    net = testnet.TestNet().up()
    gw = start_gateway("--egress-allow", "198.18.0.0/15,public.gbtest",
                       "--egress-dns", testnet.DNS)
    try:
        timed_start(gw, False)
        timed_start(gw, True)
        times = {False: [], True: []}
        skip = len(sandbox_times(gw.read_log()))
        for _ in range(n):
            for network in (False, True):
                times[network].append(timed_start(gw, network))
        made = sandbox_times(gw.read_log())[skip:]
        sandbox = {False: made[0::2], True: made[1::2]}
        med = {k: statistics.median(v) * 1000 for k, v in times.items()}
        setup = [float(m) for m in re.findall(r"set up in ([0-9.]+) ms", gw.read_log())]
        print(f"kernel start (POST /api/kernels until ready), median of {n}:")
        print(f"  no network       {med[False]:7.1f} ms")
        print(f"  network: true    {med[True]:7.1f} ms")
        print(f"  difference       {med[True] - med[False]:+7.1f} ms")
        sb = {k: statistics.median(v) for k, v in sandbox.items()}
        print(f"sandbox made (kernel start asked to sandbox ready), median of {n}:")
        print(f"  no network       {sb[False]:7.1f} ms")
        print(f"  network: true    {sb[True]:7.1f} ms")
        print(f"  difference       {sb[True] - sb[False]:+7.1f} ms")
        print(f"kernel-host network set-up (veth, nft, dnsmasq), median of {len(setup)}: "
              f"{statistics.median(setup):.1f} ms (min {min(setup):.1f}, max {max(setup):.1f})")
    finally:
        gw.stop()
        net.down()


if __name__ == "__main__":
    main()
