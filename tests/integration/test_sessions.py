"""/api/sessions with Jupyter Server's shapes."""
import threading
import time

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


def test_a_second_tab_while_the_kernel_starts_gets_the_same_session(gateway):
    """A notebook opened in a second tab while the first tab's kernel is
    still starting: its POST is answered once that kernel is ready, with
    the same session. One kernel per path, not one per tab."""
    body = {"path": "work/tabs.ipynb", "type": "notebook", "kernel": {"name": "python3"}}
    answers = {}

    def post(key):
        answers[key] = gateway.request("POST", "/api/sessions", body)

    first = threading.Thread(target=post, args=("first",))
    first.start()
    deadline = time.time() + 30
    while True:
        status, kernels, _ = gateway.request("GET", "/api/kernels")
        if kernels:
            break
        assert time.time() < deadline, "the first tab's kernel never showed"
        time.sleep(0.01)
    assert kernels[0]["execution_state"] == "starting", kernels
    post("second")
    first.join(60)
    (status1, s1, _), (status2, s2, _) = answers["first"], answers["second"]
    assert (status1, status2) == (201, 201), (s1, s2)
    assert s2["id"] == s1["id"] and s2["kernel"]["id"] == s1["kernel"]["id"], (s1, s2)
    status, kernels, _ = gateway.request("GET", "/api/kernels")
    assert [k["id"] for k in kernels] == [s1["kernel"]["id"]], kernels
    status, listing, _ = gateway.request("GET", "/api/sessions")
    assert [x["id"] for x in listing] == [s1["id"]], listing
    status, _, _ = gateway.request("DELETE", f"/api/sessions/{s1['id']}")
    assert status == 204


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
