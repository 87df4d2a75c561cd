#!/usr/bin/env python3
"""Writes the seed corpus of every fuzz target into tests/fuzz/corpus/.

The files are committed; run this again only to change the seeds. Each seed
is small and named for what it is: valid messages so the fuzzer starts
inside the interesting paths, and a few malformed ones near the edges.
Input formats are described at the top of each tests/fuzz/fuzz-*.c.
"""

import hashlib
import hmac
import json
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus")
FUZZ_KEY = b"fuzz-key-0123456789abcdef"  # the key fuzz-wire.c signs with
UUID = "1b4e28ba-2fa1-41d2-883f-0016d3cca427"

HEADER = {"msg_id": "m1", "session": "s1", "username": "u",
          "date": "2024-05-17T13:04:05.123456Z", "msg_type": "execute_request",
          "version": "5.3"}


def compact(obj):
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def write(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def wire_input(flags, frames):
    out = bytes([flags])
    for f in frames:
        assert len(f) <= 255, "wire seed frames are length-prefixed by one byte"
        out += bytes([len(f)]) + f
    return out


def sign(key, parts):
    if not key:
        return b""
    return hmac.new(key, b"".join(parts), hashlib.sha256).hexdigest().encode()


def wire_seeds():
    parts = [compact(HEADER), b"{}", b"{}", compact({"code": "print(1)"})]
    write("fuzz-wire", "valid-keyed",
          wire_input(1, [b"<IDS|MSG>", sign(FUZZ_KEY, parts)] + parts))
    write("fuzz-wire", "valid-empty-key", wire_input(0, [b"<IDS|MSG>", b""] + parts))
    write("fuzz-wire", "harness-signs-identities-buffers",
          wire_input(3, [b"ident-1", b"\x00\xffid", b"<IDS|MSG>", b"0" * 64] + parts +
                     [b"\x00\x01\x02", b""]))
    write("fuzz-wire", "bad-signature", wire_input(1, [b"<IDS|MSG>", b"f" * 64] + parts))
    write("fuzz-wire", "missing-signature", wire_input(1, [b"<IDS|MSG>", b""] + parts))
    write("fuzz-wire", "no-delimiter", wire_input(0, [b"<IDS|MSG", b""] + parts))
    write("fuzz-wire", "too-few-frames", wire_input(0, [b"<IDS|MSG>", b""] + parts[:3]))


def be32(*values):
    return b"".join(struct.pack(">I", v) for v in values)


def ws_binary(msg_json, buffers):
    n = 1 + len(buffers)
    at = 4 * (n + 1)
    offsets = []
    for part in [msg_json] + list(buffers):
        offsets.append(at)
        at += len(part)
    return be32(n, *offsets) + msg_json + b"".join(buffers)


def wsjson_seeds():
    full = {"channel": "shell", "header": HEADER, "parent_header": {},
            "metadata": {}, "content": {"code": "print(1)"}, "buffers": []}
    text = lambda obj: b"\x00" + compact(obj)
    binary = lambda obj, bufs: b"\x01" + ws_binary(compact(obj), bufs)
    write("fuzz-wsjson", "text-full", text(full))
    write("fuzz-wsjson", "text-no-channel",
          text({"header": HEADER, "content": {}}))
    write("fuzz-wsjson", "text-lenient",
          text({"channel": "control", "header": {"msg_id": "x", "date": 1700000000.5},
                "metadata": None, "buffers": {}}))
    write("fuzz-wsjson", "text-not-utf8",
          b"\x00" + compact({"header": {"msg_id": "a"}, "content": {"t": "X"}}).replace(
              b"X", b"\xff\xc3"))
    write("fuzz-wsjson", "text-iopub-refused", text(dict(full, channel="iopub")))
    write("fuzz-wsjson", "text-invalid-json", b"\x00{\"header\":{")
    write("fuzz-wsjson", "binary-two-buffers",
          binary(dict(full, channel="stdin"), [b"\x00\x01\xff", b"xyz"]))
    write("fuzz-wsjson", "binary-no-buffers", binary({"header": {}}, []))
    good = ws_binary(compact({"header": {}}), [b"AAAA", b"BB"])
    write("fuzz-wsjson", "binary-truncated", b"\x01" + good[:-3])
    bad = bytearray(good)
    bad[8:12] = be32(len(good) + 10)
    write("fuzz-wsjson", "binary-offset-past-end", b"\x01" + bytes(bad))
    write("fuzz-wsjson", "binary-huge-nbufs", b"\x01" + be32(0xFFFFFFFF, 8) + b"{}")


def le64(*values):
    return b"".join(struct.pack("<Q", v) for v in values)


def wsv1(channel, parts, buffers=()):
    items = [channel.encode()] + list(parts) + list(buffers)
    count = 1 + len(items)
    at = 8 * (1 + count)
    offsets = [at]
    for item in items:
        at += len(item)
        offsets.append(at)
    return le64(count, *offsets) + b"".join(items)


def wsv1_seeds():
    parts = [compact(HEADER), b"{}", b"{}", compact({"code": "1+1"})]
    write("fuzz-wsv1", "shell", wsv1("shell", parts))
    write("fuzz-wsv1", "iopub-buffers", wsv1("iopub", parts, [b"\x00\xff", b"", b"buf"]))
    write("fuzz-wsv1", "hb-empty-parts", wsv1("hb", [b"", b"", b"", b""]))
    good = wsv1("control", parts)
    write("fuzz-wsv1", "truncated", good[:-1])
    bad = bytearray(good)
    bad[24:32] = le64(8 * 7 + len("control") - 3)
    write("fuzz-wsv1", "offsets-out-of-order", bytes(bad))
    write("fuzz-wsv1", "unknown-channel", wsv1("shellx", parts))
    write("fuzz-wsv1", "huge-offset-number", le64(2 ** 61) + good[8:])


def connfile_seeds():
    tcp = {"shell_port": 53794, "iopub_port": 40885, "stdin_port": 58295,
           "control_port": 39271, "hb_port": 45401, "ip": "127.0.0.1",
           "key": "8f33d4ae-8dd0e1d9d3b4a52f0aa5fb5e", "transport": "tcp",
           "signature_scheme": "hmac-sha256", "kernel_name": "python3"}
    write("fuzz-connfile", "tcp", json.dumps(tcp, indent=1).encode())
    write("fuzz-connfile", "ipc", compact(dict(tcp, transport="ipc", ip="/run/glovebox/k/kernel",
                                               shell_port=1, iopub_port=2, stdin_port=3,
                                               control_port=4, hb_port=5)))
    minimal = {k: tcp[k] for k in ("ip", "shell_port", "iopub_port", "stdin_port",
                                   "control_port", "hb_port")}
    write("fuzz-connfile", "minimal", compact(minimal))
    write("fuzz-connfile", "missing-ip", compact({k: v for k, v in tcp.items() if k != "ip"}))
    write("fuzz-connfile", "port-out-of-range", compact(dict(tcp, hb_port=65536)))
    write("fuzz-connfile", "not-an-object", b"[\"ip\"]")


SANDBOX_UUID = "6fa459ea-ee8a-4ca4-894e-db77e160355e"
# enum hostmsg_type in protocol/hostmsg.h
HOSTMSG_TYPES = {"sandbox-create": 1, "sandbox-destroy": 2, "start": 3, "signal": 4, "stop": 5,
                 "sandbox-ready": 100, "sandbox-failed": 101, "sandbox-gone": 102,
                 "started": 103, "start-failed": 104, "exited": 105}


def hostmsg_seeds():
    sandbox = {"sandbox_id": SANDBOX_UUID,
               "limits": {"memory_mb": 1024, "cpu_millis": 1000, "pids": 256, "disk_mb": 1024},
               "ro_paths": ["/usr/share/jupyter/kernels/python3", "/opt/kernels/r"],
               "sandbox": True}
    start = {"id": UUID, "sandbox_id": SANDBOX_UUID, "kernel": True,
             "kernelspec_dir": "/usr/share/jupyter/kernels/python3", "key": "0123456789abcdef",
             "cwd": "", "argv": ["python3", "-m", "ipykernel_launcher", "-f",
                                 "{connection_file}"],
             "env": ["PATH=/usr/bin", "A="]}
    seeds = {
        "sandbox-create": sandbox,
        "sandbox-create-none": dict(sandbox, ro_paths=[], sandbox=False),
        "sandbox-ready": {"sandbox_id": SANDBOX_UUID, "init_pid": 4241, "user_uid": 100000,
                          "user_gid": 100000, "root": "/proc/4241/root"},
        "sandbox-failed": {"id": SANDBOX_UUID, "step": "cgroup", "error": 13,
                           "message": "permission denied"},
        "sandbox-destroy": {"id": SANDBOX_UUID},
        "sandbox-gone": {"id": SANDBOX_UUID, "pid": 4241, "exit_code": 0, "signal": 0,
                         "reason": "exited"},
        "start": start,
        "start-command": dict(start, kernel=False, kernelspec_dir="", key="",
                              cwd="/home/user/work", argv=["ls", "-l"], env=[]),
        "started": {"id": UUID, "pid": 4242, "ipc_prefix": "/run/glovebox/k/kernel"},
        "started-command": {"id": UUID, "pid": 4243, "ipc_prefix": ""},
        "start-failed": {"id": UUID, "step": "exec", "error": 2, "message": "no such file"},
        "signal": {"id": UUID, "signal": 2},
        "stop": {"id": UUID},
        "exited": {"id": UUID, "pid": 4242, "exit_code": -1, "signal": 9,
                   "reason": "out-of-memory"},
        # Refused, each by one field near an edge.
        "start-env-without-equals": dict(start, env=["NOEQUALS"]),
        "start-empty-argv": dict(start, argv=[]),
        "start-cwd-relative": dict(start, cwd="home/user"),
        "start-kernel-missing": {k: v for k, v in start.items() if k != "kernel"},
        "sandbox-ro-path-dotdot": dict(sandbox, ro_paths=["/usr/share/../../etc"]),
        "sandbox-limit-zero": dict(sandbox, limits=dict(sandbox["limits"], pids=0)),
        "sandbox-ready-root-relative": {"sandbox_id": SANDBOX_UUID, "init_pid": 0,
                                        "user_uid": 4294967295, "user_gid": 0, "root": "r"},
    }
    for name, body in seeds.items():
        write("fuzz-hostmsg", name, compact(body))
    # Some bodies as datagrams with the 8-byte (type, length) header, in the
    # byte order of the machine (the socket never leaves it).
    for name in ("sandbox-create", "sandbox-ready", "start", "started", "exited"):
        body = compact(seeds[name])
        write("fuzz-hostmsg", "datagram-" + name,
              struct.pack("=II", HOSTMSG_TYPES[name], len(body)) + body)
    # fuzz-hostmsg.c attaches ((input length + 1) % (HOSTMSG_MAX_FDS + 2))
    # descriptors: padded with JSON whitespace, this one carries one more than
    # a message may (HOSTMSG_MAX_FDS is 3).
    body = compact(seeds["started-command"])
    while (8 + len(body) + 1) % 5 != 4:
        body = b" " + body
    write("fuzz-hostmsg", "datagram-started-too-many-fds",
          struct.pack("=II", HOSTMSG_TYPES["started"], len(body)) + body)
    body = compact(seeds["stop"])
    write("fuzz-hostmsg", "datagram-length-lies",
          struct.pack("=II", HOSTMSG_TYPES["stop"], len(body) + 5) + body)


def chunked_input(cut, body, limit=0):
    # fuzz-chunked.c: the cut offset (two bytes, little-endian), emit's
    # limit in units of 4 bytes (0: none), then the body.
    return struct.pack("<HB", cut, limit) + body


def chunked_seeds():
    write("fuzz-chunked", "rfc-example",
          chunked_input(9, b"4\r\nWiki\r\n5\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\n\r\n"))
    write("fuzz-chunked", "extensions-trailers",
          chunked_input(4, b"5;name=\"v;x\"\r\nhello\r\n1A;a\r\n" + bytes(range(26)) +
                        b"\r\n0;last\r\nExpires: never\r\nX-Sum: 1\r\n\r\nGET / HTTP/1.1\r\n"))
    write("fuzz-chunked", "emit-limit",
          chunked_input(300, b"ff\r\n" + b"\xaa" * 255 + b"\r\n0\r\n\r\n", limit=16))
    write("fuzz-chunked", "missing-crlf-after-data", chunked_input(3, b"3\r\nabcX\r\n0\r\n\r\n"))
    write("fuzz-chunked", "sixteen-digits",
          chunked_input(8, b"0000000000000003\r\nabc\r\n0\r\n\r\n"))
    write("fuzz-chunked", "long-line",
          chunked_input(200, b"1;" + b"e" * 253 + b"\r\nx\r\n0\r\n\r\n"))
    write("fuzz-chunked", "bad-trailer-end", chunked_input(12, b"3\r\nabc\r\n0\r\nX: y\r\n\rZ"))


MP_BOUNDARY = b"----WebKitFormBoundary7MA4YWxkTrZu0gW"
RT_BOUNDARY = b"----GloveboxFuzzBoundary7MA4YWxkTrZu0gW"  # fuzz-multipart.c's round trips


def multipart_parse_input(cut, content_type, body):
    # fuzz-multipart.c, parse mode: mode byte 0, the cut offset, the
    # Content-Type up to LF, the body.
    return struct.pack("<BH", 0, cut) + content_type + b"\n" + body


def multipart_round_trip_input(mode, cut, parts):
    # Round-trip mode: mode byte (bit 0 set), the cut offset, then each part
    # as a flags byte, a two-byte length and the payload.
    out = struct.pack("<BH", mode | 1, cut)
    for flags, payload in parts:
        out += struct.pack("<BH", flags, len(payload)) + payload
    return out


def multipart_seeds():
    ct = b"multipart/form-data; boundary=" + MP_BOUNDARY
    d = b"--" + MP_BOUNDARY
    two = (d + b"\r\nContent-Disposition: form-data; name=\"field\"\r\n\r\nvalue\r\n" +
           d + b"\r\nContent-Disposition: form-data; name=\"upload\"; filename=\"a b;c.txt\"\r\n"
           b"Content-Type: application/octet-stream\r\n\r\n\x00\xff\r\n--" + MP_BOUNDARY[:10] +
           b"\r\r\n" + d + b"--\r\nepilogue")
    write("fuzz-multipart", "two-parts", multipart_parse_input(len(two) // 2, ct, two))
    write("fuzz-multipart", "quoted-boundary-preamble",
          multipart_parse_input(40, b'multipart/form-data; charset=utf-8; boundary="a b"',
                                b"preamble\r\n--a\r\n--a b \t\r\n\r\nno headers\r\n--a b--"))
    write("fuzz-multipart", "filename-first",
          multipart_parse_input(30, b"multipart/form-data; boundary=b",
                                b"--b\r\nContent-Disposition: form-data; filename=\"x; name=y\"; "
                                b"name=\"real\"\r\n\r\nX\r\n--b--"))
    write("fuzz-multipart", "handler-stops",
          multipart_parse_input(20, b"multipart/form-data; boundary=b",
                                b"--b\r\nContent-Disposition: form-data; name=\"stop\"\r\n\r\nX\r\n--b--"))
    write("fuzz-multipart", "garbage-after-delimiter",
          multipart_parse_input(9, b"multipart/form-data; boundary=b",
                                b"--b\r\n\r\nA\r\n--b garbage\r\n\r\nB\r\n--b--"))
    write("fuzz-multipart", "missing-final-boundary",
          multipart_parse_input(7, b"multipart/form-data; boundary=b", b"--b\r\n\r\nA\r\n--b-"))
    write("fuzz-multipart", "round-trip-three",
          multipart_round_trip_input(6, 100, [
              (1, b"\x00\x01\r\n--" + RT_BOUNDARY[:20] + b"\r\r\n"),
              (2, b""),
              (4, b"--" + RT_BOUNDARY + b"\r\n\r\n")]))
    write("fuzz-multipart", "round-trip-none", multipart_round_trip_input(0, 0, []))


def header_seeds():
    """fuzz-header: a header's bytes, as kernels and clients send them, and
    the shapes the fast scan must get right or leave to jansson."""
    write("fuzz-header", "full", compact(HEADER))
    write("fuzz-header", "nested",
          b'{"x":{"msg_id":"in","msg_type":"a"},"msg_id":"i","msg_type":"t"}')
    write("fuzz-header", "escaped", b'{"m\\u0073g_id":"e","msg_type":"t","a":[1,"}",{"b":null}]}')
    write("fuzz-header", "spaces", b' { "msg_id" : "i" , "n" : -1.5e3 , "msg_type" : "t" } ')
    write("fuzz-header", "truncated", b'{"msg_id":"i","msg_type":"t"')


def string_token_seeds():
    """fuzz-string-token: stream contents as ipykernel sends them, and the
    shapes the scan must get right or leave to jansson."""
    write("fuzz-string-token", "stdout", b'{"name": "stdout", "text": "hello\\n"}')
    write("fuzz-string-token", "escapes",
          b'{"name":"stderr","text":"\\u001b[31mred\\u001b[0m \\"q\\" caf\xc3\xa9\\t"}')
    write("fuzz-string-token", "nested-duplicate",
          b'{"x":{"text":"in"},"text":"a","name":"stdout","text":"b"}')
    write("fuzz-string-token", "escaped-key", b'{"n\\u0061me":"stdout","text":"x"}')
    write("fuzz-string-token", "not-utf8", b'{"name":"stdout","text":"\xff"}')


def request_seeds():
    """fuzz-request: a flag byte, a header, 0xff, a content."""
    header = b'{"msg_id":"m","msg_type":"execute_request","session":"s"}'
    write("fuzz-request", "execute", b"\x00" + header + b"\xff" + b'{"code":"1","silent":false}')
    write("fuzz-request", "execute-no-silent", b"\x01" + header + b"\xff" + b'{"code":"1"}')
    write("fuzz-request", "code-42", b"\x00" + header + b"\xff" + b'{"code":42}')
    write("fuzz-request", "unknown", b'\x01{"msg_id":"m","msg_type":"bogus_request"}\xff{}')
    write("fuzz-request", "no-type", b'\x00{"msg_id":"m"}\xff{}')
    write("fuzz-request", "bad-json", b"\x01{not json\xff{}")


def utf8_seeds():
    # fuzz-utf8.c: the cut (one byte, modulo the length), then the bytes.
    write("fuzz-utf8", "prompt", b"\x05" + b"\x1b[?2004huser@glovebox:~$ ls\r\n")
    write("fuzz-utf8", "cut-snowman", b"\x03" + "a\u2603b\U0001F600c".encode())
    write("fuzz-utf8", "invalid", b"\x02" + b"A\xffB\xc0\xaf\xed\xa0\x80\xf4\x90\x80\x80\xe2(")


def main():
    utf8_seeds()
    string_token_seeds()
    request_seeds()
    header_seeds()
    wire_seeds()
    wsjson_seeds()
    wsv1_seeds()
    connfile_seeds()
    hostmsg_seeds()
    chunked_seeds()
    multipart_seeds()
    return 0


if __name__ == "__main__":
    sys.exit(main())
