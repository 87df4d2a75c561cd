"""kernel-host/zygote_wire.c, the C wire of the zygote kernels' loop, as
the extension module the build makes of it (glovebox-zygote.so has it
built in): what it sends is what jupyter_client's Session sends, and Session
reads it; what it reads is what Session reads, and it refuses what
Session refuses. Its use in the loop's kernels is tested in sandboxes
(tests/sandbox/test_zygote_loop.py)."""
import datetime
import json
import json.encoder
import json.scanner
import os
import re
import sys
import warnings

import pytest
import zmq
from jupyter_client import jsonutil
from jupyter_client.adapter import adapt
from jupyter_client.session import DONE, Session, json_packer

from gbclient import BUILD

WIRE_DIR = os.path.join(BUILD, "kernel-host")
if not os.path.exists(os.path.join(WIRE_DIR, "_glovebox_wire.so")):
    pytest.skip("the zygote is not built (no python3-dev)", allow_module_level=True)
sys.path.insert(0, WIRE_DIR)
import _glovebox_wire  # noqa: E402

KEY = b"k" * 32
# zygote_kernel.py's wire_tools, as the zygote builds them.
TOOLS = (json.encoder.c_make_encoder, jsonutil.json_default, json.encoder.c_encode_basestring,
         json.scanner.c_make_scanner(json.JSONDecoder()), json_packer, adapt, DONE,
         zmq.ZMQError)
CONTENTS = [
    {},
    {"name": "stdout", "text": "plain\n"},
    {"text": "é ü 漢字 🙂 \x00 \x1f \" \\ \u2028 \udc80"},  # a lone low surrogate: surrogateescape
    {"nested": [1, -2, 3.5, 1e300, 2 ** 70, True, False, None, {"a": [[]]}], "": ""},
    {"when": datetime.datetime(2020, 1, 2, 3, 4, 5, 6, tzinfo=datetime.timezone.utc)},
    {"raw": b"\x00\xffbytes"},
]


@pytest.fixture
def pair():
    ctx = zmq.Context()
    a, b = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    a.bind("inproc://wire")
    b.connect("inproc://wire")
    yield a, b
    ctx.destroy(0)


def session(key=KEY, **kw):
    return Session(key=key, username="someone", **kw)


def wire_of(s, size=None):
    return _glovebox_wire.Wire(s.key, s.session, s.username, s.digest_history,
                               s.digest_history_size if size is None else size, TOOLS)


def frames(sock):
    assert sock.poll(2000), "nothing was sent"
    return sock.recv_multipart()


def blank_id(header):
    """A header's bytes with its message's own id and date blanked."""
    return re.sub(rb'"(msg_id|date)": "[^"]*"', rb'"\1": ""', header)


@pytest.mark.parametrize("prepared", [False, True])
def test_what_it_sends_is_what_session_sends(pair, prepared):
    a, b = pair
    if prepared:
        _glovebox_wire.prepare()
    s = session()
    w = wire_of(s)
    parent = s.msg("execute_request", {"code": "1"})
    for content in CONTENTS:
        for ident in (None, b"one", [b"one", b"two"]):
            for par in (parent, parent["header"], None, {}):
                msg = w.send(a.underlying, "stream", content, par, ident, {"m": [1]})
                ours = frames(b)
                s.send(a, "stream", content, par, ident=ident, metadata={"m": [1]})
                theirs = frames(b)
                n = len(ours) - 5
                assert ours[:n - 1] == theirs[:n - 1]  # identities, delimiter
                assert ours[n - 1] == b"<IDS|MSG>"
                # The same bytes: the header but for its id and date, the
                # parent header, metadata and content.
                assert blank_id(ours[n + 1]) == blank_id(theirs[n + 1])
                assert ours[n + 2:] == theirs[n + 2:]
                # Session reads it, signature checked, as the message returned.
                idents, rest = s.feed_identities(ours)
                got = s.deserialize(rest)
                assert got["msg_id"] == msg["msg_id"] == got["header"]["msg_id"]
                assert got["content"] == s.deserialize(s.feed_identities(theirs)[1])["content"]
                assert got["parent_header"].get("msg_id") == (parent["header"]["msg_id"]
                                                              if par else None)
                assert msg["tracker"] is DONE and msg["metadata"] == {"m": [1]}



