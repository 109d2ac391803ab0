"""The console against the real app of koboi-server (uvicorn on 127.0.0.1, httpx as the
browser): login with an API key, the cookie's flags, ownership through the server's own
checks, CSRF on every form, the content-security policy, approvals, jobs, the audit trail
and the live stream."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import httpx
import pytest
from console_support import CSRF_FIELD, ThreadServer, csrf_of, make_key, revoke_key, write_config

from koboi_console.pages import CSP

# Real servers (uvicorn in a thread) and a few seconds of start-up each.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

CONSOLE_PAGES = ("/console/sessions", "/console/jobs", "/console/login")


def _sse_events(text: str) -> list[tuple[str, dict[str, Any]]]:
    events, name = [], "message"
    for line in text.splitlines():
        if line.startswith("event: "):
            name = line[len("event: ") :]
        elif line.startswith("data: "):
            events.append((name, json.loads(line[len("data: ") :])))
            name = "message"
    return events


def _wait(check: Callable[[], Any], what: str, seconds: float = 20) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _pending_chat(api: httpx.Client, line: str) -> tuple[str, str]:
    """A chat whose append_log call waits for approval: its session and approval ids."""
    answer = api.post("/v1/chat", json={"message": f"log {line}"})
    assert answer.status_code == 202, answer.text
    body = answer.json()
    assert body["status"] == "awaiting_approval"
    return body["session_id"], body["approvals"][0]["approval_id"]


def test_login_sets_a_strict_httponly_cookie_and_a_bad_key_is_refused(
    serve: Callable[..., ThreadServer], config_path: Path
) -> None:
    key = make_key(config_path, "alice")
    server = serve()
    browser = server.browser()
    # Not logged in: every page sends to the login page, saying where to come back.
    first = browser.get("/console/sessions")
    assert first.status_code == 303
    assert first.headers["location"] == "/console/login?next=/console/sessions&why=login"
    assert browser.get("/console").headers["location"] == "/console/sessions"

    # A wrong key: 401, the form again, no login cookie.
    page = browser.get("/console/login")
    refused = browser.post(
        "/console/login",
        data={"key": key[:-1] + ("A" if key[-1] != "A" else "B"), "csrf_token": csrf_of(page.text)},
    )
    assert refused.status_code == 401
    assert "not valid or was revoked" in refused.text
    assert "koboi_console" not in browser.client.cookies

    answer = browser.login(key)
    assert answer.status_code == 303 and answer.headers["location"] == "/console/sessions"
    cookie = next(
        v for k, v in answer.headers.multi_items() if k == "set-cookie" and "koboi_console=" in v
    )
    flags = {part.strip().lower() for part in cookie.split(";")}
    assert {"httponly", "samesite=strict", "path=/console"} <= flags
    assert "secure" not in flags  # server.host is loopback: plain HTTP on this machine
    token = cookie.split(";")[0].split("=", 1)[1]
    assert key not in cookie and token != key

    # The store keeps the login by hash, never the key nor the login token.
    from console_support import in_store

    async def logins(store: Any) -> list[tuple[str, dict[str, Any]]]:
        return list(await store.record_list("console.login"))

    stored = in_store(config_path, logins)
    assert len(stored) == 1
    assert token not in json.dumps(stored) and key not in json.dumps(stored)
    assert stored[0][1]["principal"] == "alice"

    sessions = browser.get("/console/sessions")
    assert sessions.status_code == 200 and "alice" in sessions.text


def test_a_second_principal_sees_none_of_the_first_ones_sessions(
    serve: Callable[..., ThreadServer], config_path: Path
) -> None:
    alice_key, bob_key = make_key(config_path, "alice"), make_key(config_path, "bob")
    server = serve()
    alice_api = server.api(alice_key)
    done = alice_api.post("/v1/chat", json={"message": "What is 6 * 7?"}).json()
    assert done["output"] == "6 * 7 = 42"
    sid = done["session_id"]
    pending_sid, approval_id = _pending_chat(alice_api, "secret-plan")
    job = alice_api.post("/v1/jobs", json={"input": "What is 3 * 4?"}).json()

    alice, bob = server.browser(), server.browser()
    assert alice.login(alice_key).status_code == 303
    assert bob.login(bob_key).status_code == 303
    listed = alice.get("/console/sessions").text
    assert sid in listed and pending_sid in listed
    assert alice.get(f"/console/sessions/{sid}").status_code == 200

    bob_list = bob.get("/console/sessions")
    assert bob_list.status_code == 200
    assert sid not in bob_list.text and pending_sid not in bob_list.text
    assert 'id="no-sessions"' in bob_list.text
    assert job["id"] not in bob.get("/console/jobs").text
    # Every page of alice's objects answers bob as for an id that does not exist.
    missing = "0" * 32
    for path in (
        "/console/sessions/{}",
        "/console/sessions/{}/audit",
        "/console/sessions/{}/events",
    ):
        theirs, nothing = bob.get(path.format(sid)), bob.get(path.format(missing))
        assert theirs.status_code == nothing.status_code == 404
        assert theirs.text.replace(sid, missing) == nothing.text
    for path in ("/console/jobs/{}", "/console/jobs/{}/status", "/console/jobs/{}/events"):
        assert bob.get(path.format(job["id"])).status_code == 404
    # Nor can bob decide alice's approval, with a valid CSRF token of his own.
    decided = bob.post(
        f"/console/approvals/{approval_id}",
        data={"csrf_token": bob.csrf(), "decision": "approve"},
    )
    assert decided.status_code == 404
    view = alice_api.get(f"/v1/approvals/{approval_id}").json()
    assert view["status"] == "pending"
    cancel = bob.post(f"/console/jobs/{job['id']}/cancel", data={"csrf_token": bob.csrf()})
    assert cancel.status_code == 404


def test_a_form_post_without_the_csrf_token_is_refused(
    serve: Callable[..., ThreadServer], config_path: Path
) -> None:
    key = make_key(config_path, "alice")
    server = serve()
    api = server.api(key)
    _, approval_id = _pending_chat(api, "hello")
    browser = server.browser()
    assert browser.login(key).status_code == 303
    good = browser.csrf()

    posts: list[tuple[str, dict[str, str]]] = [
        (f"/console/approvals/{approval_id}", {"decision": "approve"}),
        ("/console/jobs", {"input": "What is 2 * 2?"}),
        ("/console/logout", {}),
    ]
    for path, fields in posts:
        for token in (None, "", good[:-2] + "xx", "x" * 43):
            data = dict(fields) if token is None else {**fields, "csrf_token": token}
            refused = browser.post(path, data=data)
            assert refused.status_code == 403, (path, token, refused.text)
            assert "csrf" in refused.text.lower()
    # A cross-site post is refused even with the right token.
    cross = browser.post(
        f"/console/approvals/{approval_id}",
        data={"csrf_token": good, "decision": "approve"},
        headers={"Sec-Fetch-Site": "cross-site"},
    )
    assert cross.status_code == 403
    # Nothing happened: the approval waits, no job was queued, the login still works.
    assert api.get(f"/v1/approvals/{approval_id}").json()["status"] == "pending"
    assert api.get("/v1/jobs").json()["jobs"] == []
    assert browser.get("/console/sessions").status_code == 200
    # The login form too: its token must match the cookie the login page set.
    fresh = server.browser()
    fresh.get("/console/login")
    assert fresh.post("/console/login", data={"key": key}).status_code == 403
    other = csrf_of(server.browser().get("/console/login").text)
    assert fresh.post("/console/login", data={"key": key, "csrf_token": other}).status_code == 403

    # With the token, the same decision goes through the server's approval route.
    approved = browser.post(
        f"/console/approvals/{approval_id}",
        data={"csrf_token": good, "decision": "approve", "idempotency_key": "k-1"},
    )
    assert approved.status_code == 303, approved.text
    assert api.get(f"/v1/approvals/{approval_id}").json()["status"] == "approved"
    # A second decision is the server's 409, shown as a page.
    again = browser.post(
        f"/console/approvals/{approval_id}", data={"csrf_token": good, "decision": "deny"}
    )
    assert again.status_code == 409 and "approval_not_pending" in again.text
    # The same form sent twice (its idempotency key): the first answer again, not a 409.
    replay = browser.post(
        f"/console/approvals/{approval_id}",
        data={"csrf_token": good, "decision": "approve", "idempotency_key": "k-1"},
    )
    assert replay.status_code == 303


class _Audit(HTMLParser):
    """What a page holds that a strict CSP would block or that could run inline."""

    def __init__(self) -> None:
        super().__init__()
        self.problems: list[str] = []
        self.scripts: list[str] = []
        self.inline_script = False
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        names = {name for name, _ in attrs}
        self.problems += [f"<{tag} {n}>" for n in names if n.startswith("on") or n == "style"]
        if tag == "style":
            self.problems.append("<style>")
        if tag == "script":
            self._in_script = True
            src = dict(attrs).get("src")
            if src is None:
                self.problems.append("<script> without src")
            else:
                self.scripts.append(src)
        for name, value in attrs:
            if name in ("href", "src", "action") and value and "//" in value:
                self.problems.append(f"{name}={value} (another origin)")

    def handle_endtag(self, tag: str) -> None:
        self._in_script = self._in_script and tag != "script"

    def handle_data(self, data: str) -> None:
        if self._in_script and data.strip():
            self.problems.append("inline script text")


def test_every_page_has_a_strict_csp_and_no_inline_script(
    serve: Callable[..., ThreadServer], config_path: Path
) -> None:
    key = make_key(config_path, "alice")
    server = serve()
    api = server.api(key)
    sid, _ = _pending_chat(api, "hello")
    job = api.post("/v1/jobs", json={"input": "What is 3 * 4?"}).json()
    browser = server.browser()
    login_page = browser.get("/console/login")
    assert browser.login(key).status_code == 303
    pages = [
        login_page,
        *(browser.get(p) for p in CONSOLE_PAGES[:2]),
        browser.get(f"/console/sessions/{sid}"),
        browser.get(f"/console/sessions/{sid}/audit"),
        browser.get(f"/console/jobs/{job['id']}"),
        browser.get(f"/console/sessions/{'0' * 32}"),  # an error page
    ]
    for page in pages:
        assert page.headers["content-security-policy"] == CSP, page.url
        assert page.headers["x-frame-options"] == "DENY"
        assert page.headers["x-content-type-options"] == "nosniff"
        assert page.headers["cache-control"] == "no-store"
        audit = _Audit()
        audit.feed(page.text)
        assert audit.problems == [], (page.url, audit.problems)
        assert audit.scripts == ["/console/static/console.js"]
    assert "script-src 'self'" in CSP and "'unsafe-inline'" not in CSP
    assert "frame-ancestors 'none'" in CSP and "form-action 'self'" in CSP
    # The assets come from the wheel, with the same headers.
    script = browser.get("/console/static/console.js")
    assert script.status_code == 200 and script.headers["content-type"].startswith(
        "text/javascript"
    )
    assert "EventSource" in script.text and "innerHTML" not in script.text
    assert script.headers["content-security-policy"] == CSP
    css = browser.get("/console/static/console.css")
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
    assert "@import" not in css.text and "url(" not in css.text
    assert not [p for p in browser.get("/openapi.json").json()["paths"] if "console" in p]
    assert browser.get("/console/static/../plugin.py").status_code == 404
    assert browser.get("/console/static/settings.py").status_code == 404


def test_approve_from_the_console_and_follow_the_stream(
    serve: Callable[..., ThreadServer], config_path: Path
) -> None:
    key = make_key(config_path, "alice")
    server = serve()
    api = server.api(key)
    sid, approval_id = _pending_chat(api, "from-console")
    browser = server.browser()
    assert browser.login(key).status_code == 303
    page = browser.get(f"/console/sessions/{sid}")
    assert page.status_code == 200
    # The pending call is shown with its arguments, and a form to decide it.
    assert f'id="approval-{approval_id}"' in page.text
    assert "append_log" in page.text and "&#34;line&#34;: &#34;from-console&#34;" in page.text
    form = page.text[page.text.index(f"/console/approvals/{approval_id}") :]
    token = CSRF_FIELD.search(form)
    assert token is not None
    decided = browser.post(
        f"/console/approvals/{approval_id}",
        data={
            "csrf_token": token.group(1),
            "decision": "approve",
            "reason": "looks fine",
            "next": f"/console/sessions/{sid}",
        },
    )
    assert decided.status_code == 303 and decided.headers["location"] == f"/console/sessions/{sid}"
    view = api.get(f"/v1/approvals/{approval_id}").json()
    assert view["status"] == "approved" and view["decision_reason"] == "looks fine"
    assert view["decided_by"].startswith("http:alice:")
    _wait(lambda: api.get(f"/v1/sessions/{sid}").json()["status"] == "completed", "the run")

    # The live view's stream: the server's events of the session, in order, to its final.
    stream = browser.get(f"/console/sessions/{sid}/events")
    assert stream.status_code == 200
    assert stream.headers["content-type"].startswith("text/event-stream")
    events = _sse_events(stream.text)
    names = [name for name, _ in events]
    assert names[0] == "run_started" and names[-1] == "final"
    assert {"pending_approval", "approval_decided", "tool_call", "tool_result"} <= set(names)
    final = events[-1][1]
    assert final["outcome"] == "completed" and final["output"] == "logged: appended from-console"
    # The same as the API's stream for the key's owner.
    api_events = _sse_events(api.get(f"/v1/sessions/{sid}/events").text)
    assert [n for n, _ in api_events] == names
    # After= resumes like the API.
    later = _sse_events(browser.get(f"/console/sessions/{sid}/events?after=3").text)
    assert later[0][1]["event_id"] == 4

    # The audit trail shows the approval and the call.
    audit = browser.get(f"/console/sessions/{sid}/audit")
    assert audit.status_code == 200
    assert "approval" in audit.text and "append_log" in audit.text
    assert "looks fine" in audit.text


def test_a_job_from_the_console_runs_to_its_end(
    serve: Callable[..., ThreadServer], config_path: Path
) -> None:
    key = make_key(config_path, "alice")
    server = serve()
    browser = server.browser()
    assert browser.login(key).status_code == 303
    jobs = browser.get("/console/jobs")
    token = csrf_of(jobs.text)
    idem = re.search(r'name="idempotency_key" value="([^"]+)"', jobs.text)
    assert idem is not None
    queued = browser.post(
        "/console/jobs",
        data={"csrf_token": token, "input": "What is 3 * 4?", "idempotency_key": idem.group(1)},
    )
    assert queued.status_code == 303
    job_path = queued.headers["location"]
    job_id = job_path.rsplit("/", 1)[1]
    # Sent twice (a double click): the same job, not a second one.
    again = browser.post(
        "/console/jobs",
        data={"csrf_token": token, "input": "What is 3 * 4?", "idempotency_key": idem.group(1)},
    )
    assert again.headers["location"] == job_path
    status = _wait(
        lambda: (s := browser.get(f"{job_path}/status").json())["status"] == "completed" and s,
        "the job",
    )
    assert status["id"] == job_id
    page = browser.get(job_path)
    assert page.status_code == 200 and "3 * 4 = 12" in page.text
    assert 'id="job-status">completed' in page.text
    events = _sse_events(browser.get(f"{job_path}/events").text)
    assert events[-1][0] == "final" and events[-1][1]["output"] == "3 * 4 = 12"
    api_jobs = server.api(key).get("/v1/jobs").json()["jobs"]
    assert [j["id"] for j in api_jobs] == [job_id]
    # An empty input is the server's 422, as a page.
    empty = browser.post("/console/jobs", data={"csrf_token": token, "input": "  "})
    assert empty.status_code == 422 and "non-empty input" in empty.text


def test_revoking_the_key_or_logging_out_ends_the_login(
    serve: Callable[..., ThreadServer], config_path: Path
) -> None:
    key, other = make_key(config_path, "alice"), make_key(config_path, "alice")
    server = serve()
    first, second = server.browser(), server.browser()
    assert first.login(key).status_code == 303
    assert second.login(other).status_code == 303
    revoke_key(config_path, key)
    gone = first.get("/console/sessions")
    assert gone.status_code == 303 and gone.headers["location"].endswith("why=revoked")
    assert first.login(key).status_code == 401  # a revoked key cannot log in again
    # The other key's login goes on until it logs out; then its cookie is worth nothing.
    assert second.get("/console/sessions").status_code == 200
    cookie = second.client.cookies["koboi_console"]
    out = second.post("/console/logout", data={"csrf_token": second.csrf()})
    assert out.status_code == 303 and out.headers["location"] == "/console/login"
    replayed = httpx.get(
        server.base_url + "/console/sessions", cookies={"koboi_console": cookie}, timeout=10
    )
    assert replayed.status_code == 303


def test_the_console_is_off_without_its_section(
    serve: Callable[..., ThreadServer], tmp_path: Path
) -> None:
    from console_support import AGENT

    config = write_config(tmp_path, text=AGENT.replace("    console: {}\n", ""))
    server = serve(config)
    assert httpx.get(server.base_url + "/console/login").status_code == 404
    disabled = write_config(
        tmp_path, text=AGENT.replace("console: {}", "console: {enabled: false}")
    )
    server = serve(disabled)
    assert httpx.get(server.base_url + "/console/login").status_code == 404


def test_a_bad_console_section_is_one_clear_error(tmp_path: Path) -> None:
    from koboi.config import load_config
    from koboi.errors import KoboiError
    from koboi.plugins import default_host

    config = write_config(tmp_path, extra="", text=AGENT_WITH("console: {login_hours: 3}"))
    with pytest.raises(KoboiError, match=r"console\.login_hours"):
        load_config(config, default_host().catalog())


def AGENT_WITH(section: str) -> str:
    from console_support import AGENT

    return AGENT.replace("console: {}", section)


def test_an_open_stream_ends_when_the_login_ends(
    serve: Callable[..., ThreadServer], config_path: Path
) -> None:
    """The server re-checks a key on its own streams; the console re-checks the login."""
    key = make_key(config_path, "alice")
    server = serve()
    api = server.api(key)
    sid, _ = _pending_chat(api, "waiting")  # the run waits: the stream stays open
    browser = server.browser()
    assert browser.login(key).status_code == 303
    seen: list[str] = []
    with browser.client.stream("GET", f"/console/sessions/{sid}/events") as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            seen.append(line)
            if line == "event: pending_approval":
                revoke_key(config_path, key)
            if line.startswith("data: ") and '"unauthorized"' in line:
                break
    assert "event: error" in seen
    assert json.loads(seen[-1][len("data: ") :])["code"] == "unauthorized"
