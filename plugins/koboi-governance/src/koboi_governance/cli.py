"""``koboi trust`` and ``koboi audit``: the trust database and the audit trail, from the shell.

Both use the store every other command uses: ``--config``'s ``store.url``, else
``KOBOI_STORE``, else the default store (see docs/config.md, "Finding the store").
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Annotated, Any, TypeVar

import anyio
import typer

from koboi.errors import KoboiError
from koboi_cli.api import ConfigOption, JsonOption, print_json, write

T = TypeVar("T")

trust_app = typer.Typer(
    help="The trust database: tool calls approved with 'always', as rules that skip the prompt.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)


def _with_store(config: Any, work: Callable[[Any], Awaitable[T]]) -> T:
    """Run ``work(store)`` on the command's store (with keyed records: trust needs them)."""
    from koboi.store import records_of
    from koboi_cli.api import open_store, store_target

    target = store_target(config)

    async def main() -> T:
        async with open_store(target) as store:
            return await work(records_of(store, "koboi trust"))

    return anyio.run(main)


def _line(text: str) -> None:
    write(sys.stdout, text + "\n")


def _when(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


@trust_app.command("list")
def trust_list(config: ConfigOption = None, as_json: JsonOption = False) -> None:
    """List the trust rules that have not expired."""
    from koboi_governance.trust import TrustBook

    rules = _with_store(config, lambda store: TrustBook(store).rules())
    if as_json:
        print_json([{"id": r.id, **r.to_record()} for r in rules])
        return
    if not rules:
        _line("no trust rules")
        return
    for rule in rules:
        left = max(0.0, rule.expires_at - time.time()) / 86400
        owner = rule.owner if rule.owner is not None else "(command line)"
        agent = rule.agent if rule.agent is not None else "any agent"
        _line(
            f"{rule.id}  {rule.describe()}  owner {owner}, {agent} (by {rule.created_by or '?'}, "
            f"expires {_when(rule.expires_at)}, in {left:.1f} days)"
        )


def _parse_patterns(items: list[str]) -> dict[str, Any]:
    patterns: dict[str, Any] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise KoboiError(f"--arg {item!r}: write NAME=GLOB, e.g. --arg 'path=src/*'")
        try:
            # Numbers, booleans and JSON strings keep their type; anything else is a glob.
            patterns[name] = json.loads(value) if value[:1] in '0123456789-tf"' else value
        except ValueError:
            patterns[name] = value
    return patterns


@trust_app.command("add")
def trust_add(
    tool: Annotated[str, typer.Argument(help="Tool name, exactly as registered.")],
    arg: Annotated[
        list[str],
        typer.Option("--arg", help="NAME=GLOB an argument must match; repeat for each argument."),
    ],
    ttl_days: Annotated[
        float, typer.Option("--ttl-days", min=0.001, help="Days until the rule expires.")
    ] = 30.0,
    note: Annotated[str, typer.Option("--note", help="Why the rule exists.")] = "",
    owner: Annotated[
        str | None,
        typer.Option(
            "--owner",
            help="The principal whose sessions the rule applies to (a koboi serve API key's "
            "name); default: command-line runs only.",
        ),
    ] = None,
    agent: Annotated[
        str | None,
        typer.Option("--agent", help="Only for this agent (agent.name); default: any agent."),
    ] = None,
    config: ConfigOption = None,
) -> None:
    """Trust TOOL when its arguments match the patterns (every argument must be named)."""
    from koboi_governance.trust import TrustBook

    patterns = _parse_patterns(arg)
    rule = _with_store(
        config,
        lambda store: TrustBook(store).add(
            tool,
            patterns=patterns,
            ttl_seconds=ttl_days * 86400,
            created_by="koboi trust add",
            note=note,
            owner=owner,
            agent=agent,
        ),
    )
    _line(f"added {rule.id}: {rule.describe()} until {_when(rule.expires_at)}")


@trust_app.command("revoke")
def trust_revoke(
    rule_id: Annotated[str, typer.Argument(help="The rule's id (from 'koboi trust list').")],
    config: ConfigOption = None,
) -> None:
    """Revoke a trust rule: the next matching call asks again."""
    from koboi_governance.trust import TrustBook

    if not _with_store(config, lambda store: TrustBook(store).revoke(rule_id)):
        raise KoboiError(f"no trust rule {rule_id!r} (see 'koboi trust list')")
    _line(f"revoked {rule_id}")


def audit(
    session: Annotated[str, typer.Argument(help="Session id, a unique prefix of one, or 'last'.")],
    config: ConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show the audit trail of a session: each governed action, before and after."""

    async def read(store: Any) -> tuple[str, list[Any]]:
        info = await store.resolve_session(session)
        return info.id, await store.read_audit(info.id)

    session_id, entries = _with_store(config, read)
    if as_json:
        rows = [{"id": e.id, "at": e.at, **dict(e.data)} for e in entries]
        print_json(rows)
        return
    if not entries:
        _line(f"session {session_id}: no audit records")
        return
    _line(f"session {session_id}: {len(entries)} audit records")
    for entry in entries:
        _line(f"{entry.id:>6}  {_when(entry.at)}  {describe_record(entry.data)}")


def describe_record(data: Any) -> str:
    """One line for an audit record."""
    action = data.get("action", "?")
    phase = data.get("phase")
    if action == "tool_call":
        head = f"{phase:<8} {data.get('tool')} step {data.get('step')} [{data.get('call_id')}]"
        if phase == "decision":
            return f"{head} DENIED at {data.get('stage')}: {data.get('reason')}"
        if phase == "before":
            stages = ", ".join(
                f"{s.get('stage')}={s.get('action')}" for s in data.get("stages") or ()
            )
            args = json.dumps(data.get("arguments"), ensure_ascii=False, sort_keys=True)
            return f"{head} allowed ({stages or 'no stage spoke'}) {args}"
        if phase == "after":
            return f"{head} {data.get('outcome')} ({data.get('result_chars')} chars)"
    if action == "approval" and phase == "requested":
        return (
            f"approval {data.get('tool')} [{data.get('call_id')}] requested: {data.get('reason')}"
        )
    if action == "approval":
        verdict = "approved" if data.get("approved") else "denied"
        return (
            f"approval {data.get('tool')} [{data.get('call_id')}] {verdict} by "
            f"{data.get('decided_by')} ({data.get('scope')}): {data.get('reason')}"
        )
    rest = {k: v for k, v in data.items() if k not in ("action", "session_id")}
    return f"{action} {json.dumps(rest, ensure_ascii=False, sort_keys=True)}"
