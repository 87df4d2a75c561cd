"""The bounds of what the gateway asks of the kernel-host: a command line,
an environment, a working directory. Just under each bound works; just over,
the client gets a clear refusal naming the bound, at once, and nothing is
left behind (no phantom in commands.list). A request the kernel-host
refuses anyway is answered, never dropped. Real gateway, real sandboxes;
the kernel-host's own answers are checked by talking to it directly."""
import array
import base64
import json
import os
import socket
import struct
import subprocess
import tempfile
import time
import urllib.request

import pytest

from gbclient import (KERNEL_HOST, connect_frames, e2b_create, e2b_kill, envd_envelope,
                      envd_headers, envd_rpc, value_of)

# protocol/hostmsg.h
MAX_STRING = 128 * 1024 - 1  # one argument or NAME=value: Linux's MAX_ARG_STRLEN less its NUL
MAX_EXEC_BYTES = 1024 * 1024  # argv and env together, each string with its NUL
MAX_ENV_VARS = 512  # an E2B sandbox's envVars (half of a process's 1024)


def start_command(gw, sb, process, timeout=20):
    """An envd Start stream read to its end: (frames, seconds it took).
    A stream that does not end within timeout fails the test (the hang)."""
    req = urllib.request.Request(gw.base + "/e2b/process.Process/Start", method="POST",
                                 data=envd_envelope({"process": process}))
    req.add_header("Content-Type", "application/connect+json")
    for k, v in envd_headers(sb).items():
        req.add_header(k, v)
    start = time.time()
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        body = resp.read()
    return connect_frames(body), time.time() - start


def outcome(frames):
    """(stdout, exit code) of a command that ran, or ("error", message)."""
    out, code = b"", None
    for flags, frame in frames:
        if flags & 2:
            if "error" in frame:
                return "error", frame["error"]
            break
        event = frame.get("event", {})
        out += base64.b64decode(event.get("data", {}).get("stdout", ""))
        if "end" in event:
            code = event["end"].get("exitCode")
    return out.decode(), code


@pytest.fixture(scope="module")
def sandbox(gateway):
    sb = e2b_create(gateway)
    yield sb
    e2b_kill(gateway, sb)


def listed(gw, sb):
    status, reply = envd_rpc(gw, sb, "process.Process/List", {})
    assert status == 200, reply
    return reply["processes"]


def test_a_command_line_of_the_largest_size_runs(gateway, sandbox):
    # "echo ok #xxx...": exactly MAX_STRING bytes in one argument.
    line = "echo ok #" + "x" * (MAX_STRING - 9)
    frames, _ = start_command(gateway, sandbox, {"cmd": "/bin/bash", "args": ["-c", line]})
    assert outcome(frames) == ("ok\n", 0)


def test_a_command_line_one_byte_over_is_refused_at_once_naming_the_bound(gateway, sandbox):
    line = "echo ok #" + "x" * (MAX_STRING - 8)
    frames, took = start_command(gateway, sandbox, {"cmd": "/bin/bash", "args": ["-c", line]})
    kind, error = outcome(frames)
    assert kind == "error", frames
    assert error["code"] == "invalid_argument", error
    assert "process.args[1]" in error["message"] and str(MAX_STRING) in error["message"], error
    assert "MAX_ARG_STRLEN" in error["message"], error
    assert took < 5
    assert listed(gateway, sandbox) == [], "no phantom process"


def test_a_command_line_is_passed_on_as_it_is(gateway, sandbox):
    # Only a kernelspec's argv has {connection_file} and {resource_dir}
    # filled in; a command's words are the client's.
    frames, _ = start_command(gateway, sandbox, {
        "cmd": "/bin/echo", "args": ["{connection_file}", "{resource_dir}", "{x}"]})
    assert outcome(frames) == ("{connection_file} {resource_dir} {x}\n", 0)


def test_an_env_var_of_the_largest_size_reaches_the_command(gateway, sandbox):
    value = "v" * (MAX_STRING - len("BIG="))
    frames, _ = start_command(gateway, sandbox, {"cmd": "/bin/bash",
                                                 "args": ["-c", "echo ${#BIG}"],
                                                 "envs": {"BIG": value}})
    assert outcome(frames) == (f"{len(value)}\n", 0)
    frames, _ = start_command(gateway, sandbox, {"cmd": "/bin/bash", "args": ["-c", "true"],
                                                 "envs": {"BIG": value + "v"}})
    kind, error = outcome(frames)
    assert kind == "error" and error["code"] == "invalid_argument", frames
    assert "process.envs[BIG]" in error["message"] and str(MAX_STRING) in error["message"]


