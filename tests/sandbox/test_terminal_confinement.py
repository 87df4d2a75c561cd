"""A terminal's shell is confined like a kernel: the sandbox's user, no
capabilities, the seccomp filter, a pseudo-terminal of the sandbox's own
devpts (none of the host's); as root and as an ordinary user."""
import json
import time

import pytest
import websocket

from gbclient import start_gateway

UNPRIVILEGED = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]

# Run in the shell; each line printed as KEY=VALUE.
PROBE = (
    "echo UID=$(id -u) TTYOWNER=$(stat -c %U $(tty)) PTS=$(ls /dev/pts | tr '\\n' ,); "
    "grep -E '^(Seccomp|NoNewPrivs|CapEff):' /proc/self/status | tr -d '\\t' | tr : =; "
    "python3 -c 'import fcntl, termios\n"
    "try:\n"
    "    fcntl.ioctl(0, termios.TIOCSTI, b\"x\"); print(\"TIOCSTI=allowed\")\n"
    "except OSError as e:\n"
    "    print(\"TIOCSTI=\" + str(e.errno))\n"
    "fcntl.ioctl(0, termios.TIOCGWINSZ, b\"\\0\" * 8); print(\"TIOCGWINSZ=ok\")'; "
    "echo END-$((1+1))")


def probe(gw):
    status, model, _ = gw.request("POST", "/api/terminals", {})
    assert status == 200, model
    url = f"ws://127.0.0.1:{gw.port}/terminals/websocket/{model['name']}?token={gw.token}"
    ws = websocket.create_connection(url, timeout=30)
    try:
        ws.send(json.dumps(["stdin", PROBE + "\r"]))
        text, end = "", time.monotonic() + 30
        while "END-2" not in text:
            assert time.monotonic() < end, text
            msg = json.loads(ws.recv())
            if msg[0] == "stdout":
                text += msg[1]
    finally:
        ws.close()
        gw.request("DELETE", f"/api/terminals/{model['name']}")
    found = {}
    for line in text.split("\r\n"):
        for word in line.split():
            key, _, value = word.partition("=")
            if key.isalpha() and value and "$" not in value:
                found[key] = value
    return found


@pytest.mark.parametrize("runner", [(), UNPRIVILEGED], ids=["root", "unprivileged"])
def test_the_shell_is_confined(runner):
    gw = start_gateway(runner=list(runner))
    try:
        found = probe(gw)
    finally:
        gw.stop()
    assert found["UID"] == "1000", found
    assert found["TTYOWNER"] == "user", found
    assert found["PTS"] == "0,ptmx,", "the sandbox's own devpts: " + found["PTS"]
    assert found["Seccomp"] == "2" and found["NoNewPrivs"] == "1", found
    assert found["CapEff"] == "0000000000000000", found
    # Typing into its own terminal is denied (EPERM), reading it is not.
    assert found["TIOCSTI"] == "1", found
    assert found["TIOCGWINSZ"] == "ok", found
