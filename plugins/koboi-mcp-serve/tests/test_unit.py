"""What mcp-serve decides without a client: exposure, the signed approval state, the
cheap plugin module. Fast; the real server is in test_serve.py."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from koboi import Risk, tool
from koboi.approval import arguments_hash
from koboi_mcp_serve.serve import ApprovalSigner, Exposure, exposure


@tool(risk=Risk.SAFE, thread=False)
def look() -> str:
    """Look."""
    return "seen"


@tool(risk=Risk.DESTRUCTIVE, thread=False)
def wipe() -> str:
    """Wipe."""
    return "wiped"


def test_loading_the_plugin_imports_nothing_heavy() -> None:
    code = (
        "import sys, koboi_mcp_serve.plugin\n"
        "heavy = [m for m in ('mcp', 'uvicorn', 'starlette', 'pydantic', 'koboi_server') "
        "if m in sys.modules]\n"
        "print(','.join(heavy))"
    )
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert shown.stdout.strip() == ""


def test_only_safe_tools_are_exposed_unless_allowed() -> None:
    assert Exposure().exposes(look) and not Exposure().exposes(wipe)
    assert exposure(["wipe"], False).exposes(wipe)
    assert exposure([], True).exposes(wipe)


def test_an_approval_binds_to_one_tool_and_its_arguments() -> None:
    signer = ApprovalSigner()
    digest = arguments_hash({"path": "a.txt"})
    state = signer.state("write_file", digest)
    assert signer.verify(state) == ("write_file", digest)
    # Another server (another key), a changed byte, garbage: nothing is approved.
    assert ApprovalSigner().verify(state) is None
    tampered = state[:-4] + ("AAAA" if not state.endswith("AAAA") else "BBBB")
    assert signer.verify(tampered) is None
    assert signer.verify("not base64 at all!") is None


def test_an_approval_expires(monkeypatch: pytest.MonkeyPatch) -> None:
    signer = ApprovalSigner()
    state = signer.state("write_file", "h")
    later = time.time() + 301
    monkeypatch.setattr(time, "time", lambda: later)
    assert signer.verify(state) is None
