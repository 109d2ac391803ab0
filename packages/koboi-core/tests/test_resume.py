"""Resume semantics: what a crash leaves behind, and what resuming does with it.

A crash is simulated in-process by a store that dies (raises a BaseException,
which nothing in the loop catches) at a chosen commit; from then on it refuses
everything, like a killed process. Real SIGKILL tests live in the root tests/.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio
import pytest

from koboi import (
    AllowAllApprover,
    FencedOut,
    KoboiAgent,
    KoboiError,
    LeaseHeld,
    tool,
)
from koboi.journal import INTERRUPTED_RESULT
from koboi.store import InMemoryStore, JournalEvent, NewEvent
from koboi_scripted import ScriptedProvider

pytestmark = pytest.mark.anyio


class Crash(BaseException):
    """The process died."""


class CrashingStore(InMemoryStore):
    """Dies just before its ``crash_at``-th append would commit."""

    def __init__(self, crash_at: int | None = None) -> None:
        super().__init__()
        self.crash_at = crash_at
        self.appends = 0
        self.dead = False

    async def append(
        self,
        session_id: str,
        events: Sequence[NewEvent],
        *,
        fence: int | None = None,
        audit: Sequence[Any] = (),
        status: Any = None,
    ) -> list[JournalEvent]:
        if self.dead:
            raise Crash
        self.appends += 1
        if self.crash_at is not None and self.appends == self.crash_at:
            self.dead = True
            raise Crash
        return await super().append(session_id, events, fence=fence, audit=audit, status=status)

    async def set_status(self, session_id: str, status: Any, *, fence: int | None = None) -> Any:
        if self.dead:
            raise Crash
        return await super().set_status(session_id, status, fence=fence)

    async def release_lease(self, lease: Any) -> None:
        if self.dead:
            raise Crash  # a killed process releases nothing
        await super().release_lease(lease)

    def revive(self) -> None:
        self.dead, self.crash_at = False, None


effects: list[str] = []


@tool(risk="safe")
def append_line(text: str) -> str:
    """Append a line to the log (not idempotent)."""
    effects.append(text)
    return f"appended {text}"


@tool(risk="safe", idempotent=True)
def write_whole(text: str) -> str:
    """Write the whole file (idempotent)."""
    effects.append(f"write {text}")
    return "written"


@pytest.fixture(autouse=True)
def _clear() -> None:
    effects.clear()


def script(tool_name: str = "append_line", n: int = 3) -> list[Any]:
    turns: list[Any] = [{"name": tool_name, "arguments": {"text": f"step-{i}"}} for i in range(n)]
    return [*turns, "all done"]


def make(store: InMemoryStore, turns: list[Any], **agent: Any) -> KoboiAgent:
    config = {"llm": {"provider": "scripted"}, "agent": {"stream": False, **agent}}
    return KoboiAgent.from_dict(
        config,
        provider=ScriptedProvider.from_turns(turns),
        store=store,
        extra_tools=[append_line, write_whole],
        approver=AllowAllApprover(),
    )


async def crash_run(store: CrashingStore, turns: list[Any], **agent: Any) -> str:
    async with make(store, turns, **agent) as a:
        with pytest.raises(Crash):
            await a.run("go")
    (session,) = await InMemoryStore.list_sessions(store)
    store.revive()
    # The dead process's lease must run out before anyone can take over.
    await expire_leases(store)
    return session.id


async def expire_leases(store: InMemoryStore) -> None:
    for sid, lease in list(store._leases.items()):
        store._leases[sid] = type(lease)(lease.session_id, lease.holder, lease.fence, 0.0)


async def resume(store: InMemoryStore, sid: str, turns: list[Any], **agent: Any) -> Any:
    async with make(store, turns, **agent) as a:
        return await a.resume_run(sid)


async def test_two_commits_per_step() -> None:
    store = CrashingStore()
    async with make(store, script(n=4)) as a:
        result = await a.run("go")
    assert result.outcome == "completed"
    # 4 tool steps + 1 final step: each tool step commits [.., model_call_started] and
    # [model_call_finished, tool_call_started]; the last commits model_call_started and
    # [model_call_finished, run_finished].
    assert store.appends == 2 * 5
    types = [e.type for e in await store.read(result.session_id)]
    assert types.count("tool_call_started") == 4


async def test_crash_after_the_effect_never_reruns_a_non_idempotent_tool() -> None:
    store = CrashingStore(crash_at=3)  # the commit after step-0's effect: [finished, model started]
    sid = await crash_run(store, script())
    assert effects == ["step-0"]
    result = await resume(store, sid, script())
    assert result.outcome == "completed" and result.output == "all done"
    assert effects == ["step-0", "step-1", "step-2"]  # step-0 not repeated
    tool_message = result.messages[2]
    assert tool_message.content == INTERRUPTED_RESULT and tool_message.is_error
    types = [e.type for e in await store.read(sid)]
    assert "run_resumed" in types and "tool_call_interrupted" in types


async def test_crash_before_the_effect_leaves_it_in_doubt_but_never_replays() -> None:
    store = CrashingStore()

    @tool(name="append_line", risk="safe")
    def dies_before_effect(text: str) -> str:
        """Dies (the whole process: the store goes with it)."""
        store.dead = True
        raise Crash

    config = {"llm": {"provider": "scripted"}, "agent": {"stream": False}}
    async with KoboiAgent.from_dict(
        config,
        provider=ScriptedProvider.from_turns(script()),
        store=store,
        extra_tools=[dies_before_effect],
    ) as a:
        with pytest.raises(Crash):
            await a.run("go")
    store.revive()
    sid = (await store.list_sessions())[0].id
    await expire_leases(store)
    result = await resume(store, sid, script())
    assert effects == ["step-1", "step-2"]
    assert result.messages[2].content == INTERRUPTED_RESULT


async def test_an_idempotent_tool_in_doubt_runs_again() -> None:
    store = CrashingStore(crash_at=3)
    sid = await crash_run(store, script("write_whole", n=2))
    result = await resume(store, sid, script("write_whole", n=2))
    assert result.outcome == "completed"
    assert effects == ["write step-0", "write step-0", "write step-1"]
    assert result.messages[2].content == "written"


async def test_completed_steps_are_never_run_again() -> None:
    store = CrashingStore(crash_at=5)  # step-0 and step-1 done, crash committing step-1's end
    sid = await crash_run(store, script(n=3))
    assert effects == ["step-0", "step-1"]
    result = await resume(store, sid, script(n=3))
    assert effects == ["step-0", "step-1", "step-2"]
    contents = [m.content for m in result.messages if m.role == "tool"]
    assert contents == ["appended step-0", INTERRUPTED_RESULT, "appended step-2"]


async def test_crash_during_a_model_call_asks_again() -> None:
    store = CrashingStore(
        crash_at=2
    )  # dies committing step 1's [model_call_finished, tool started]
    sid = await crash_run(store, script(n=2))
    assert effects == []  # the tool never started
    result = await resume(store, sid, script(n=2))
    assert result.outcome == "completed"
    assert effects == ["step-0", "step-1"]  # the call the model had asked for ran exactly once
    uninterrupted = await run_clean(script(n=2))
    assert result.output == uninterrupted.output
    assert [m.content for m in result.messages] == [m.content for m in uninterrupted.messages]


async def run_clean(turns: list[Any]) -> Any:
    effects_before = list(effects)
    async with make(InMemoryStore(), turns) as a:
        result = await a.run("go")
    effects[:] = effects_before
    return result


async def test_policy_fail_ends_the_run() -> None:
    store = CrashingStore(crash_at=3)
    sid = await crash_run(store, script())
    result = await resume(store, sid, script(), on_interrupted_tool="fail")
    assert result.outcome == "failed"
    assert "was interrupted and its outcome is unknown" in (result.error or "")
    assert effects == ["step-0"]


async def test_policy_ask_reruns_when_approved() -> None:
    store = CrashingStore(crash_at=3)
    sid = await crash_run(store, script())
    result = await resume(store, sid, script(), on_interrupted_tool="ask")
    assert result.outcome == "completed"
    assert effects == ["step-0", "step-0", "step-1", "step-2"]
    approvals = [e for e in await store.read(sid) if e.type == "approval_requested"]
    assert "interrupted" in approvals[0].data["reason"]


async def test_lost_run_finished_completes_without_asking_the_model_again() -> None:
    store = CrashingStore(crash_at=2)  # the final step's [model_call_finished, run_finished]
    sid = await crash_run(store, ["the answer"])
    types = [e.type for e in await store.read(sid)]
    assert types == ["run_started", "model_call_started"]
    # The model is asked again (its answer was never committed) and the run completes.
    result = await resume(store, sid, ["the answer"])
    assert (result.outcome, result.output) == ("completed", "the answer")


async def test_resume_of_a_finished_session_is_an_error() -> None:
    store = InMemoryStore()
    async with make(store, ["done"]) as a:
        result = await a.run("go")
        with pytest.raises(KoboiError, match="has no interrupted run to resume"):
            await a.resume_run(result.session_id)
        with pytest.raises(KoboiError, match="no session id starts with"):
            await a.resume_run("zzz")


async def test_the_status_is_committed_with_the_runs_first_and_last_events() -> None:
    """``running`` travels with the run's first commit and the outcome with
    ``run_finished``: a kill between two commits never leaves a status the journal
    contradicts, and a run costs no commit of its own for its status."""
    store = CrashingStore(crash_at=1)  # dies committing [run_started, model_call_started]
    with pytest.raises(Crash):
        async with make(store, script()) as a:
            await a.run("go")
    (info,) = await store.list_sessions()
    assert info.status == "created" and await store.read(info.id) == []
    store = CrashingStore(crash_at=2)  # dies committing [model_call_finished, run_finished]
    with pytest.raises(Crash):
        async with make(store, ["done"]) as a:
            await a.run("go")
    (info,) = await store.list_sessions()
    assert info.status == "running"
    assert [e.type for e in await store.read(info.id)] == ["run_started", "model_call_started"]
    statuses: list[str] = []

    class Watching(InMemoryStore):
        async def set_status(self, session_id: str, status: Any, **kw: Any) -> Any:
            statuses.append(f"set_status {status}")
            return await super().set_status(session_id, status, **kw)

        async def append(self, session_id: str, events: Any, **kw: Any) -> Any:
            stored = await super().append(session_id, events, **kw)
            if kw.get("status") is not None:
                statuses.append(f"{kw['status']} with {[e.type for e in stored]}")
            return stored

    async with make(Watching(), ["done"]) as a:
        await a.run("go")
    assert statuses == [
        "running with ['run_started', 'model_call_started']",
        "completed with ['model_call_finished', 'run_finished']",
    ]


async def _leave_a_stale_running_status(store: InMemoryStore, *, run: bool) -> str:
    """What an earlier koboi, which set the status in a transaction of its own, left
    when killed between that write and the journal's: ``running`` over a journal that
    says the run ended (``run``), or that never started."""
    if run:
        async with make(store, ["done"]) as a:
            session_id = (await a.run("go")).session_id
    else:
        session_id = (await store.create_session()).id
    await store.set_status(session_id, "running")
    return session_id


async def test_a_stale_running_status_after_a_finished_run_is_settled_by_resume() -> None:
    store = InMemoryStore()
    session_id = await _leave_a_stale_running_status(store, run=True)
    assert [e.type for e in await store.read(session_id)][-1] == "run_finished"
    async with make(store, ["never asked"]) as a:
        with pytest.raises(
            KoboiError, match=r"no interrupted run to resume \(its last run: completed"
        ):
            await a.resume_run(session_id)
    # The journal is the truth: the status follows it, and recovery stops finding it.
    assert (await store.get_session(session_id)).status == "completed"
    assert await store.list_sessions(status="running") == []


async def test_a_stale_running_status_before_any_event_is_settled_as_created() -> None:
    store = InMemoryStore()
    session_id = await _leave_a_stale_running_status(store, run=False)
    assert await store.read(session_id) == []
    async with make(store, script()) as a:
        with pytest.raises(KoboiError, match=r"its last run: never started"):
            await a.resume_run(session_id)
    assert (await store.get_session(session_id)).status == "created"


async def test_resume_leaves_a_settled_status_alone() -> None:
    store = InMemoryStore()
    async with make(store, ["done"]) as a:
        result = await a.run("go")
        await store.set_status(result.session_id, "failed")  # whatever it is, not running
        with pytest.raises(KoboiError, match="has no interrupted run to resume"):
            await a.resume_run(result.session_id)
    assert (await store.get_session(result.session_id)).status == "failed"


async def test_a_new_message_on_an_interrupted_session_says_resume_first() -> None:
    store = CrashingStore(crash_at=3)
    sid = await crash_run(store, script())
    async with make(store, script()) as a:
        with pytest.raises(KoboiError, match="has an interrupted run; resume it first"):
            await a.run("hello", session_id=sid)


async def test_a_session_being_run_cannot_be_resumed_by_another() -> None:
    store = CrashingStore(crash_at=3)
    async with make(store, script()) as a:
        with pytest.raises(Crash):
            await a.run("go")
    store.revive()
    sid = (await store.list_sessions())[0].id
    # The dead process's lease has not expired yet: a resumer is told who holds it.
    with pytest.raises(LeaseHeld, match="is being run by"):
        await resume(store, sid, script())


async def test_a_zombie_that_lost_its_lease_writes_nothing() -> None:
    store = InMemoryStore()
    gate = anyio.Event()
    release = anyio.Event()

    @tool(name="append_line", risk="safe")
    async def slow_line(text: str) -> str:
        """Pauses like a stopped process."""
        gate.set()
        await release.wait()
        effects.append(text)
        return "late"

    config = {"llm": {"provider": "scripted"}, "agent": {"stream": False, "lease_seconds": 0.05}}
    zombie = KoboiAgent.from_dict(
        config,
        provider=ScriptedProvider.from_turns(script()),
        store=store,
        extra_tools=[slow_line],
    )
    outcome: dict[str, Any] = {}

    async def run_zombie() -> None:
        async with zombie:
            try:
                await zombie.run("go")
            except FencedOut as exc:
                outcome["error"] = exc

    async with anyio.create_task_group() as tg:
        tg.start_soon(run_zombie)
        await gate.wait()
        sid = (await store.list_sessions())[0].id
        # Freeze the zombie's renewals by taking over once its lease has lapsed.
        await expire_leases(store)
        taker = await store.acquire_lease(sid, "rescuer", 60)
        before = [e.seq for e in await store.read(sid)]
        release.set()
    assert isinstance(outcome.get("error"), FencedOut)
    assert [e.seq for e in await store.read(sid)] == before  # the zombie wrote nothing
    assert taker.fence == 2


async def test_a_dead_holder_on_this_host_is_taken_over_at_once() -> None:
    import socket
    import sys

    from koboi.store import holder_is_dead

    store = CrashingStore(crash_at=3)
    sid = await crash_run(store, script())
    # A holder whose process has exited, on this host, with a lease far from expiry.
    gone = await anyio.run_process([sys.executable, "-c", "import os; print(os.getpid())"])
    dead = f"{socket.gethostname()}:{gone.stdout.decode().strip()}:abcd1234"
    assert holder_is_dead(dead)
    await store.acquire_lease(sid, dead, 3600)
    result = await resume(store, sid, script())
    assert result.outcome == "completed"
    fences = [e.data.get("holder") for e in await store.read(sid) if e.type == "run_resumed"]
    assert fences and fences[0] != dead


async def test_a_live_or_remote_holder_is_respected() -> None:
    import os
    import socket

    from koboi.store import holder_is_dead

    store = CrashingStore(crash_at=3)
    sid = await crash_run(store, script())
    alive = f"{socket.gethostname()}:{os.getppid()}:abcd1234"
    remote = "another-host.example:12345:abcd1234"
    assert not holder_is_dead(alive) and not holder_is_dead(remote)
    assert not holder_is_dead("garbage")
    for holder in (alive, remote):
        await expire_leases(store)
        await store.acquire_lease(sid, holder, 3600)
        with pytest.raises(LeaseHeld, match="is being run by"):
            await resume(store, sid, script())
