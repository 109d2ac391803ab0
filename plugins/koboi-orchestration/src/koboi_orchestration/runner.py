"""The ``orchestration`` runner: a graph of agents, each node a durable child run.

One run, one session: the orchestrating agent's. Every node runs one agent as
a child run (``RunHandle.child``) in a session of its own whose id is derived
from the run and the node (:func:`koboi.subagents.child_session_id`), under the parent's
whole pipeline and sharing its budgets. The runner journals, in the parent's
session:

- ``orchestration.routed``: the route a router took (sequential, parallel);
- ``orchestration.planned``: a planner's graph, once checked (dynamic);
- ``orchestration.node_started`` before a node's child starts (committed
  first), ``orchestration.node_finished`` when it ends (committed before
  anything depends on it), ``orchestration.node_skipped`` for a node none of
  whose incoming edges was taken.

Resumed after a crash, it reads them back: the route and the plan are not
asked again, a node that finished is not run again (its child answers from
its journal, and its usage counts again), and a node that started is
continued (its child is resumed, its tool calls under the in-doubt rule).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import anyio

from koboi.errors import BudgetExceeded, KoboiError, ProviderError
from koboi.runners import Runner
from koboi.subagents import child_session_id
from koboi_orchestration.assembly import check_agents, child_options
from koboi_orchestration.config import AgentDef, OrchestrationSection
from koboi_orchestration.graph import Graph, GraphError, Node, parse_plan
from koboi_orchestration.router import Route, route

if TYPE_CHECKING:
    from koboi.config import AgentConfig
    from koboi.events import AgentEvent, Outcome, RunResult
    from koboi.runners import RunHandle

NAMESPACE = "orchestration"
ROUTED = f"{NAMESPACE}.routed"
PLANNED = f"{NAMESPACE}.planned"
NODE_STARTED = f"{NAMESPACE}.node_started"
NODE_FINISHED = f"{NAMESPACE}.node_finished"
NODE_SKIPPED = f"{NAMESPACE}.node_skipped"
PLAN_PURPOSE = "orchestration.plan"


@dataclass
class NodeResult:
    """How one node ended: ``completed``, ``skipped``, or the child's other outcome."""

    node: str
    outcome: str
    output: str = ""
    error: str | None = None
    session_id: str | None = None


@dataclass
class Progress:
    """What the parent's journal says was done before (empty for a new run)."""

    route: Route | None = None
    plan: Any = None
    started: set[str] = field(default_factory=set)
    finished: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)

    @classmethod
    def read(cls, run: RunHandle) -> Progress:
        """This run's own events (an earlier run of the session had nodes of its own)."""
        progress = cls()
        for event in run.plugin_events(NAMESPACE):
            if event.seq <= run.started_seq:
                continue
            data = event.data
            if event.type == ROUTED:
                progress.route = Route(
                    str(data["router"]),
                    str(data["used"]),
                    [str(a) for a in data["agents"]],
                    float(data["confidence"]),
                    str(data["reason"]),
                )
            elif event.type == PLANNED:
                progress.plan = data["plan"]
            elif event.type == NODE_STARTED:
                progress.started.add(str(data["node"]))
            elif event.type == NODE_FINISHED:
                progress.finished[str(data["node"])] = data
            elif event.type == NODE_SKIPPED:
                progress.skipped[str(data["node"])] = str(data.get("reason", ""))
        return progress


def node_message(task: str, inputs: list[tuple[str, str]]) -> str:
    """What a node's agent is asked: its task, then the output of each node that feeds it."""
    if not inputs:
        return task
    parts = [task, ""]
    for source, output in inputs:
        parts += [f"--- Output of {source} ---", output, ""]
    return "\n".join(parts).rstrip() + "\n"


