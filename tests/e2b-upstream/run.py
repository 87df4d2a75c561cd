#!/usr/bin/python3
"""E2B's own Python test suites, unmodified, against a real Glovebox.

Serves two gateways from the build tree (one per suite, so that one suite's
sandboxes never show in the other's lists), each behind an HAProxy that
terminates TLS for its ports domain, as an operator serving E2B's getHost
names would (`https://{port}-{id}.e2b.localhost:PORT`: libnss-myhostname
resolves every name under .localhost to loopback, and a CA made for the run
signs the certificate). Runs the code-interpreter and python-sdk suites in
parallel through ../shared/e2b-tests/run, which sets nothing but the SDKs'
own variables, then holds the results against expected-failures: a test
that fails and is not listed there fails this suite, and so does a listed
test that passes (the list must be kept true) or a line that names no test.

Ends with "E2B_UPSTREAM_RESULT passed=N failed=M": passed counts E2B's
tests that passed, failed counts the unexpected results. Exit status 0
only when failed is 0.

    tests/e2b-upstream/run.py              # both suites
    E2B_UPSTREAM_SUITES=sdk tests/e2b-upstream/run.py
Environment: GLOVEBOX_BUILD (default build/), E2B_TESTS (the suites' folder,
default ../shared/e2b-tests beside the repository), E2B_UPSTREAM_OUT (logs,
JUnit files; default $GLOVEBOX_BUILD/e2b-upstream), E2B_UPSTREAM_KERNELS
(cold or defaults: how both suites' kernels start; by default the
code-interpreter suite's as with no flags, the SDK suite's cold).
"""
import fnmatch
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
BUILD = os.path.abspath(os.environ.get("GLOVEBOX_BUILD", os.path.join(ROOT, "build")))
OUT = os.path.abspath(os.environ.get("E2B_UPSTREAM_OUT", os.path.join(BUILD, "e2b-upstream")))
EXPECTED = os.path.join(HERE, "expected-failures")
# JUnit file names the runner writes for each of its suites.
SUITES = {"ci": ["code-interpreter"], "sdk": ["python-sdk", "python-sdk-urls"]}
NAMES = {"code-interpreter": "code-interpreter", "python-sdk": "python-sdk",
         "python-sdk-urls": "python-sdk"}
# What the operator of these gateways chose, as an E2B user would expect
# them: E2B's default of public ports for a create that says nothing.
GATEWAY_FLAGS = ["--e2b-public-traffic", "--template-image", "ubuntu:22.04=base"]
# How each suite's kernels start. The code-interpreter suite's, as a user's
# do with no flags (docs/performance.md#fast-by-default): from the zygote,
# in its own Jupyter loop (kernel-host/zygote_kernel.py), and from the pool.
# The SDK suite's cold, with no pool, as in the other suites' gateways
# (tests/integration/gbclient.py's cold_args). E2B_UPSTREAM_KERNELS=cold or
# =defaults sets both.
KERNEL_FLAGS = {"defaults": [], "cold": ["--zygote", "none", "--pool", "none"]}
SUITE_KERNELS = {"ci": "defaults", "sdk": "cold"}


def tests_dir():
    for d in (os.environ.get("E2B_TESTS"), os.path.join(ROOT, "..", "shared", "e2b-tests"),
              "/work/shared/e2b-tests"):
        if d and os.path.isfile(os.path.join(d, "run")):
            return os.path.abspath(d)
    sys.exit("E2B's test suites were not found: set E2B_TESTS to ../shared/e2b-tests")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def openssl(*args):
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def make_tls(d):
    """A CA of this run and a certificate for localhost and every name of
    the ports domains; returns (combined PEM for HAProxy, CA bundle)."""
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
            "/CN=Glovebox e2b-upstream CA", "-keyout", f"{d}/ca.key", "-out", f"{d}/ca.crt")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost", "-keyout",
            f"{d}/server.key", "-out", f"{d}/server.csr")
    with open(f"{d}/ext", "w") as f:
        f.write("subjectAltName=DNS:localhost,DNS:*.e2b.localhost,IP:127.0.0.1\n"
                "basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n")
    openssl("x509", "-req", "-in", f"{d}/server.csr", "-CA", f"{d}/ca.crt", "-CAkey",
            f"{d}/ca.key", "-CAcreateserial", "-days", "2", "-extfile", f"{d}/ext", "-out",
            f"{d}/server.crt")
    with open(f"{d}/haproxy.pem", "w") as out:
        for name in ("server.crt", "server.key"):
            with open(f"{d}/{name}") as f:
                out.write(f.read())
    with open(f"{d}/bundle.crt", "w") as out:
        with open("/etc/ssl/certs/ca-certificates.crt") as f:
            out.write(f.read())
        with open(f"{d}/ca.crt") as f:
            out.write(f.read())
    return f"{d}/haproxy.pem", f"{d}/bundle.crt"