def test_a_message_built_beforehand_is_sent_as_session_sends_it(pair):
    # A display's message, or ipykernel's execute_result, is built with
    # Session.msg before it is sent: the same frames, signature and all.
    a, b = pair
    s = session()
    w = wire_of(s)
    parent = s.msg("execute_request", {"code": "1"})
    for content in CONTENTS + [None, "text", b"{}"]:
        for ident in (None, b"one", [b"one", b"two"]):
            msg = s.msg("display_data", content, parent=parent, metadata={"m": [1]})
            same = dict(msg)
            assert w.send_message(a.underlying, msg, ident) is msg
            ours = frames(b)
            s.send(a, same, ident=ident)
            assert ours == frames(b)
            assert msg["tracker"] is DONE
    # No content at all: Session's {} too.
    msg = s.msg("display_data", {})
    del msg["content"]
    w.send_message(a.underlying, msg, None)
    ours = frames(b)
    s.send(a, dict(msg), ident=None)
    assert ours == frames(b)
    with pytest.raises(KeyError):
        w.send_message(a.underlying, {"header": {}, "parent_header": {}, "content": {}}, None)
    assert b.poll(100) == 0


def test_a_content_json_refuses_goes_to_sessions_packer(pair):
    a, b = pair
    s = session()
    w = wire_of(s)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        w.send(a.underlying, "x", {"v": float("nan")}, None, None, None)
    assert json.loads(frames(b)[-1]) == {"v": "nan"}  # json_clean's, with its warning
    assert "JSON-compliant" in str(seen[0].message)
    with pytest.raises(UnicodeEncodeError):  # as json_packer raises it
        w.send(a.underlying, "x", {"v": "\ud800"}, None, None, None)
    with pytest.raises(ValueError, match="Can't clean for JSON"):  # json_clean's
        w.send(a.underlying, "x", {"v": object()}, None, None, None)
    with pytest.raises(TypeError, match="Content incorrect type"):
        w.send(a.underlying, "x", 3, None, None, None)
    assert b.poll(100) == 0, "a refused message was half sent"
    # bytes and str contents go as they are, as Session sends them.
    w.send(a.underlying, "x", b'{"raw": 1}', None, None, None)
    assert frames(b)[-1] == b'{"raw": 1}'
    w.send(a.underlying, "x", '{"é": 1}', None, None, None)
    assert frames(b)[-1] == '{"é": 1}'.encode()


def test_what_it_reads_is_what_session_reads(pair):
    a, b = pair
    s, reader = session(), session()
    w = wire_of(reader)
    for content in CONTENTS:
        s.send(a, "execute_request", content, s.msg("kernel_info_request"),
               ident=[b"x"], metadata={"cellId": "c"}, buffers=[b"buf"])
        idents, rest = s.feed_identities(frames(b))
        ours = w.deserialize(rest)
        theirs = Session(key=KEY).deserialize(rest)
        assert idents == [b"x"]
        for k in ("msg_id", "msg_type", "metadata", "content"):
            assert ours[k] == theirs[k], k
        assert [bytes(m) for m in ours["buffers"]] == [b"buf"]
        # The dates stay the strings that came; Session makes datetimes.
        for k in ("header", "parent_header"):
            assert ours[k]["date"] == theirs[k]["date"].isoformat().replace("+00:00", "Z")
            assert {**ours[k], "date": 0} == {**theirs[k], "date": 0}


def test_it_refuses_what_session_refuses(pair):
    a, b = pair
    s = session()
    w = wire_of(session())
    s.send(a, "execute_request", {"code": "1"})
    _, rest = s.feed_identities(frames(b))
    w.deserialize(rest)
    with pytest.raises(ValueError, match="Duplicate Signature"):
        w.deserialize(rest)
    s.send(a, "execute_request", {"code": "2"})
    _, rest = s.feed_identities(frames(b))
    with pytest.raises(ValueError, match="Invalid Signature"):
        w.deserialize([b"0" * 64] + rest[1:])
    with pytest.raises(ValueError, match="Invalid Signature"):
        w.deserialize(rest[:4] + [b'{"code": "3"}'])
    with pytest.raises(ValueError, match="Unsigned Message"):
        w.deserialize([b""] + rest[1:])
    # Too few parts: Session signs what there is, which cannot match.
    with pytest.raises(IndexError):
        wire_of(session()).deserialize([])
    for short in (rest[:1], rest[:4]):
        with pytest.raises(ValueError, match="Invalid Signature"):
            wire_of(session()).deserialize(short)
    with pytest.raises(TypeError, match="malformed"):
        wire_of(session(key=b"")).deserialize(rest[:4])
    # Bad JSON, signed: refused, as json.loads refuses it.
    unsigned = wire_of(session(key=b""))
    good = rest[1:]
    for header, match in ((b"", "Expecting value"), (b"{} x", "Extra data"),
                          ("\ufeff{}".encode(), "BOM"), (" \ufeff{}".encode(), "Expecting value"),
                          (b'{"msg_id": "1"}', "msg_type"),
                          (b"[1]", "not an object")):
        with pytest.raises((ValueError, TypeError, KeyError), match=match):
            unsigned.deserialize([b""] + [header] + good[1:])
    # Whitespace around a part is JSON's, as json.loads reads it.
    assert unsigned.deserialize([b""] + [b" \n" + good[0] + b"\r\t"] + good[1:])["content"] \
        == {"code": "2"}


