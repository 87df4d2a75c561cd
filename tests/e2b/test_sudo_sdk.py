"""E2B's passwordless sudo in an E2B sandbox (kernel-host/sudo_main.c,
gateway/e2b/sudo.c): the sandbox's user runs anything as the sandbox's
root, confined as any command run as root is, and nothing else; a sandbox
that is not E2B's has no sudo to ask."""
import time

import pytest

from e2b import CommandExitException
from e2b_code_interpreter import Sandbox

# CapEff of a command run as root through the API (user="root"): the
# file-ownership capabilities (CHOWN, DAC_OVERRIDE, DAC_READ_SEARCH, FOWNER).
ROOT_CAPS = "000000000000000f"


def cap_eff(text):
    return next(line.split()[1] for line in text.splitlines() if line.startswith("CapEff:"))


def test_sudo_runs_as_the_sandboxs_root_with_the_callers_stdio(sbx):
    # At once after create: sudo waits for the service, which starts as
    # the create is answered.
    r = sbx.commands.run("sudo id -u; sudo whoami; id -u")
    assert r.stdout.split() == ["0", "root", "1000"], r
    # Empty arguments are arguments (E2B's own test runs sudo echo "$FOO"
    # with FOO unset).
    r = sbx.commands.run("sudo printf '[%s]' '' x ''")
    assert r.stdout == "[][x][]", r
    r = sbx.commands.run("echo from-stdin | sudo cat")
    assert r.stdout == "from-stdin\n"
    r = sbx.commands.run("sudo sh -c 'echo out; echo err >&2; exit 7'; echo status=$?")
    assert r.stdout == "out\nstatus=7\n" and r.stderr == "err\n", r
    # sudo's own environment: root's HOME, the caller in SUDO_USER, the
    # caller's variables kept only with -E.
    r = sbx.commands.run("sudo sh -c 'echo $HOME $USER $SUDO_USER ${FOO:-unset}'; "
                         "sudo -E sh -c 'echo ${FOO:-unset}'", envs={"FOO": "bar"})
    assert r.stdout == "/root root user unset\nbar\n", r
    # What root may write, in the sandbox's own layer; the user may not.
    r = sbx.commands.run("sudo sh -c 'echo x > /etc/glovebox-sudo-test'; "
                         "cat /etc/glovebox-sudo-test; ls -l /etc/glovebox-sudo-test")
    assert r.stdout.startswith("x\n-rw-r--r-- 1 root root"), r
    with pytest.raises(CommandExitException):
        sbx.commands.run("echo y > /etc/glovebox-sudo-test")


def test_sudo_is_confined_as_a_root_command_is(sbx):
    """The same capabilities, no_new_privs and seccomp filter as
    commands.run(user="root"), whichever way root is reached."""
    via_api = sbx.commands.run("cat /proc/self/status", user="root").stdout
    via_sudo = sbx.commands.run("sudo cat /proc/self/status").stdout
    for field in ("CapEff:", "CapBnd:", "NoNewPrivs:", "Seccomp:"):
        a = [line for line in via_api.splitlines() if line.startswith(field)]
        b = [line for line in via_sudo.splitlines() if line.startswith(field)]
        assert a == b, (field, a, b)
    assert cap_eff(via_sudo) == ROOT_CAPS
    with pytest.raises(CommandExitException) as e:
        sbx.commands.run("sudo unshare --user --map-root-user true")
    assert e.value.exit_code != 0


def test_sudo_passes_signals_on_and_its_command_ends_with_it(sbx):
    handle = sbx.commands.run("sudo sleep 300", background=True)
    deadline = time.time() + 10
    while "sleep 300" not in sbx.commands.run("ps -eo user,args").stdout:
        assert time.time() < deadline
        time.sleep(0.1)
    sbx.commands.run("pkill -INT -x sudo")
    with pytest.raises(CommandExitException):
        handle.wait()
    deadline = time.time() + 10
    while "sleep 300" in sbx.commands.run("ps -eo args").stdout:
        assert time.time() < deadline, "the command outlived its sudo"
        time.sleep(0.1)


def test_sudo_options_and_refusals(sbx):
    assert sbx.commands.run("sudo -u user id -u").stdout == "1000\n"
    assert "NOPASSWD: ALL" in sbx.commands.run("sudo -l").stdout
    assert sbx.commands.run("sudo -i pwd").stdout == "/root\n"
    for bad, message in (("sudo -u nobody id", "unknown user nobody"),
                         ("sudo -Z id", "option -Z is not supported"),
                         ("sudo no-such-command", "no-such-command")):
        with pytest.raises(CommandExitException) as e:
            sbx.commands.run(bad)
        assert message in e.value.stderr, (bad, e.value.stderr)


def test_a_create_is_not_held_by_the_sudo_services_start(gateway):
    """The kernel-host, which starts the service, is stopped: a create from
    the pool is answered all the same, and its first sudo, once the
    kernel-host goes on, waits for the service and runs."""
    import os
    import signal
    from gbclient import kernel_host
    deadline = time.time() + 60
    while gateway.request("GET", "/api/status")[1]["pool"]["kernelspecs"]["python3"]["ready"] < 1:
        assert time.time() < deadline, "the pool never filled"
        time.sleep(0.1)
    host = kernel_host(gateway)
    os.kill(host, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        sbx = Sandbox.create()
        took = time.monotonic() - t0
    finally:
        os.kill(host, signal.SIGCONT)
    try:
        assert took < 5, took
        assert sbx.commands.run("sudo id -u").stdout == "0\n"
    finally:
        sbx.kill()


def test_a_resumed_sandbox_has_sudo_again(gateway):
    sbx = Sandbox.create()
    try:
        assert sbx.pause() is True
        sbx = Sandbox.connect(sbx.sandbox_id)
        assert sbx.commands.run("sudo id -u").stdout == "0\n"
    finally:
        sbx.kill()


def test_a_kernel_that_is_not_e2bs_has_no_sudo(gateway):
    """A Jupyter kernel's sandbox runs no sudo service: sudo says so."""
    from gbclient import run_cell
    kid = gateway.start_kernel()
    try:
        content, stdout, _ = run_cell(
            gateway, kid, "import subprocess\n"
                          "r = subprocess.run(['sudo', 'id'], capture_output=True, text=True)\n"
                          "print(r.returncode, r.stdout, r.stderr)")
        assert content["status"] == "ok", content
        assert stdout.startswith("1 ") and "offers no sudo" in stdout, stdout
    finally:
        gateway.request("DELETE", f"/api/kernels/{kid}")