class Gateway:
    def __init__(self, name, work, token, tls_port):
        self.port = free_port()
        self.log_path = os.path.join(OUT, f"glovebox-{name}.log")
        cmd = [os.path.join(BUILD, "glovebox"), "--listen", f"127.0.0.1:{self.port}",
               "--state-dir", os.path.join(work, f"state-{name}"),
               "--ports-domain", f"e2b.localhost:{tls_port}", *GATEWAY_FLAGS,
               *KERNEL_FLAGS[os.environ.get("E2B_UPSTREAM_KERNELS", SUITE_KERNELS[name])]]
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL,
                                     env=dict(os.environ, GLOVEBOX_TOKEN=token))
        deadline = time.time() + 60
        while True:
            with open(self.log_path) as f:
                if "Glovebox is serving at" in f.read():
                    break
            if self.proc.poll() is not None or time.time() > deadline:
                with open(self.log_path) as f:
                    sys.exit(f"glovebox ({name}) did not start:\n{f.read()[-3000:]}")
            time.sleep(0.1)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def start_haproxy(work, pem, routes):
    """One TLS frontend per gateway: routes is [(tls_port, gateway_port)]."""
    cfg = os.path.join(work, "haproxy.cfg")
    with open(cfg, "w") as f:
        f.write("global\n    maxconn 4000\n"
                "defaults\n    mode http\n    timeout connect 5s\n    timeout client 300s\n"
                "    timeout server 300s\n    timeout tunnel 1h\n")
        for tls_port, gw_port in routes:
            f.write(f"frontend ports{tls_port}\n    bind 127.0.0.1:{tls_port} ssl crt {pem}\n"
                    f"    default_backend gw{gw_port}\n"
                    f"backend gw{gw_port}\n    server gw 127.0.0.1:{gw_port}\n")
    proc = subprocess.Popen(["haproxy", "-db", "-f", cfg], stdout=subprocess.DEVNULL,
                            stderr=open(os.path.join(OUT, "haproxy.log"), "w"),
                            stdin=subprocess.DEVNULL)
    for tls_port, _ in routes:
        deadline = time.time() + 15
        while True:
            try:
                socket.create_connection(("127.0.0.1", tls_port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.time() > deadline:
                    sys.exit("haproxy did not start: see " + os.path.join(OUT, "haproxy.log"))
                time.sleep(0.1)
    return proc


def read_expected():
    """[(suite, pattern, reason)] from expected-failures."""
    entries = []
    with open(EXPECTED) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split(None, 2)
            if len(parts) < 3 or parts[0] not in NAMES.values() or "::" not in parts[1]:
                sys.exit(f"{EXPECTED}:{n}: want 'SUITE CLASSNAME::NAME REASON': {line}")
            entries.append(tuple(parts))
    return entries


def results(junit_files):
    """{(suite, "classname::name"): (outcome, message)} from the JUnit files."""
    found = {}
    for name, path in junit_files:
        try:
            root = ET.parse(path).getroot()
        except (OSError, ET.ParseError) as e:
            found[(NAMES[name], f"<{name}>::<junit>")] = ("failed", f"no JUnit results: {e}")
            continue
        for case in root.iter("testcase"):
            key = (NAMES[name], f"{case.get('classname')}::{case.get('name')}")
            bad = case.find("failure")
            if bad is None:
                bad = case.find("error")
            if bad is not None:
                text = (bad.get("message") or "") + "\n" + (bad.text or "")
                found[key] = ("failed", text.strip())
            elif case.find("skipped") is not None:
                found[key] = ("skipped", "")
            else:
                found[key] = ("passed", "")
    return found


def judge(found, expected, ran):
    """The unexpected results, as lines, and the count of passed tests."""
    problems = []
    listed = {}
    for suite, pattern, reason in expected:
        if suite not in ran:
            continue
        hits = [k for k in found if k[0] == suite and fnmatch.fnmatchcase(k[1], pattern)]
        if not hits:
            problems.append(f"!! {suite} {pattern}: listed in expected-failures, names no test")
        for k in hits:
            listed[k] = reason
            if found[k][0] == "passed":
                problems.append(f"!! {suite} {k[1]}: passed, yet listed in expected-failures "
                                f"({reason}): take it off the list")
    for k, (outcome, message) in sorted(found.items()):
        if outcome == "failed" and k not in listed:
            lines = [line for line in message.splitlines() if line.strip()]
            short = lines[:2] + (["..."] + lines[-6:] if len(lines) > 8 else lines[2:])
            problems.append(f"!! {k[0]} {k[1]}: failed\n" +
                            "\n".join("   " + line[:300] for line in short))
    passed = sum(1 for outcome, _ in found.values() if outcome == "passed")
    return problems, passed, listed


def main():
    e2b_tests = tests_dir()
    wanted = os.environ.get("E2B_UPSTREAM_SUITES", "ci sdk").split()
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    work = tempfile.mkdtemp(prefix="glovebox-e2b-upstream-")
    pem, bundle = make_tls(work)
    gateways, runs, proxy = {}, {}, None
    try:
        tokens = {s: "e2b_" + secrets.token_hex(20) for s in wanted}
        tls_ports = {s: free_port() for s in wanted}
        for s in wanted:
            gateways[s] = Gateway(s, work, tokens[s], tls_ports[s])
        proxy = start_haproxy(work, pem, [(tls_ports[s], gateways[s].port) for s in wanted])
        env = dict(os.environ, SSL_CERT_FILE=bundle)
        start = time.time()
        for s in wanted:
            out = os.path.join(OUT, s)
            runs[s] = subprocess.Popen(
                [os.path.join(e2b_tests, "run"), f"http://127.0.0.1:{gateways[s].port}",
                 tokens[s], s], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                stdin=subprocess.DEVNULL,
                # Volumes: E2B's suites test them only when asked, and the
                # SDK finds their content API where this variable says
                # (Glovebox serves it beside the control plane).
                env=dict(env, E2B_TESTS_OUT=out, ENABLE_VOLUME_TESTS="1",
                         E2B_VOLUME_API_URL=f"http://127.0.0.1:{gateways[s].port}/e2b"))
        for s in wanted:
            summary, _ = runs[s].communicate(timeout=3600)
            print(summary.strip())
        print(f"e2b-upstream: the suites ran {time.time() - start:.0f} s")
    finally:
        for p in runs.values():
            if p.poll() is None:
                p.kill()
        if proxy:
            proxy.terminate()
            proxy.wait()
        for gw in gateways.values():
            gw.stop()
        shutil.rmtree(work, ignore_errors=True)

    files = [(name, os.path.join(OUT, s, name + ".xml")) for s in wanted for name in SUITES[s]]
    found = results(files)
    problems, passed, listed = judge(found, read_expected(),
                                     {NAMES[n] for s in wanted for n in SUITES[s]})
    for suite in sorted({k[0] for k in found}):
        counts = {o: sum(1 for k, (outcome, _) in found.items() if k[0] == suite and outcome == o)
                  for o in ("passed", "failed", "skipped")}
        expected_here = sum(1 for k in listed if k[0] == suite and found[k][0] == "failed")
        print(f"{suite}: {counts['passed']} passed, {counts['failed']} failed "
              f"({expected_here} of them listed in expected-failures), {counts['skipped']} skipped")
    for line in problems:
        print(line)
    print(f"logs and JUnit files: {OUT}")
    print(f"E2B_UPSTREAM_RESULT passed={passed} failed={len(problems)}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
