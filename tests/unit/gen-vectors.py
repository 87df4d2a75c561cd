#!/usr/bin/python3
"""Writes signed ZMQ wire messages made by Debian's jupyter_client as JSON.

tests/unit/test-vectors.c checks that Glovebox's decoder accepts each of them
and that its signer reproduces every signature byte for byte, so the C code
is held to the implementation that real kernels (ipykernel) use rather than
to our reading of the spec.

Run with Debian's /usr/bin/python3 (python3-jupyter-client 7.4.9); the
output goes to stdout:

    {"generator": "...", "vectors": [
        {"name": ..., "key": <base64>, "nidentities": N,
         "frames": [<base64>, ...], "signature": "<hex or empty>"}, ...]}

Frames are exactly what Session.send hands to zmq: identities, "<IDS|MSG>",
the signature, the four JSON parts and any buffers.
"""

import base64
import datetime
import json
import sys

import jupyter_client
from jupyter_client.session import Session


class CaptureStream:
    """Stands in for a zmq socket: keeps the frames Session.send passes."""

    def __init__(self):
        self.frames = None

    def send_multipart(self, frames, copy=True, track=False):
        self.frames = [bytes(f) for f in frames]


def b64(data):
    return base64.b64encode(data).decode("ascii")


def fixed_header(session, msg_type, n):
    """A header as Session.msg_header makes it, with a fixed id and date so
    the vectors are the same from run to run."""
    header = session.msg_header(msg_type)
    header["msg_id"] = "00000000-0000-4000-8000-%012d" % n
    header["date"] = datetime.datetime(2024, 5, 17, 13, 4, 5, 123456 + n,
                                       tzinfo=datetime.timezone.utc)
    return header


def main():
    hex_key = b"4d8f2a1c-6b7e-4c3d-9a0f-1e2d3c4b5a69"
    cases = []
    counter = 0

    def add(name, key, msg_type, content, parent=None, metadata=None,
            ident=None, buffers=None):
        nonlocal counter
        counter += 1
        session = Session(key=key, username="glovebox-test",
                          session="11111111-2222-4333-8444-555555555555")
        header = fixed_header(session, msg_type, counter)
        msg = session.msg(msg_type, content=content, parent=parent,
                          header=header, metadata=metadata)
        stream = CaptureStream()
        session.send(stream, msg, ident=ident, buffers=buffers)
        frames = stream.frames
        nident = 0 if ident is None else (len(ident) if isinstance(ident, list) else 1)
        if frames[nident] != b"<IDS|MSG>":
            raise SystemExit("unexpected frame layout for %s" % name)
        cases.append({
            "name": name,
            "key": b64(key),
            "nidentities": nident,
            "nbuffers": 0 if buffers is None else len(buffers),
            "frames": [b64(f) for f in frames],
            "signature": frames[nident + 1].decode("ascii"),
        })
        return msg

    request = add("execute_request ascii", hex_key, "execute_request",
                  {"code": "print('hello')", "silent": False,
                   "store_history": True, "user_expressions": {},
                   "allow_stdin": True, "stop_on_error": True})
    add("execute_result non-ascii with parent", hex_key, "execute_result",
        {"execution_count": 1,
         "data": {"text/plain": "'héllo wörld — ☃ 日本語 😀'"},
         "metadata": {}},
        parent=request)
    add("nested content and metadata", hex_key, "comm_msg",
        {"comm_id": "c0ffee", "data": {"method": "update", "state": {
            "value": [1, 2.5, -3e-7, None, True, {"deep": {"deeper": ["x"]}}],
            "label": "tab\there \"quoted\" back\\slash \u0001 ctrl"}}},
        parent=request, metadata={"trusted": True, "tags": ["a", "ü"]})
    add("routed through identities", hex_key, "kernel_info_request", {},
        ident=[b"client-\x00\xff-identity", b"second"])
    add("empty key", b"", "status", {"execution_state": "idle"},
        parent=request)
    add("binary buffers", hex_key, "comm_msg",
        {"comm_id": "c0ffee", "data": {"method": "custom"}},
        parent=request, buffers=[b"\x00\x01\x02\xff", b"", b"x" * 1000])
    add("long key", bytes(range(256)) * 1, "shutdown_request",
        {"restart": False})

    json.dump({"generator": "jupyter_client %s" % jupyter_client.__version__,
               "vectors": cases}, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
