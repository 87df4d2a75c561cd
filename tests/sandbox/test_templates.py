"""Templates (--template NAME=DIR): a directory tree as the sandbox's root,
read-only and shared, under a writable upper layer of each sandbox's own on
its size-limited tmpfs; and the host's /usr plus read-only directories
(NAME=host:DIR). A real gateway, real kernels, real sandboxes.

The tree is made from the host's own Python and ipykernel, hard-linked
(cp -al: seconds, where debootstrap takes minutes and needs the network);
with GLOVEBOX_DEBOOTSTRAP_TEMPLATE=DIR, a tree debootstrap made (the
command is in docs/templates-and-languages.md; scripts/test makes it once
per machine) is checked too."""
import json
import os
import shutil
import subprocess
import tempfile
import time

import pytest

from conftest import run, value
from gbclient import start_gateway
from gbtemplate import MARKER, make_tree, write_kernelspec


def snapshot(root):
    """Every name under the tree's writable places, to show nothing lands there."""
    names = []
    for d in ["opt", "usr/local", "etc", "home", "tmp", "root"]:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, d)):
            names += [os.path.join(dirpath, n) for n in dirnames + filenames]
    return sorted(names)


@pytest.fixture(scope="module")
def tree():
    root = tempfile.mkdtemp(prefix="glovebox-template-")
    os.chmod(root, 0o755)
    make_tree(root)
    yield root
    shutil.rmtree(root)


@pytest.fixture(scope="module")
def extra():
    """A directory for the host form: the host's /usr plus this, read-only."""
    root = tempfile.mkdtemp(prefix="glovebox-extra-")
    os.chmod(root, 0o755)
    with open(os.path.join(root, "data.txt"), "w") as f:
        f.write("extra data")
    yield root
    shutil.rmtree(root)


@pytest.fixture(scope="module")
def specs():
    """A kernelspec of the gateway's own that runs in the template, with env."""
    root = tempfile.mkdtemp(prefix="glovebox-tplspecs-")
    os.chmod(root, 0o755)
    write_kernelspec(root, "tplenv", "tpl", {"FROM_TEMPLATE_SPEC": "spec-env-value"})
    yield root
    shutil.rmtree(root)


@pytest.fixture(scope="module")
def gateway(tree, extra, specs):
    gw = start_gateway("--template", f"tpl={tree}", "--template", f"extra=host:{extra}",
                       "--kernelspec-path", specs)
    yield gw
    gw.stop()


def start(gw, **body):
    status, model, _ = gw.request("POST", "/api/kernels", body)
    assert status == 201, model
    return model["id"]


def stop(gw, kid):
    status, _, _ = gw.request("DELETE", f"/api/kernels/{kid}")
    assert status == 204


def check(gw, kid, code):
    content, stdout, outputs = run(gw, kid, code)
    assert content["status"] == "ok", (content, outputs)
    return stdout


def write_error(gw, kid, path):
    """The errno's name of creating path in the sandbox, or None if it worked."""
    out = check(gw, kid, (
        "import errno\n"
        "try:\n"
        f"    open({path!r}, 'w').close()\n"
        "    print('None')\n"
        "except OSError as e:\n"
        "    print(errno.errorcode[e.errno])\n"))
    name = out.split()[-1]
    return None if name == "None" else name