class OrchestrationRunner(Runner):
    """Runs the ``orchestration`` section's agents as its ``execution.mode`` says."""

    name = "orchestration"

    def __init__(self, section: OrchestrationSection) -> None:
        self.section = section
        self.agents = {a.name: a for a in section.agents}

    async def run(self, run: RunHandle) -> AsyncIterator[AgentEvent]:
        mode = self.section.execution.mode
        if mode == "deep_research":
            async for event in self._delegate(run, "deep_research"):
                yield event
            return
        progress = Progress.read(run) if run.resumed else Progress()
        try:
            graph = await self._graph(run, progress)
        except GraphError as exc:
            run.finish("", outcome="failed", error=f"the plan could not be used: {exc}")
            return
        except BudgetExceeded as exc:
            run.finish("", outcome="budget_exceeded", error=str(exc))
            return
        if graph is None:
            return  # the planner answered directly: finished
        execution = _Execution(run, graph, self.agents, self.section, progress)
        await execution.run()
        # The last nodes' ends, committed (and streamed) before the run's own end.
        await run.commit()
        execution.finish()

    # -- which graph ----------------------------------------------------------------------

    async def _graph(self, run: RunHandle, progress: Progress) -> Graph | None:
        section = self.section
        mode = section.execution.mode
        agents = list(section.agents)
        if mode in ("sequential", "parallel"):
            if section.router is not None:
                taken = progress.route
                if taken is None:
                    taken = await route(run.input, agents, section.router, run.model)
                    run.info.record(ROUTED, taken.to_data())
                agents = [a for a in agents if a.name in taken.agents]
            return Graph.chain(agents) if mode == "sequential" else Graph.side_by_side(agents)
        if mode == "dynamic":
            return await self._planned(run, progress)
        return Graph.from_agents(agents)

    async def _planned(self, run: RunHandle, progress: Progress) -> Graph | None:
        """A planner's graph (a side call, journaled), checked before it runs; an invalid
        plan is asked for again with the reason, ``execution.max_replans`` times."""
        settings = self.section.execution
        if progress.plan is not None:
            return Graph.from_plan(progress.plan, self.agents, max_nodes=settings.max_nodes)
        listing = "\n".join(
            f"- {a.name}: {a.description or a.system_prompt or a.name}" for a in self.section.agents
        )
        system = (
            "You plan how a team of agents answers a request. Each step runs one agent on a "
            "task; a step may depend on earlier steps, whose output it then receives. The "
            f"agents:\n{listing}\n"
            'Answer with JSON only: {"nodes": [{"id": "<short id>", "agent": "<agent>", '
            '"task": "<what to do>", "depends_on": ["<id>", ...]}]}. If no plan is needed, '
            'answer {"answer": "<the answer>"}.'
        )
        prompt = run.input
        error = ""
        for _attempt in range(settings.max_replans + 1):
            try:
                text = await run.model.ask(prompt, purpose=PLAN_PURPOSE, system=system)
            except ProviderError as exc:
                raise GraphError(f"the planner failed: {exc}") from None
            try:
                plan = parse_plan(text)
                if isinstance(plan, dict) and "answer" in plan and not plan.get("nodes"):
                    run.info.record(PLANNED, {"plan": plan})
                    run.finish(str(plan["answer"]))
                    return None
                graph = Graph.from_plan(plan, self.agents, max_nodes=settings.max_nodes)
            except GraphError as exc:
                error = str(exc)
                prompt = (
                    f"{run.input}\n\nYour previous plan could not be used: {error}. "
                    "Answer again with a valid plan."
                )
                continue
            run.info.record(PLANNED, {"plan": graph.to_plan()})
            return graph
        raise GraphError(error)

    async def _delegate(self, run: RunHandle, name: str) -> AsyncIterator[AgentEvent]:
        """Run the runner another plugin registered as ``name`` (deep_research)."""
        host = run.info.host
        entry = host.catalog().runners.get(name) if host is not None else None
        if entry is None:
            run.finish(
                "",
                outcome="failed",
                error=f"execution.mode {name} needs the runner {name!r} (install koboi-research)",
            )
            return
        inner = entry.target({}, run.info.config)
        if not isinstance(inner, Runner):
            raise KoboiError(f"runner plugin {entry.plugin!r} returned {inner!r}, not a Runner")
        async for event in inner.run(run):
            yield event


