"""The kernel protocol as Jupyter's clients use it: stdin, comms with binary
buffers both ways, display updates, lenient input, large messages."""
import json
import struct
import time
import uuid

import pytest
import websocket

from gbclient import V1, decode_v1, encode_v1, outputs_of, stdout_of

ECHO_TARGET = """
def _echo_target(comm, open_msg):
    @comm.on_msg
    def _(msg):
        bufs = [bytes(b)[::-1] for b in msg.get('buffers') or []]
        comm.send({'echo': msg['content']['data'], 'lengths': [len(b) for b in bufs]},
                  buffers=bufs)
get_ipython().kernel.comm_manager.register_target('echo', _echo_target)
"""


def test_input_through_stdin(gateway, kernel):
    ch = gateway.connect(kernel)
    prompts = []

    def answer(prompt):
        prompts.append(prompt)
        return "glovebox"

    reply, outputs = ch.execute("name = input('who? ')\nprint('hello', name)", stdin_reply=answer)
    assert prompts == ["who? "]
    assert reply["content"]["status"] == "ok"
    assert stdout_of(outputs) == "hello glovebox\n"
    ch.close()


@pytest.mark.parametrize("proto", [None, V1])
def test_comms_with_buffers_both_ways(gateway, kernel, proto):
    ch = gateway.connect(kernel, subprotocol=proto)
    reply, _ = ch.execute(ECHO_TARGET)
    assert reply["content"]["status"] == "ok"
    comm_id = uuid.uuid4().hex
    ch.send("comm_open", {"comm_id": comm_id, "target_name": "echo", "data": {}})
    header = {"msg_id": uuid.uuid4().hex, "msg_type": "comm_msg", "username": "t",
              "session": ch.session, "date": "2026-01-01T00:00:00Z", "version": "5.3"}
    content = {"comm_id": comm_id, "data": {"hello": 1}}
    buffers = [b"\x00\x01\x02binary", b"second"]
    if proto == V1:
        parts = [json.dumps(p).encode() for p in (header, {}, {}, content)] + buffers
        ch.ws.send_binary(encode_v1("shell", parts))
    else:
        # The JSON format's binary frame: big-endian offsets, JSON, buffers.
        body = json.dumps({"header": header, "parent_header": {}, "metadata": {},
                           "content": content, "channel": "shell"}).encode()
        nbufs = 1 + len(buffers)
        offsets = [4 * (nbufs + 1)]
        for part in [body] + buffers[:-1]:
            offsets.append(offsets[-1] + len(part))
        ch.ws.send_binary(struct.pack(">%dI" % (nbufs + 1), nbufs, *offsets) + body +
                          b"".join(buffers))
    while True:
        m = ch.recv(timeout=30)
        if m["msg_type"] == "comm_msg" and m["content"]["comm_id"] == comm_id:
            break
    assert m["content"]["data"] == {"echo": {"hello": 1}, "lengths": [9, 6]}
    assert [bytes(b) for b in m["buffers"]] == [b"yranib\x02\x01\x00", b"dnoces"]
    ch.close()


def test_kernel_opened_comm_reaches_client(gateway, kernel):
    ch = gateway.connect(kernel)
    _, outputs = ch.execute("from ipykernel.comm import Comm\n"
                            "c = Comm(target_name='from-kernel', data={'x': 1})")
    opened = outputs_of(outputs, "comm_open")
    assert opened and opened[0]["content"]["target_name"] == "from-kernel"
    assert opened[0]["content"]["data"] == {"x": 1}
    ch.close()


def test_display_update_and_clear_output(gateway, kernel):
    ch = gateway.connect(kernel)
    _, outputs = ch.execute("h = display('first', display_id=True)\nh.update('second')\n"
                            "from IPython.display import clear_output\nclear_output(wait=True)")
    types = [m["msg_type"] for m in outputs]
    assert "display_data" in types and "update_display_data" in types
    assert "clear_output" in types
    update = outputs_of(outputs, "update_display_data")[0]["content"]
    assert update["data"]["text/plain"] == "'second'"
    assert update["transient"]["display_id"] == \
        outputs_of(outputs, "display_data")[0]["content"]["transient"]["display_id"]
    assert outputs_of(outputs, "clear_output")[0]["content"] == {"wait": True}
    ch.close()


def request(ch, msg_type, content, **overrides):
    msg = {"header": {"msg_id": uuid.uuid4().hex, "msg_type": msg_type, "username": "t",
                      "session": ch.session, "date": "2026-01-01T00:00:00Z", "version": "5.3"},
           "parent_header": {}, "metadata": {}, "content": content, "channel": "shell"}
    for key, value in overrides.items():
        if value is None:
            msg.pop(key, None)
        else:
            msg[key] = value
    return msg