def test_template_is_listed_and_runs_in_its_tree(gateway, tree):
    status, body, _ = gateway.request("GET", "/api/kernelspecs")
    assert status == 200
    assert body["kernelspecs"]["tpl"]["spec"]["language"] == "python"
    assert body["kernelspecs"]["tpl"]["spec"]["metadata"]["glovebox"]["template"] == "tpl"
    # The gateway's kernelspec naming the template: its bare program is the tree's.
    assert body["kernelspecs"]["tplenv"]["spec"]["argv"][0] == "/usr/bin/python3"
    assert "extra" in body["kernelspecs"]
    kid = start(gateway, template="tpl")
    try:
        assert value(gateway, kid, "open('/etc/template-marker').read()") == MARKER
        # The tree's own files, as the image's owners: its root is the
        # sandbox's root, its 1000 the sandbox's user.
        assert value(gateway, kid, "__import__('os').stat('/opt/shared').st_uid") == 1000
        assert value(gateway, kid, "__import__('os').stat('/usr/bin').st_uid") == 0
        assert value(gateway, kid, "__import__('os').getuid()") == 1000
        assert value(gateway, kid, "__import__('sys').executable") == "/usr/bin/python3"
        # The overlay's options name no host directory of the gateway's.
        mounts = value(gateway, kid, "open('/proc/self/mountinfo').read()")
        root = [line for line in mounts.splitlines() if line.split()[4] == "/"]
        assert len(root) == 1 and " overlay " in root[0], mounts
        assert "lowerdir=base:lower,upperdir=upper,workdir=work" in root[0], root
    finally:
        stop(gateway, kid)
    # A sandbox without the template does not have the tree.
    kid = start(gateway)
    try:
        assert not value(gateway, kid, "__import__('os').path.exists('/etc/template-marker')")
    finally:
        stop(gateway, kid)
    # By name too: the template's default kernel has its name.
    kid = start(gateway, name="tpl")
    try:
        assert value(gateway, kid, "open('/etc/template-marker').read()") == MARKER
    finally:
        stop(gateway, kid)


def test_writes_stay_in_the_sandbox_and_vanish_with_it(gateway, tree):
    before = snapshot(tree)
    kid = start(gateway, template="tpl")
    try:
        out = check(gateway, kid, (
            "import os, subprocess\n"
            "open('/opt/shared/made-here', 'w').write('x')\n"
            "open('/usr/local/lib/lib-made-here', 'w').write('y')\n"
            "os.makedirs('/home/user/pkg')\n"
            "open('/home/user/pkg/pyproject.toml', 'w').write(\n"
            "    '[build-system]\\nrequires = [\"setuptools\"]\\n'\n"
            "    'build-backend = \"setuptools.build_meta\"\\n'\n"
            "    '[project]\\nname = \"gbtpl\"\\nversion = \"1.0\"\\n')\n"
            "open('/home/user/pkg/gbtpl.py', 'w').write('ANSWER = 42\\n')\n"
            "r = subprocess.run(['pip', 'install', '--user', '--no-index',\n"
            "                    '--no-build-isolation', '/home/user/pkg'],\n"
            "                   capture_output=True, text=True)\n"
            "print(r.returncode, r.stdout[-300:], r.stderr[-600:])\n"
            "print(open('/opt/shared/made-here').read() + open('/usr/local/lib/lib-made-here').read())\n"))
        assert out.startswith("0 "), out
        assert "Successfully installed gbtpl-1.0" in out
        assert out.rstrip().endswith("xy"), out
        assert value(gateway, kid, "__import__('subprocess').run(['python3', '-c', "
                                   "'import gbtpl; print(gbtpl.ANSWER)'], capture_output=True,"
                                   " text=True).stdout") == "42\n"
        # What the image does not let its user write stays read-only.
        assert write_error(gateway, kid, "/usr/bin/made-here") == "EACCES"
        # Nothing reached the host's tree.
        assert snapshot(tree) == before
    finally:
        stop(gateway, kid)
    assert snapshot(tree) == before
    kid = start(gateway, template="tpl")
    try:
        assert value(gateway, kid, "[__import__('os').path.exists(p) for p in "
                                   "['/opt/shared/made-here', '/usr/local/lib/lib-made-here', "
                                   "'/home/user/pkg']]") == [False, False, False]
    finally:
        stop(gateway, kid)


def test_two_sandboxes_of_a_template_do_not_share_writes(gateway):
    a = start(gateway, template="tpl")
    b = start(gateway, template="tpl")
    try:
        check(gateway, a, "open('/opt/shared/from-a', 'w').write('a')")
        check(gateway, b, "open('/opt/shared/from-b', 'w').write('b')")
        assert value(gateway, a, "sorted(__import__('os').listdir('/opt/shared'))") == ["from-a"]
        assert value(gateway, b, "sorted(__import__('os').listdir('/opt/shared'))") == ["from-b"]
    finally:
        stop(gateway, a)
        stop(gateway, b)


