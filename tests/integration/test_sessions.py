"""/api/sessions with Jupyter Server's shapes."""
from gbclient import outputs_of


def test_session_lifecycle(gateway):
    status, s, headers = gateway.request("POST", "/api/sessions", {
        "path": "work/a.ipynb", "name": "a.ipynb", "type": "notebook",
        "kernel": {"name": "python3"}})
    assert status == 201, s
    assert headers["Location"] == f"/api/sessions/{s['id']}"
    assert (s["path"], s["name"], s["type"]) == ("work/a.ipynb", "a.ipynb", "notebook")
    assert s["notebook"] == {"path": "work/a.ipynb", "name": "a.ipynb"}
    kid = s["kernel"]["id"]
    assert s["kernel"]["execution_state"] == "idle"
    status, k, _ = gateway.request("GET", f"/api/kernels/{kid}")
    assert status == 200

    # The same path gives the same session back.
    status, again, _ = gateway.request("POST", "/api/sessions", {"path": "work/a.ipynb",
                                                                 "kernel": {"name": "python3"}})
    assert status == 201 and again["id"] == s["id"] and again["kernel"]["id"] == kid

    status, listing, _ = gateway.request("GET", "/api/sessions")
    assert [x["id"] for x in listing] == [s["id"]]
    status, one, _ = gateway.request("GET", f"/api/sessions/{s['id']}")
    assert status == 200 and one["kernel"]["id"] == kid

    status, renamed, _ = gateway.request("PATCH", f"/api/sessions/{s['id']}",
                                         {"path": "work/b.ipynb", "name": "b.ipynb"})
    assert status == 200 and renamed["path"] == "work/b.ipynb" and renamed["kernel"]["id"] == kid

    status, _, _ = gateway.request("DELETE", f"/api/sessions/{s['id']}")
    assert status == 204
    status, _, _ = gateway.request("GET", f"/api/sessions/{s['id']}")
    assert status == 404
    status, _, _ = gateway.request("GET", f"/api/kernels/{kid}")
    assert status == 404, "deleting a session shuts its kernel down"


def test_session_on_existing_kernel_and_kernel_change(gateway, kernel):
    status, s, _ = gateway.request("POST", "/api/sessions", {
        "path": "c.ipynb", "type": "notebook", "kernel": {"id": kernel}})
    assert status == 201 and s["kernel"]["id"] == kernel
    ch = gateway.connect(kernel)
    ch.execute("x = 7")
    ch.close()
    # A new kernel by name replaces (and shuts down) the old one.
    status, changed, _ = gateway.request("PATCH", f"/api/sessions/{s['id']}",
                                         {"kernel": {"name": "python3"}})
    assert status == 200 and changed["kernel"]["id"] != kernel
    new = changed["kernel"]["id"]
    ch = gateway.connect(new)
    _, outputs = ch.execute("'x' in dir()")
    assert outputs_of(outputs, "execute_result")[0]["content"]["data"]["text/plain"] == "False"
    ch.close()
    for _ in range(50):
        if gateway.request("GET", f"/api/kernels/{kernel}")[0] == 404:
            break
        import time
        time.sleep(0.1)
    assert gateway.request("GET", f"/api/kernels/{kernel}")[0] == 404
    # Deleting the kernel directly drops its session.
    gateway.request("DELETE", f"/api/kernels/{new}")
    status, _, _ = gateway.request("GET", f"/api/sessions/{s['id']}")
    assert status == 404


def test_session_errors(gateway):
    cases = [({"kernel": {"name": "python3"}}, 400),           # no path
             ({"path": 7}, 400),
             ({"path": "x.ipynb", "kernel": "python3"}, 400),
             ({"path": "x.ipynb", "kernel": {"name": "nope"}}, 404),
             ({"path": "x.ipynb", "kernel": {"id": "00000000-0000-4000-8000-000000000000"}}, 404)]
    for body, code in cases:
        status, err, _ = gateway.request("POST", "/api/sessions", body)
        assert status == code, (body, status, err)
        assert err["message"]
    status, _, _ = gateway.request("POST", "/api/sessions", raw=b"{bad")
    assert status == 400
    for method in ("GET", "PATCH", "DELETE"):
        status, _, _ = gateway.request(method, "/api/sessions/nope", {} if method == "PATCH"
                                       else None)
        assert status == 404
