"""Configured webhook endpoints are checked when the config loads (``koboi validate``, with the
key path) for what needs no DNS — addresses, ``localhost``, names of the allow-list — and at
start-up for names, where a refused address stops the server with one line. Each refusal has
its control: the same URL, allowed, passes."""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from koboi_server.webhooks import generate_secret

SECRET = generate_secret()

BASE = """
    agent: {name: hooks}
    llm: {provider: scripted, fallback: hi}
    store: {url: "sqlite:///koboi.db"}
"""


def _config(write_config: Callable[..., Path], url: str, allow: Sequence[str] = ()) -> Path:
    allowed = ", ".join(f'"{a}"' for a in allow)
    extra = f"""
    server:
      webhooks:
        allow: [{allowed}]
        endpoints:
          - url: https://hooks.example.com/fine
            secrets: ["{SECRET}"]
          - url: "{url}"
            secrets: ["{SECRET}"]
    """
    path: Path = write_config(BASE, extra=textwrap.dedent(extra), name="hooks.yaml")
    return path


def _cli(*args: str) -> Any:
    from typer.testing import CliRunner

    from koboi_cli.app import app

    return CliRunner().invoke(app, list(args))


@pytest.mark.parametrize(
    ("url", "allow", "what"),
    [
        ("http://127.0.0.1:9000/hook", ["10.0.0.0/8"], "loopback"),
        ("http://localhost:9000/hook", [], "loopback"),
        ("http://api.localhost/hook", [], "loopback"),
        ("http://[::1]:9000/hook", ["127.0.0.1"], "loopback"),
        ("http://10.1.2.3/hook", [], "private"),
        ("http://169.254.169.254/latest", ["169.254.0.0/16"], "metadata"),
    ],
)
def test_validate_refuses_an_endpoint_address_with_its_key_path(
    write_config: Callable[..., Path], url: str, allow: list[str], what: str
) -> None:
    result = _cli("validate", str(_config(write_config, url, allow)))
    assert result.exit_code != 0, result.stdout
    assert "server.webhooks.endpoints[1].url" in result.stderr, result.stderr
    assert what in result.stderr and "Traceback" not in result.stderr
    assert "endpoints[0]" not in result.stderr  # the public one is fine


@pytest.mark.parametrize(
    ("url", "allow"),
    [
        ("http://127.0.0.1:9000/hook", ["127.0.0.1"]),  # the controls of the refusals above
        ("http://localhost:9000/hook", ["localhost"]),
        ("http://localhost:9000/hook", ["127.0.0.0/8", "::1"]),
        ("http://10.1.2.3/hook", ["10.0.0.0/8"]),
        ("http://hooks.corp/hook", ["*.corp"]),  # an allow-listed name: no lookup needed
        ("https://receiver.example.org/hook", []),  # a name: resolved at start-up, not now
    ],
)
def test_validate_lets_allowed_and_unresolved_endpoints_through(
    write_config: Callable[..., Path], url: str, allow: list[str]
) -> None:
    result = _cli("validate", str(_config(write_config, url, allow)))
    assert result.exit_code == 0, result.stderr
    assert "ok:" in result.stdout


def _resolve_to(monkeypatch: pytest.MonkeyPatch, answers: dict[str, list[str]]) -> list[str]:
    """Answer name lookups of the webhook guard from ``answers`` (an OSError for the rest)."""
    asked: list[str] = []

    async def resolver(host: str, port: int) -> list[str]:
        asked.append(host)
        if host not in answers:
            raise OSError(-2, "Name or service not known")
        return answers[host]

    monkeypatch.setattr("koboi_server.webhooks.url_guard.system_resolver", resolver)
    return asked


def test_serve_stops_at_start_up_when_an_endpoint_name_resolves_to_a_refused_address(
    write_config: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    asked = _resolve_to(
        monkeypatch, {"hooks.example.com": ["93.184.216.34"], "inside.example.net": ["10.0.0.5"]}
    )
    config = _config(write_config, "https://inside.example.net/hook")
    assert _cli("validate", str(config)).exit_code == 0  # a name: not resolved when loading
    result = _cli("serve", str(config), "--port", "1")
    assert result.exit_code != 0
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, result.stderr
    assert "server.webhooks.endpoints.1.url" in lines[0]
    assert "resolves to 10.0.0.5" in lines[0] and "Traceback" not in result.stderr
    assert "inside.example.net" in asked


def test_create_app_refuses_to_start_on_a_refused_endpoint_and_starts_otherwise(
    write_config: Callable[..., Path],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    import anyio

    from koboi.errors import KoboiError
    from koboi_server import create_app

    answers = {"hooks.example.com": ["93.184.216.34"], "inside.example.net": ["127.0.0.1"]}
    _resolve_to(monkeypatch, answers)

    async def start(config: Path) -> None:
        app = create_app(config, settings={"run_jobs": False, "access_log": False})
        async with app.router.lifespan_context(app):
            pass

    refused = _config(write_config, "https://inside.example.net/hook")
    with pytest.raises(KoboiError, match=r"server\.webhooks\.endpoints\.1\.url: .*loopback"):
        anyio.run(start, refused)
    # Controls: a public answer starts; a name that does not resolve now only warns (the
    # first delivery checks again).
    answers["inside.example.net"] = ["93.184.216.35"]
    anyio.run(start, refused)
    unresolved = _config(write_config, "https://nowhere.example.net/hook")
    with caplog.at_level("WARNING", logger="koboi.server"):
        anyio.run(start, unresolved)
    assert any(
        "server.webhooks.endpoints.1.url" in r.getMessage() and "resolve" in r.getMessage()
        for r in caplog.records
    ), [r.getMessage() for r in caplog.records]
