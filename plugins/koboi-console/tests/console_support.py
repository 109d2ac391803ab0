"""Shared pieces of koboi-console's tests: the scripted agent (a tool that asks for approval,
one that does not), the real app of koboi-server with the console on, and a browser-like
client that logs in through the login form."""

from __future__ import annotations

import re
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from koboi_server import testing

#: append_log is moderate: in act mode it asks for approval; the calculator does not.
AGENT = """
    agent: {name: console-demo, mode: act, approval_timeout_seconds: 120}
    llm:
      provider: scripted
      rules:
        - match: 'log (?P<line>[\\w-]+)'
          tool: append_log
          arguments: {line: "{line}"}
          reply: "logged: {result}"
        - match: '(?P<expr>\\d+ \\* \\d+)'
          tool: calculator
          arguments: {expression: "{expr}"}
          reply: "{expr} = {result}"
      fallback: "Ask me some arithmetic, please."
    tools: {builtin: [calculator, append_log]}
    sandbox: {backend: passthrough, workdir: work}
    store: {url: "sqlite:///koboi.db"}
    console: {}
"""

#: Two principals (alice, bob) on a passthrough sandbox: the operator's opt-in.
FAST = {
    "shared_sandbox": True,
    "keepalive_seconds": 0.5,
    "key_recheck_seconds": 0.3,
    "poll_seconds": 0.1,
    "access_log": False,
    "job_poll_seconds": 0.1,
}

CSRF_FIELD = re.compile(r'name="csrf_token" value="([^"]+)"')


@pytest.fixture(autouse=True)
def _isolated(koboi_clean_environment: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """koboi-testing's clean environment; the demo tools without their step pause."""
    monkeypatch.setenv("KOBOI_DEMO_STEP_SECONDS", "0")


def write_config(directory: Path, extra: str = "", text: str = AGENT) -> Path:
    path = directory / "agent.yaml"
    path.write_text(textwrap.dedent(text) + textwrap.dedent(extra), encoding="utf-8")
    return path


@pytest.fixture
def config_path(tmp_path: Path) -> Path:
    return write_config(tmp_path)


def csrf_of(html: str) -> str:
    found = CSRF_FIELD.search(html)
    assert found, html
    return found.group(1)


class Browser:
    """An httpx client that behaves as a browser on the console: its own cookies, forms,
    redirects not followed unless asked."""

    def __init__(self, base_url: str) -> None:
        self.client = httpx.Client(base_url=base_url, timeout=30)

    def login(self, key: str) -> httpx.Response:
        page = self.client.get("/console/login")
        assert page.status_code == 200
        return self.client.post(
            "/console/login",
            data={"key": key, "csrf_token": csrf_of(page.text), "next": "/console/sessions"},
        )

    def csrf(self, path: str = "/console/sessions") -> str:
        return csrf_of(self.client.get(path).text)

    def get(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.client.get(path, **kwargs)

    def post(self, path: str, **kwargs: Any) -> httpx.Response:
        return self.client.post(path, **kwargs)


class ThreadServer(testing.ThreadServer):
    """koboi-server's test server, with the console's browsers and API clients it made
    (closed when it stops)."""

    def __init__(self, app: Any) -> None:
        super().__init__(app)
        self.browsers: list[Browser] = []
        self.clients: list[httpx.Client] = []

    def browser(self) -> Browser:
        browser = Browser(self.base_url)
        self.browsers.append(browser)
        return browser

    def api(self, key: str) -> httpx.Client:
        client = httpx.Client(
            base_url=self.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=30
        )
        self.clients.append(client)
        return client

    def stop(self) -> None:
        for client in [*self.clients, *(b.client for b in self.browsers)]:
            client.close()
        super().stop()


def in_store(config: Path, work: Callable[[Any], Any]) -> Any:
    """``await work(store)`` on the config's store, opened by the test process."""
    return testing.store_call(config, work)


def make_key(config: Path, principal: str) -> str:
    return testing.create_key(config, principal)


def revoke_key(config: Path, token: str) -> None:
    testing.revoke_key(config, token)


@pytest.fixture
def serve(config_path: Path) -> Iterator[Callable[..., ThreadServer]]:
    """``serve(config=..., **settings)``: the real app of koboi-server with the console, on
    a 127.0.0.1 port (uvicorn in a thread: lifespan, middleware and routes are the real ones)."""
    from koboi_server import create_app

    started: list[ThreadServer] = []

    def start(config: Path = config_path, **settings: Any) -> ThreadServer:
        app = create_app(config, settings={**FAST, **settings})
        server = ThreadServer(app).start()
        started.append(server)
        return server

    yield start
    for server in reversed(started):
        server.stop()
