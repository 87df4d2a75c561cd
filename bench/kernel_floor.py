"""The floor of a forked kernel's CPU to its first result: what a process
forked from a parent that imported what Glovebox's zygote imports (numpy,
pandas, matplotlib.pyplot, ipykernel) and built an IPython shell spends to
answer `1+1` over the Jupyter protocol with no kernel framework around the
shell: five ZMQ sockets, one Session, one poll loop, the shell's run_cell
and display formatter. No sandbox, no kernel application, no threads of
its own. Beside it, in the same parent, ipykernel's own start after the
same fork (its application, kernel, shell, threads), which is what a
Glovebox zygote kernel runs today (with the shell prebuilt).

Each kernel's CPU is its threads' run time (schedstat) read when the
client has the result; minor faults from /proc/PID/stat.

usage: /usr/bin/python3 bench/kernel_floor.py [N]   (N kernels of each; prints JSON)"""
import gc
import importlib
import json
import os
import socket
import statistics
import sys
import tempfile
import time

for _name in ("numpy", "pandas", "matplotlib.pyplot", "ipykernel.kernelapp",
              "ipykernel.ipkernel", "jupyter_client", "zmq"):
    importlib.import_module(_name)
from IPython.core.interactiveshell import InteractiveShell  # noqa: E402
from jupyter_client import BlockingKernelClient  # noqa: E402
from jupyter_client.session import Session  # noqa: E402

SHELL = InteractiveShell.instance()
SHELL.run_cell("0;", store_history=False)
SHELL.display_formatter.format(0)
gc.collect()
gc.freeze()


def free_ports(n):
    out, socks = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        out.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return out


def lean_kernel(info):
    """The loop: kernel_info and execute, the heartbeat echoed."""
    import zmq
    ctx = zmq.Context()
    socks = {}
    for name, kind in (("shell", zmq.ROUTER), ("iopub", zmq.PUB), ("hb", zmq.REP),
                       ("control", zmq.ROUTER), ("stdin", zmq.ROUTER)):
        socks[name] = ctx.socket(kind)
        socks[name].bind(f"tcp://127.0.0.1:{info[name + '_port']}")
    shell, iopub, hb = socks["shell"], socks["iopub"], socks["hb"]
    session = Session(key=info["key"].encode())
    poller = zmq.Poller()
    poller.register(shell, zmq.POLLIN)
    poller.register(hb, zmq.POLLIN)
    count = 0
    while True:
        for sock, _ in poller.poll():
            if sock is hb:
                hb.send(hb.recv())
                continue
            idents, parts = session.feed_identities(shell.recv_multipart())
            msg = session.deserialize(parts)
            session.send(iopub, "status", {"execution_state": "busy"}, parent=msg)
            if msg["header"]["msg_type"] == "execute_request":
                count += 1
                result = SHELL.run_cell(msg["content"]["code"], store_history=True).result
                data, metadata = SHELL.display_formatter.format(result)
                session.send(iopub, "execute_result", {"data": data, "metadata": metadata,
                                                       "execution_count": count}, parent=msg)
                session.send(shell, "execute_reply", {"status": "ok", "execution_count": count},
                             parent=msg, ident=idents)
            else:
                session.send(shell, "kernel_info_reply",
                             {"status": "ok", "protocol_version": "5.3"}, parent=msg, ident=idents)
            session.send(iopub, "status", {"execution_state": "idle"}, parent=msg)


def ipykernel_kernel(path):
    from ipykernel.kernelapp import IPKernelApp
    InteractiveShell.clear_instance()
    IPKernelApp.launch_instance(argv=["-f", path])


def cpu_and_faults(pid):
    ns = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
            ns += int(f.read().split()[0])
    with open(f"/proc/{pid}/stat") as f:
        minflt = int(f.read().rsplit(")", 1)[1].split()[7])
    return ns / 1e9, minflt


def one(kind, tmp):
    p = free_ports(5)
    info = dict(shell_port=p[0], iopub_port=p[1], stdin_port=p[2], control_port=p[3],
                hb_port=p[4], ip="127.0.0.1", key="k" * 32, transport="tcp",
                signature_scheme="hmac-sha256")
    path = os.path.join(tmp, "kernel.json")
    with open(path, "w") as f:
        json.dump(info, f)
    pid = os.fork()
    if pid == 0:
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            lean_kernel(info) if kind == "lean" else ipykernel_kernel(path)
        finally:
            os._exit(0)
    kc = BlockingKernelClient()
    kc.load_connection_info(info)
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=60)
        time.sleep(0.1)  # the IOPub subscription joined
        mid = kc.execute("1+1")
        while True:
            m = kc.get_iopub_msg(timeout=60)
            if m["msg_type"] == "execute_result" and m["parent_header"].get("msg_id") == mid:
                break
        return cpu_and_faults(pid)
    finally:
        kc.stop_channels()
        os.kill(pid, 9)
        os.waitpid(pid, 0)


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    tmp = tempfile.mkdtemp()
    runs = {"lean": [], "ipykernel": []}
    for _ in range(n):
        for kind in runs:
            runs[kind].append(one(kind, tmp))
    print(json.dumps({kind: {"cpu": statistics.median(r[0] for r in rs),
                             "minflt": statistics.median(r[1] for r in rs),
                             "samples": rs} for kind, rs in runs.items()}))


if __name__ == "__main__":
    main()