def reply_to(ch, msg_id, timeout=30):
    while True:
        m = ch.recv(timeout=timeout)
        if m["channel"] == "shell" and m["parent_header"].get("msg_id") == msg_id:
            return m


def test_lenient_input(gateway, kernel):
    ch = gateway.connect(kernel)
    # No channel (shell is meant), buffers as {} or absent, a float date.
    variants = [dict(channel=None), dict(buffers={}), dict(buffers=None),
                dict(metadata=None, parent_header=None)]
    for overrides in variants:
        msg = request(ch, "kernel_info_request", {}, **overrides)
        ch.ws.send(json.dumps(msg))
        assert reply_to(ch, msg["header"]["msg_id"])["msg_type"] == "kernel_info_reply"
    msg = request(ch, "kernel_info_request", {})
    msg["header"]["date"] = 1767225600.25
    ch.ws.send(json.dumps(msg))
    assert reply_to(ch, msg["header"]["msg_id"])["msg_type"] == "kernel_info_reply"
    # Bytes that are not UTF-8 inside a text frame (Jupyter Server's own
    # gateway proxy sends those) become U+FFFD instead of breaking the frame.
    msg = request(ch, "execute_request", {"code": "s = 'PLACEHOLDER'; print(len(s))",
                                          "silent": False})
    raw = json.dumps(msg).encode().replace(b"PLACEHOLDER", b"ab\xff\xfecd")
    ch.ws.send(raw, opcode=websocket.ABNF.OPCODE_TEXT)
    reply = reply_to(ch, msg["header"]["msg_id"])
    assert reply["content"]["status"] == "ok"
    ch.close()


SIZE_TARGET = """
def _size_target(comm, open_msg):
    comm.on_msg(lambda msg: comm.send({'len': len(msg['content']['data']['blob'])}))
get_ipython().kernel.comm_manager.register_target('size', _size_target)
"""


def test_large_messages_both_ways(gateway, kernel):
    size = 64 * 1024 * 1024
    ch = gateway.connect(kernel)
    reply, _ = ch.execute(SIZE_TARGET)
    assert reply["content"]["status"] == "ok"
    # Client to kernel: a 64 MiB comm message (a comm, not code: compiling
    # 64 MiB of source costs IPython more than the kernel's memory limit).
    comm_id = uuid.uuid4().hex
    ch.send("comm_open", {"comm_id": comm_id, "target_name": "size", "data": {}})
    ch.send("comm_msg", {"comm_id": comm_id, "data": {"blob": "a" * size}})
    while True:
        m = ch.recv(timeout=120)
        if m["msg_type"] == "comm_msg" and m["content"]["comm_id"] == comm_id:
            break
    assert m["content"]["data"] == {"len": size}
    # Kernel to client: a 64 MiB display_data.
    reply, outputs = ch.execute("from IPython.display import display\n"
                                f"display({{'text/plain': 'a' * {size}}}, raw=True)", timeout=120)
    shown = outputs_of(outputs, "display_data")[0]["content"]["data"]["text/plain"]
    assert len(shown) == size and shown[:3] == "aaa"
    ch.close()


def test_message_above_limit_closes_with_1009():
    from gbclient import start_gateway
    gw = start_gateway("--max-message-bytes", "100000")
    try:
        kid = gw.start_kernel()
        ch = gw.connect(kid)
        ch.ws.send(json.dumps(request(ch, "execute_request", {"code": "#" + "x" * 200000})))
        # (Statuses of the kernel's start may come first.)
        opcode = None
        while opcode != websocket.ABNF.OPCODE_CLOSE:
            opcode, data = ch.ws.recv_data(control_frame=True)
        assert struct.unpack(">H", data[:2])[0] == 1009
        ok = gw.connect(kid)
        _, outputs = ok.execute("2 + 2")
        assert outputs_of(outputs, "execute_result")[0]["content"]["data"]["text/plain"] == "4"
    finally:
        gw.stop()


def test_base_url():
    from gbclient import start_gateway
    gw = start_gateway("--base-url", "/gb/")
    try:
        status, body, _ = gw.request("GET", "/gb/api")
        assert status == 200 and "version" in body
        status, _, _ = gw.request("GET", "/api")
        assert status == 404
        status, model, headers = gw.request("POST", "/gb/api/kernels", {})
        assert status == 201 and headers["Location"] == f"/gb/api/kernels/{model['id']}"
        status, specs, _ = gw.request("GET", "/gb/api/kernelspecs")
        assert specs["kernelspecs"]["python3"]["resources"]["logo-64x64"].startswith(
            "/gb/kernelspecs/")
        ws = websocket.create_connection(
            f"ws://127.0.0.1:{gw.port}/gb/api/kernels/{model['id']}/channels?token={gw.token}")
        ws.close()
        with pytest.raises(websocket.WebSocketBadStatusException):
            websocket.create_connection(
                f"ws://127.0.0.1:{gw.port}/api/kernels/{model['id']}/channels?token={gw.token}")
    finally:
        gw.stop()


