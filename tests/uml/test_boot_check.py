"""tests/uml/run tells a host the guest's kernel cannot run on (a panic
before the guest's init took its first step, with the kernel's ptrace
message) from a guest that booted and then failed. Runs on the host, not in
the guest: a stand-in for linux.uml prints what the real one printed on
each kind of machine."""
import os
import stat
import subprocess

import pytest

from umllib import in_guest

pytestmark = pytest.mark.skipif(in_guest(), reason="runs tests/uml/run itself, on the host")

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.path.abspath(os.environ.get("GLOVEBOX_BUILD", os.path.join(HERE, "..", "..", "build")))

# What Debian's UML 6.1 printed on an Intel Xeon with AVX-512 and AMX.
BOOT = ["Core dump limits :", "\tsoft - NONE", "\thard - NONE",
        "Checking that ptrace can change system call numbers...OK",
        "Checking syscall emulation for ptrace...OK", "Checking environment variables for a tempfile...OK",
        "Checking if /dev/shm is on tmpfs...OK"]
FP_FAILED = "userspace - ptrace set fp regs failed, errno = 14"
PANIC = ["Kernel panic - not syncing: Attempted to kill init! exitcode=0x0000000b",
         "CPU: 0 PID: 1 Comm: init Not tainted 6.1.0-39-amd64 #1 Debian 6.1.148-1"]


def fake_uml(tmp_path, lines, status=1):
    path = tmp_path / "linux.uml"
    body = "".join("cat <<'LINE'\n%s\nLINE\n" % line for line in lines)
    path.write_text("#!/bin/sh\n" + body + "exit %d\n" % status)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def run_suite(tmp_path, lines, status=1):
    env = dict(os.environ, UML=fake_uml(tmp_path, lines, status), UML_OUT=str(tmp_path / "out"),
               GLOVEBOX_BUILD=BUILD, UML_TIMEOUT="60")
    if not os.path.exists(os.path.join(BUILD, "glovebox")):
        pytest.fail(f"no build in {BUILD}")
    done = subprocess.run([os.path.join(HERE, "run")], env=env, capture_output=True, text=True,
                          timeout=300)
    results = [line for line in done.stdout.splitlines() if line.startswith("UML_SUITE_RESULT")]
    assert len(results) == 1, (done.stdout[-2000:], done.stderr[-2000:])
    return done.returncode, results[0], done.stderr


def test_a_host_the_kernel_cannot_run_on_is_skipped_with_the_reason(tmp_path):
    rc, result, err = run_suite(tmp_path, BOOT + [FP_FAILED] + PANIC)
    assert rc == 0, (result, err)
    assert result == f"UML_SUITE_RESULT passed=0 failed=0 skipped=1 reason={FP_FAILED}", result


def test_a_guest_that_started_init_and_then_panicked_fails(tmp_path):
    rc, result, _ = run_suite(tmp_path, BOOT + ["uml-init: started", FP_FAILED] + PANIC)
    assert rc != 0
    assert "skipped" not in result and "failed=0" not in result, result


def test_a_panic_before_init_for_another_reason_fails(tmp_path):
    rc, result, err = run_suite(tmp_path, BOOT + ["Kernel panic - not syncing: No working init found."])
    assert rc != 0
    assert "skipped" not in result and "failed=0" not in result, result
    assert "panicked before its init started" in err