def test_the_signature_history_is_bounded_as_sessions(pair):
    a, b = pair
    s = session()
    reader = session()
    w = wire_of(reader, size=10)
    for i in range(30):
        s.send(a, "execute_request", {"code": str(i)})
        w.deserialize(s.feed_identities(frames(b))[1])
        assert len(reader.digest_history) <= 10
    # A history of size 0 keeps nothing: a replay is not caught (as Session).
    w0 = wire_of(session(), size=0)
    s.send(a, "execute_request", {"code": "again"})
    _, rest = s.feed_identities(frames(b))
    w0.deserialize(rest)
    w0.deserialize(rest)


def test_a_message_of_another_version_is_adapted_as_session_adapts_it(pair):
    a, b = pair
    s = session()
    old = s.msg("execute_request", {"code": "1", "user_variables": ["x"]})
    del old["header"]["version"]  # protocol 4: no version in the header
    s.send(a, old, ident=[b"x"])
    _, rest = s.feed_identities(frames(b))
    ours = wire_of(session()).deserialize(rest)
    theirs = Session(key=KEY).deserialize(rest)
    assert ours["content"] == theirs["content"]
    assert "user_expressions" in ours["content"]  # the 4 to 5 adapter's


def test_one_count_of_ids_and_nothing_sent_from_a_fork(pair):
    a, b = pair
    s = session()
    w = wire_of(s)
    first = w.next_id()
    sent = w.send(a.underlying, "x", {}, None, None, None)["msg_id"]
    frames(b)
    assert first.rsplit("_", 1)[1] == "0" and sent.rsplit("_", 1)[1] == "1"
    assert sent == f"{s.session}_{os.getpid()}_1"
    pid = os.fork()
    if pid == 0:
        os._exit(0 if w.send(a.underlying, "x", {}, None, None, None) is None else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert b.poll(300) == 0, "a forked child sent on the parent's socket"


def test_a_closed_socket_is_zmqs_error():
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PUB)
    handle = sock.underlying
    w = wire_of(session())
    ctx.destroy(0)
    with pytest.raises(zmq.ZMQError):
        w.send(handle, "x", {}, None, None, None)
    # No socket: the message is built and dropped (a closed IOPub's).
    assert w.send(0, "x", {"a": 1}, None, None, None)["content"] == {"a": 1}


def test_without_a_key_nothing_is_signed_or_checked(pair):
    a, b = pair
    s = session(key=b"")
    w = wire_of(s)
    w.send(a.underlying, "x", {}, None, None, None)
    got = frames(b)
    assert got[1] == b""
    assert w.deserialize([b"anything"] + got[2:])["msg_type"] == "x"