def close_or_reply(ch, msg_id, timeout=20):
    """('close', code, reason) or ('reply', reply, idle seen) for msg_id."""
    reply, idle, deadline = None, False, time.time() + timeout
    while time.time() < deadline:
        ch.ws.settimeout(deadline - time.time())
        opcode, data = ch.ws.recv_data(control_frame=True)
        if opcode == websocket.ABNF.OPCODE_CLOSE:
            return ("close", struct.unpack(">H", data[:2])[0], data[2:].decode())
        if opcode not in (websocket.ABNF.OPCODE_TEXT, websocket.ABNF.OPCODE_BINARY):
            continue
        m = decode_v1(data) if ch.v1 else json.loads(data)
        if m["parent_header"].get("msg_id") != msg_id:
            continue
        # (Shell and iopub travel apart: the idle may come first.)
        if m["channel"] == "shell":
            reply = m
        elif m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
            idle = True
        if reply and idle:
            return ("reply", reply, True)
    raise AssertionError(f"no answer at all to {msg_id}")


def test_messages_no_kernel_answers_get_an_answer(gateway, kernel):
    """Each of these used to get nothing back: the kernel drops them."""
    def header(msg_type="execute_request"):
        return {"msg_id": uuid.uuid4().hex, "msg_type": msg_type, "username": "t",
                "session": "s", "date": "2026-01-01T00:00:00Z", "version": "5.3"}

    refused = {
        "no content": ({}, None),
        "no code": ({}, {"silent": False}),
        "code 42": ({}, {"code": 42, "silent": False}),
        "unknown type": ({"msg_type": "bogus_request"}, {}),
    }
    for name, (hdr_over, content) in refused.items():
        ch = gateway.connect(kernel)
        h = header()
        h.update(hdr_over)
        msg = {"header": h, "parent_header": {}, "metadata": {}, "channel": "shell"}
        if content is not None:
            msg["content"] = content
        ch.ws.send(json.dumps(msg))
        kind, reply, _ = close_or_reply(ch, h["msg_id"])
        assert kind == "reply", (name, kind, reply)
        want = "bogus_reply" if name == "unknown type" else "execute_reply"
        assert reply["msg_type"] == want, name
        assert reply["content"]["status"] == "error", name
        assert reply["content"]["ename"] in ("BadRequest", "UnknownMessageType"), name
        ch.close()

    # No channel means shell (DESIGN.md, as Jupyter Server reads it): an
    # execute_request without one, and without silent (which the spec
    # defaults and ipykernel requires), runs.
    ch = gateway.connect(kernel)
    h = header()
    ch.ws.send(json.dumps({"header": h, "parent_header": {}, "metadata": {},
                           "content": {"code": "print('ran')"}}))
    kind, reply, _ = close_or_reply(ch, h["msg_id"])
    assert (kind, reply["content"]["status"]) == ("reply", "ok")
    ch.close()

    # A header without msg_type cannot be answered: 1007 and the reason.
    ch = gateway.connect(kernel)
    h = header()
    del h["msg_type"]
    ch.ws.send(json.dumps({"header": h, "content": {}, "channel": "shell"}))
    kind, code, reason = close_or_reply(ch, h["msg_id"])
    assert (kind, code) == ("close", 1007) and "msg_type" in reason, (kind, code, reason)

    # v1: a header that is not JSON, likewise.
    ch = gateway.connect(kernel, subprotocol=V1)
    ch.ws.send_binary(encode_v1("shell", [b"{not json", b"{}", b"{}", b'{"code": "1"}']))
    kind, code, reason = close_or_reply(ch, "none")
    assert (kind, code) == ("close", 1007) and "header is not a JSON object" in reason, reason

    # v1: an execute_request whose code is not a string is refused, not dropped.
    ch = gateway.connect(kernel, subprotocol=V1)
    h = header()
    ch.ws.send_binary(encode_v1("shell", [json.dumps(p).encode()
                                          for p in (h, {}, {}, {"code": 42, "silent": False})]))
    kind, reply, _ = close_or_reply(ch, h["msg_id"])
    assert kind == "reply" and reply["content"]["ename"] == "BadRequest", reply
    # And the kernel still answers a good one on the same connection.
    reply, outputs = ch.execute("6 * 7")
    assert outputs_of(outputs, "execute_result")[0]["content"]["data"]["text/plain"] == "42"
    ch.close()
