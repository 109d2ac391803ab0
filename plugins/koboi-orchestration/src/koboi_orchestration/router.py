"""Routers: which of the agents answer a message.

- ``keyword``: each agent scores the number of its ``keywords`` found in the
  message (whole words, case-insensitive; a keyword of several words as a
  phrase); the best score wins (ties: all of them), with confidence
  ``best / (best + runner-up + 1)``.
- ``llm``: the run's model picks, in a side call (purpose
  ``orchestration.route``, journaled and answered from the journal on resume)
  answering JSON ``{"agents": [...], "confidence": 0..1, "reason": "..."}``;
  an answer that does not parse or names no known agent falls back to the
  keyword router, and says so.
- ``hybrid``: the keyword router when its confidence reaches
  ``confidence_threshold``, else the model.

Nobody picked: ``router.fallback`` (``all``, or one agent). The route taken is
journaled by the runner as ``orchestration.routed``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from koboi.errors import BudgetExceeded, ProviderError

if TYPE_CHECKING:
    from koboi.sidecalls import RunModel
    from koboi_orchestration.config import AgentDef, RouterSettings

ROUTE_PURPOSE = "orchestration.route"


@dataclass(frozen=True)
class Route:
    """Who answers, and why: what ``orchestration.routed`` records."""

    router: str
    used: str
    agents: list[str]
    confidence: float
    reason: str

    def to_data(self) -> dict[str, Any]:
        return {
            "router": self.router,
            "used": self.used,
            "agents": list(self.agents),
            "confidence": round(self.confidence, 4),
            "reason": self.reason,
        }


def keyword_route(message: str, agents: Sequence[AgentDef]) -> tuple[list[str], float, str]:
    text = " ".join(re.findall(r"\w+", message.casefold()))
    scores: list[tuple[int, str]] = []
    for agent in agents:
        found = [k for k in agent.keywords if _has(text, k)]
        scores.append((len(found), agent.name))
    ranked = sorted({s for s, _ in scores}, reverse=True)
    best = ranked[0] if ranked else 0
    if best == 0:
        return [], 0.0, "no agent's keywords are in the message"
    runner_up = ranked[1] if len(ranked) > 1 else 0
    chosen = [name for score, name in scores if score == best]
    if len(chosen) > 1:
        runner_up = best
    confidence = best / (best + runner_up + 1)
    return chosen, confidence, f"{best} keyword(s) matched"


def _has(text: str, keyword: str) -> bool:
    words = re.findall(r"\w+", keyword.casefold())
    return bool(words) and f" {' '.join(words)} " in f" {text} "


async def llm_route(
    message: str, agents: Sequence[AgentDef], model: RunModel
) -> tuple[list[str], float, str] | str:
    """The model's pick, or why it could not be used (a string)."""
    listing = "\n".join(f"- {a.name}: {a.description or a.system_prompt or a.name}" for a in agents)
    system = (
        "You route a user's message to the agents best placed to answer it. The agents:\n"
        f"{listing}\n"
        'Answer with JSON only: {"agents": ["<name>", ...], "confidence": <0 to 1>, '
        '"reason": "<why>"}.'
    )
    try:
        answer = await model.ask(message, purpose=ROUTE_PURPOSE, system=system)
    except (ProviderError, BudgetExceeded) as exc:
        return f"the model could not route: {exc}"
    try:
        data = json.loads(_unfenced(answer))
    except ValueError:
        return "the model's answer is not JSON"
    if not isinstance(data, dict) or not isinstance(data.get("agents"), list):
        return 'the model\'s answer has no "agents" list'
    known = {a.name for a in agents}
    picked = [str(n) for n in data["agents"] if str(n) in known]
    unknown = [str(n) for n in data["agents"] if str(n) not in known]
    if not picked:
        return "the model named no known agent" + (f" ({', '.join(unknown)})" if unknown else "")
    try:
        confidence = min(1.0, max(0.0, float(data.get("confidence", 1.0))))
    except (TypeError, ValueError):
        confidence = 1.0
    reason = str(data.get("reason") or "the model's pick")
    if unknown:
        reason += f" (unknown agents ignored: {', '.join(unknown)})"
    # Keep the config's order: the run is the same whatever order the model wrote.
    ordered = [a.name for a in agents if a.name in picked]
    return ordered, confidence, reason


def _unfenced(text: str) -> str:
    fenced = re.search(r"```(?:json)?\s*(.*?)```", text, re.DOTALL)
    return fenced.group(1).strip() if fenced else text.strip()


async def route(
    message: str, agents: Sequence[AgentDef], settings: RouterSettings, model: RunModel
) -> Route:
    """The route of ``message`` by ``settings``."""
    picked, confidence, reason = keyword_route(message, agents)
    used = "keyword"
    if settings.type == "llm" or (
        settings.type == "hybrid" and confidence < settings.confidence_threshold
    ):
        answer = await llm_route(message, agents, model)
        if isinstance(answer, str):
            reason = f"{answer}; keyword router: {reason}"
        else:
            picked, confidence, reason = answer
            used = "llm"
    if not picked:
        fallback = settings.fallback
        picked = [a.name for a in agents] if fallback == "all" else [fallback]
        reason = f"{reason}; fallback: {fallback}"
    return Route(settings.type, used, picked, confidence, reason)