class _Execution:
    """One run of a graph: every node in a task, at most ``max_parallel`` at a time."""

    def __init__(
        self,
        run: RunHandle,
        graph: Graph,
        agents: Mapping[str, AgentDef],
        section: OrchestrationSection,
        progress: Progress,
    ) -> None:
        self.run_handle = run
        self.graph = graph
        self.agents = agents
        self.settings = section.execution
        self.progress = progress
        self.results: dict[str, NodeResult] = {}
        self.settled = {n.id: anyio.Event() for n in graph.nodes}
        self.limiter = anyio.CapacityLimiter(self.settings.max_parallel)
        #: Why no new node starts (a failure under "stop", a budget used up).
        self.stopped: NodeResult | None = None
        #: What made a node's task fail (not a node's failure: the run's).
        self.error: Exception | None = None

    async def run(self) -> None:
        async with anyio.create_task_group() as group:
            for node in self.graph.nodes:
                group.start_soon(self._node, node, group.cancel_scope)
        if self.error is not None:
            # The run cannot go on (the store failed, a bug): what stopped it, as it was,
            # not wrapped in a task group's exception group.
            raise self.error

    async def _node(self, node: Node, scope: anyio.CancelScope) -> None:
        try:
            for edge in self.graph.incoming(node.id):
                await self.settled[edge.source].wait()
            self.results[node.id] = await self._settle(node)
        except Exception as exc:  # handed to run(), which raises it once every node stopped
            if self.error is None:
                self.error = exc
            scope.cancel()
        finally:
            self.settled[node.id].set()

    async def _settle(self, node: Node) -> NodeResult:
        run = self.run_handle
        done = self.progress.finished.get(node.id)
        if done is not None and done.get("outcome") != "completed":
            return _recorded(node.id, done)
        if node.id in self.progress.skipped:
            return NodeResult(node.id, "skipped", error=self.progress.skipped[node.id])
        inputs, reason = self._inputs(node)
        if reason is not None:
            return self._skip(node, reason)
        agent = self.agents[node.agent]
        # This run's own children: a later message of the session starts new ones.
        session = child_session_id(run.session_id, f"{run.started_seq}:node:{node.id}")
        async with self.limiter:
            stopped = self.stopped
            if done is None and stopped is not None:
                return self._skip(node, f"the run stopped: node {stopped.node} {stopped.outcome}")
            if node.id not in self.progress.started:
                run.info.record(
                    NODE_STARTED,
                    {
                        "node": node.id,
                        "agent": agent.name,
                        "session_id": session,
                        "inputs": [source for source, _ in inputs],
                    },
                )
            result = await self._child(node, agent, session, inputs)
        if done is None:
            finished: dict[str, Any] = {
                "node": node.id,
                "agent": agent.name,
                "session_id": session,
                "outcome": result.outcome,
                "output": result.output,
            }
            if result.error:
                finished["error"] = result.error
            # Committed with what comes next: before any node starts (a child's start
            # commits what its parent recorded) or with the run's end. A crash before then
            # loses only this note: the child's own journal says it finished, and the
            # resumed run reads its result there without running it again.
            run.info.record(NODE_FINISHED, finished)
        stops = result.outcome == "budget_exceeded" or self.settings.on_node_failure == "stop"
        if result.outcome != "completed" and self.stopped is None and stops:
            self.stopped = result
        return result

    def _skip(self, node: Node, reason: str) -> NodeResult:
        self.run_handle.info.record(NODE_SKIPPED, {"node": node.id, "reason": reason})
        return NodeResult(node.id, "skipped", error=reason)

    def _inputs(self, node: Node) -> tuple[list[tuple[str, str]], str | None]:
        """What flows into ``node`` along the edges taken, or why it is skipped."""
        incoming = self.graph.incoming(node.id)
        if not incoming:
            return [], None
        inputs: list[tuple[str, str]] = []
        not_taken: list[str] = []
        for edge in incoming:
            source = self.results.get(edge.source)
            if source is None or source.outcome != "completed":
                state = source.outcome if source is not None else "not run"
                not_taken.append(f"{edge.source} {state}")
            elif edge.when is not None and not edge.when.holds(source.output):
                not_taken.append(f"{edge.source}: {edge.when.describe()} does not hold")
            elif edge.source not in [s for s, _ in inputs]:
                inputs.append((edge.source, source.output))
        if not inputs:
            return [], "no edge into it was taken (" + "; ".join(not_taken) + ")"
        return inputs, None

    async def _child(
        self, node: Node, agent: AgentDef, session: str, inputs: list[tuple[str, str]]
    ) -> NodeResult:
        run = self.run_handle
        message = node_message(node.task or run.input, inputs)
        options = cast("Any", child_options(agent))
        timeout = agent.timeout_seconds or self.settings.node_timeout_seconds
        try:
            with anyio.fail_after(timeout):
                result: RunResult = await run.child(
                    message, tag=node.id, session_id=session, **options
                )
        except TimeoutError:
            return NodeResult(
                node.id,
                "failed",
                error=f"node {node.id} timed out after {timeout:g} s (its timeout_seconds)",
                session_id=session,
            )
        except KoboiError as exc:  # refused by the kernel (tools, mode): the node fails
            return NodeResult(node.id, "failed", error=str(exc), session_id=session)
        error = result.error
        if result.outcome != "completed" and not error:
            error = f"node {node.id} ended {result.outcome}"
        return NodeResult(node.id, result.outcome, result.output, error, session)

    # -- the end ----------------------------------------------------------------------------

    def finish(self) -> None:
        run = self.run_handle
        stopped = self.stopped
        if stopped is not None:
            outcome: Outcome = (
                "budget_exceeded" if stopped.outcome == "budget_exceeded" else "failed"
            )
            error = stopped.error or f"node {stopped.node} ended {stopped.outcome}"
            run.finish(self._answer(), outcome=outcome, error=f"node {stopped.node}: {error}")
            return
        answer = self._answer()
        ran = [r for r in self.results.values() if r.outcome == "completed"]
        if not ran:
            run.finish("", outcome="failed", error="no node of the graph completed")
            return
        run.finish(answer)

    def _answer(self) -> str:
        """``execution.output``'s node, else the nodes nothing depends on that completed."""
        chosen = self.settings.output
        if chosen is not None:
            picked = self.results.get(chosen)
            return picked.output if picked is not None and picked.outcome == "completed" else ""
        sinks = [
            self.results[n]
            for n in self.graph.sinks()
            if n in self.results and self.results[n].outcome == "completed"
        ]
        if len(sinks) == 1:
            return sinks[0].output
        return "\n\n".join(f"## {r.node}\n\n{r.output.strip()}" for r in sinks)


