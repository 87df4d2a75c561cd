"""Template builds through the unmodified E2B Python SDK (Template.build,
E2B's v3 API): a build's steps run in a sandbox of its base, whose every
change to its root lands in a layer of its own; Sandbox.create(name) then
starts from it. What Glovebox adds and bounds: the base images the operator
maps (--template-image), a tenant's templates its own, the disk, time and
builds at once a tenant has, the signed upload URL, the layer kept read-only
under --state-dir across restarts. Needs root (layers are loop-mounted
images)."""
import glob
import hashlib
import json
import os
import secrets
import shutil
import tempfile
import time
import urllib.error
import urllib.request

import pytest

from conftest import point_sdk_at
from gbclient import start_gateway
from gbtemplate import make_tree

from e2b import BuildException, Sandbox, Template, wait_for_port

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/loop-control"),
                                reason="template builds need root and loop devices")


@pytest.fixture(scope="module")
def tree():
    root = tempfile.mkdtemp(prefix="glovebox-build-tree-")
    os.chmod(root, 0o755)
    make_tree(root)
    yield root
    shutil.rmtree(root)


def keys_file(directory):
    keys = {name: "e2b_" + secrets.token_hex(20) for name in ("alice", "bob")}
    path = os.path.join(directory, "keys.json")
    with open(path, "w") as f:
        json.dump({"keys": [{"name": n, "sha256": hashlib.sha256(k.encode()).hexdigest()}
                            for n, k in keys.items()]}, f)
    return path, keys


class Gateway:
    """A glovebox with its own state directory, restartable on it."""

    def __init__(self, tree, *args):
        self.state = tempfile.mkdtemp(prefix="glovebox-build-state-")
        self.keys_path, self.keys = keys_file(self.state)
        self.args = ["--state-dir", self.state, "--keys-file", self.keys_path,
                     "--template", f"tree={tree}", "--template-image", "ubuntu:22.04=tree",
                     *args]
        self.start()

    def start(self):
        self.gw = start_gateway(*self.args)
        point_sdk_at(self.gw, self.keys["alice"])

    def stop(self):
        self.gw.stop()

    def close(self):
        self.stop()
        shutil.rmtree(self.state, ignore_errors=True)


@pytest.fixture(scope="module")
def gw(tree):
    g = Gateway(tree, "--template-build-disk-mb", "64", "--template-max-builds", "1")
    yield g
    g.close()


@pytest.fixture(autouse=True)
def sdk_env(gw):
    point_sdk_at(gw.gw, gw.keys["alice"])


def build(template, name, **kw):
    logs = []
    info = Template.build(template, name, cpu_count=1, memory_mb=512,
                          on_build_logs=lambda entry: logs.append(entry.message), **kw)
    return info, logs


def test_build_then_sandboxes_start_from_it(gw, tmp_path):
    (tmp_path / "app.txt").write_text("copied")
    template = (Template(file_context_path=str(tmp_path)).from_base_image()
                .copy("app.txt", "/opt/app/")
                .run_cmd("mkdir -p /usr/local/lib/built && echo lib > /usr/local/lib/built/x "
                         "&& rm -rf /usr/share/doc/bash", user="root")
                .run_cmd("echo made > ~/at-build")
                .set_envs({"GREETING": "hello"})
                .set_workdir("/opt/app")
                .set_start_cmd("python3 -m http.server 8321", wait_for_port(8321)))
    info, logs = build(template, "app:v1")
    assert info.tags == ["v1"] and "The ready command passed" in logs
    # Its layer: one image, under the state directory, read-only from now on.
    layer = os.path.join(gw.state, "templates", "layers", f"{info.build_id}.img")
    before = os.stat(layer)
    sbx = Sandbox.create("app:v1")
    try:
        out = sbx.commands.run("pwd; cat app.txt; echo; echo $GREETING; cat /usr/local/lib/built/x "
                               "~/at-build; test -e /usr/share/doc/bash || echo whited-out; "
                               "stat -c %U /opt/app/app.txt ~/at-build /usr/local/lib/built/x")
        assert out.stdout.split() == ["/opt/app", "copied", "hello", "lib", "made",
                                      "whited-out", "user", "user", "root"], out.stdout
        # Its start command serves.
        deadline = time.time() + 10
        while sbx.commands.run("ss -Htln sport = :8321").stdout == "" and time.time() < deadline:
            time.sleep(0.2)
        assert sbx.commands.run("ss -Htln sport = :8321").stdout != ""
        # What a sandbox writes is its own: the template stays as built.
        sbx.commands.run("echo changed > /opt/app/app.txt; rm ~/at-build", user="root")
        other = Sandbox.create("app")  # the newest build without a tag
        try:
            assert other.commands.run("cat /opt/app/app.txt ~/at-build").stdout == "copiedmade\n"
        finally:
            other.kill()
    finally:
        sbx.kill()
    after = os.stat(layer)
    assert (after.st_mtime_ns, after.st_size) == (before.st_mtime_ns, before.st_size)
    assert Template.exists("app") is True and Template.exists("nothing-here") is False