def test_env_names_a_process_cannot_have_are_refused(gateway, sandbox):
    for name in ("A=B", ""):
        frames, _ = start_command(gateway, sandbox, {"cmd": "/bin/true", "envs": {name: "1"}})
        kind, error = outcome(frames)
        assert kind == "error" and error["code"] == "invalid_argument", (name, frames)
        assert "name" in error["message"]


def test_a_command_whose_whole_environment_is_past_the_bound_is_refused(gateway):
    # The sandbox's envVars (under their own bound) and the command's envs
    # together pass 1 MiB: refused with the total named, before starting.
    chunk = "e" * 100000
    env_vars = {f"S{i}": chunk for i in range(5)}
    status, sb, _ = gateway.request("POST", "/e2b/v2/sandboxes", {"envVars": env_vars},
                                    token="", headers={"X-API-KEY": gateway.token})
    assert status == 201, sb
    try:
        frames, _ = start_command(gateway, sb, {"cmd": "/bin/bash",
                                                "args": ["-c", "echo ${#S4}"]})
        assert outcome(frames) == ("100000\n", 0), "the envVars reach commands"
        envs = {f"C{i}": chunk for i in range(6)}
        frames, took = start_command(gateway, sb, {"cmd": "/bin/true", "envs": envs})
        kind, error = outcome(frames)
        assert kind == "error" and error["code"] == "invalid_argument", frames
        assert str(MAX_EXEC_BYTES) in error["message"], error
        assert took < 5
        assert listed(gateway, sb) == []
    finally:
        e2b_kill(gateway, sb)


def test_a_cwd_longer_than_a_path_is_refused_not_cut(gateway, sandbox):
    frames, _ = start_command(gateway, sandbox, {"cmd": "/bin/pwd",
                                                 "cwd": "/" + "d" * 5000})
    kind, error = outcome(frames)
    assert kind == "error" and error["code"] == "invalid_argument", frames
    assert "process.cwd" in error["message"] and "4095" in error["message"]


def test_a_command_the_kernel_host_cannot_start_is_answered_and_not_listed(gateway, sandbox):
    frames, took = start_command(gateway, sandbox, {"cmd": "/bin/true",
                                                    "cwd": "/no/such/directory"})
    kind, error = outcome(frames)
    assert kind == "error" and error["code"] == "invalid_argument", frames
    assert took < 5
    assert listed(gateway, sandbox) == []


def create_with_env(gateway, env_vars):
    return gateway.request("POST", "/e2b/v2/sandboxes", {"envVars": env_vars}, token="",
                           headers={"X-API-KEY": gateway.token})


def test_sandbox_env_vars_up_to_their_bounds(gateway):
    value = "w" * (MAX_STRING - len("BIG="))
    status, sb, _ = create_with_env(gateway, {"BIG": value})
    assert status == 201, sb
    try:
        frames, _ = start_command(gateway, sb, {"cmd": "/bin/bash",
                                                "args": ["-c", "echo ${#BIG}"]})
        assert outcome(frames) == (f"{len(value)}\n", 0)
    finally:
        e2b_kill(gateway, sb)
    for env_vars, named in (({"BIG": value + "w"}, str(MAX_STRING)),
                            ({f"V{i}": "1" for i in range(MAX_ENV_VARS + 1)}, str(MAX_ENV_VARS)),
                            ({"A=B": "1"}, "without '='")):
        status, reply, _ = create_with_env(gateway, env_vars)
        assert status == 400, (status, reply)
        assert named in reply["message"], reply


def test_a_kernel_env_past_the_old_4_kib_and_past_the_bound(gateway):
    value = "k" * 20000
    status, model, _ = gateway.request("POST", "/api/kernels",
                                       {"name": "python3", "env": {"LONG": value}})
    assert status == 201, model
    try:
        assert value_of(gateway, model["id"], "len(__import__('os').environ['LONG'])") == 20000
    finally:
        gateway.request("DELETE", f"/api/kernels/{model['id']}")
    status, reply, _ = gateway.request("POST", "/api/kernels",
                                       {"name": "python3", "env": {"LONG": "k" * MAX_STRING}})
    assert status == 400, reply
    assert str(MAX_STRING) in reply["message"], reply


# ---- the kernel-host itself ------------------------------------------------

HOSTMSG = {"SANDBOX_CREATE": 1, "START": 3, "CONNECT": 6, "SANDBOX_FAILED": 101,
           "START_FAILED": 104, "HELLO": 106, "CONNECTED": 107}
