"""The orchestration and research demo configs run offline and do what their headers say."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from koboi import AllowAllApprover, KoboiAgent
from koboi.plugins import reset_default_host

pytestmark = pytest.mark.anyio

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


@pytest.fixture(autouse=True)
def _memory_store(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KOBOI_STORE", "memory://")
    for name in ("KOBOI_DEMO_STEP_SECONDS", "KOBOI_DEMO_PAUSE_IN_MODEL_CALL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("KOBOI_DEMO_STEP_SECONDS", "0")
    reset_default_host()


@pytest.mark.parametrize(
    ("message", "routed", "said"),
    [
        ("I was charged twice, can I get a refund?", ["billing"], "a double charge is refunded"),
        ("The app shows an error after login", ["tech"], "clear the app's cache"),
        ("Something is wrong with my account", ["billing", "tech"], "## billing"),
    ],
)
async def test_the_router_demo(message: str, routed: list[str], said: str) -> None:
    async with KoboiAgent.from_config(CONFIGS / "router_demo.yaml") as agent:
        result = await agent.run(message, session_id="s")
        journal = await agent.store.read("s")
    assert result.outcome == "completed", result.error
    assert said in result.output
    (route,) = [e.data for e in journal if e.type == "orchestration.routed"]
    assert route["agents"] == routed


async def test_the_orchestration_demo(tmp_path: Path) -> None:
    import yaml

    data = yaml.safe_load((CONFIGS / "orchestration_demo.yaml").read_text(encoding="utf-8"))
    data["sandbox"]["workdir"] = str(tmp_path)
    agent = KoboiAgent.from_dict(data, base_dir=CONFIGS, approver=AllowAllApprover())
    async with agent:
        result = await agent.run("Why are there tides?", session_id="s")
        journal = await agent.store.read("s")
    assert result.outcome == "completed", result.error
    assert result.output.startswith("Tides rise and fall because the Moon's gravity")
    finished = [e.data["node"] for e in journal if e.type == "orchestration.node_finished"]
    assert sorted(finished) == ["intake", "moon", "publish", "review", "sun"]
    lines = (tmp_path / "crash_demo.log").read_text().split()
    assert sorted(lines) == sorted(
        ["intake-1", "moon-1", "moon-2", "sun-1", "review-1", "publish-1"]
    )


async def test_the_deep_research_demo_cites_its_corpus() -> None:
    async with KoboiAgent.from_config(CONFIGS / "deep_research_demo.yaml") as agent:
        result = await agent.run("How do tides work?", session_id="s")
        journal = await agent.store.read("s")
    assert result.outcome == "completed", result.error
    body, _, sources = result.output.partition("\n## Sources\n")
    quoted = dict(re.findall(r'^\[(\d+)\] \S+ — "(.*)"$', sources, re.MULTILINE))
    claims = [line for line in body.splitlines() if line.startswith("- ")]
    assert len(claims) == 4 and "fish" not in result.output
    for claim in claims:
        for number in re.findall(r"\[(\d+)\]", claim):
            path = re.search(rf"^\[{number}\] (\S+) — ", sources, re.MULTILINE)
            assert path is not None, claim
            page = (CONFIGS / "research_corpus" / path.group(1)).read_text(encoding="utf-8")
            assert quoted[number] in page, (claim, quoted[number])
    (report,) = [e.data for e in journal if e.type == "research.report"]
    assert report["dropped"] == ["The sea is salty because fish cry."]
