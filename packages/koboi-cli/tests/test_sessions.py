"""``koboi sessions``, ``koboi show``, ``koboi run --resume`` and session refs.

A session interrupted mid-run is built through the Store API (the journal a
process leaves when it dies between ``tool_call_started`` and
``tool_call_finished``); killing real processes is the crash tests' job.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, get_args

import anyio
import pytest
from typer.testing import CliRunner

from koboi import journal as J
from koboi.messages import Message, ModelResponse, ToolCall, Usage
from koboi.store import InMemoryStore, NewEvent, SessionStatus, Store
from koboi_cli.app import SessionStatusChoice, app
from koboi_cli.cmd_run import session_for_run
from koboi_cli.cmd_sessions import ago, summarize
from koboi_cli.stores import StoreTarget, open_store, store_target

WriteConfig = Callable[[str], Path]

SQLITE_CONFIG = """
    agent: {name: calc}
    store: {url: "sqlite:///sessions.db"}
    llm:
      provider: scripted
      script:
        - tool_calls: [{name: calculator, arguments: {expression: "2 + 2"}}]
        - reply: "It is 4."
    tools: {builtin: [calculator]}
"""

MEMORY_CONFIG = SQLITE_CONFIG.replace('"sqlite:///sessions.db"', '"memory://"')

SECRET = "sk-live-0123456789abcdefXYZ"


def tool_call_response(call: ToolCall) -> dict[str, Any]:
    message = Message.assistant(tool_calls=(call,))
    return ModelResponse(message=message, usage=Usage(requests=1)).model_dump(mode="json")


async def write_interrupted(store: Store, session_id: str | None = None) -> str:
    """The journal of a run whose process died while its calculator call ran."""
    info = await store.create_session(session_id, config_name="calc")
    call = ToolCall(id="call_0_0", name="calculator", arguments={"expression": "2 + 2"})
    await store.append(
        info.id,
        [
            NewEvent(J.RUN_STARTED, {"input": "go", "agent": "calc", "config_hash": ""}),
            NewEvent(J.MODEL_CALL_STARTED, {"step": 1}),
            NewEvent(J.MODEL_CALL_FINISHED, {"step": 1, "response": tool_call_response(call)}),
            NewEvent(
                J.TOOL_CALL_STARTED,
                {
                    "step": 1,
                    "call_id": call.id,
                    "name": call.name,
                    "arguments": call.arguments,
                    "idempotent": True,
                },
            ),
        ],
    )
    await store.set_status(info.id, "running")
    return info.id


async def write_with_secrets(store: Store, session_id: str) -> str:
    """A finished run whose tool call carried credentials."""
    info = await store.create_session(session_id, config_name="fetcher")
    arguments = {
        "url": "https://api.example.com/v1/items",
        "headers": {"Authorization": f"Bearer {SECRET}", "Accept": "application/json"},
        "api_key": "plain-value-123",
    }
    call = ToolCall(id="c1", name="http_get", arguments=arguments)
    await store.append(
        info.id,
        [
            NewEvent(J.RUN_STARTED, {"input": f"fetch with {SECRET}", "agent": "fetcher"}),
            NewEvent(J.MODEL_CALL_STARTED, {"step": 1}),
            NewEvent(J.MODEL_CALL_FINISHED, {"step": 1, "response": tool_call_response(call)}),
            NewEvent(
                J.TOOL_CALL_REFUSED,
                {
                    "step": 1,
                    "call_id": "c1",
                    "name": "http_get",
                    "stage": "policy",
                    "reason": "network is off",
                },
            ),
            NewEvent(
                J.APPROVAL_REQUESTED,
                {"step": 1, "call_id": "c1", "name": "http_get", "risk": "network", "reason": "r"},
            ),
            NewEvent(
                J.APPROVAL_DECIDED,
                {"step": 1, "call_id": "c1", "approved": False, "decided_by": "cli", "reason": ""},
            ),
            NewEvent(
                J.TOOL_CALL_STARTED,
                {"step": 1, "call_id": "c1", "name": "http_get", "arguments": arguments},
            ),
            NewEvent(
                J.TOOL_CALL_FINISHED,
                {"step": 1, "call_id": "c1", "name": "http_get", "content": "x" * 500},
            ),
            NewEvent(
                J.RUN_FINISHED,
                {"outcome": "completed", "output": "done", "steps": 2, "error": None},
            ),
        ],
    )
    await store.set_status(info.id, "completed")
    return info.id


def in_store(config: Path, work: Callable[[Store], Any]) -> Any:
    """Run ``work(store)`` against the store ``config`` uses, as the CLI opens it."""

    async def main() -> Any:
        async with open_store(store_target(config)) as store:
            return await work(store)

    return anyio.run(main)


# -- with the SQLite store: what a user really does --------------------------------------


@pytest.fixture
def sqlite_config(write_config: WriteConfig) -> Path:
    pytest.importorskip("koboi_store_sql", reason="koboi-store-sql is needed for a durable store")
    return write_config(SQLITE_CONFIG)


def sessions_json(runner: CliRunner, *args: str) -> list[dict[str, Any]]:
    result = runner.invoke(app, ["sessions", *args, "--json"])
    assert result.exit_code == 0, result.output
    rows: list[dict[str, Any]] = json.loads(result.stdout)
    return rows


@pytest.mark.e2e
def test_resume_last_completes_an_interrupted_session(
    runner: CliRunner, sqlite_config: Path, tmp_path: Path
) -> None:
    sid = in_store(sqlite_config, write_interrupted)

    before = runner.invoke(app, ["sessions", str(sqlite_config)])
    assert before.exit_code == 0, before.output
    header, row = before.stdout.splitlines()
    assert header.split() == [
        "ID",
        "STATUS",
        "RESUMABLE",
        "RUNS",
        "STEPS",
        "TOKENS",
        "COST",
        "LAST",
        "ACTIVITY",
        "AGENT",
    ]
    assert row.split()[:5] == [sid, "interrupted", "yes", "1", "1"]  # no live holder
    assert row.split()[-1] == "calc"

    # A real process, as after a crash: a fresh interpreter finds the store by the config.
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "koboi_cli",
            "run",
            str(sqlite_config),
            "--resume",
            "last",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={**os.environ},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["session_id"] == sid
    assert result["outcome"] == "completed"
    assert result["output"] == "It is 4."

    (after,) = sessions_json(runner, "--config", str(sqlite_config))
    assert after["id"] == sid
    assert after["status"] == "completed"
    assert after["resumable"] is False
    assert after["steps"] == 2

    timeline = runner.invoke(app, ["show", sid[:8], str(sqlite_config)])
    assert timeline.exit_code == 0, timeline.output
    types = [line.split()[2] for line in timeline.stdout.splitlines()[4:]]
    assert types[:4] == [
        J.RUN_STARTED,
        J.MODEL_CALL_STARTED,
        J.MODEL_CALL_FINISHED,
        J.TOOL_CALL_STARTED,
    ]
    assert J.RUN_RESUMED in types
    assert types[-1] == J.RUN_FINISHED

    again = runner.invoke(app, ["run", str(sqlite_config), "--resume", sid[:6]])
    assert again.exit_code == 1
    assert again.stderr.strip() == (
        f"error: session {sid} has no interrupted run to resume (its last run: completed)"
    )


def test_resume_prints_events_like_run(runner: CliRunner, sqlite_config: Path) -> None:
    sid = in_store(sqlite_config, write_interrupted)
    result = runner.invoke(app, ["run", str(sqlite_config), "--resume", sid[:10]])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == ["← 4", "It is 4."]
    assert f"resuming the interrupted run of session {sid}" in result.stderr


def test_resume_while_another_process_holds_the_lease(
    runner: CliRunner, sqlite_config: Path
) -> None:
    async def held(store: Store) -> str:
        sid = await write_interrupted(store)
        await store.acquire_lease(sid, "otherhost:4242:deadbeef", 600)
        return sid

    sid = in_store(sqlite_config, held)
    result = runner.invoke(app, ["run", str(sqlite_config), "--resume", "last"])
    assert result.exit_code == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: session {sid} is being run by otherhost:4242:deadbeef")
    assert "Traceback" not in result.output

    # Continuing it with a new message is refused the same way.
    result = runner.invoke(app, ["run", str(sqlite_config), "-m", "hi", "--session", sid[:5]])
    assert result.exit_code == 1
    assert "error:" in result.stderr


def test_new_message_on_an_interrupted_session_says_to_resume(
    runner: CliRunner, sqlite_config: Path
) -> None:
    sid = in_store(sqlite_config, write_interrupted)
    result = runner.invoke(app, ["run", str(sqlite_config), "-m", "hi", "--session", "last"])
    assert result.exit_code == 1
    assert f"session {sid} has an interrupted run; resume it first" in result.stderr


def test_session_option_accepts_prefix_and_last(runner: CliRunner, sqlite_config: Path) -> None:
    first = runner.invoke(app, ["run", str(sqlite_config), "-m", "one", "--json"])
    assert first.exit_code == 0, first.output
    sid = json.loads(first.stdout)["session_id"]

    for ref in (sid[:7], "last", sid):
        again = runner.invoke(
            app, ["run", str(sqlite_config), "-m", "more", "--json", "--session", ref]
        )
        assert again.exit_code == 0, again.output
        assert json.loads(again.stdout)["session_id"] == sid
    (row,) = sessions_json(runner, str(sqlite_config))
    assert row["runs"] == 4

    fresh = runner.invoke(
        app, ["run", str(sqlite_config), "-m", "x", "--json", "--session", "zzz-new"]
    )
    assert fresh.exit_code == 0, fresh.output
    assert json.loads(fresh.stdout)["session_id"] == "zzz-new"


def test_unknown_and_ambiguous_prefixes_are_errors(runner: CliRunner, sqlite_config: Path) -> None:
    async def two(store: Store) -> None:
        await write_interrupted(store, "abc111")
        await write_interrupted(store, "abc222")

    in_store(sqlite_config, two)
    for args in (
        ["show", "abc", str(sqlite_config)],
        ["run", str(sqlite_config), "--resume", "abc"],
        ["run", str(sqlite_config), "-m", "hi", "--session", "abc"],
    ):
        result = runner.invoke(app, args)
        assert result.exit_code == 1, args
        assert "ambiguous" in result.stderr and "abc111" in result.stderr, args

    for args in (
        ["show", "nope", str(sqlite_config)],
        ["run", str(sqlite_config), "--resume", "nope"],
    ):
        result = runner.invoke(app, args)
        assert result.exit_code == 1, args
        assert result.stderr.strip() == "error: no session id starts with 'nope'"

    assert len(sessions_json(runner, str(sqlite_config))) == 2  # no session was created


def test_show_redacts_arguments(runner: CliRunner, sqlite_config: Path) -> None:
    sid = in_store(sqlite_config, lambda store: write_with_secrets(store, "secret-session"))
    result = runner.invoke(app, ["show", "secret", "--config", str(sqlite_config)])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert SECRET not in out and "plain-value-123" not in out
    assert out.splitlines()[0] == f"session {sid}"
    summaries = {line.split()[2]: line for line in out.splitlines()[4:]}
    assert '"Authorization":"***"' in summaries[J.TOOL_CALL_STARTED]
    assert "https://api.example.com/v1/items" in summaries[J.TOOL_CALL_STARTED]
    assert "http_get refused by policy: network is off" in summaries[J.TOOL_CALL_REFUSED]
    assert "denied by cli" in summaries[J.APPROVAL_DECIDED]
    assert "completed after 2 steps" in summaries[J.RUN_FINISHED]
    assert all(len(line) < 200 for line in out.splitlines())  # long results are cut

    as_json = runner.invoke(app, ["show", "last", str(sqlite_config), "--json"])
    assert as_json.exit_code == 0, as_json.output
    events = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert [e["seq"] for e in events] == list(range(1, 10))
    assert SECRET not in as_json.stdout and "plain-value-123" not in as_json.stdout
    assert events[6]["data"]["arguments"]["api_key"] == "***"


async def write_tree(store: Store) -> None:
    """A parent whose runner started a child (naming its session in a plugin event) and
    whose tool started another (its metadata names the call); the runner's child has a
    child of its own."""
    finished = {"outcome": "completed", "output": "ok", "steps": 1, "error": None}

    async def journal(sid: str, events: list[NewEvent], **metadata: Any) -> None:
        await store.create_session(sid, config_name="tree", metadata=metadata or None)
        await store.append(sid, [NewEvent(J.RUN_STARTED, {"input": f"to {sid}"}), *events])

    call = ToolCall(id="call_x", name="delegate", arguments={})
    await journal(
        "root",
        [
            NewEvent("tests.node_started", {"node": "a", "session_id": "kid-a"}),
            NewEvent(J.MODEL_CALL_FINISHED, {"step": 1, "response": tool_call_response(call)}),
            NewEvent(
                J.TOOL_CALL_STARTED,
                {"step": 1, "call_id": "call_x", "name": "delegate", "arguments": {}},
            ),
            NewEvent(J.TOOL_CALL_FINISHED, {"step": 1, "call_id": "call_x", "content": "ok"}),
            NewEvent(J.RUN_FINISHED, finished),
        ],
    )
    await journal("kid-a", [NewEvent(J.RUN_FINISHED, finished)], parent_session="root", tag="a")
    await journal(
        "kid-call", [NewEvent(J.RUN_FINISHED, finished)], parent_session="root",
        parent_call="call_x",
    )  # fmt: skip
    await journal("grandkid", [], parent_session="kid-a", tag="deeper")


def test_show_prints_a_run_and_its_children_as_a_tree(
    runner: CliRunner, sqlite_config: Path
) -> None:
    in_store(sqlite_config, write_tree)
    result = runner.invoke(app, ["show", "root", "--config", str(sqlite_config)])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[1].endswith(", 3 child sessions")
    shape = [
        line.split("child session")[1].split(":")[0].strip()
        if line.strip().startswith("└─")
        else line.split()[0]
        for line in lines[4:]
    ]
    # Each child right after the parent's event that started it, its events indented.
    assert shape == ["1", "2", "a", "1", "2", "deeper", "1", "3", "4", "call_x", "1", "2", "5", "6"]
    assert lines[7].startswith("  1 ") and lines[10].startswith("    1 ")  # one indent a level

    as_json = runner.invoke(app, ["show", "root", "--config", str(sqlite_config), "--json"])
    events = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert [(e["session_id"], e["seq"]) for e in events][:5] == [
        ("root", 1), ("root", 2), ("kid-a", 1), ("kid-a", 2), ("grandkid", 1),
    ]  # fmt: skip
    assert events[2]["parent_session"] == "root" and "parent_session" not in events[0]


def test_sessions_filters_and_limits(runner: CliRunner, sqlite_config: Path) -> None:
    async def three(store: Store) -> None:
        await write_interrupted(store, "s-running")
        await write_with_secrets(store, "s-done-1")
        await write_with_secrets(store, "s-done-2")

    in_store(sqlite_config, three)
    assert [r["id"] for r in sessions_json(runner, str(sqlite_config))] == [
        "s-done-2",
        "s-done-1",
        "s-running",
    ]
    assert [r["id"] for r in sessions_json(runner, str(sqlite_config), "--limit", "1")] == [
        "s-done-2"
    ]
    running = sessions_json(runner, str(sqlite_config), "--status", "running")
    assert [(r["id"], r["resumable"]) for r in running] == [("s-running", True)]

    none = runner.invoke(app, ["sessions", str(sqlite_config), "--status", "failed"])
    assert none.exit_code == 0
    assert none.stdout == ""
    assert "no sessions with status 'failed'" in none.stderr

    bad = runner.invoke(app, ["sessions", str(sqlite_config), "--status", "sleeping"])
    assert bad.exit_code == 2


def test_without_config_the_store_comes_from_koboi_store(
    runner: CliRunner, sqlite_config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    in_store(sqlite_config, write_interrupted)
    monkeypatch.setenv("KOBOI_STORE", f"sqlite:///{tmp_path / 'sessions.db'}")
    rows = sessions_json(runner)
    assert len(rows) == 1
    shown = runner.invoke(app, ["show", "last"])
    assert shown.exit_code == 0, shown.output


def test_without_config_or_env_the_default_store_is_in_the_working_directory(
    runner: CliRunner, sqlite_config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KOBOI_STORE", raising=False)
    monkeypatch.chdir(tmp_path)
    target = store_target(None)
    assert target.base_dir == tmp_path
    assert target.url.startswith("sqlite:")
    result = runner.invoke(app, ["sessions"])
    assert result.exit_code == 0, result.output
    assert "no sessions in sqlite:" in result.stderr


# -- memory:// and plain logic: one process is enough -------------------------------------


def test_memory_store_says_nothing_survives(runner: CliRunner, write_config: WriteConfig) -> None:
    config = write_config(MEMORY_CONFIG)
    listed = runner.invoke(app, ["sessions", str(config)])
    assert listed.exit_code == 0, listed.output
    assert "keeps nothing between commands" in listed.stderr

    shown = runner.invoke(app, ["show", "last", "--config", str(config)])
    assert shown.exit_code == 1
    assert shown.stderr.startswith(
        "error: there are no sessions in this store yet; the store is memory://"
    )

    resumed = runner.invoke(app, ["run", str(config), "--resume", "last"])
    assert resumed.exit_code == 1
    assert resumed.stderr.strip() == "error: there are no sessions in this store yet"


def test_run_option_rules(runner: CliRunner, write_config: WriteConfig) -> None:
    config = write_config(MEMORY_CONFIG)
    cases = {
        ("-m", "hi", "--resume", "last"): "not both",
        ("--resume", "last", "--session", "x"): "drop --session",
        (): "missing -m/--message",
    }
    for args, message in cases.items():
        result = runner.invoke(app, ["run", str(config), *args])
        assert result.exit_code == 2, args
        assert message in result.stderr, args

    both = runner.invoke(app, ["sessions", str(config), "--config", "other.yaml"])
    assert both.exit_code == 2
    assert "give the config once" in both.stderr


def test_status_choices_match_the_kernel() -> None:
    assert [c.value for c in SessionStatusChoice] == list(get_args(SessionStatus))


def test_store_target_relative_to_the_config(write_config: WriteConfig, tmp_path: Path) -> None:
    target = store_target(write_config(MEMORY_CONFIG))
    assert target == StoreTarget("memory://", tmp_path)
    assert (
        StoreTarget("postgresql://koboi:pw@db/k", tmp_path).shown_url
        == "postgresql://koboi:***@db/k"
    )


@pytest.mark.anyio
async def test_session_for_run_resolves_refs() -> None:
    store = InMemoryStore()
    await store.create_session("abc111")
    await store.create_session("abc222")
    await store.create_session("xyz")
    assert await session_for_run(store, None) is None
    assert await session_for_run(store, "xyz") == "xyz"
    assert await session_for_run(store, "abc1") == "abc111"
    assert await session_for_run(store, "brand-new") == "brand-new"  # the kernel creates it
    assert await session_for_run(store, "last") in {"abc111", "abc222", "xyz"}
    with pytest.raises(Exception, match="ambiguous"):
        await session_for_run(store, "abc")
    with pytest.raises(Exception, match="no sessions"):
        await session_for_run(InMemoryStore(), "last")


@pytest.mark.parametrize(
    ("kind", "data", "expected"),
    [
        (J.MODEL_CALL_STARTED, {"step": 3}, "step 3"),
        (J.MODEL_CALL_FAILED, {"step": 2, "error": "timeout"}, "step 2: timeout"),
        (
            J.TOOL_CALL_INTERRUPTED,
            {"name": "shell", "call_id": "c", "policy": "fail"},
            "shell: outcome unknown (policy fail)",
        ),
        (
            J.RUN_RESUMED,
            {"after_seq": 4, "step": 1, "holder": "h:1:ab"},
            "after seq 4 at step 1 by h:1:ab",
        ),
        (
            J.TOOL_CALL_FINISHED,
            {"name": "shell", "content": "boom\nmore", "is_error": True},
            "shell → error: boom … (5 more characters)",
        ),
        (
            J.RUN_FINISHED,
            {"outcome": "failed", "steps": 1, "error": "provider down", "output": ""},
            "failed after 1 steps: provider down",
        ),
        (
            J.MODEL_CALL_FAILED,
            {"step": 2, "error": "connection reset", "streamed": "The answer"},
            'step 2: connection reset (after streaming "The answer")',
        ),
        (
            J.PROVIDER_EVENT,
            {"step": 1, "kind": "retry", "attempt": 1, "delay_seconds": 0.4, "reason": "HTTP 429"},
            "retry 1 in 0.4 s: HTTP 429",
        ),
        (
            J.PROVIDER_EVENT,
            {
                "step": 1,
                "kind": "failover",
                "provider": "gpt",
                "next": "claude",
                "reason": "HTTP 503",
            },
            "failover from gpt to claude: HTTP 503",
        ),
        (
            J.PROVIDER_EVENT,
            {"kind": "breaker_open", "provider": "gpt", "failures": 3, "cooldown_seconds": 60},
            "gpt benched for 60 s after 3 failures",
        ),
        (J.PROVIDER_EVENT, {"kind": "breaker_closed", "provider": "gpt"}, "gpt is back"),
        (
            J.PROVIDER_EVENT,
            {"kind": "cache_hit", "key": "0123456789abcdef"},
            "answer from the response cache (0123456789abcdef)",
        ),
        (
            J.BUDGET_EXCEEDED,
            {"step": 2, "budget": "max_total_tokens", "limit": 1000, "used": 1100},
            "step 2: max_total_tokens used 1100 of 1000",
        ),
        ("custom_event", {"note": "hello"}, '{"note":"hello"}'),
    ],
)
def test_summaries(kind: str, data: dict[str, Any], expected: str) -> None:
    assert summarize(kind, data) == expected


def test_ago() -> None:
    assert ago(5) == "5 s ago"
    assert ago(125) == "2 min ago"
    assert ago(7200) == "2 h ago"
    assert ago(3 * 86400) == "3 d ago"


def test_session_row_status_follows_the_lease() -> None:
    import os
    import socket
    import time

    from koboi.store import JournalEvent, Lease, SessionInfo
    from koboi_cli.cmd_sessions import session_row

    info = SessionInfo(id="s", status="running", created_at=0.0, updated_at=0.0)
    events = [JournalEvent("s", 1, "run_started", {"input": "go"}, 0.0)]
    alive = f"{socket.gethostname()}:{os.getpid()}:x"
    held = session_row(info, events, Lease("s", alive, 1, time.time() + 60))
    assert (held.status, held.resumable, held.holder) == ("running", False, alive)
    expired = session_row(info, events, Lease("s", alive, 1, time.time() - 1))
    assert (expired.status, expired.resumable) == ("interrupted", True)
    never = session_row(info, events, None)
    assert (never.status, never.resumable) == ("interrupted", True)
    done = session_row(
        SessionInfo(id="s", status="completed", created_at=0.0, updated_at=0.0),
        [*events, JournalEvent("s", 2, "run_finished", {"outcome": "completed"}, 0.0)],
    )
    assert (done.status, done.resumable) == ("completed", False)


def test_listing_settled_sessions_reads_no_journal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tokens and cost come from the store's session totals: a settled session's journal is
    not read; an unsettled one (a run may be in flight) still is."""
    import contextlib

    from koboi.store import InMemoryStore, NewEvent
    from koboi_cli import cmd_sessions

    class CountingStore(InMemoryStore):
        reads = 0

        async def read(self, session_id: str, *, after: int = 0, limit: int | None = None):  # type: ignore[no-untyped-def]
            CountingStore.reads += 1
            return await super().read(session_id, after=after, limit=limit)

    store = CountingStore()
    answered = NewEvent(
        "model_call_finished",
        {
            "step": 1,
            "response": {
                "message": {"role": "assistant", "content": "ok"},
                "usage": {"input_tokens": 900, "output_tokens": 100},
                "cost_usd": 0.0125,
            },
        },
    )

    async def fill() -> tuple[str, str]:
        done = (await store.create_session()).id
        await store.append(done, [NewEvent("run_started", {}), answered])
        await store.set_status(done, "completed")
        busy = (await store.create_session()).id
        await store.set_status(busy, "running")
        await store.append(busy, [NewEvent("run_started", {}), answered])
        return done, busy

    done, busy = anyio.run(fill)

    @contextlib.asynccontextmanager
    async def opened(target: object):  # type: ignore[no-untyped-def]
        yield store

    monkeypatch.setattr(cmd_sessions, "open_store", opened)
    rows = {r.info.id: r for r in anyio.run(cmd_sessions._session_rows, None, 10, None)}
    assert CountingStore.reads == 1  # the running session's, never the completed one's
    assert cmd_sessions.cost(rows[done].totals) == "$0.0125"
    assert cmd_sessions.tokens(rows[done].totals) == "1000"
    assert cmd_sessions.row_json(rows[done])["cost_usd"] == 0.0125
    assert rows[done].runs == 1 and rows[done].steps == 1
    assert rows[busy].status == "interrupted" and rows[busy].totals is not None