def test_disk_limit_holds_for_every_write(gateway, tree):
    """The upper layer, /home/user and /tmp share the sandbox's disk limit: a
    write past it fails with ENOSPC in the sandbox, and nothing else does."""
    before = snapshot(tree)
    kid = start(gateway, template="tpl", limits={"disk_mb": 16})
    try:
        out = check(gateway, kid, (
            "import errno\n"
            "def fill(path, mb):\n"
            "    try:\n"
            "        with open(path, 'wb') as f:\n"
            "            for _ in range(mb):\n"
            "                f.write(b'\\0' * (1 << 20))\n"
            "        return 'ok'\n"
            "    except OSError as e:\n"
            "        return errno.errorcode[e.errno]\n"
            "print(fill('/usr/local/lib/big', 10), fill('/tmp/big', 10),"
            " fill('/home/user/big', 10))\n"))
        assert out.split() == ["ok", "ENOSPC", "ENOSPC"], out
        # The sandbox carries on once space is freed.
        check(gateway, kid, "__import__('os').remove('/usr/local/lib/big')\n"
                            "open('/home/user/small', 'w').write('fits')")
    finally:
        stop(gateway, kid)
    assert snapshot(tree) == before


def test_unknown_template_is_404_naming_the_known_ones(gateway):
    status, body, _ = gateway.request("POST", "/api/kernels", {"template": "nope"})
    assert status == 404
    assert "nope" in body["message"] and "tpl" in body["message"]
    assert "extra" in body["message"]
    status, body, _ = gateway.request("POST", "/api/kernels", {"template": "tpl",
                                                                "name": "no-such-kernel"})
    assert status == 404, body
    status, body, _ = gateway.request("POST", "/api/kernels", {"template": 3})
    assert status == 400, body


def test_template_kernelspec_with_env(gateway):
    """A kernelspec that names the template runs in it, with its env."""
    for body in [{"name": "tplenv"}, {"template": "tpl", "name": "tplenv"}]:
        status, model, _ = gateway.request("POST", "/api/kernels", body)
        assert status == 201, model
        kid = model["id"]
        try:
            env = value(gateway, kid, "dict(__import__('os').environ)")
            assert env["FROM_TEMPLATE_SPEC"] == "spec-env-value"
            assert value(gateway, kid, "open('/etc/template-marker').read()") == MARKER
        finally:
            stop(gateway, kid)


def test_host_form_adds_read_only_directories(gateway, extra):
    kid = start(gateway, template="extra")
    try:
        assert value(gateway, kid, f"open('{extra}/data.txt').read()") == "extra data"
        assert write_error(gateway, kid, f"{extra}/new") in ("EROFS", "EACCES")
        assert not value(gateway, kid, "__import__('os').path.exists('/etc/template-marker')")
        # The host's /usr, as every sandbox has it.
        assert value(gateway, kid, "__import__('os').path.exists('/usr/share/jupyter/kernels/ir')"
                     ) == os.path.exists("/usr/share/jupyter/kernels/ir")
    finally:
        stop(gateway, kid)
    assert os.listdir(extra) == ["data.txt"]


def test_bad_templates_stop_the_gateway(tree, specs):
    for args, said in [(["--template", "tpl=/nonexistent"], "not an absolute path"),
                       (["--template", "tpl=relative"], "not an absolute path"),
                       (["--template", "tpl=/etc"], "no usr directory"),
                       (["--template", "tpl"], "NAME=DIR"),
                       (["--template", f"a={tree}", "--template", f"a={tree}"], "given twice"),
                       (["--kernelspec-path", specs], "names template tpl")]:
        with pytest.raises(RuntimeError) as caught:
            start_gateway(*args)
        assert said in str(caught.value), (args, str(caught.value))


def test_templates_from_the_config_file(tree):
    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
        json.dump({"template": [f"fromfile={tree}"]}, f)
        f.flush()
        gw = start_gateway("--config", f.name)
        try:
            status, body, _ = gw.request("GET", "/api/kernelspecs")
            assert "fromfile" in body["kernelspecs"], body
            status, body, _ = gw.request("POST", "/api/kernels", {"template": "other"})
            assert status == 404 and "fromfile" in body["message"], body
        finally:
            gw.stop()


def documented_debootstrap():
    """The arguments of the debootstrap command docs/templates-and-languages.md
    gives, without its target directory."""
    page = os.path.join(os.path.dirname(__file__), "..", "..", "docs",
                        "templates-and-languages.md")
    with open(page) as f:
        text = f.read().replace("\\\n", " ")
    line = next(l for l in text.splitlines() if l.startswith("sudo debootstrap "))
    return line.split()[2:-1]


