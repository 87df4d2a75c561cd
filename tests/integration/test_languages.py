"""Kernels of every language, over REST and WebSocket: Glovebox's own bash
kernel, Debian's IRkernel (R needs /etc/R, which Glovebox binds), npm's
ijavascript and tslab (TCP-only: they run beside glovebox-kernel-bridge).
Also what makes a new language work without hand edits: kernelspecs found
again when installed after start, paths a kernelspec declares, and a
kernel that fails to start saying why."""
import json
import os
import pathlib
import shutil
import tempfile
import time

import pytest

from gbclient import outputs_of, start_gateway, stdout_of


def installed(name):
    return any(os.path.isfile(os.path.join(d, name, "kernel.json"))
               for d in ("/usr/share/jupyter/kernels", "/usr/local/share/jupyter/kernels"))


def spec_dir():
    """A kernelspec directory the sandbox's user may enter (pytest's
    tmp_path is not)."""
    path = pathlib.Path(tempfile.mkdtemp(prefix="glovebox-spec-"))
    os.chmod(path, 0o755)
    return path


def run_one(gw, name, code, timeout=60):
    status, model, _ = gw.request("POST", "/api/kernels", {"name": name})
    assert status == 201, model
    ch = gw.connect(model["id"])
    try:
        return ch.execute(code, timeout=timeout)
    finally:
        ch.close()
        gw.request("DELETE", f"/api/kernels/{model['id']}")


CASES = [
    ("bash", "echo $((6 * 7))", "42\n"),
    ("ir", "cat(6 * 7, '\\n')", "42 \n"),
    ("javascript", "console.log(6 * 7)", "42\n"),
    ("tslab", "const n: number = 6 * 7; console.log(n)", "42\n"),
]


@pytest.mark.parametrize("name,code,out", CASES)
def test_each_language(gateway, name, code, out):
    if name != "bash" and not installed(name):
        pytest.skip(f"kernelspec {name} is not installed (scripts/test installs it)")
    reply, outputs = run_one(gateway, name, code)
    assert reply["content"]["status"] == "ok", reply["content"]
    assert stdout_of(outputs) == out


def test_bash_keeps_state_and_reports_failures(gateway):
    kid = gateway.start_kernel(name="bash")
    ch = gateway.connect(kid)
    try:
        ch.execute("cd /tmp; x=41")
        _, outputs = ch.execute("echo $((x + 1)) $PWD; echo err >&2")
        assert stdout_of(outputs) == "42 /tmp\nerr\n"
        reply, outputs = ch.execute("ls /nonexistent")
        assert reply["content"]["status"] == "error"
        assert outputs_of(outputs, "error")[0]["content"]["evalue"] == "exit status 2"
        assert "No such file" in stdout_of(outputs)
        # An interrupt stops the foreground command; the shell lives on.
        msg_id = ch.send("execute_request", {"code": "echo sleeping; sleep 60", "silent": False})
        while True:
            m = ch.recv()
            if m["msg_type"] == "stream" and m["parent_header"]["msg_id"] == msg_id:
                break
        start = time.time()
        status, _, _ = gateway.request("POST", f"/api/kernels/{kid}/interrupt")
        assert status == 204
        reply, outputs = ch.collect(msg_id, timeout=10)
        assert time.time() - start < 5
        assert outputs_of(outputs, "error")[0]["content"]["ename"] == "KeyboardInterrupt"
        _, outputs = ch.execute("echo $x")
        assert stdout_of(outputs) == "41\n"
    finally:
        ch.close()
        gateway.request("DELETE", f"/api/kernels/{kid}")


def test_r_plots_and_data_frames(gateway):
    if not installed("ir"):
        pytest.skip("r-cran-irkernel is not installed (scripts/test installs it)")
    kid = gateway.start_kernel(name="ir")
    ch = gateway.connect(kid)
    try:
        _, outputs = ch.execute("plot(1:10)")
        data = outputs_of(outputs, "display_data")[0]["content"]["data"]
        assert "image/png" in data
        _, outputs = ch.execute("data.frame(city = c('Oslo', 'Rome'), sales = c(33, 76))")
        data = outputs_of(outputs, "display_data")[0]["content"]["data"]
        assert "<table" in data["text/html"] and "Oslo" in data["text/html"]
    finally:
        ch.close()
        gateway.request("DELETE", f"/api/kernels/{kid}")


