"""Contract suite for :class:`koboi.runners.Runner` implementations."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest

from koboi import journal as J
from koboi.agent import KoboiAgent
from koboi.events import FinalEvent
from koboi.runners import Runner
from koboi.store import InMemoryStore
from koboi_testing.models import InOrderModel

#: Makes the agent under test: ``make(model, store)``.
AgentFactory = Callable[[InOrderModel, InMemoryStore], KoboiAgent]


class RunnerContract:
    """Behaviour every :class:`~koboi.runners.Runner` must show, run through a real agent.

    **Required fixtures**:

    ``runner``
        The runner under test.
    ``turns``
        What the model answers, in order, for one whole run of the runner (texts, or
        ``{"name", "arguments"}`` tool calls; see :class:`koboi_testing.models.InOrderModel`).

    **Optional fixture** ``agent_factory``: ``make(model, store) -> KoboiAgent`` (default:
    an agent of ``{"llm": {"provider": "scripted"}}`` with the runner set; the provider
    name must be registered, which koboi-scripted does).
    """

    @pytest.fixture
    def agent_factory(self, runner: Runner) -> AgentFactory:
        def make(model: InOrderModel, store: InMemoryStore) -> KoboiAgent:
            return KoboiAgent.from_dict(
                {"llm": {"provider": "scripted"}, "agent": {"stream": False}},
                provider=model,
                store=store,
                runner=runner,
            )

        return make

    @pytest.mark.anyio
    async def test_a_run_is_journaled_from_start_to_finish(
        self, agent_factory: AgentFactory, turns: Sequence[Any], runner: Runner
    ) -> None:
        store = InMemoryStore()
        agent = agent_factory(InOrderModel(list(turns)), store)
        async with agent:
            events = [e async for e in agent.stream("go")]
        final = events[-1]
        assert isinstance(final, FinalEvent), "the last event of a run is a FinalEvent"
        assert sum(isinstance(e, FinalEvent) for e in events) == 1
        journal = await store.read(final.result.session_id)
        assert journal[0].type == J.RUN_STARTED and journal[-1].type == J.RUN_FINISHED
        assert journal[-1].seq == final.event_id
        assert final.result.outcome in ("completed", "max_iterations", "budget_exceeded", "failed")
        assert [e.type for e in journal].count(J.RUN_FINISHED) == 1
        if runner.name != "loop":
            assert journal[0].data.get("runner") == runner.name

    @pytest.mark.anyio
    async def test_leaving_the_stream_early_records_the_run_cancelled(
        self, agent_factory: AgentFactory, turns: Sequence[Any]
    ) -> None:
        store = InMemoryStore()
        agent = agent_factory(InOrderModel(list(turns)), store)
        async with agent:
            stream = agent.stream("go")
            await stream.__anext__()
            await stream.aclose()
            # The run's own session (a runner may start children in sessions of theirs).
            (session,) = [
                s for s in await store.list_sessions() if "parent_session" not in s.metadata
            ]
            journal = await store.read(session.id)
        assert journal[-1].type == J.RUN_FINISHED
        assert J.RUN_FINISHED.of(journal[-1])["outcome"] in ("cancelled", "completed")

    @pytest.mark.anyio
    async def test_a_session_runs_again_after_a_finished_run(
        self, agent_factory: AgentFactory, turns: Sequence[Any]
    ) -> None:
        store = InMemoryStore()
        agent = agent_factory(InOrderModel([*turns, *turns]), store)
        async with agent:
            first = await agent.run("one")
            second = await agent.run("two", session_id=first.session_id)
        assert second.session_id == first.session_id
        journal = await store.read(first.session_id)
        assert [e.type for e in journal].count(J.RUN_STARTED) == 2
