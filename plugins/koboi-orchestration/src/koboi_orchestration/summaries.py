"""One line per ``orchestration.*`` journal event, for ``koboi show``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def _quote(text: Any, limit: int = 60) -> str:
    flat = " ".join(str(text).split())
    return json.dumps(flat if len(flat) <= limit else flat[: limit - 1] + "…", ensure_ascii=False)


def summarize(event_type: str, data: Mapping[str, Any]) -> str | None:
    kind = event_type.removeprefix("orchestration.")
    if kind == "routed":
        agents = ", ".join(data.get("agents", [])) or "nobody"
        return (
            f"{data.get('used')} router → {agents} (confidence {data.get('confidence')}): "
            f"{data.get('reason', '')}"
        )
    if kind == "planned":
        plan = data.get("plan") or {}
        if "answer" in plan:
            return f"no plan needed: {_quote(plan['answer'])}"
        nodes = [
            f"{n.get('id')} ({n.get('agent')})"
            + (f" ← {', '.join(n['depends_on'])}" if n.get("depends_on") else "")
            for n in plan.get("nodes", [])
        ]
        return f"plan of {len(nodes)} node(s): " + "; ".join(nodes)
    if kind == "node_started":
        inputs = data.get("inputs") or []
        fed = f" ← {', '.join(inputs)}" if inputs else ""
        return f"node {data.get('node')} (agent {data.get('agent')}){fed}"
    if kind == "node_finished":
        outcome = data.get("outcome")
        detail = data.get("error") if outcome != "completed" else _quote(data.get("output", ""))
        return f"node {data.get('node')} {outcome}: {detail}"
    if kind == "node_skipped":
        return f"node {data.get('node')} skipped: {data.get('reason', '')}"
    return None
