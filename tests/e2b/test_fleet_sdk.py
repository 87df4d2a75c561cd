"""E2B's Python SDK, unmodified, against three Glovebox hosts behind
Debian's HAProxy (docs/several-hosts.md; the set-up is
tests/sandbox/fleetnet.py's): sandboxes created through the front land on
more than one host, and everything the SDK then sends for a sandbox (its
control routes by path, envd and the code interpreter by the
E2b-Sandbox-Id header) reaches the sandbox's own host; the list shows the
whole fleet, its metadata filter intact; a killed host's sandboxes fail
with an error while the others carry on."""
import os
import shutil
import sys

import pytest

from conftest import point_sdk_at

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "sandbox"))
from fleetnet import TOKEN, Fleet, host_of  # noqa: E402

from e2b import SandboxException  # noqa: E402
from e2b_code_interpreter import Sandbox  # noqa: E402
from e2b.sandbox.sandbox_api import SandboxQuery  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("haproxy") is None or shutil.which("nsenter") is None,
                                reason="needs haproxy and nsenter")


@pytest.fixture(scope="module")
def fleet():
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    f = Fleet().up()
    yield f
    f.down()


def test_sandboxes_through_the_front(fleet):
    point_sdk_at(fleet.front, TOKEN)
    boxes = []
    try:
        for i in range(3):
            boxes.append(Sandbox.create(metadata={"suite": "fleet", "n": str(i)}))
        hosts = [host_of(b.sandbox_id) for b in boxes]
        assert None not in hosts and len(set(hosts)) >= 2, [b.sandbox_id for b in boxes]
        for i, b in enumerate(boxes):
            ex = b.run_code(f"n = {i}\nn * 10")
            assert ex.error is None and ex.text == str(i * 10), (b.sandbox_id, ex)
            b.files.write("/home/user/which.txt", b.sandbox_id)
            assert b.files.read("/home/user/which.txt") == b.sandbox_id
            assert b.commands.run("cat /home/user/which.txt").stdout == b.sandbox_id
        # The list goes to any host and shows every host's, filter and all.
        listed = Sandbox.list(query=SandboxQuery(metadata={"suite": "fleet"})).next_items()
        assert {s.sandbox_id for s in listed} == {b.sandbox_id for b in boxes}, listed
        assert Sandbox.list(query=SandboxQuery(metadata={"suite": "other"})).next_items() == []
        # connect() by id reaches the same sandbox, with its state.
        again = Sandbox.connect(boxes[0].sandbox_id)
        assert again.run_code("n").text == "0"

        # A killed host: its sandbox's calls fail, the others go on.
        victim = boxes[0]
        fleet.host(host_of(victim.sandbox_id)).kill()
        dead = host_of(victim.sandbox_id)
        with pytest.raises(SandboxException) as failed:
            victim.run_code("1", timeout=30, request_timeout=30)
        assert f"Host {dead} is down" in str(failed.value), failed.value
        for b in boxes[1:]:
            if host_of(b.sandbox_id) != dead:
                assert b.run_code("n + 1").error is None
        boxes = [b for b in boxes if host_of(b.sandbox_id) != dead]
    finally:
        for b in boxes:
            b.kill()
