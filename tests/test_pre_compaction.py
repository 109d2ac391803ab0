"""koboi-hooks' pre_compact hooks on koboi-context's real compactions.

Each plugin is tested alone against a stand-in for the other (koboi-hooks against a
plugin that defines ``koboi_context_register_compaction_hooks``, koboi-context against
a test hook); this test puts the two real plugins together: a long session under the
``summarise`` strategy, a command hook on ``pre_compact`` that reads the compaction's
details from stdin and answers extra instructions, which the summary side call must
carry.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import anyio

from koboi import KoboiAgent
from koboi.messages import Message, ModelRequest, ModelResponse
from koboi.provider import ModelProvider


class Recording(ModelProvider):
    """Answers every call and keeps the system prompt of each summary request."""

    name = "recording"
    model = "recording"

    def __init__(self) -> None:
        self.summary_prompts: list[str] = []

    async def complete(self, request: ModelRequest) -> ModelResponse:
        first = request.messages[0]
        last = request.messages[-1].content or ""
        if last.startswith("Summary so far"):
            self.summary_prompts.append(first.content or "")
            return ModelResponse(message=Message.assistant("The user described billing tickets."))
        return ModelResponse(message=Message.assistant("Noted."))

    def context_window(self) -> int | None:
        return 8000


CONFIG = """
agent:
  name: pre-compaction
  system_prompt: "You are a careful assistant."
llm:
  provider: scripted
  context_window: 8000
  rules: []
  fallback: "Noted."
context:
  strategy: summarise
  max_context_tokens: 600
  summary_tokens: 100
  reserve_output_tokens: 50
  tokenizer: o200k_base
hooks:
  pre_compact:
    - name: keep-tickets
      command: "cat > seen.json; echo 'Keep every ticket number.'"
sandbox:
  backend: passthrough
  workdir: work
store:
  url: "memory://"
"""

MESSAGE = (
    "Ticket T-{n}: the billing export of the northern region stops half-way through "
    "the night run, and the finance team needs the figures before the morning meeting."
)


def test_a_pre_compact_hook_adds_instructions_to_the_summary_side_call(tmp_path: Path) -> None:
    config = tmp_path / "agent.yaml"
    config.write_text(textwrap.dedent(CONFIG), encoding="utf-8")

    model = Recording()

    async def main() -> list[object]:
        async with KoboiAgent.from_config(config, provider=model) as agent:
            result = await agent.run(MESSAGE.format(n=1))
            for n in range(2, 14):
                result = await agent.run(MESSAGE.format(n=n), session_id=result.session_id)
                assert result.outcome == "completed", result.error
            return list(await agent.store.read(result.session_id))

    events = anyio.run(main)
    types = [e.type for e in events]
    assert "context.compacted" in types, types  # the session outgrew its window

    ran = [e.data for e in events if e.type == "hooks.ran" and e.data["event"] == "pre_compact"]
    assert ran and ran[0]["context"] == "Keep every ticket number.", ran
    asked = [e.data for e in events if e.type == "context.hook"]
    assert asked and asked[0]["details"]["strategy"] == "summarise", asked
    # The hook saw the compaction's details on stdin, by the shared contract.
    seen = json.loads((tmp_path / "work" / "seen.json").read_text())
    assert seen["hook_event_name"] == "PreCompact" and seen["tokens_before"] > 0, seen
    # The summary side call carried the hook's instructions.
    started = [e.data for e in events if e.type == "side_call_started"]
    assert any(s.get("purpose") == "context.summary" for s in started), started
    assert model.summary_prompts, "no summary was asked"
    assert all(p.endswith("Keep every ticket number.") for p in model.summary_prompts)
