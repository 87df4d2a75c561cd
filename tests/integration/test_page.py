"""The web page's files: public, each with a CSP, confined to the static
directory, and at the base URL."""
import http.client
import os
import subprocess
import tempfile

import pytest

from gbclient import BINARY, start_gateway


def fetch(gw, method, path, headers=None):
    """Sends the path as is (no client-side normalisation of '..')."""
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=30)
    try:
        conn.request(method, path, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.read(), resp.headers
    finally:
        conn.close()


@pytest.fixture(scope="module")
def gw():
    g = start_gateway()
    yield g
    g.stop()


def test_page_needs_no_token_and_carries_a_csp(gw):
    status, body, headers = fetch(gw, "GET", "/")
    assert status == 200, body
    assert headers["Content-Type"].startswith("text/html")
    assert b'<script type="module" src="static/app.js"' in body
    csp = headers["Content-Security-Policy"]
    assert "default-src 'none'" in csp and "script-src 'self'" in csp
    assert "unsafe-inline" not in csp
    assert headers["X-Content-Type-Options"] == "nosniff"
    for name, type_ in [("app.js", "text/javascript"), ("style.css", "text/css"),
                        ("frame.html", "text/html"), ("frame.js", "text/javascript"),
                        ("favicon.svg", "image/svg+xml"), ("render.js", "text/javascript"),
                        ("highlight.js", "text/javascript"), ("notebook.js", "text/javascript"),
                        ("shared.js", "text/javascript"), ("cells.js", "text/javascript"),
                        ("document.js", "text/javascript")]:
        status, body, headers = fetch(gw, "GET", "/static/" + name)
        assert status == 200 and body, name
        assert headers["Content-Type"].startswith(type_), name
        assert headers["Content-Security-Policy"], name
    # The frame for kernel HTML is sandboxed by its own policy as well.
    assert fetch(gw, "GET", "/static/frame.html")[2]["Content-Security-Policy"].startswith(
        "sandbox allow-scripts;")
    # The API stays closed.
    assert fetch(gw, "GET", "/api/kernels")[0] == 401


def test_page_files_cannot_name_anything_else(gw):
    for path in ["/static/../README.md", "/static/%2e%2e/README.md", "/static/..%2fREADME.md",
                 "/static/.gitignore", "/static/", "/static/nope.js",
                 "/static/%2fetc%2fpasswd", "/static//etc/passwd", "/static/a/b"]:
        status, body, _ = fetch(gw, "GET", path)
        assert status in (401, 404), (path, status)
        assert b"Glovebox" not in body and b"root:" not in body, path
    status, body, _ = fetch(gw, "POST", "/static/app.js")
    assert status == 405 and b"GET" in body


def test_static_dir_and_base_url(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "index.html").write_text("<!doctype html><title>mine</title>")
    (site / "page.js").write_text("1")
    secret = tmp_path / "secret.txt"
    secret.write_text("not for the web")
    os.symlink(secret, site / "link.js")
    (site / "dir.js").mkdir()
    g = start_gateway("--static-dir", str(site), "--base-url", "/gb")
    try:
        status, body, headers = fetch(g, "GET", "/gb?token=abc")
        assert status == 302 and headers["Location"] == "/gb/?token=abc"
        status, body, _ = fetch(g, "GET", "/gb/")
        assert status == 200 and b"<title>mine</title>" in body
        assert fetch(g, "GET", "/gb/static/page.js")[1] == b"1"
        # A symlink in the directory is not followed; a directory is no file.
        assert fetch(g, "GET", "/gb/static/link.js")[0] == 404
        assert fetch(g, "GET", "/gb/static/dir.js")[0] == 404
        assert fetch(g, "GET", "/")[0] == 404, "outside the base URL"
    finally:
        g.stop()


def test_missing_static_dir_is_a_start_up_error():
    with tempfile.TemporaryDirectory() as d:
        proc = subprocess.run([BINARY, "--listen", "127.0.0.1:0", "--static-dir",
                               os.path.join(d, "nope")], capture_output=True, text=True,
                              timeout=30)
    assert proc.returncode != 0
    assert "--static-dir" in proc.stderr and "No such file" in proc.stderr
