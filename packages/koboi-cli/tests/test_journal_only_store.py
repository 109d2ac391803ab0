"""``koboi run`` on a third-party store that implements only the journal contract: a run
interrupted by the store failing mid-run, resumed with ``koboi run --resume``, listed by
``koboi sessions`` and shown by ``koboi show`` (a plugin's own event included)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import koboi_scripted.plugin
from koboi import ToolContext, hookimpl, tool
from koboi import journal as J
from koboi.plugins import PluginHost
from koboi.store import InMemoryStore, NewEvent, Store, capabilities_of
from koboi_cli.app import app
from koboi_testing.stores import JournalOnlyStore

WriteConfig = Callable[[str], Path]

CONFIG = """
    agent: {name: notes}
    store: {url: "journal://notes"}
    llm:
      provider: scripted
      script:
        - tool_calls: [{name: note, arguments: {text: "buy milk"}}]
        - reply: "Noted."
    tools: {builtin: [note]}
"""


class FailingJournal(JournalOnlyStore):
    """Only the journal, on a memory shared by every command of a test; ``failing`` makes
    the commit of a tool call's result fail, as a full disk would."""

    def __init__(self, inner: Store, failing: list[bool]) -> None:
        super().__init__(inner)
        self.failing = failing

    async def append(self, session_id: str, events: Sequence[NewEvent], **kw: Any) -> Any:
        if self.failing and any(e.type == J.TOOL_CALL_FINISHED for e in events):
            self.failing.clear()
            raise OSError("No space left on device")
        return await super().append(session_id, events, **kw)


@tool(risk="safe", idempotent=True, thread=False)
def note(text: str, ctx: ToolContext) -> str:
    """Write a note down.

    Args:
        text: The note.
    """
    ctx.record("notes.saved", {"text": text})
    return f"noted: {text}"


class NotesPlugin:
    """Plugin ``notes``: the tool, and the ``journal://`` store scheme."""

    def __init__(self) -> None:
        self.memory = InMemoryStore()
        self.failing = [True]
        self.opened: list[FailingJournal] = []

    @hookimpl
    def koboi_register_tools(self, register: Callable[..., None]) -> None:
        register(note)

    @hookimpl
    def koboi_register_stores(self, register: Callable[..., None]) -> None:
        def open_store(url: str, base_dir: Path) -> FailingJournal:
            store = FailingJournal(self.memory, self.failing)
            self.opened.append(store)
            return store

        register("journal", open_store, description="a journal and nothing more")


@pytest.fixture
def notes(use_host: Callable[[PluginHost], PluginHost]) -> NotesPlugin:
    plugin = NotesPlugin()
    host = PluginHost(load_entry_points=False, strict=True)
    host.add_plugin(koboi_scripted.plugin, "scripted", dist="koboi-scripted")
    host.add_plugin(plugin, "notes")
    use_host(host)
    return plugin


def test_koboi_run_interrupted_and_resumed_on_a_journal_only_store(
    runner: CliRunner, write_config: WriteConfig, notes: NotesPlugin
) -> None:
    config = str(write_config(CONFIG))
    failed = runner.invoke(app, ["run", config, "-m", "remember the milk", "--json"])
    assert failed.exit_code == 1
    assert failed.stderr.startswith("error: ") and "No space left on device" in failed.stderr
    assert "Traceback" not in failed.output
    assert notes.opened and all(capabilities_of(s) == [] for s in notes.opened)

    listed = runner.invoke(app, ["sessions", config, "--json"])
    assert listed.exit_code == 0, listed.output
    (row,) = json.loads(listed.stdout)
    assert row["status"] == "interrupted" and row["resumable"] is True

    resumed = runner.invoke(app, ["run", config, "--resume", "last", "--json"])
    assert resumed.exit_code == 0, resumed.output
    result = json.loads(resumed.stdout)
    assert result["session_id"] == row["id"]
    assert (result["outcome"], result["output"]) == ("completed", "Noted.")

    shown = runner.invoke(app, ["show", "last", config])
    assert shown.exit_code == 0, shown.output
    rows = [line.split(None, 3) for line in shown.stdout.splitlines()]
    types = [r[2] for r in rows[1:] if len(r) >= 3]
    assert types.count(J.RUN_STARTED) == 1 and types.count(J.RUN_RESUMED) == 1
    assert types[-1] == J.RUN_FINISHED
    # The plugin's own event, summarised with the kernel's: its data as compact JSON (once:
    # the one recorded before the failure was never committed; the call ran again).
    assert [r[3] for r in rows if len(r) == 4 and r[2] == "notes.saved"] == ['{"text":"buy milk"}']

    again = runner.invoke(app, ["run", config, "--resume", "last"])
    assert again.exit_code == 1
    assert "has no interrupted run to resume (its last run: completed)" in again.stderr


def test_koboi_run_needing_a_capability_the_store_lacks_says_so(
    runner: CliRunner, write_config: WriteConfig, notes: NotesPlugin
) -> None:
    # The response cache is an optional capability this store does not have.
    config = str(write_config(CONFIG + "    cache: {mode: record}\n"))
    refused = runner.invoke(app, ["run", config, "-m", "hi"])
    assert refused.exit_code == 1
    (line,) = refused.stderr.strip().splitlines()
    assert "needs a store with response cache" in line and "'journal-only'" in line
    # Control: the same config without the cache runs on it.
    notes.failing.clear()
    ran = runner.invoke(app, ["run", str(write_config(CONFIG)), "-m", "hi", "--json"])
    assert ran.exit_code == 0, ran.output
    assert json.loads(ran.stdout)["output"] == "Noted."