def test_javascript_interrupt_and_restart(gateway):
    if not installed("javascript"):
        pytest.skip("ijavascript is not installed (scripts/test installs it)")
    kid = gateway.start_kernel(name="javascript")
    ch = gateway.connect(kid)
    try:
        ch.execute("var y = 41")
        _, outputs = ch.execute("y + 1")
        assert outputs_of(outputs, "execute_result")[0]["content"]["data"]["text/plain"] == "42"
        status, model, _ = gateway.request("POST", f"/api/kernels/{kid}/restart")
        assert status == 200 and model["execution_state"] == "idle"
        _, outputs = ch.execute("typeof y")
        assert outputs_of(outputs, "execute_result")[0]["content"]["data"]["text/plain"] == \
            "'undefined'"
    finally:
        ch.close()
        gateway.request("DELETE", f"/api/kernels/{kid}")


def test_failed_start_says_why():
    """The kernel's last output is in the error the client sees."""
    tmp = spec_dir()
    (tmp / "broken").mkdir()
    (tmp / "broken" / "kernel.json").write_text(json.dumps({
        "argv": ["/bin/sh", "-c", "echo starting; echo 'ldpaths: No such file' >&2; exit 3",
                 "{connection_file}"],
        "display_name": "Broken", "language": "broken"}))
    gw = start_gateway("--kernelspec-path", str(tmp))
    try:
        status, body, _ = gw.request("POST", "/api/kernels", {"name": "broken"})
        assert status == 500
        assert "exited with code 3" in body["message"], body
        assert "starting | ldpaths: No such file" in body["message"], body
    finally:
        gw.stop()
        shutil.rmtree(tmp)


def test_kernelspecs_found_again_after_start():
    """Installed, changed, removed while the gateway runs: no restart."""
    tmp = spec_dir()
    gw = start_gateway("--kernelspec-path", str(tmp))
    try:
        status, body, _ = gw.request("GET", "/api/kernelspecs/later")
        assert status == 404
        spec = json.load(open("/usr/share/jupyter/kernels/python3/kernel.json"))
        spec["display_name"] = "Later"
        (tmp / "later").mkdir()
        (tmp / "later" / "kernel.json").write_text(json.dumps(spec))
        status, body, _ = gw.request("GET", "/api/kernelspecs")
        assert body["kernelspecs"]["later"]["spec"]["display_name"] == "Later"
        kid = gw.start_kernel(name="later")
        ch = gw.connect(kid)
        _, outputs = ch.execute("print(6 * 7)")
        assert stdout_of(outputs) == "42\n"
        spec["display_name"] = "Later, changed"
        (tmp / "later" / "kernel.json").write_text(json.dumps(spec))
        status, body, _ = gw.request("GET", "/api/kernelspecs/later")
        assert body["spec"]["display_name"] == "Later, changed"
        shutil.rmtree(tmp / "later")
        status, body, _ = gw.request("GET", "/api/kernelspecs")
        assert "later" not in body["kernelspecs"]
        status, _, _ = gw.request("POST", "/api/kernels", {"name": "later"})
        assert status == 404
        # The kernel that runs it is not disturbed.
        _, outputs = ch.execute("print(1 + 1)")
        assert stdout_of(outputs) == "2\n"
        ch.close()
    finally:
        gw.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def test_declared_read_only_paths():
    """A kernelspec's metadata names host paths its kernel needs; they are
    bound read-only, and paths the sandbox mounts itself are refused."""
    tmp = spec_dir()
    data = pathlib.Path(tempfile.mkdtemp(prefix="glovebox-data-", dir="/var/tmp"))
    os.chmod(data, 0o755)
    (data / "answer.txt").write_text("42\n")
    os.chmod(data / "answer.txt", 0o644)
    spec = json.load(open("/usr/share/jupyter/kernels/python3/kernel.json"))
    spec["metadata"] = {"glovebox": {"read_only_paths": [str(data), "/run", "/proc/1"]}}
    (tmp / "withdata").mkdir()
    (tmp / "withdata" / "kernel.json").write_text(json.dumps(spec))
    gw = start_gateway("--kernelspec-path", str(tmp))
    try:
        kid = gw.start_kernel(name="withdata")
        ch = gw.connect(kid)
        _, outputs = ch.execute(
            f"print(open('{data}/answer.txt').read().strip())\n"
            f"try:\n    open('{data}/new', 'w')\nexcept OSError as e:\n    print(e.errno)\n"
            "import os; print(sorted(os.listdir('/run')))")
        assert stdout_of(outputs) == "42\n30\n['kernel']\n"
        ch.close()
        assert "read-only path /run refused" in gw.read_log()
    finally:
        gw.stop()
        shutil.rmtree(tmp)
        shutil.rmtree(data)


