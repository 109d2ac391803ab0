"""The graph of an orchestrated run: nodes, plain and conditional edges, validation.

A node runs one agent. An edge ``a -> b`` passes ``a``'s output to ``b``; a
conditional edge only when its test holds on ``a``'s output. The same graph
comes from a config (``depends_on`` and ``conditionals``), from the
sequential and parallel modes (a chain, no edges) or from a planner's JSON
plan; it is checked the same way (no cycle, no unknown agent, no unknown
node) before anything runs, and rendered by ``koboi graph``.
"""

from __future__ import annotations

import itertools
import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from koboi_orchestration.config import AgentDef, Condition


class GraphError(ValueError):
    """The graph cannot run: a cycle, an unknown agent or node, a malformed plan."""


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    #: None for a plain edge.
    when: Condition | None = None


@dataclass(frozen=True)
class Node:
    """One node: ``id`` (unique in the graph) runs ``agent`` on ``task`` (None: the
    user's message)."""

    id: str
    agent: str
    task: str | None = None


@dataclass
class Graph:
    nodes: list[Node]
    edges: list[Edge] = field(default_factory=list)
    _incoming: dict[str, list[Edge]] | None = field(default=None, repr=False, compare=False)

    # -- construction ---------------------------------------------------------------------

    @classmethod
    def from_agents(cls, agents: Sequence[AgentDef]) -> Graph:
        """The graph a config's ``depends_on`` and ``conditionals`` draw."""
        nodes = [Node(a.name, a.name) for a in agents]
        edges = [Edge(dep, a.name) for a in agents for dep in a.depends_on]
        edges += [Edge(a.name, c.to, c.when) for a in agents for c in a.conditionals]
        graph = cls(nodes, edges)
        graph.check({a.name for a in agents})
        return graph

    @classmethod
    def chain(cls, agents: Sequence[AgentDef]) -> Graph:
        """Sequential: each agent gets the previous one's output."""
        nodes = [Node(a.name, a.name) for a in agents]
        edges = [Edge(a.id, b.id) for a, b in itertools.pairwise(nodes)]
        return cls(nodes, edges)

    @classmethod
    def side_by_side(cls, agents: Sequence[AgentDef]) -> Graph:
        """Parallel: every agent on the message, nothing passed between them."""
        return cls([Node(a.name, a.name) for a in agents])

    @classmethod
    def from_plan(cls, plan: Any, agents: Iterable[str], *, max_nodes: int) -> Graph:
        """A planner's plan, ``{"nodes": [{"id", "agent", "task", "depends_on"}]}``, checked."""
        known = set(agents)
        if not isinstance(plan, Mapping) or not isinstance(plan.get("nodes"), list):
            raise GraphError('the plan must be a JSON object with a "nodes" list')
        raw = plan["nodes"]
        if not raw:
            raise GraphError("the plan has no nodes")
        if len(raw) > max_nodes:
            raise GraphError(
                f"the plan has {len(raw)} nodes, more than {max_nodes} (execution.max_nodes)"
            )
        nodes: list[Node] = []
        edges: list[Edge] = []
        for index, item in enumerate(raw):
            if not isinstance(item, Mapping):
                raise GraphError(f"node {index + 1} of the plan is not an object")
            node_id = str(item.get("id") or "").strip()
            agent = str(item.get("agent") or "").strip()
            task = item.get("task")
            deps = item.get("depends_on") or []
            if not node_id or not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", node_id):
                raise GraphError(f"node {index + 1} of the plan has no valid id: {node_id!r}")
            if agent not in known:
                raise GraphError(
                    f"node {node_id!r} asks for agent {agent!r}, which is not one of the "
                    f"agents ({', '.join(sorted(known))})"
                )
            if task is not None and not isinstance(task, str):
                raise GraphError(f"node {node_id!r}: task must be a string")
            if not isinstance(deps, list) or not all(isinstance(d, str) for d in deps):
                raise GraphError(f"node {node_id!r}: depends_on must be a list of node ids")
            nodes.append(Node(node_id, agent, task or None))
            edges += [Edge(dep, node_id) for dep in deps]
        graph = cls(nodes, edges)
        graph.check(known)
        return graph

    # -- checks ---------------------------------------------------------------------------

    def check(self, agents: set[str]) -> None:
        """Unique node ids, known agents and nodes, and no cycle (named when found)."""
        ids = [n.id for n in self.nodes]
        twice = sorted(i for i, times in Counter(ids).items() if times > 1)
        if twice:
            raise GraphError(f"node ids must be unique: {', '.join(twice)} appear twice")
        for node in self.nodes:
            if node.agent not in agents:
                raise GraphError(f"node {node.id!r}: no agent is named {node.agent!r}")
        known = set(ids)
        for edge in self.edges:
            for end in (edge.source, edge.target):
                if end not in known:
                    raise GraphError(f"edge {edge.source} -> {edge.target}: no node {end!r}")
        cycle = self.cycle()
        if cycle:
            raise GraphError("the graph has a cycle: " + " -> ".join(cycle))

    def cycle(self) -> list[str]:
        """A cycle as a path that ends where it began; [] when there is none. Iterative
        (a depth-first search with an explicit stack): a chain of thousands of nodes
        must not hit Python's recursion limit."""
        after: dict[str, list[str]] = {n.id: [] for n in self.nodes}
        for edge in self.edges:
            after[edge.source].append(edge.target)
        colour = dict.fromkeys(after, 0)  # 0 new, 1 on the path, 2 done
        for start in after:
            if colour[start]:
                continue
            path = [start]
            branches = [iter(after[start])]
            colour[start] = 1
            while branches:
                nxt = next(branches[-1], None)
                if nxt is None:
                    colour[path.pop()] = 2
                    branches.pop()
                elif colour[nxt] == 1:
                    return [*path[path.index(nxt) :], nxt]
                elif colour[nxt] == 0:
                    colour[nxt] = 1
                    path.append(nxt)
                    branches.append(iter(after[nxt]))
        return []

    # -- what the runner asks -------------------------------------------------------------

    def incoming(self, node: str) -> list[Edge]:
        """The edges into ``node``, in the order declared."""
        if self._incoming is None:
            self._incoming = {}
            for edge in self.edges:
                self._incoming.setdefault(edge.target, []).append(edge)
        return self._incoming.get(node, [])

    def sinks(self) -> list[str]:
        """Nodes no edge leaves, in node order."""
        sources = {e.source for e in self.edges}
        return [n.id for n in self.nodes if n.id not in sources]

    def node(self, node_id: str) -> Node:
        for node in self.nodes:
            if node.id == node_id:
                return node
        raise KeyError(node_id)

    def to_plan(self) -> dict[str, Any]:
        """The graph as a plan (what :meth:`from_plan` reads back): plain edges only."""
        return {
            "nodes": [
                {
                    "id": n.id,
                    "agent": n.agent,
                    **({"task": n.task} if n.task else {}),
                    "depends_on": [e.source for e in self.incoming(n.id)],
                }
                for n in self.nodes
            ]
        }

    # -- rendering ------------------------------------------------------------------------

    def to_data(self) -> dict[str, Any]:
        return {
            "nodes": [
                {"id": n.id, "agent": n.agent, **({"task": n.task} if n.task else {})}
                for n in self.nodes
            ],
            "edges": [
                {
                    "from": e.source,
                    "to": e.target,
                    **({"when": e.when.model_dump(exclude_none=True)} if e.when else {}),
                }
                for e in self.edges
            ],
        }

    def mermaid(self, *, router: str | None = None) -> str:
        """``graph TD``; conditional edges are labelled with their test, a router is a
        node of its own with dotted edges to every agent it may pick."""
        ids = {n.id: _mermaid_id(n.id, i) for i, n in enumerate(self.nodes)}
        lines = ["graph TD"]
        for node in self.nodes:
            label = node.id if node.agent == node.id else f"{node.id} ({node.agent})"
            lines.append(f'    {ids[node.id]}["{_mermaid_text(label)}"]')
        if router is not None:
            lines.append(f'    router{{"{_mermaid_text(router + " router")}"}}')
            lines += [f"    router -.-> {ids[n.id]}" for n in self.nodes]
        for edge in self.edges:
            source, target = ids[edge.source], ids[edge.target]
            if edge.when is None:
                lines.append(f"    {source} --> {target}")
            else:
                lines.append(
                    f'    {source} -- "{_mermaid_text(edge.when.describe())}" --> {target}'
                )
        return "\n".join(lines) + "\n"


def _mermaid_id(name: str, index: int) -> str:
    safe = re.sub(r"[^A-Za-z0-9_]", "_", name)
    # "end", "graph" and the like are keywords of mermaid: never use a name bare.
    return f"n{index}_{safe}"


def _mermaid_text(text: str) -> str:
    return text.replace('"', "#quot;")


def parse_plan(text: str) -> Any:
    """The JSON of a planner's answer (a fenced code block is accepted)."""
    stripped = text.strip()
    fenced = re.search(r"```(?:json)?\s*(.*?)```", stripped, re.DOTALL)
    if fenced:
        stripped = fenced.group(1).strip()
    try:
        return json.loads(stripped)
    except ValueError as exc:
        raise GraphError(f"the plan is not JSON: {exc}") from None
