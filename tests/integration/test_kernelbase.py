"""kernels/glovebox_kernelbase.py, the base of Glovebox's own Python-hosted
kernels (bash, Java): after a failed cell, the requests that had reached
the kernel are aborted and no later one.

Run on the host, in this process, with ipykernel's real message loop over
real ZeroMQ sockets: what is checked is the order of that loop, which the
gateway cannot force. A kernel that is slow to get back to its loop after
a failed cell (preempted, under load) is made so on purpose: its idle
status, the sign clients wait for, is followed by a pause, during which the
client sends its next cell."""
import asyncio
import logging
import os
import sys
import time

import zmq
from jupyter_client.session import Session
from zmq.eventloop.zmqstream import ZMQStream

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "kernels"))
from glovebox_kernelbase import GloveboxKernel  # noqa: E402


class Probe(GloveboxKernel):
    """A kernel whose cell "fail" fails after a moment; any other succeeds."""
    implementation = language = "probe"
    implementation_version = language_version = "1"
    language_info = {"name": "probe"}
    banner = ""

    def do_execute(self, code, silent, store_history=True, user_expressions=None,
                   allow_stdin=False):
        if code == "fail":
            time.sleep(0.3)  # long enough for a cell sent behind it to arrive
            return {"status": "error", "ename": "Failed", "evalue": "", "traceback": [],
                    "execution_count": self.execution_count}
        return {"status": "ok", "execution_count": self.execution_count, "payload": [],
                "user_expressions": {}}


async def replies_to(cells_before, cell_after_idle):
    """Sends "fail" then cells_before at once (queued behind it), and
    cell_after_idle once the kernel has said it is idle after "fail", while
    it is slow to go on. Returns each cell's reply status, in order."""
    ctx = zmq.Context()
    shell, control = ctx.socket(zmq.ROUTER), ctx.socket(zmq.ROUTER)
    port = shell.bind_to_random_port("tcp://127.0.0.1")
    control.bind_to_random_port("tcp://127.0.0.1")
    iopub = ctx.socket(zmq.PUB)
    iopub.bind_to_random_port("tcp://127.0.0.1")
    client = ctx.socket(zmq.DEALER)
    client.connect(f"tcp://127.0.0.1:{port}")
    session = Session(key=b"secret")
    kernel = Probe(session=session, shell_stream=ZMQStream(shell),
                   control_stream=ZMQStream(control), iopub_socket=iopub,
                   log=logging.getLogger("probe"))
    publish = kernel._publish_status

    def slow_after_idle(status, channel, parent=None):
        publish(status, channel, parent)
        parent = parent or kernel.get_parent(channel)
        if status == "idle" and parent.get("content", {}).get("code") == "fail":
            session.send(client, "execute_request", {"code": cell_after_idle, "silent": False})
            time.sleep(0.3)  # it arrives while the kernel is away from its loop

    kernel._publish_status = slow_after_idle
    kernel.start()
    sent = {}
    for code in ["fail"] + cells_before:
        sent[session.send(client, "execute_request", {"code": code, "silent": False})
             ["header"]["msg_id"]] = code
    replies = []
    deadline = time.time() + 20
    try:
        while len(replies) < len(cells_before) + 2 and time.time() < deadline:
            if client.poll(0):
                _, msg = session.recv(client, zmq.NOBLOCK)
                replies.append((sent.get(msg["parent_header"]["msg_id"], cell_after_idle),
                                msg["content"]["status"]))
            await asyncio.sleep(0.01)
    finally:
        for s in (client, iopub):
            s.close(0)
        kernel.shell_stream.close()
        kernel.control_stream.close()
    return replies


def test_a_cell_sent_after_a_failed_cells_idle_runs():
    # ipykernel 6.17's own base aborts "after" here: its abort ends from a
    # timer, which the request that came in the pause beats.
    assert asyncio.run(replies_to([], "after")) == [("fail", "error"), ("after", "ok")]


def test_cells_queued_behind_a_failed_cell_are_aborted():
    replies = asyncio.run(replies_to(["queued 1", "queued 2"], "after"))
    assert replies == [("fail", "error"), ("queued 1", "aborted"), ("queued 2", "aborted"),
                       ("after", "ok")], replies
