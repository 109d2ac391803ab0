"""LangGraph's side of the orchestration benchmark (run in its own environment).

A chain of N nodes (one super-step each), each node calling ``fake_model.answer``
with the state it receives and passing its answer on: the same work as koboi's
chain of N child runs. Prints one JSON object: seconds per run for each
checkpointer (none, InMemorySaver, SqliteSaver when langgraph-checkpoint-sqlite is
installed).

    python bench_langgraph.py N [REPEATS] [DIRECTORY]
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any, TypedDict

sys.path.insert(0, str(Path(__file__).parent))

from fake_model import answer
from langgraph.graph import END, START, StateGraph


class State(TypedDict):
    text: str


def node(state: State) -> State:
    return {"text": answer(state["text"])}


def chain(n: int) -> Any:
    graph = StateGraph(State)
    for i in range(n):
        graph.add_node(f"n{i}", node)
    graph.add_edge(START, "n0")
    for i in range(n - 1):
        graph.add_edge(f"n{i}", f"n{i + 1}")
    graph.add_edge(f"n{n - 1}", END)
    return graph


def timed(compiled: Any, n: int, config: dict[str, Any] | None) -> float:
    began = time.perf_counter()
    out = compiled.invoke({"text": "go"}, config=config, **{"recursion_limit": n + 10})
    took = time.perf_counter() - began
    assert out["text"].startswith("done"), out
    return took


def main() -> None:
    n = int(sys.argv[1])
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    directory = Path(sys.argv[3]) if len(sys.argv) > 3 else Path(".")
    import langgraph

    results: dict[str, Any] = {"n": n, "version": getattr(langgraph, "__version__", "?")}
    try:
        from importlib.metadata import version

        results["version"] = version("langgraph")
    except Exception:
        pass
    graph = chain(n)
    plain = graph.compile()
    timed(plain, n, None)  # warm-up
    results["none"] = min(timed(plain, n, None) for _ in range(repeats))
    from langgraph.checkpoint.memory import InMemorySaver

    memory = graph.compile(checkpointer=InMemorySaver())
    runs = [timed(memory, n, {"configurable": {"thread_id": f"m{i}"}}) for i in range(repeats)]
    results["memory"] = min(runs)
    try:
        from langgraph.checkpoint.sqlite import SqliteSaver
    except ImportError:
        results["sqlite"] = None
    else:
        path = directory / f"lg-{n}-{os.getpid()}.db"
        with sqlite3.connect(path, check_same_thread=False) as connection:
            saver = SqliteSaver(connection)
            durable = graph.compile(checkpointer=saver)
            runs = [
                timed(durable, n, {"configurable": {"thread_id": f"s{i}"}}) for i in range(repeats)
            ]
        results["sqlite"] = min(runs)
        path.unlink(missing_ok=True)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