def test_a_failing_step_fails_the_build_with_its_logs(gw):
    template = Template().from_image("ubuntu:22.04").run_cmd("echo before-failing; exit 3")
    with pytest.raises(BuildException) as failed:
        build(template, "fails")
    assert "failed to run command 'echo before-failing; exit 3': command failed: exit status 3" \
        in str(failed.value)
    assert not Template.exists("fails")


def test_an_unknown_base_image_is_named(gw):
    with pytest.raises(BuildException) as failed:
        build(Template().from_image("nosuch/image:9"), "noimage")
    assert "base image 'nosuch/image:9' is not available" in str(failed.value)
    assert "--template-image" in str(failed.value)


def test_a_build_past_its_disk_fails_inside(gw):
    """--template-build-disk-mb 64: the layer is the bound; a step writing
    past it gets ENOSPC and fails the build."""
    template = Template().from_base_image().run_cmd(
        "head -c 200000000 /dev/zero > /opt/big", user="root")
    with pytest.raises(BuildException) as failed:
        build(template, "toobig")
    assert "exit status" in str(failed.value)


def test_builds_at_once_are_bounded(gw):
    """--template-max-builds 1: a second build of the same key while one
    runs is refused (429)."""
    first = Template.build_in_background(Template().from_base_image().run_cmd("sleep 5"), "slow")
    try:
        with pytest.raises(Exception) as refused:
            Template.build_in_background(Template().from_base_image(), "second")
        assert "--template-max-builds" in str(refused.value)
    finally:
        deadline = time.time() + 60
        while Template.get_build_status(first).status.value == "building" and \
                time.time() < deadline:
            time.sleep(0.5)


def test_templates_are_their_tenants(gw):
    build(Template().from_base_image().run_cmd("true"), "alices")
    bob = gw.keys["bob"]
    assert Template.exists("alices", api_key=bob) is False
    with pytest.raises(Exception):
        Sandbox.create("alices", api_key=bob)
    with pytest.raises(Exception):
        Template.assign_tags("alices", "stolen", api_key=bob)


def test_upload_urls_are_signed(gw, tmp_path):
    """The upload route takes no API key: its signature is the credential,
    for one hash of one tenant, and it bounds what a tenant stores."""
    base = gw.gw.base
    req = urllib.request.Request(f"{base}/e2b/v3/templates", method="POST",
                                 data=json.dumps({"name": "uploads"}).encode(),
                                 headers={"X-API-KEY": gw.keys["alice"],
                                          "Content-Type": "application/json"})
    created = json.load(urllib.request.urlopen(req))
    digest = "ab" * 32
    req = urllib.request.Request(
        f"{base}/e2b/templates/{created['templateID']}/files/{digest}",
        headers={"X-API-KEY": gw.keys["alice"]})
    answer = json.load(urllib.request.urlopen(req))
    assert answer["present"] is False and "/e2b/template-uploads/" in answer["url"]

    def put(url, body=b"archive"):
        try:
            return urllib.request.urlopen(urllib.request.Request(url, data=body,
                                                                 method="PUT")).status
        except urllib.error.HTTPError as e:
            return e.code

    url = answer["url"]
    assert put(url.replace("signature=", "signature=0")) in (400, 403)
    assert put(url.replace(digest, "cd" * 32)) == 403
    assert put(url.replace("expires=", "expires=1")) == 403
    assert put(url) == 200
    assert json.load(urllib.request.urlopen(req))["present"] is True