def loop_module():
    """kernel-host/zygote_kernel.py as a module of this interpreter (the
    zygote runs it as its bootstrap loads it); _glovebox_wire is importable."""
    import importlib.util
    path = os.path.join(os.path.dirname(__file__), "..", "..", "kernel-host", "zygote_kernel.py")
    spec = importlib.util.spec_from_file_location("glovebox_zygote_kernel", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_loops_session_sends_through_the_wire_and_falls_back_to_session(pair):
    a, b = pair
    loop = loop_module()
    loop.PREBUILT["wire_tools"] = loop.wire_tools()
    s = loop.WireSession(key=KEY, username="someone")
    assert s.wire is None
    iopub = loop.LockedSocket(a, loop.threading.RLock())
    s.connect_wire([(iopub, a.underlying, True)])
    assert type(s.wire).__name__ == "Wire"
    checker = session()
    sent = s.send(iopub, "stream", {"text": "x"}, ident=b"t")
    assert checker.deserialize(checker.feed_identities(frames(b))[1])["msg_id"] == sent["msg_id"]
    # A message built beforehand: through the wire too (Session's send
    # is not called), as Session sends it.
    built = s.msg("display_data", {"data": {"text/plain": "1"}}, parent=sent)
    send = loop.Session.send
    loop.Session.send = None
    try:
        assert s.send(iopub, built, ident=b"t") is built
    finally:
        loop.Session.send = send
    got = checker.deserialize(checker.feed_identities(frames(b))[1])
    assert got["msg_id"] == built["msg_id"] and got["parent_header"]["msg_id"] == sent["msg_id"]
    # Buffers: Session's own send, on the same count of ids.
    with_buffers = s.send(iopub, "comm_msg", {"data": {}}, buffers=[b"\x00"])
    got = frames(b)
    assert got[-1] == b"\x00" and with_buffers["msg_id"].rsplit("_", 1)[1] == "2"
    assert checker.deserialize(checker.feed_identities(got)[1])["msg_id"] == with_buffers["msg_id"]
    # Read back through the wire, and a replay refused.
    s2 = Session(key=KEY)
    s2.send(a, "execute_request", {"code": "1"})
    rest = s.feed_identities(frames(b))[1]
    assert s.deserialize(rest)["content"] == {"code": "1"}
    with pytest.raises(ValueError, match="Duplicate"):
        s.deserialize(rest)
    # A closed IOPub builds the message and drops it, as LockedSocket does;
    # so does a closed wire (the loop's end); a closed socket of its own is
    # refused.
    iopub.closed = True
    assert s.send(iopub, "stream", {"text": "y"})["content"] == {"text": "y"}
    iopub.closed = False
    s.close_wire()
    assert s.send(iopub, "stream", {"text": "z"})["msg_type"] == "stream"
    assert b.poll(100) == 0
    ctx = zmq.Context()
    other = ctx.socket(zmq.ROUTER)
    s.connect_wire([(other, other.underlying, False)])
    other.close()
    with pytest.raises(zmq.ZMQError):
        s.send(other, "x", {})
    ctx.term()
    # A new key (the gateway re-keys a restored copy): the wire signs and
    # checks with it, its ids counting on.
    s.connect_wire([(a, a.underlying, False)])
    first = s.send(a, "x", {})["msg_id"]
    frames(b)
    s.key = b"n" * 32
    rekeyed = session(key=b"n" * 32)
    after = s.send(a, "x", {})
    assert rekeyed.deserialize(rekeyed.feed_identities(frames(b))[1])["msg_id"] == after["msg_id"]
    assert int(after["msg_id"].rsplit("_", 1)[1]) == int(first.rsplit("_", 1)[1]) + 1
    rekeyed.send(a, "execute_request", {"code": "2"})
    assert s.deserialize(s.feed_identities(frames(b))[1])["content"] == {"code": "2"}
    session().send(a, "execute_request", {"code": "old key"})
    with pytest.raises(ValueError, match="Invalid Signature"):
        s.deserialize(s.feed_identities(frames(b))[1])
    # Configured beyond the wire: Session's alone.
    plain = loop.WireSession(key=KEY, signature_scheme="hmac-sha512")
    plain.connect_wire([(a, a.underlying, False)])
    assert plain.wire is None


def test_a_refused_identity_sends_nothing(pair):
    a, b = pair
    w = wire_of(session())
    with pytest.raises(TypeError):
        w.send(a.underlying, "x", {}, None, [b"id1", "not bytes"], None)
    with pytest.raises(ValueError, match="too many"):
        w.send(a.underlying, "x", {}, None, [b"i"] * 17, None)
    assert b.poll(100) == 0
    # The next message is whole, its identities its own.
    w.send(a.underlying, "x", {}, None, [b"id2"], None)
    got = frames(b)
    assert got[:2] == [b"id2", b"<IDS|MSG>"] and len(got) == 7


def test_a_wire_not_made_or_made_again_is_refused_not_crashed(pair):
    a, b = pair
    bare = _glovebox_wire.Wire.__new__(_glovebox_wire.Wire)
    for call in (bare.next_id, lambda: bare.send(a.underlying, "x", {}, None, None, None),
                 lambda: bare.deserialize([b""] * 5)):
        with pytest.raises(ValueError, match="not initialised"):
            call()
    s = session()
    w = wire_of(s)
    with pytest.raises(ValueError, match="key"):
        w.__init__(b"k" * 300, s.session, s.username, s.digest_history, 10, TOOLS)
    w.send(a.underlying, "x", {}, None, None, None)  # still its old key
    assert s.deserialize(s.feed_identities(frames(b))[1])["msg_type"] == "x"
    with pytest.raises(TypeError, match="keyword"):
        _glovebox_wire.Wire(KEY, s.session, s.username, s.digest_history, 10, tools=TOOLS)


def test_metadata_as_dict_update_takes_it(pair):
    a, b = pair
    w = wire_of(session())
    msg = w.send(a.underlying, "x", {}, None, None, [("k", 1)])
    assert msg["metadata"] == {"k": 1} and json.loads(frames(b)[-2]) == {"k": 1}


def test_a_forked_childs_ids_are_its_own(pair):
    w = wire_of(session())
    r, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.write(wfd, w.next_id().encode())
        os._exit(0)
    os.waitpid(pid, 0)
    child = os.read(r, 200).decode()
    assert child.split("_")[-2] == str(pid) and w.next_id().split("_")[-2] == str(os.getpid())