ID = "1b4e28ba-2fa1-41d2-883f-0016d3cca427"
SANDBOX_ID = "6fa459ea-ee8a-4ca4-894e-db77e160355e"


class KernelHost:
    """glovebox-kernel-host on a SOCK_SEQPACKET socketpair, as the gateway
    starts it, speaking protocol/hostmsg.h."""

    def __init__(self):
        self.runtime = tempfile.mkdtemp(prefix="glovebox-bounds-")
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.proc = subprocess.Popen([KERNEL_HOST, "--runtime-dir", self.runtime,
                                      "--fd", str(theirs.fileno())],
                                     pass_fds=[theirs.fileno()], stderr=subprocess.PIPE)
        theirs.close()
        kind, body = self.recv(30)
        assert kind == HOSTMSG["HELLO"], (kind, body)

    def send(self, kind, body, fds=()):
        text = json.dumps(body).encode()
        head = struct.pack("=II", kind, len(text))
        if len(text) > 32 * 1024:  # the way hostmsg_send sends a large body
            fd = os.memfd_create("test-bounds", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
            os.write(fd, text)
            import fcntl
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW |
                        fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SEAL)
            head = struct.pack("=II", kind, len(text) | 0x80000000)
            self.sock.sendmsg([head], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                        array.array("i", [fd]))])
            os.close(fd)
            return
        self.sock.sendmsg([head + text])

    def recv(self, timeout=10):
        """The next message: (type, body); fails after timeout (the hang)."""
        self.sock.settimeout(timeout)
        data, anc, _, _ = self.sock.recvmsg(1 << 20, socket.CMSG_SPACE(16))
        for level, kind, fds in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                for fd in array.array("i", fds[:len(fds) - len(fds) % 4]):
                    os.close(fd)
        kind, length = struct.unpack("=II", data[:8])
        return kind, json.loads(data[8:8 + length])

    def close(self):
        self.sock.close()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        subprocess.run(["rm", "-rf", self.runtime])


@pytest.fixture
def kernel_host():
    kh = KernelHost()
    yield kh
    kh.close()


def good_start(**change):
    body = {"id": ID, "sandbox_id": SANDBOX_ID, "kernel": False, "kernelspec_dir": "",
            "key": "", "cwd": "", "argv": ["/bin/true"], "env": []}
    body.update(change)
    return body


def test_the_kernel_host_answers_a_start_it_refuses(kernel_host):
    # Past the bound of one argument: the request the old gateway sent for
    # a command line over 4 KiB, which the kernel-host dropped in silence.
    cases = [good_start(argv=["/bin/bash", "-c", "x" * (MAX_STRING + 1)]),
             good_start(env=["NOEQUALS"]),
             good_start(cwd="relative/path"),
             good_start(env=["E=" + "e" * 100000] * 11)]  # past MAX_EXEC_BYTES
    for body in cases:
        kernel_host.send(HOSTMSG["START"], body)
        kind, reply = kernel_host.recv()
        assert kind == HOSTMSG["START_FAILED"], (kind, reply)
        assert reply["id"] == ID and reply["error"] == 22, reply  # EINVAL
        assert "refused" in reply["message"], reply


def test_the_kernel_host_answers_a_sandbox_and_a_connect_it_refuses(kernel_host):
    kernel_host.send(HOSTMSG["SANDBOX_CREATE"], {
        "sandbox_id": SANDBOX_ID, "sandbox": True, "ro_paths": ["relative"],
        "limits": {"memory_mb": 64, "cpu_millis": 1000, "pids": 16, "disk_mb": 16}})
    kind, reply = kernel_host.recv()
    assert kind == HOSTMSG["SANDBOX_FAILED"] and reply["id"] == SANDBOX_ID, (kind, reply)
    kernel_host.send(HOSTMSG["CONNECT"], {"id": ID, "sandbox_id": SANDBOX_ID, "port": 0})
    kind, reply = kernel_host.recv()
    assert kind == HOSTMSG["CONNECTED"] and reply == {"id": ID, "error": 22}, (kind, reply)


def test_a_start_of_the_largest_size_reaches_the_kernel_host(kernel_host):
    # A large body comes in a sealed memfd; within bounds, the request is
    # read whole and acted on: no such sandbox here, which it says.
    kernel_host.send(HOSTMSG["START"],
                     good_start(argv=["/bin/bash", "-c", "\u0001" * MAX_STRING]))
    kind, reply = kernel_host.recv()
    assert kind == HOSTMSG["START_FAILED"] and reply["id"] == ID, (kind, reply)
    assert "refused" not in reply["message"], reply
