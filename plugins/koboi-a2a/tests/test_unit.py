"""The parts that need no server: the section, the card and its signature, what a
message says, what a job looks like as a task, the keygen command, lazy imports."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import ContentTypeNotSupportedError, InvalidParamsError
from a2a_testkit import signing_key
from google.protobuf.struct_pb2 import Struct, Value
from pydantic import ValidationError

from koboi.errors import KoboiError
from koboi.store import Job
from koboi_a2a.card import CardRefused, CardSigner, build_card, verifier_for
from koboi_a2a.config import A2ASettings, PeerSettings, ServeSettings, SigningSettings
from koboi_a2a.inbound import message_text, task_of


def test_the_section_refuses_what_cannot_work() -> None:
    with pytest.raises(ValidationError, match="not a peer name"):
        PeerSettings(name="a.b", url="http://x")
    with pytest.raises(ValidationError, match="not an http"):
        PeerSettings(name="calc", url="ftp://x")
    with pytest.raises(ValidationError, match="either public_key_file or public_key"):
        PeerSettings(name="calc", url="http://x", public_key="k", public_key_file="f")
    with pytest.raises(ValidationError, match="two peers are named 'calc'"):
        A2ASettings.model_validate(
            {"peers": [{"name": "calc", "url": "http://a"}, {"name": "calc", "url": "http://b"}]}
        )
    with pytest.raises(ValidationError, match="extra"):
        A2ASettings.model_validate({"serve": {"sign": {}}})
    assert PeerSettings(name="calc", url="http://x:1/").url == "http://x:1"


def _card(skills: list[dict[str, Any]] | None = None) -> pb.AgentCard:
    settings = ServeSettings.model_validate({"skills": skills or []})
    return build_card(
        name="calc",
        system_prompt="I do arithmetic.\n\nMore words.",
        tools=["calculator"],
        settings=settings,
        base_url="http://127.0.0.1:9",
    )


def test_the_card_is_built_from_the_agent_or_its_configured_skills() -> None:
    card = _card()
    assert card.description == "I do arithmetic."
    assert [(s.id, list(s.tags)) for s in card.skills] == [("calc", ["calculator"])]
    assert card.supported_interfaces[0].url == "http://127.0.0.1:9/v1/a2a"
    configured = _card([{"id": "sum", "description": "Adds.", "examples": ["1 + 1"]}])
    assert [(s.id, s.name, s.description, list(s.examples)) for s in configured.skills] == [
        ("sum", "sum", "Adds.", ["1 + 1"])
    ]


def test_a_signed_card_verifies_and_any_change_breaks_it(tmp_path: Path) -> None:
    private, public = signing_key(tmp_path)
    signer = CardSigner(SigningSettings(key_file=str(private)), tmp_path, "http://127.0.0.1:9")
    signed = signer.sign(_card())
    assert len(signed.signatures) == 1
    assert signer.jwks["keys"][0]["kid"] == "koboi-card"
    peer = PeerSettings(name="calc", url="http://127.0.0.1:9", public_key_file=str(public))
    verify = verifier_for(peer, tmp_path, lambda url: {})
    assert verify is not None
    verify(signed)
    changed = pb.AgentCard()
    changed.CopyFrom(signed)
    changed.skills[0].description = "Transfers money."
    with pytest.raises(CardRefused, match="No valid signature"):
        verify(changed)
    # Another key's signature is no better.
    _, other = signing_key(tmp_path, "other")
    stranger = PeerSettings(name="calc", url="http://127.0.0.1:9", public_key_file=str(other))
    with pytest.raises(CardRefused):
        verifier_for(stranger, tmp_path, lambda url: {})(signed)  # type: ignore[misc]
    # Without a pinned key or trust_card_jwks there is nothing to check with.
    assert verifier_for(PeerSettings(name="calc", url="http://x"), tmp_path, dict) is None


def test_bad_keys_are_one_clear_line(tmp_path: Path) -> None:
    with pytest.raises(KoboiError, match=r"key_file \(.*missing.pem\): cannot read the key"):
        CardSigner(SigningSettings(key_file="missing.pem"), tmp_path, "http://x")
    (tmp_path / "junk.pem").write_text("not a key")
    with pytest.raises(KoboiError, match="not an unencrypted PEM private key"):
        CardSigner(SigningSettings(key_file="junk.pem"), tmp_path, "http://x")
    private, _ = signing_key(tmp_path)
    with pytest.raises(KoboiError, match="does not fit algorithm EdDSA"):
        CardSigner(SigningSettings(key_file=str(private), algorithm="EdDSA"), tmp_path, "http://x")


def test_what_a_message_says() -> None:
    data = Struct()
    data.update({"city": "Paris"})
    message = pb.Message(parts=[pb.Part(text="Weather?"), pb.Part(data=Value(struct_value=data))])
    assert message_text(message) == 'Weather?\n{"city": "Paris"}'
    with pytest.raises(ContentTypeNotSupportedError, match="not url parts"):
        message_text(pb.Message(parts=[pb.Part(url="http://x/y")]))
    with pytest.raises(InvalidParamsError, match="no text"):
        message_text(pb.Message(parts=[pb.Part(text="  ")]))


def _job(status: str, result: dict[str, Any] | None = None) -> Job:
    now = time.time()
    return Job(
        id="job_1",
        session_id="s1",
        owner="desk",
        status=status,  # type: ignore[arg-type]
        request={"input": "hi", "metadata": {"a2a": {"message_id": "m1", "context_id": "c1"}}},
        created_at=now,
        updated_at=now,
        result=result,
    )


def test_a_job_as_a_task() -> None:
    done = task_of(_job("completed", {"outcome": "completed", "output": "hello"}))
    assert (done.id, done.context_id, done.status.state) == ("job_1", "c1", pb.TASK_STATE_COMPLETED)
    assert done.artifacts[0].parts[0].text == "hello"
    assert [m.role for m in done.history] == [pb.ROLE_USER, pb.ROLE_AGENT]
    assert done.history[0].message_id == "m1"
    assert len(task_of(_job("completed", {"output": "x"}), history_length=0).history) == 0
    waiting = task_of(
        _job(
            "waiting_input",
            {"suspension": {"reason": "waiting", "data": {"question": "which one?"}}},
        )
    )
    assert waiting.status.state == pb.TASK_STATE_INPUT_REQUIRED
    assert waiting.status.message.parts[0].text == "waiting: which one?"
    refused = task_of(_job("failed", {"outcome": "refused", "error": "policy"}))
    assert refused.status.state == pb.TASK_STATE_REJECTED
    assert refused.status.message.parts[0].text == "policy"
    states = {s: task_of(_job(s)).status.state for s in ("queued", "running", "cancelled")}
    assert states == {
        "queued": pb.TASK_STATE_SUBMITTED,
        "running": pb.TASK_STATE_WORKING,
        "cancelled": pb.TASK_STATE_CANCELED,
    }


def test_keygen_writes_a_key_once(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from koboi_a2a.cli import app

    out = tmp_path / "card.pem"
    made = CliRunner().invoke(app, ["keygen", "--out", str(out)])
    assert made.exit_code == 0 and made.stdout.startswith("-----BEGIN PUBLIC KEY-----")
    assert out.stat().st_mode & 0o077 == 0
    CardSigner(SigningSettings(key_file=str(out)), tmp_path, "http://x")  # it signs
    again = CliRunner().invoke(app, ["keygen", "--out", str(out)])
    assert again.exit_code != 0


def test_an_agent_without_the_section_never_imports_a2a_sdk() -> None:
    code = (
        "import sys\n"
        "from koboi_a2a import plugin\n"
        "class Config:\n"
        "    def section(self, name):\n"
        "        return None\n"
        "assert plugin.create_toolset(Config()) is None\n"
        "print(sorted(m for m in sys.modules if m == 'a2a' or m.startswith('a2a.')))\n"
    )
    ran = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert ran.stdout.strip() == "[]"


def test_koboi_a2a_peers_reports_each_peer(tmp_path: Path) -> None:
    import json

    from typer.testing import CliRunner

    from koboi_a2a.cli import app

    config = tmp_path / "agent.yaml"
    config.write_text(
        "agent: {name: desk}\nllm: {provider: scripted}\n"
        "a2a:\n  peers:\n    - {name: calc, url: 'http://127.0.0.1:9', allow_unsigned: true}\n"
    )
    ran = CliRunner().invoke(app, ["peers", str(config), "--json"])
    assert ran.exit_code == 1
    (row,) = json.loads(ran.stdout)
    assert (row["peer"], row["status"]) == ("calc", "unreachable")
    assert "cannot fetch http://127.0.0.1:9/.well-known/agent-card.json" in row["error"]
