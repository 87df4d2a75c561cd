"""Servers that test_ports.py starts inside a sandbox (Python's standard
library only): files over HTTP on 8000, the request echoed back on 8001,
an endless answer on 8002 (it counts what it could send), chosen answer
heads on 8003, and a WebSocket
echo on 8765 whose first message is the path it was asked for."""
import base64
import functools
import hashlib
import http.server
import json
import os
import socket
import struct
import sys
import threading

HOME = sys.argv[1] if len(sys.argv) > 1 else "/home/user"


def read_head(c):
    data = b""
    while b"\r\n\r\n" not in data:
        d = c.recv(4096)
        if not d:
            raise EOFError
        data += d
    head, rest = data.split(b"\r\n\r\n", 1)
    return head.decode("latin-1"), rest


def header(head, name):
    for line in head.split("\r\n")[1:]:
        k, _, v = line.partition(":")
        if k.strip().lower() == name:
            return v.strip()
    return None


def echo_request(c):
    head, body = read_head(c)
    length = int(header(head, "content-length") or 0)
    while len(body) < length:
        d = c.recv(65536)
        if not d:
            break
        body += d
    out = json.dumps({"head": head, "body": body.decode("latin-1")}).encode()
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
              + str(len(out)).encode() + b"\r\nConnection: close\r\n\r\n" + out)


def headers_test(c):
    """An answer chosen by the path: /interim sends 100 Continue before a
    page; /cookies sets cookies of every scope and origin-wide headers;
    /close closes without an answer; /long sends a head over 16 KiB."""
    head, _ = read_head(c)
    path = head.split(" ")[1]
    page = b"<script>localStorage.getItem('token')</script>"
    if path.startswith("/close"):
        return
    if path.startswith("/long"):
        c.sendall(b"HTTP/1.1 200 OK\r\n" + b"X-Long: " + b"a" * 20000 + b"\r\n\r\n")
        return
    if path.startswith("/interim"):
        c.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        extra = b""
    else:
        prefix = header(head, "x-forwarded-prefix") or ""
        extra = ("".join(f"Set-Cookie: {line}\r\n" for line in (
            f"own=1; Path={prefix}/x; HttpOnly",
            "nopath=1",
            f"exact=1; path={prefix}",
            "root=1; Path=/",
            f"sibling=1; Path={prefix}0/",
            f"dom=1; Path={prefix}/; Domain=127.0.0.1",
            f"dots=1; Path={prefix}/../../",
            f"twice=1; Path={prefix}/; Path=/",
        )) + "Clear-Site-Data: \"storage\"\r\nService-Worker-Allowed: /\r\n"
            "X-Kept: yes\r\n").encode()
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n" + extra
              + b"Content-Length: " + str(len(page)).encode()
              + b"\r\nConnection: close\r\n\r\n" + page)


def firehose(c):
    read_head(c)
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n\r\n")
    chunk = b"x" * 65536
    sent = 0
    while True:
        sent += c.send(chunk)
        # Replaced whole, so that a reader never sees it half written.
        new = f"{HOME}/firehose.count.{threading.get_ident()}"
        with open(new, "w") as f:
            f.write(str(sent))
        os.replace(new, HOME + "/firehose.count")


def websocket_echo(c):
    head, buf = read_head(c)
    key = header(head, "sec-websocket-key")
    accept = base64.b64encode(hashlib.sha1(
        (key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()).decode()
    c.sendall(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
               "Connection: Upgrade\r\nSec-WebSocket-Accept: " + accept + "\r\n\r\n").encode())

    def send(op, payload):
        n = len(payload)
        h = bytes([0x80 | op])
        if n < 126:
            h += bytes([n])
        elif n < 65536:
            h += bytes([126]) + struct.pack(">H", n)
        else:
            h += bytes([127]) + struct.pack(">Q", n)
        c.sendall(h + payload)

    def need(n):
        nonlocal buf
        while len(buf) < n:
            d = c.recv(65536)
            if not d:
                raise EOFError
            buf += d
        out, buf = buf[:n], buf[n:]
        return out

    send(1, ("path:" + head.split(" ")[1]).encode())
    while True:
        b0, b1 = need(2)
        op, n = b0 & 15, b1 & 127
        if n == 126:
            n = struct.unpack(">H", need(2))[0]
        elif n == 127:
            n = struct.unpack(">Q", need(8))[0]
        mask = need(4) if b1 & 128 else b"\0\0\0\0"
        payload = bytes(x ^ mask[i % 4] for i, x in enumerate(need(n)))
        if op == 8:
            send(8, b"")
            return
        send(10 if op == 9 else op, payload)


def serve(port, handle):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port))
    s.listen(16)

    def one(c):
        try:
            handle(c)
        except (EOFError, OSError):
            pass
        finally:
            c.close()

    while True:
        c, _ = s.accept()
        threading.Thread(target=one, args=(c,), daemon=True).start()


for port, handle in ((8001, echo_request), (8002, firehose), (8003, headers_test),
                     (8765, websocket_echo)):
    threading.Thread(target=serve, args=(port, handle), daemon=True).start()
files = functools.partial(http.server.SimpleHTTPRequestHandler, directory=HOME)
http.server.ThreadingHTTPServer(("127.0.0.1", 8000), files).serve_forever()