@pytest.mark.skipif(not os.environ.get("GLOVEBOX_DEBOOTSTRAP_TEMPLATE"),
                    reason="GLOVEBOX_DEBOOTSTRAP_TEMPLATE=DIR names no debootstrap tree "
                           "(scripts/test makes one as root, in /var/cache/glovebox)")
def test_a_debootstrap_template():
    """The documented recipe, which scripts/test makes once per machine and
    names in a .recipe file beside the tree."""
    root = os.environ["GLOVEBOX_DEBOOTSTRAP_TEMPLATE"]
    if os.path.exists(root.rstrip("/") + ".recipe"):
        with open(root.rstrip("/") + ".recipe") as f:
            assert f.read().split() == documented_debootstrap(), \
                "scripts/test's debootstrap command is not the one the docs give"
    assert os.path.isdir(os.path.join(root, "usr", "lib", "python3", "dist-packages", "pandas"))
    gw = start_gateway("--template", f"deb={root}")
    try:
        kid = start(gw, template="deb")
        try:
            with open(os.path.join(root, "etc", "debian_version")) as f:
                assert value(gw, kid, "open('/etc/debian_version').read()") == f.read()
            out = check(gw, kid, (
                "import os, subprocess\n"
                "os.makedirs('/home/user/pkg')\n"
                "open('/home/user/pkg/pyproject.toml', 'w').write(\n"
                "    '[build-system]\\nrequires = [\"setuptools\"]\\n'\n"
                "    'build-backend = \"setuptools.build_meta\"\\n'\n"
                "    '[project]\\nname = \"gbdeb\"\\nversion = \"1.0\"\\n')\n"
                "open('/home/user/pkg/gbdeb.py', 'w').write('ANSWER = 42\\n')\n"
                "r = subprocess.run(['pip', 'install', '--user', '--no-index',\n"
                "                    '--no-build-isolation', '/home/user/pkg'],\n"
                "                   capture_output=True, text=True)\n"
                "print(r.returncode, r.stdout[-300:], r.stderr[-600:])\n"))
            assert out.startswith("0 ") and "Successfully installed gbdeb-1.0" in out, out
            # The tree's root owns its files, as the sandbox's root.
            assert value(gw, kid, "__import__('os').stat('/usr/bin/python3').st_uid") == 0
            assert write_error(gw, kid, "/usr/lib/made-here") == "EACCES"
        finally:
            stop(gw, kid)
        assert not os.path.exists(os.path.join(root, "home", "user", "pkg"))
    finally:
        gw.stop()


def test_unprivileged_gateway_reads_its_template(tree):
    """As an ordinary user there is no idmapped mount: the tree keeps the
    host's owners (its root's files are nobody's inside), its files are
    readable, and the sandbox writes its home and /tmp only."""
    gw = start_gateway("--template", f"tpl={tree}",
                       runner=["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"])
    try:
        kid = start(gw, template="tpl")
        try:
            assert value(gw, kid, "open('/etc/template-marker').read()") == MARKER
            assert value(gw, kid, "__import__('os').stat('/usr/bin').st_uid") == 65534
            assert write_error(gw, kid, "/home/user/mine") is None
            assert write_error(gw, kid, "/tmp/mine") is None
            assert write_error(gw, kid, "/opt/shared/mine") == "EACCES"
        finally:
            stop(gw, kid)
    finally:
        gw.stop()


def test_mounts_inside_the_tree_stay_out(gateway, tree):
    """What is mounted inside the tree (a /proc or /sys left from a chroot)
    is not part of the template: only the tree's own filesystem is."""
    inner = os.path.join(tree, "mnt")
    os.mkdir(inner)
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", inner], check=True)
    try:
        with open(os.path.join(inner, "host-only"), "w") as f:
            f.write("x")
        kid = start(gateway, template="tpl")
        try:
            assert value(gateway, kid, "__import__('os').listdir('/mnt')") == []
        finally:
            stop(gateway, kid)
    finally:
        subprocess.run(["umount", inner], check=True)
        os.rmdir(inner)


