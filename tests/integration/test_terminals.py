"""Terminals (/api/terminals and terminado's WebSocket) at the edges the
JupyterLab client does not reach (tests/node/terminals.test.mjs has that):
without a sandbox, bytes that are not UTF-8, a large output read whole, the
--max-terminals cap."""
import json
import time

import pytest
import websocket

from gbclient import start_gateway


@pytest.fixture(scope="module")
def gw():
    g = start_gateway("--max-terminals", "2")
    yield g
    g.stop()


def open_socket(gw, name):
    url = f"ws://127.0.0.1:{gw.port}/terminals/websocket/{name}?token={gw.token}"
    ws = websocket.create_connection(url, timeout=30)
    assert json.loads(ws.recv()) == ["setup", {}]
    return ws


def read_until(ws, predicate, what, seconds=30):
    """Reads ["stdout", text] messages until predicate(all text so far)."""
    text, end = "", time.monotonic() + seconds
    while not predicate(text):
        assert time.monotonic() < end, f"{what}: {text[-500:]!r}"
        msg = json.loads(ws.recv())
        if msg[0] == "stdout":
            text += msg[1]
        elif msg[0] == "disconnect":
            raise AssertionError(f"{what}: the terminal ended: {text[-500:]!r}")
    return text


def start_terminal(gw, **body):
    status, model, _ = gw.request("POST", "/api/terminals", body)
    assert status == 200, model
    return model["name"]


def start_terminal_when_room(gw):
    end = time.monotonic() + 20
    while True:
        status, model, _ = gw.request("POST", "/api/terminals", {})
        if status != 403 or time.monotonic() > end:
            assert status == 200, model
            return model["name"]
        time.sleep(0.1)


def test_bytes_that_are_not_utf8_become_u_fffd(gw):
    name = start_terminal(gw)
    ws = open_socket(gw, name)
    try:
        ws.send(json.dumps(["stdin", "printf 'A\\377B\\342\\230\\203C\\n'\r"]))
        # (The echoed command line holds "C\\n", not "C" and a line end.)
        text = read_until(ws, lambda t: "C\r\n" in t, "the printf")
        assert "A\ufffdB\u2603C\r\n" in text
        # A character written in two pieces arrives whole.
        ws.send(json.dumps(["stdin", "printf '\\342'; sleep 0.3; printf '\\230\\203D\\n'\r"]))
        text = read_until(ws, lambda t: "D\r\n" in t, "the split character")
        assert "\u2603D\r\n" in text and "\ufffdD" not in text
    finally:
        ws.close()
        gw.request("DELETE", f"/api/terminals/{name}")


def test_a_large_output_arrives_whole(gw):
    name = start_terminal(gw)
    ws = open_socket(gw, name)
    try:
        ws.send(json.dumps(["stdin", "seq 1 200000; echo END-$((1+1))\r"]))
        text = read_until(ws, lambda t: "END-2" in t, "the end of seq", seconds=60)
        start = text.index("\r1\r\n2\r\n") + 1
        lines = text[start:].split("\r\n")
        assert lines[:200000] == [str(i) for i in range(1, 200001)]
    finally:
        ws.close()
        gw.request("DELETE", f"/api/terminals/{name}")


def test_max_terminals_and_bad_messages(gw):
    # (The other tests' terminals count until their shells are reaped.)
    names = [start_terminal_when_room(gw) for _ in range(2)]
    status, body, _ = gw.request("POST", "/api/terminals", {})
    assert status == 403 and "--max-terminals" in body["message"]
    ws = open_socket(gw, names[0])
    ws.send(json.dumps(["stdin", 5]))
    opcode, data = ws.recv_data()
    while opcode != websocket.ABNF.OPCODE_CLOSE:
        opcode, data = ws.recv_data()
    assert int.from_bytes(data[:2], "big") == 1003
    for name in names:
        assert gw.request("DELETE", f"/api/terminals/{name}")[0] == 204
    status, listed, _ = gw.request("GET", "/api/terminals")
    assert status == 200 and listed == []
    # Room again once their shells are reaped (they count until then).
    end = time.monotonic() + 20
    while gw.request("POST", "/api/terminals", {"name": "after"})[0] == 403:
        assert time.monotonic() < end, "the deleted terminals still count"
        time.sleep(0.1)
    assert gw.request("DELETE", "/api/terminals/after")[0] == 204


def test_without_a_sandbox():
    g = start_gateway("--sandbox", "none")
    try:
        name = start_terminal(g)
        ws = open_socket(g, name)
        ws.send(json.dumps(["set_size", 33, 99]))
        ws.send(json.dumps(["stdin", "echo N$((6*7)); stty size; tty\r"]))
        text = read_until(ws, lambda t: "\n/dev/pts/" in t, "the shell")
        assert "N42\r\n33 99\r\n" in text
        assert g.request("DELETE", f"/api/terminals/{name}")[0] == 204
        while True:
            msg = json.loads(ws.recv())
            if msg[0] == "disconnect":
                break
        ws.close()
    finally:
        g.stop()