def _recorded(node: str, data: Mapping[str, Any]) -> NodeResult:
    return NodeResult(
        node,
        str(data.get("outcome")),
        str(data.get("output") or ""),
        data.get("error"),
        data.get("session_id"),
    )


def create_runner(
    options: Any, config: AgentConfig, *, mode: str | None = None
) -> OrchestrationRunner:
    """The runner factory (``agent.runner: orchestration``, or one of the modes by name):
    refuses, when the agent is assembled, a config without agents or with one that asks
    for more than its parent."""
    from koboi_orchestration.assembly import section_of

    named = mode or "orchestration"
    section = section_of(config)
    if section is None or not section.enabled:
        raise KoboiError(
            f"agent.runner is '{named}', but the config has no enabled orchestration "
            "section: add one with its agents (docs/orchestration.md)"
        )
    if mode is not None and mode != section.execution.mode:
        if "mode" in section.execution.model_fields_set:
            raise KoboiError(
                f"agent.runner is '{mode}' but orchestration.execution.mode is "
                f"'{section.execution.mode}': write one of them"
            )
        execution = section.execution.model_copy(update={"mode": mode})
        section = OrchestrationSection.model_validate(
            {**section.model_dump(), "execution": execution.model_dump()}
        )
    check_agents(config, section)
    return OrchestrationRunner(section)
