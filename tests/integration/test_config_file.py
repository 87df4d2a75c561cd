"""The configuration file (--config) as the systemd unit uses it: the
documented example is a valid configuration, the unit reads that file (no
arguments variable), and a token given there is never printed."""
import json
import os
import re
import subprocess


from gbclient import BINARY, start_gateway

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def documented_example():
    with open(os.path.join(ROOT, "docs", "operations.md")) as f:
        page = f.read()
    section = page[page.index("### The configuration file"):]
    m = re.search(r"```json\n(.*?)```", section, re.S)
    return json.loads(m.group(1))


def test_the_documented_example_is_a_valid_configuration(tmp_path):
    example = documented_example()
    path = tmp_path / "glovebox.json"
    path.write_text(json.dumps(example))
    path.chmod(0o600)
    out = subprocess.run([BINARY, "--config", str(path), "--check-config"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "configuration is valid" in out.stdout
    assert "warning" not in out.stderr, out.stderr
    # As complete as the unit's: where it listens, its token, a pool.
    assert {"listen", "token", "pool"} <= set(example)


def test_the_unit_reads_its_configuration_file():
    with open(os.path.join(ROOT, "dist", "glovebox.service.in")) as f:
        unit = f.read()
    exec_start = [line for line in unit.splitlines() if line.startswith("ExecStart=")]
    assert len(exec_start) == 1
    assert "--config @sysconfdir@/glovebox/glovebox.json" in exec_start[0]
    assert "$" not in exec_start[0] and "token" not in exec_start[0], exec_start
    # The install steps write the file the unit reads.
    with open(os.path.join(ROOT, "docs", "operations.md")) as f:
        assert "/usr/local/etc/glovebox/glovebox.json" in f.read()


def test_a_token_from_the_configuration_file_is_never_printed(tmp_path):
    token = "cfg-file-token-5e1d9a"
    path = tmp_path / "glovebox.json"
    path.write_text(json.dumps({"token": token, "max-kernels": 3}))
    path.chmod(0o600)
    gw = start_gateway("--config", str(path), token=None)
    try:
        gw.token = token
        assert gw.request("GET", "/api/kernels")[0] == 200
        assert gw.request("GET", "/api/kernels", token="not-the-token")[0] == 401
        # What a journal keeps: the URL line and the log.
        assert gw.url_line.strip() == f"Glovebox is serving at {gw.base}/"
        log = gw.read_log()
        assert token not in log
        assert "token: the one in the --config file (not printed)" in log
        assert "readable or writable by every user" not in log
    finally:
        gw.stop()


def test_a_configuration_file_with_the_token_readable_by_all_is_warned_about(tmp_path):
    path = tmp_path / "glovebox.json"
    path.write_text(json.dumps({"token": "cfg-file-token-5e1d9a"}))
    path.chmod(0o644)
    out = subprocess.run([BINARY, "--config", str(path), "--check-config"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert f"--config {path} holds the token and is readable or writable by every user" \
        in out.stderr
    # Without a token in it, the same mode is fine.
    path.write_text(json.dumps({"max-kernels": 3}))
    out = subprocess.run([BINARY, "--config", str(path), "--check-config"],
                         capture_output=True, text=True, timeout=60)
    assert "warning" not in out.stderr, out.stderr


def test_flags_left_in_glovebox_args_are_not_lost_silently():
    env = dict(os.environ, GLOVEBOX_ARGS="--max-kernels 5")
    gw = start_gateway(env=env)
    try:
        assert "GLOVEBOX_ARGS is set but nothing reads it" in gw.read_log()
    finally:
        gw.stop()