def test_a_death_names_the_last_output():
    """A ready kernel whose process exits with an error: its last output is
    in the reason its model and the run it ended give. (ipykernel itself
    sends its own fd 2 to iopub: a wrapper prints, as a launcher would.)"""
    tmp = spec_dir()
    (tmp / "dying").mkdir()
    (tmp / "dying" / "kernel.json").write_text(json.dumps({
        "argv": ["/bin/sh", "-c", "/usr/bin/python3 -m ipykernel_launcher -f \"$0\"; "
                 "echo 'fatal: the thing broke' >&2; exit 3", "{connection_file}"],
        "display_name": "Dying", "language": "python"}))
    gw = start_gateway("--kernelspec-path", str(tmp))
    try:
        kid = gw.start_kernel(name="dying")
        ch = gw.connect(kid)
        msg_id = ch.send("execute_request", {"code": "import os; os._exit(0)", "silent": False})
        while True:
            reply = ch.recv(30)
            if reply["channel"] == "shell" and reply["parent_header"].get("msg_id") == msg_id:
                break
        assert reply["content"]["status"] == "error"
        assert "exited with code 3; its last output: " in reply["content"]["evalue"], \
            reply["content"]
        assert "fatal: the thing broke" in reply["content"]["evalue"]
        deadline = time.time() + 30
        while True:
            _, model, _ = gw.request("GET", f"/api/kernels/{kid}")
            if model["execution_state"] == "idle" and model.get("reason"):
                break
            assert time.time() < deadline, model
            time.sleep(0.2)
        assert "fatal: the thing broke" in model["reason"], model
        ch.close()
    finally:
        gw.stop()
        shutil.rmtree(tmp)


def test_both_ipc_socket_namings():
    """A kernel that honours "transport": "ipc" but names its sockets
    <ip>:<port> (tslab builds "transport://ip:port") works when its
    kernelspec says so; without that, the gateway looks for <ip>-<port>, as
    jupyter_client names them, and the start fails (the control)."""
    if not installed("tslab"):
        pytest.skip("tslab is not installed (scripts/test installs it)")
    tmp = spec_dir()
    for name, meta in (("colon", {"transport": "ipc", "ipc_naming": "ip:port"}),
                       ("dash", {"transport": "ipc"})):
        (tmp / name).mkdir()
        (tmp / name / "kernel.json").write_text(json.dumps({
            "argv": ["tslab", "kernel", "--config-path", "{connection_file}"],
            "display_name": name, "language": "typescript", "metadata": {"glovebox": meta}}))
    gw = start_gateway("--kernelspec-path", str(tmp), "--kernel-start-timeout", "15")
    try:
        _, outputs = run_one(gw, "colon", "console.log(6 * 7)")
        assert stdout_of(outputs) == "42\n"
        status, body, _ = gw.request("POST", "/api/kernels", {"name": "dash"})
        assert status == 500 and "did not answer kernel_info" in body["message"], body
    finally:
        gw.stop()
        shutil.rmtree(tmp)