def test_built_templates_survive_a_restart(tree):
    g = Gateway(tree)
    try:
        info, _ = build(Template().from_image("ubuntu:22.04")
                        .run_cmd("echo kept > /opt/kept", user="root"), "kept")
        g.stop()
        # A build that ran when the gateway stopped left its layer: gone at
        # the next start, the built template's kept.
        orphan = os.path.join(g.state, "templates", "layers",
                              "00000000-0000-4000-8000-000000000000.img")
        open(orphan, "w").close()
        g.start()
        assert not os.path.exists(orphan)
        assert Template.exists("kept")
        sbx = Sandbox.create("kept")
        try:
            assert sbx.commands.run("cat /opt/kept").stdout == "kept\n"
        finally:
            sbx.kill()
        assert glob.glob(os.path.join(g.state, "templates", "layers", "*.img")) == \
            [os.path.join(g.state, "templates", "layers", f"{info.build_id}.img")]
    finally:
        g.close()


def test_a_build_is_bounded_in_time(tree):
    g = Gateway(tree, "--template-build-timeout", "10")
    try:
        with pytest.raises(BuildException) as failed:
            build(Template().from_base_image().run_cmd("sleep 60"), "slowpoke")
        assert "--template-build-timeout" in str(failed.value)
        # Its layer went with it.
        deadline = time.time() + 10
        while glob.glob(os.path.join(g.state, "templates", "layers", "*.img")) and \
                time.time() < deadline:
            time.sleep(0.2)
        assert glob.glob(os.path.join(g.state, "templates", "layers", "*.img")) == []
    finally:
        g.close()


def test_a_built_templates_sandbox_pauses_and_forks_with_its_memory(tree, tmp_path):
    """(Issue 24.) A sandbox of a built template pauses with its memory:
    the restore mounts the template's layers again (read-only, idmapped)
    and lays the overlays as the sandbox had them, so the layer's files,
    the sandbox's own writes over them, its variables and its start
    command's server are all back; a fork is a copy; the layer is never
    written."""
    from e2b_code_interpreter import Sandbox as CodeSandbox
    from test_pause_memory import CRIU, criu_usable
    from test_pause_sdk import api
    if not criu_usable():
        pytest.skip(f"memory pause needs CRIU 4.1+ at {CRIU}")
    g = Gateway(tree, "--criu", CRIU, "--template-build-disk-mb", "64")
    sandboxes = []
    try:
        template = (Template().from_base_image()
                    .run_cmd("mkdir -p /opt/app && echo built > /opt/app/at-build", user="root")
                    .set_start_cmd("python3 -m http.server 8322", wait_for_port(8322)))
        info, _ = build(template, "mem:v1")
        layer = os.path.join(g.state, "templates", "layers", f"{info.build_id}.img")
        before = os.stat(layer)
        sbx = CodeSandbox.create("mem:v1")
        sandboxes.append(sbx)
        assert sbx.run_code("x = 21").error is None
        sbx.commands.run("echo mine > /opt/app/written", user="root")
        assert sbx.pause() is True
        status, body = api(g.gw, "GET", f"/sandboxes/{sbx.sandbox_id}")
        assert body["glovebox"] == {"memoryKept": True}, body
        again = CodeSandbox.connect(sbx.sandbox_id)
        probe = "cat /opt/app/at-build /opt/app/written; ss -Htln sport = :8322 | wc -l"
        assert again.run_code("x * 2").text == "42"
        assert again.commands.run(probe).stdout.split() == ["built", "mine", "1"]
        copies = again.fork(count=1, timeout=60)
        sandboxes += copies
        assert copies[0].run_code("x * 2").text == "42"
        assert copies[0].commands.run(probe).stdout.split() == ["built", "mine", "1"]
        after = os.stat(layer)
        assert (after.st_mtime_ns, after.st_size) == (before.st_mtime_ns, before.st_size)
    finally:
        for s in sandboxes:
            s.kill()
        g.close()
