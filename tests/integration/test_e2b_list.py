"""E2B's list of sandboxes (GET /e2b/v2/sandboxes) over plain HTTP: a long
metadata filter no longer hides the arguments after it (every page was the
first, and the SDK's `while has_next` never ended); pages are keysets that
neither repeat nor skip a sandbox when others start or end between them;
order, startedAfter, template and state filter; limit is 1 to 100; and
every bad argument is a 400 naming it. The older GET /e2b/sandboxes lists
the running ones, all of them, newest first. The same through the SDKs:
E2B's own tests/*/api_*/test_sbx_list.py."""
import base64
import time
import urllib.parse
import uuid

import pytest


def api(gateway, method, path, body=None):
    return gateway.request(method, "/e2b" + path, body, token="",
                           headers={"X-API-KEY": gateway.token})


def listing(gateway, **query):
    status, listed, headers = api(gateway, "GET", "/v2/sandboxes?" +
                                  urllib.parse.urlencode(query))
    return status, listed, headers.get("X-Next-Token")


def metadata(**pairs):
    """The SDKs' encoding of a metadata filter (before the query's own)."""
    return urllib.parse.urlencode({urllib.parse.quote(k): urllib.parse.quote(v)
                                   for k, v in pairs.items()})


@pytest.fixture(scope="module")
def boxes(gateway):
    """Three sandboxes of one long tag, oldest first; the middle one on
    template "base"."""
    tag = "list-" + str(uuid.uuid4())
    made = []
    for template in ("code-interpreter-v1", "base", "code-interpreter-v1"):
        status, sb, _ = api(gateway, "POST", "/v2/sandboxes",
                            {"templateID": template, "timeout": 300,
                             "metadata": {"sandbox_test_id": tag, "n": str(len(made))}})
        assert status == 201, sb
        made.append(sb["sandboxID"])
        time.sleep(0.01)
    yield tag, made
    for sid in made:
        api(gateway, "DELETE", f"/sandboxes/{sid}")


def walk(gateway, **query):
    """Every page of the list, in order: (ids, number of pages)."""
    seen, token, pages = [], None, 0
    while True:
        args = dict(query, **({"nextToken": token} if token else {}))
        status, listed, token = listing(gateway, **args)
        assert status == 200, listed
        pages += 1
        seen += [s["sandboxID"] for s in listed]
        assert pages < 10, seen  # every page the first: the bug this fixes
        if not token:
            return seen, pages


def test_pages_go_on_past_a_long_metadata_filter(gateway, boxes):
    tag, made = boxes
    seen, pages = walk(gateway, metadata=metadata(sandbox_test_id=tag), limit=1)
    assert seen == made[::-1] and pages == 3
    seen, pages = walk(gateway, metadata=metadata(sandbox_test_id=tag), limit=1, order="asc")
    assert seen == made and pages == 3
    seen, _ = walk(gateway, metadata=metadata(sandbox_test_id=tag, n="1"))
    assert seen == [made[1]]


def test_a_page_neither_repeats_nor_skips_when_sandboxes_come_and_go(gateway, boxes):
    tag, made = boxes
    status, first, token = listing(gateway, metadata=metadata(sandbox_test_id=tag), limit=1)
    assert [s["sandboxID"] for s in first] == [made[2]] and token
    status, newer, _ = api(gateway, "POST", "/v2/sandboxes",
                           {"metadata": {"sandbox_test_id": tag, "n": "new"}})
    assert status == 201
    try:
        # Newer than the cursor: not in the pages after it; made[1] is next.
        status, second, token = listing(gateway, metadata=metadata(sandbox_test_id=tag),
                                        limit=1, nextToken=token)
        assert [s["sandboxID"] for s in second] == [made[1]] and token
    finally:
        api(gateway, "DELETE", f"/sandboxes/{newer['sandboxID']}")


def test_filters(gateway, boxes):
    tag, made = boxes
    status, listed, _ = listing(gateway, metadata=metadata(sandbox_test_id=tag), template="base")
    assert [s["sandboxID"] for s in listed] == [made[1]]
    status, listed, _ = listing(gateway, metadata=metadata(sandbox_test_id=tag),
                                template="team/base")
    assert [s["sandboxID"] for s in listed] == [made[1]]
    status, info, _ = api(gateway, "GET", f"/sandboxes/{made[1]}")
    status, listed, _ = listing(gateway, metadata=metadata(sandbox_test_id=tag),
                                startedAfter=info["startedAt"])
    assert [s["sandboxID"] for s in listed] == [made[2], made[1]]  # at or after
    status, listed, _ = listing(gateway, metadata=metadata(sandbox_test_id=tag), state="paused")
    assert status == 200 and listed == []
    status, listed, _ = listing(gateway, metadata=metadata(sandbox_test_id=tag),
                                state="paused,running")
    assert len(listed) == 3
    status, listed, _ = api(gateway, "GET", "/sandboxes?limit=1&" +
                            urllib.parse.urlencode({"metadata": metadata(sandbox_test_id=tag)}))
    assert status == 200 and [s["sandboxID"] for s in listed] == made[::-1]  # v1: no pages


@pytest.mark.parametrize("query,words", [
    ({"limit": "101"}, "limit must be a whole number from 1 to 100"),
    ({"limit": "99999999999999999999"}, "limit must be"),
    ({"limit": "0"}, "limit must be"),
    ({"nextToken": "not a token"}, "Invalid next token"),
    ({"nextToken": base64.urlsafe_b64encode(b"2026-01-01T00:00:00Z__gbx__asc").decode()},
     "made for the other order"),
    ({"nextToken": "A" * 300}, "Invalid next token"),
    ({"order": "sideways"}, "Invalid order parameter"),
    ({"state": "running,dead"}, "state \"dead\" is not one of running, paused"),
    ({"metadata": "novalue"}, "Error parsing metadata"),
    ({"metadata": "k=%zz"}, "Error parsing metadata"),
    ({"startedAfter": "yesterday"}, "startedAfter \"yesterday\" is not an RFC 3339 time"),
    ({"template": "base:v1"}, "tags are not supported"),
    ({"metadata": "k=" + "v" * 5000}, "a query argument is over 4096 bytes"),
])
def test_a_bad_argument_is_a_400_naming_it(gateway, query, words):
    status, err, token = listing(gateway, **query)
    assert status == 400 and err["code"] == 400 and words in err["message"], err
    assert token is None