def test_a_tree_without_kernelspecs_runs_those_that_name_it(tree):
    """An image with no kernelspec of its own (an OCI image with ipykernel
    installed by pip): the operator's kernelspec that names the template is
    its default kernel, for {"template"} as for E2B."""
    kernels = os.path.join(tree, "usr", "share", "jupyter", "kernels")
    specs = tempfile.mkdtemp(prefix="glovebox-barespecs-")
    os.chmod(specs, 0o755)
    write_kernelspec(specs, "bare-python", "bare", {"FROM_BARE": "1"})
    os.rename(kernels, kernels + ".off")
    try:
        gw = start_gateway("--template", f"bare={tree}", "--kernelspec-path", specs)
    finally:
        os.rename(kernels + ".off", kernels)
    try:
        status, body, _ = gw.request("GET", "/api/kernelspecs")
        assert "bare" not in body["kernelspecs"] and "bare-python" in body["kernelspecs"]
        kid = start(gw, template="bare")
        try:
            assert value(gw, kid, "open('/etc/template-marker').read()") == MARKER
            assert value(gw, kid, "__import__('os').environ['FROM_BARE']") == "1"
        finally:
            stop(gw, kid)
    finally:
        gw.stop()
        shutil.rmtree(specs)


def test_a_template_has_a_warm_pool(tree):
    """--pool NAME=N keeps a template's sandboxes ready like any kernelspec's."""
    gw = start_gateway("--template", f"tpl={tree}", "--pool", "tpl=1")
    try:
        deadline = time.monotonic() + 60
        while True:
            status, body, _ = gw.request("GET", "/api/status")
            if body["pool"]["kernelspecs"]["tpl"]["ready"] == 1:
                break
            assert time.monotonic() < deadline, body
            time.sleep(0.2)
        kid = start(gw, template="tpl")
        try:
            status, body, _ = gw.request("GET", "/api/status")
            assert body["pool"]["kernelspecs"]["tpl"]["taken"] == 1, body
            assert value(gw, kid, "open('/etc/template-marker').read()") == MARKER
        finally:
            stop(gw, kid)
    finally:
        gw.stop()


def test_pause_and_fork_keep_the_memory_in_a_template(tree, extra, tmp_path):
    """(Issue 24.) A template's sandbox, and the host form with a
    read-only directory of the operator's, pause with their memory: the
    restore lays the template's tree (idmapped again) under the sandbox's
    own upper layer, so its writes over the image are there and the tree
    is untouched; a fork is a copy with the same."""
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                    "integration"))
    from test_pause_memory import CRIU, criu_usable
    if not criu_usable():
        pytest.skip(f"memory pause needs CRIU 4.1+ at {CRIU}")
    before = snapshot(tree)
    gw = start_gateway("--template", f"tpl={tree}", "--template", f"extra=host:{extra}",
                       "--state-dir", str(tmp_path / "state"), "--criu", CRIU)
    kids = []
    try:
        for template, probe, written in (
                ("tpl", "open('/etc/template-marker').read()", "/usr/local/lib/made-here"),
                ("extra", f"open({extra + '/data.txt'!r}).read()", "/home/user/made-here")):
            kid = start(gw, template=template)
            kids.append(kid)
            seen = value(gw, kid, probe)
            check(gw, kid, f"x = 11\nopen({written!r}, 'w').write('y')")
            status, body, _ = gw.request("POST", f"/api/kernels/{kid}/pause")
            assert status == 200 and body["paused"] == {"memory_kept": True}, (template, body)
            assert gw.request("POST", f"/api/kernels/{kid}/resume")[0] == 200
            after = (f"(x, {probe}, open({written!r}).read(), "
                     "open('/proc/self/mountinfo').read().split('\\n')[0].split(' - ')[1]"
                     ".split()[0])")
            assert value(gw, kid, after) == (11, seen, "y", "overlay"), template
            status, body, _ = gw.request("POST", f"/api/kernels/{kid}/fork", {"count": 1})
            assert status == 201, (template, body)
            copy = body["kernels"][0]["id"]
            kids.append(copy)
            assert value(gw, copy, after) == (11, seen, "y", "overlay"), template
            assert write_error(gw, copy, "/usr/bin/made-here") == "EACCES"
    finally:
        for kid in kids:
            gw.request("DELETE", f"/api/kernels/{kid}")
        gw.stop()
    assert snapshot(tree) == before
