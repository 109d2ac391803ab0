"""The one fake model both sides of the orchestration benchmark call.

koboi calls it through a ``ModelProvider`` (bench_orchestration.py), LangGraph from
inside each node (bench_langgraph.py): the same pure-Python function, answering at
once, so what is measured is the orchestration around it. Stdlib only: it is
imported by LangGraph's separate environment too.
"""

from __future__ import annotations


def answer(prompt: str) -> str:
    """A short, deterministic reply that depends on what the node was given."""
    return f"done ({len(prompt)} chars read)"
