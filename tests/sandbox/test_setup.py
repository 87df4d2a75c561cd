"""How sandboxes are set up: failures reported precisely, kernelspecs from
anywhere, the unprivileged mode, and the explicit --sandbox=none."""
import json
import os
import shutil
import tempfile

import pytest

from conftest import run, value
from gbclient import kernel_host, start_gateway


@pytest.fixture(scope="module")
def specs():
    """A kernelspec directory outside /usr: one broken spec, one working."""
    root = tempfile.mkdtemp(prefix="glovebox-specs-")
    os.chmod(root, 0o755)
    broken = os.path.join(root, "broken")
    os.mkdir(broken)
    with open(os.path.join(broken, "kernel.json"), "w") as f:
        json.dump({"argv": ["/nonexistent/python3", "-f", "{connection_file}"],
                   "display_name": "Broken", "language": "python"}, f)
    custom = os.path.join(root, "custom")
    os.mkdir(custom)
    with open(os.path.join(custom, "kernel.json"), "w") as f:
        json.dump({"argv": ["python3", "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                   "display_name": "Custom", "language": "python",
                   "env": {"FROM_SPEC": "spec-value"}}, f)
    with open(os.path.join(custom, "marker.txt"), "w") as f:
        f.write("resource")
    # A kernel whose program is a file of its kernelspec's own directory.
    own = os.path.join(root, "own-program")
    os.mkdir(own)
    with open(os.path.join(own, "kernel.json"), "w") as f:
        json.dump({"argv": ["{resource_dir}/start-kernel", "-f", "{connection_file}"],
                   "display_name": "Own program", "language": "python"}, f)
    with open(os.path.join(own, "start-kernel"), "w") as f:
        f.write('#!/bin/sh\nexport STARTED_BY="$0"\nexec python3 -m ipykernel_launcher "$@"\n')
    os.chmod(os.path.join(own, "start-kernel"), 0o755)
    yield root
    shutil.rmtree(root)


def test_failed_step_is_reported(specs):
    gw = start_gateway("--kernelspec-path", specs)
    try:
        status, body, _ = gw.request("POST", "/api/kernels", {"name": "broken"})
        assert status == 500
        assert 'step "exec" failed' in body["message"]
        assert "No such file or directory" in body["message"]
        # Nothing half-built is left: no kernel, and the next start works.
        status, listing, _ = gw.request("GET", "/api/kernels")
        assert listing == []
        kid = gw.start_kernel(name="custom")
        gw.request("DELETE", f"/api/kernels/{kid}")
    finally:
        gw.stop()


def test_kernelspec_outside_usr_and_env(specs):
    gw = start_gateway("--kernelspec-path", specs)
    try:
        kid = gw.start_kernel(name="custom", env={"FROM_REQUEST": "request-value"})
        env = value(gw, kid, "dict(__import__('os').environ)")
        assert env["FROM_SPEC"] == "spec-value"
        assert env["FROM_REQUEST"] == "request-value"
        # The kernelspec's own directory is there, read-only, at its path.
        assert value(gw, kid, f"open('{specs}/custom/marker.txt').read()") == "resource"
        content, _, _ = run(gw, kid, f"open('{specs}/custom/new', 'w')")
        assert content["status"] == "error" and content["ename"] == "OSError"
        gw.request("DELETE", f"/api/kernels/{kid}")
    finally:
        gw.stop()


def test_a_kernelspec_program_in_its_own_directory_starts(specs):
    # "{resource_dir}" is filled in in every word of the argv, its program's
    # too, as jupyter_client does (it was left as it was there: exec failed).
    gw = start_gateway("--kernelspec-path", specs)
    try:
        kid = gw.start_kernel(name="own-program")
        assert value(gw, kid, "__import__('os').environ['STARTED_BY']") == \
            f"{specs}/own-program/start-kernel"
        gw.request("DELETE", f"/api/kernels/{kid}")
    finally:
        gw.stop()


def test_request_env_cannot_replace_home(specs):
    gw = start_gateway()
    try:
        kid = gw.start_kernel(name="python3", env={"HOME": "/etc", "LANG": "C"})
        env = value(gw, kid, "dict(__import__('os').environ)")
        assert env["HOME"] == "/home/user" and env["LANG"] == "C"
        gw.request("DELETE", f"/api/kernels/{kid}")
    finally:
        gw.stop()


def test_unprivileged_gateway_still_sandboxes():
    """As an ordinary user, the sandbox uses unprivileged user namespaces;
    the cgroup limits it cannot set are named once at start."""
    gw = start_gateway(runner=["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"])
    try:
        kid = gw.start_kernel()
        status = value(gw, kid, "open('/proc/self/status').read()")
        assert "Seccomp:\t2" in status and "NoNewPrivs:\t1" in status
        assert "CapEff:\t0000000000000000" in status
        assert value(gw, kid, "__import__('os').getuid()") == 1000
        assert value(gw, kid, "__import__('socket').if_nameindex()") == [(1, "lo")]
        log = gw.read_log()
        assert "memory limits are not enforced" in log
        assert "default limits not enforced here (the kernel-host has no cgroup controller " \
            "for them): memory_mb, cpus, pids; a request naming one gets 400" in log, log
        # Said, not silent: the model names them, and a request naming one
        # is refused; disk_mb (a tmpfs's size) is enforced all the same.
        status, model, _ = gw.request("GET", f"/api/kernels/{kid}")
        assert model["limits_not_enforced"] == ["memory_mb", "cpus", "pids"], model
        for name, limit in (("memory_mb", 256), ("cpus", 0.5), ("pids", 64)):
            status, body, _ = gw.request("POST", "/api/kernels",
                                         {"name": "python3", "limits": {name: limit}})
            assert status == 400, (name, status, body)
            assert body["message"].startswith(f"{name} limit needs the cgroup "), body
            assert "which this host does not delegate to Glovebox" in body["message"], body
        status, model, _ = gw.request("POST", "/api/kernels",
                                      {"name": "python3", "limits": {"disk_mb": 64}})
        assert status == 201, (status, model)
        gw.request("DELETE", f"/api/kernels/{model['id']}")
        gw.request("DELETE", f"/api/kernels/{kid}")
    finally:
        gw.stop()
    gw = start_gateway("--allow-unenforced-limits",
                       runner=["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"])
    try:
        status, model, _ = gw.request("POST", "/api/kernels",
                                      {"name": "python3", "limits": {"cpus": 0.5}})
        assert status == 201, (status, model)
        assert model["limits_not_enforced"] == ["memory_mb", "cpus", "pids"], model
        gw.request("DELETE", f"/api/kernels/{model['id']}")
    finally:
        gw.stop()


def test_sandbox_none_is_loud_and_unconfined():
    gw = start_gateway("--sandbox=none")
    try:
        assert "UNCONFINED" in gw.read_log()
        kid = gw.start_kernel()
        status = value(gw, kid, "open('/proc/self/status').read()")
        assert "Seccomp:\t0" in status
        # Nothing is enforced without a sandbox, and the model says so; a
        # request for a limit is not refused (the operator chose this).
        status, model, _ = gw.request("GET", f"/api/kernels/{kid}")
        assert model["limits_not_enforced"] == ["memory_mb", "cpus", "pids", "disk_mb"], model
        gw.request("DELETE", f"/api/kernels/{kid}")
        assert gw.start_kernel(name="python3", limits={"cpus": 0.5})
    finally:
        gw.stop()


def own_pids_group():
    """Our own group in the pids controller's hierarchy: cgroup v1's, or the
    unified one on a pure cgroup v2 host. A gateway started here makes its
    glovebox-<pid> group for the pids limit beneath it."""
    unified = None
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, names, path = line.rstrip("\n").split(":", 2)
            if "pids" in names.split(","):
                return f"/sys/fs/cgroup/{names}{path.rstrip('/')}"
            if names == "":
                unified = f"/sys/fs/cgroup{path.rstrip('/')}"
    assert unified and os.path.exists(f"{unified}/cgroup.controllers"), "no pids hierarchy"
    return unified


def start_over_leftovers(group, *args, **kw):
    """A gateway whose kernel-host finds, in group, an empty glovebox-<its
    pid> group with a child, as a kernel-host killed earlier with that pid
    leaves them (the pids that come next are covered, so the new
    kernel-host's is among them). Returns the gateway, its kernel-host's pid
    and the groups made, which the caller removes."""
    with open("/proc/sys/kernel/ns_last_pid") as f:
        first = int(f.read()) + 1
    made = []
    for pid in range(first, first + 400):
        path = f"{group}/glovebox-{pid}"
        if not os.path.exists(path):
            os.mkdir(path)
            os.mkdir(f"{path}/sandbox-1")
            made.append(path)
    gw = start_gateway(*args, **kw)
    return gw, kernel_host(gw), made


def remove_leftovers(made):
    """The test's own leftovers; one a kernel-host took over is not ours."""
    for path in made:
        for d in (f"{path}/sandbox-1", path):
            try:
                os.rmdir(d)
            except OSError:
                pass


def test_a_cgroup_left_by_an_earlier_kernel_host_with_the_same_pid():
    """A kernel-host killed outright leaves its glovebox-<pid> groups; a later
    one given the same pid must not take them as its own. Without root it
    may not remove root's, so their limits go unenforced, said so, rather
    than every kernel failing to start (seen in CI: "mkdir .../glovebox-
    27941/<id>: Permission denied"). With root it removes the empty ones and
    makes its own."""
    group = own_pids_group()
    gw, host, made = start_over_leftovers(
        group, "--allow-unenforced-limits",
        runner=["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"])
    try:
        assert f"{group}/glovebox-{host}" in made, (host, made[0])
        status, model, _ = gw.request("POST", "/api/kernels",
                                      {"name": "python3", "limits": {"cpus": 0.5}})
        assert status == 201, (status, model)
        assert {"pids", "cpus"} <= set(model["limits_not_enforced"]), model
        assert f"cgroup {group}/glovebox-{host} was left by an earlier process " \
            "with this pid and cannot be taken over" in gw.read_log()
        gw.request("DELETE", f"/api/kernels/{model['id']}")
    finally:
        gw.stop()
        remove_leftovers(made)
    gw, host, made = start_over_leftovers(group)
    try:
        parent = f"{group}/glovebox-{host}"
        assert parent in made, (host, made[0])
        assert f"removed cgroup {parent}, left by an earlier process with this pid" \
            in gw.read_log()
        assert not os.path.exists(f"{parent}/sandbox-1")
        status, model, _ = gw.request("POST", "/api/kernels",
                                      {"name": "python3", "limits": {"pids": 64}})
        assert status == 201, (status, model)
        assert "pids" not in model.get("limits_not_enforced", []), model
        # The kernel's groups are in the one made anew, its limit in them.
        limits = [open(os.path.join(d, "pids.max")).read().strip()
                  for d, _, files in os.walk(parent) if d != parent and "pids.max" in files]
        assert "64" in limits, limits
        gw.request("DELETE", f"/api/kernels/{model['id']}")
    finally:
        gw.stop()
        remove_leftovers(made)
