"""``koboi sessions`` (the sessions of a store) and ``koboi show`` (one session's journal).

Both read the store directly (:mod:`koboi_cli.stores`); neither runs an agent
or takes a session's lease, so they are safe while a run is in progress.
Everything shown from the journal goes through :mod:`koboi_cli.redact` first.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from koboi_cli.cmd_run import shorten
from koboi_cli.errors import CliError
from koboi_cli.redact import mask_secrets, redact_event_data
from koboi_cli.stores import StoreTarget, open_store, store_target
from koboi_cli.style import Style, err, table, write

if TYPE_CHECKING:
    from koboi.store import (
        JournalEvent,
        Lease,
        SessionInfo,
        SessionStatus,
        SessionTotals,
        Store,
    )

#: How long a one-line summary in ``koboi show`` may get.
SUMMARY_CHARS = 120

MEMORY_HINT = (
    "the store is memory://, which keeps nothing between commands; set store.url in the "
    "config or KOBOI_STORE, or install koboi-store-sql (docs/config.md, 'Finding the store')"
)


# -- koboi sessions ------------------------------------------------------------------


@dataclass(frozen=True)
class SessionRow:
    """A session and what its journal says about it."""

    info: SessionInfo
    #: A run started and has not finished: the process died, or it is still running.
    resumable: bool
    #: Model calls that finished, over all the session's runs.
    steps: int
    runs: int
    #: What to show: the stored status, except that a run whose process is gone
    #: (its lease expired, or its holder is a dead process of this host) is
    #: "interrupted" rather than "running".
    status: str = ""
    holder: str | None = None
    #: What the session's runs used: the store's totals, else summed from the journal.
    totals: SessionTotals | None = None


#: Stored statuses after which no run can be in flight (the last one finished): a row in
#: one of them needs no journal when the store keeps totals.
_SETTLED = frozenset({"completed", "failed", "suspended"})


def needs_journal(info: SessionInfo) -> bool:
    """Whether listing ``info`` must read its journal: the store keeps no totals for it,
    or a run may be unfinished (which only the journal tells)."""
    return info.totals is None or info.status not in _SETTLED


def session_row(
    info: SessionInfo, events: list[JournalEvent] | None, lease: Lease | None = None
) -> SessionRow:
    """The row of ``info``; ``events`` is its journal, or None when :func:`needs_journal`
    said it is not needed (the store's totals then say it all)."""
    from koboi import journal as J
    from koboi.store import holder_is_dead

    if events is None:
        totals = info.totals
        assert totals is not None, "a session without totals needs its journal"
        return SessionRow(
            info=info,
            resumable=False,
            steps=totals.model_calls,
            runs=totals.runs,
            status=info.status,
            totals=totals,
        )
    state = J.fold_state(events)
    status: str = info.status
    live = lease is not None and lease.expires_at > time.time() and not holder_is_dead(lease.holder)
    if state.interrupted and not live:
        status = "interrupted"
    elif state.interrupted and live:
        status = "running"
    totals = J.totals_of(events)
    return SessionRow(
        info=info,
        resumable=state.interrupted and not live,
        steps=totals.model_calls,
        runs=totals.runs,
        status=status,
        holder=lease.holder if live and lease is not None else None,
        totals=totals,
    )


def row_json(row: SessionRow) -> dict[str, Any]:
    info = row.info
    return {
        "id": info.id,
        "status": row.status,
        "stored_status": info.status,
        "resumable": row.resumable,
        "held_by": row.holder,
        "runs": row.runs,
        "steps": row.steps,
        "agent": info.config_name,
        "config_hash": info.config_hash,
        "created_at": info.created_at,
        "updated_at": info.updated_at,
        "last_seq": info.last_seq,
        "input_tokens": row.totals.input_tokens if row.totals else 0,
        "output_tokens": row.totals.output_tokens if row.totals else 0,
        "cost_usd": round(row.totals.cost_usd, 10) if row.totals else 0.0,
    }


def list_sessions(config: Path | None, *, limit: int, status: str | None, as_json: bool) -> None:
    target = store_target(config)
    rows = anyio.run(_session_rows, target, limit, status)
    if as_json:
        write(sys.stdout, json.dumps([row_json(r) for r in rows], indent=2) + "\n")
    else:
        style = Style(sys.stdout)
        now = time.time()
        header = [
            "ID",
            "STATUS",
            "RESUMABLE",
            "RUNS",
            "STEPS",
            "TOKENS",
            "COST",
            "LAST ACTIVITY",
            "AGENT",
        ]
        cells = [
            [
                r.info.id,
                r.status,
                "yes" if r.resumable else "no",
                str(r.runs),
                str(r.steps),
                tokens(r.totals),
                cost(r.totals),
                when(r.info.updated_at, now),
                r.info.config_name or "-",
            ]
            for r in rows
        ]
        if cells:
            write(sys.stdout, table(header, cells, style, {1: _status_style(style)}))
        else:
            which = f" with status {status!r}" if status else ""
            err(f"no sessions{which} in {target.shown_url}", prefix="note")
    if target.is_memory:
        err(MEMORY_HINT, prefix="hint")


async def _session_rows(target: StoreTarget, limit: int, status: str | None) -> list[SessionRow]:
    async with open_store(target) as store:
        infos = await store.list_sessions(limit=limit, status=_status(status))
        rows = []
        for info in infos:
            if needs_journal(info):
                rows.append(
                    session_row(info, await store.read(info.id), await store.get_lease(info.id))
                )
            else:
                rows.append(session_row(info, None))
        return rows


def _status(status: str | None) -> SessionStatus | None:
    from typing import get_args

    from koboi.store import SessionStatus

    if status is None:
        return None
    known: tuple[SessionStatus, ...] = get_args(SessionStatus)
    for value in known:
        if value == status:
            return value
    raise CliError(f"unknown status {status!r}; known: {', '.join(known)}")


def _status_style(style: Style) -> Any:
    colours = {"completed": "green", "failed": "red", "running": "yellow", "interrupted": "yellow"}
    return lambda text: style(text, fg=colours[text]) if text in colours else text


def tokens(totals: SessionTotals | None, *, detail: bool = False) -> str:
    """``1234`` (with ``detail``: ``1234 (1000 in, 234 out)``), or ``-``."""
    if totals is None or not totals.total_tokens:
        return "-"
    if not detail:
        return str(totals.total_tokens)
    return f"{totals.total_tokens} ({totals.input_tokens} in, {totals.output_tokens} out)"


def cost(totals: SessionTotals | None) -> str:
    """``$0.0123``, or ``-`` when nothing was priced."""
    if totals is None or not totals.cost_usd:
        return "-"
    return f"${totals.cost_usd:.4f}" if totals.cost_usd < 100 else f"${totals.cost_usd:,.2f}"


def when(timestamp: float, now: float) -> str:
    """Local time to the minute, and how long ago: ``2024-05-01 14:03 (5 min ago)``."""
    local = datetime.fromtimestamp(timestamp).strftime("%Y-%m-%d %H:%M")
    return f"{local} ({ago(now - timestamp)})"


def ago(seconds: float) -> str:
    if seconds < 0:
        return "in the future"
    if seconds < 60:
        return f"{seconds:.0f} s ago"
    if seconds < 3600:
        return f"{seconds // 60:.0f} min ago"
    if seconds < 86400:
        return f"{seconds // 3600:.0f} h ago"
    return f"{seconds // 86400:.0f} d ago"


# -- koboi show ------------------------------------------------------------------------


@dataclass
class SessionTree:
    """A session, its journal, and the sessions of its child runs (sub-agents, a runner's
    nodes), each placed under the event of the parent that started it."""

    info: SessionInfo
    events: list[JournalEvent]
    lease: Lease | None = None
    #: (seq of the parent's event it belongs under, the child's tree), in order.
    children: list[tuple[int, SessionTree]] = field(default_factory=list)


#: How deep child runs are followed (a child of a child of...).
MAX_DEPTH = 8


def show_session(ref: str, config: Path | None, *, as_json: bool) -> None:
    target = store_target(config)
    tree = anyio.run(_session_tree, target, ref)
    info, events = tree.info, tree.events
    if as_json:
        for depth, session, event in _walk(tree):
            line = {
                "session_id": event.session_id,
                "seq": event.seq,
                "at": event.at,
                "type": event.type,
                "data": redact_event_data(event.type, event.data),
            }
            if depth:
                line["parent_session"] = session.info.metadata.get("parent_session")
            write(sys.stdout, json.dumps(line, ensure_ascii=False) + "\n")
        return
    style = Style(sys.stdout)
    row = session_row(info, events, tree.lease)
    created = datetime.fromtimestamp(info.created_at).strftime("%Y-%m-%d %H:%M:%S")
    nested = sum(1 for _ in _subtrees(tree)) - 1
    write(
        sys.stdout,
        f"{style.bold('session')} {info.id}\n"
        f"  agent {info.config_name or '-'}, status {row.status}, "
        f"{row.runs} run{'' if row.runs == 1 else 's'}, {row.steps} "
        f"step{'' if row.steps == 1 else 's'}, created {created}"
        f"{', interrupted: resumable' if row.resumable else ''}"
        f", tokens {tokens(row.totals, detail=True)}, cost {cost(row.totals)}"
        f"{f', {nested} child session' + ('' if nested == 1 else 's') if nested else ''}\n\n",
    )
    if not events:
        write(sys.stdout, "(no events)\n")
        return
    every = [e for _, _, e in _walk(tree)]
    same_day = len({datetime.fromtimestamp(e.at).date() for e in every}) == 1
    clock = "%H:%M:%S" if same_day else "%Y-%m-%d %H:%M:%S"
    rows = []
    for depth, _session, item in _walk(tree, headers=True):
        indent = "  " * depth
        if isinstance(item, SessionTree):  # the start of a child's rows
            child_row = session_row(item.info, item.events)
            meta = item.info.metadata
            label = meta.get("tag") or meta.get("parent_call") or "child"
            rows.append(
                [
                    f"{indent[:-2]}└─",
                    "",
                    "child session",
                    f"{label}: {item.info.id} ({child_row.status}, {child_row.steps} "
                    f"step{'' if child_row.steps == 1 else 's'})",
                ]
            )
            continue
        rows.append(
            [
                f"{indent}{item.seq}",
                datetime.fromtimestamp(item.at).strftime(clock),
                item.type,
                summarize(item.type, item.data),
            ]
        )
    write(sys.stdout, table(["SEQ", "TIME", "TYPE", "SUMMARY"], rows, style, {2: style.cyan}))


async def _session_tree(target: StoreTarget, ref: str) -> SessionTree:
    async with open_store(target) as store:
        info = await resolve(store, ref, target)
        root = SessionTree(info, await store.read(info.id), await store.get_lease(info.id))
        # The kernel names a child's parent in its session's metadata; one listing finds
        # every child of the tree.
        by_parent: dict[str, list[SessionInfo]] = {}
        for other in await store.list_sessions(limit=1_000_000):
            parent = other.metadata.get("parent_session")
            if parent:
                by_parent.setdefault(str(parent), []).append(other)
        await _add_children(store, root, by_parent, 1)
        return root


async def _add_children(
    store: Store, tree: SessionTree, by_parent: dict[str, list[SessionInfo]], depth: int
) -> None:
    if depth > MAX_DEPTH:
        return
    kids = sorted(by_parent.get(tree.info.id, []), key=lambda i: i.created_at)
    for kid in kids:
        child = SessionTree(kid, await store.read(kid.id))
        await _add_children(store, child, by_parent, depth + 1)
        tree.children.append((_anchor(tree.events, kid), child))


def _anchor(events: list[JournalEvent], child: SessionInfo) -> int:
    """The seq of the parent's event a child belongs under: the tool call that started it,
    else the event that names its session (a runner's "node started"), else the last."""
    from koboi import journal as J

    call = child.metadata.get("parent_call")
    for event in events:
        if (
            call
            and event.type == J.TOOL_CALL_STARTED
            and J.TOOL_CALL_STARTED.of(event)["call_id"] == call
        ):
            return event.seq
        if "." in event.type and event.data.get("session_id") == child.id:
            return event.seq
    return events[-1].seq if events else 0


def _subtrees(tree: SessionTree) -> Iterator[SessionTree]:
    yield tree
    for _, child in tree.children:
        yield from _subtrees(child)


def _walk(
    tree: SessionTree, *, depth: int = 0, headers: bool = False
) -> Iterator[tuple[int, SessionTree, Any]]:
    """``(depth, session, event)`` in tree order: each child's events right after the
    parent's event it belongs under (with ``headers``, the child's tree first)."""
    pending = list(tree.children)
    for event in tree.events:
        yield depth, tree, event
        while pending and pending[0][0] <= event.seq:
            _, child = pending.pop(0)
            if headers:
                yield depth + 1, child, child
            yield from _walk(child, depth=depth + 1, headers=headers)
    for _, child in pending:
        if headers:
            yield depth + 1, child, child
        yield from _walk(child, depth=depth + 1, headers=headers)


async def resolve(store: Store, ref: str, target: StoreTarget) -> SessionInfo:
    """The session ``ref`` names (full id, unique prefix, ``last``), or an error."""
    from koboi.errors import SessionNotFound

    try:
        return await store.resolve_session(ref)
    except SessionNotFound as exc:
        if target.is_memory:
            raise CliError(f"{exc}; {MEMORY_HINT}") from exc
        raise


def summarize(event_type: str, data: Mapping[str, Any]) -> str:
    """One line saying what a journal event records, secrets masked."""
    return _one_line(_summary(event_type, redact_event_data(event_type, data)))


def _summary(kind: str, d: Mapping[str, Any]) -> str:
    """What one event says, read through its kind's schema (plugin events as they are)."""
    from koboi import journal as J

    if kind == J.RUN_STARTED:
        started = J.RUN_STARTED.data(d)
        call = started.get("call")
        if started.get("kind") == "tool_call" and call is not None:
            return f"direct call {call['name']} {_compact(call['arguments'])}"
        return f"input: {_quote(started.get('input', ''))}"
    if kind == J.MODEL_CALL_STARTED:
        begun = J.MODEL_CALL_STARTED.data(d)
        rewritten = begun.get("rewritten_by")
        return f"step {begun['step']}" + (
            f" (request from {', '.join(rewritten)})" if rewritten else ""
        )
    if kind == J.MODEL_CALL_FINISHED:
        answered = J.MODEL_CALL_FINISHED.data(d)
        return f"step {answered['step']}: {_response(answered.get('response'))}"
    if kind == J.MODEL_CALL_FAILED:
        failed = J.MODEL_CALL_FAILED.data(d)
        streamed = failed.get("streamed")
        after = f" (after streaming {_quote(streamed)})" if streamed else ""
        return f"step {failed['step']}: {failed.get('error', '')}{after}"
    if kind == J.PROVIDER_EVENT:
        return _provider_event(d)
    if kind == J.BUDGET_EXCEEDED:
        over = J.BUDGET_EXCEEDED.data(d)
        return (
            f"step {over['step']}: {over.get('budget', '?')} used {over.get('used', '?')} of "
            f"{over.get('limit', '?')}"
        )
    if kind == J.TOOL_CALL_STARTED:
        call_started = J.TOOL_CALL_STARTED.data(d)
        idempotent = " (idempotent)" if call_started.get("idempotent") else ""
        rewritten = call_started.get("rewritten_by")
        by = f" (arguments from {', '.join(rewritten)})" if rewritten else ""
        return (
            f"{call_started.get('name', '?')} {_compact(call_started.get('arguments', {}))}"
            f"{idempotent}{by}"
        )
    if kind == J.TOOL_CALL_FINISHED:
        ended = J.TOOL_CALL_FINISHED.data(d)
        label = "error: " if ended.get("is_error") else ""
        text = shorten(str(ended.get("content", "")), lines=1, chars=80)
        return f"{ended.get('name', '?')} → {label}{text}"
    if kind == J.TOOL_CALL_REFUSED:
        refused = J.TOOL_CALL_REFUSED.data(d)
        return (
            f"{refused.get('name', '?')} refused by {refused.get('stage', '?')}: "
            f"{refused.get('reason', '')}"
        )
    if kind == J.TOOL_CALL_SUSPENDED:
        waiting = J.TOOL_CALL_SUSPENDED.data(d)
        return f"{waiting.get('name', '?')} waits for {waiting.get('kind', 'input')}: {waiting.get('reason', '')}"
    if kind == J.APPROVAL_REQUESTED:
        asked = J.APPROVAL_REQUESTED.data(d)
        return (
            f"{asked.get('name', '?')} (risk {asked.get('risk', '?')}): {asked.get('reason', '')}"
        )
    if kind == J.APPROVAL_DECIDED:
        decided = J.APPROVAL_DECIDED.data(d)
        verdict = "approved" if decided.get("approved") else "denied"
        by = f" by {decided['decided_by']}" if decided.get("decided_by") else ""
        reason = f": {decided['reason']}" if decided.get("reason") else ""
        return f"{verdict}{by}{reason}"
    if kind == J.TOOL_CALL_INTERRUPTED:
        doubt = J.TOOL_CALL_INTERRUPTED.data(d)
        return f"{doubt.get('name', '?')}: outcome unknown (policy {doubt.get('policy', '?')})"
    if kind == J.RUN_RESUMED:
        resumed = J.RUN_RESUMED.data(d)
        reply = f", reply {_quote(str(resumed['reply']))}" if "reply" in resumed else ""
        return (
            f"after seq {resumed.get('after_seq')} at step {resumed.get('step')} by "
            f"{resumed.get('holder') or '?'}{reply}"
        )
    if kind == J.CONTEXT_ADDED:
        added = J.CONTEXT_ADDED.data(d)
        return f"from {added.get('source', '?')}: {_quote(added.get('text', ''))}"
    if kind == J.ANSWER_REPLACED:
        replaced = J.ANSWER_REPLACED.data(d)
        return f"by {replaced.get('by', '?')}: {_quote(replaced.get('text', ''))}"
    if kind == J.RUN_CONTINUED:
        continued = J.RUN_CONTINUED.data(d)
        return f"by {continued.get('by', '?')}: {_quote(continued.get('message', ''))}"
    if kind == J.SIDE_CALL_STARTED:
        side = J.SIDE_CALL_STARTED.data(d)
        return f"{side.get('purpose', '?')} (key {str(side.get('key', ''))[:12]})"
    if kind == J.SIDE_CALL_FINISHED:
        side_done = J.SIDE_CALL_FINISHED.data(d)
        return f"{side_done.get('purpose', '?')}: {_response(side_done.get('response'))}"
    if kind == J.SIDE_CALL_FAILED:
        side_failed = J.SIDE_CALL_FAILED.data(d)
        return f"{side_failed.get('purpose', '?')}: {side_failed.get('error', '')}"
    if kind == J.TOOLS_CHANGED:
        changed = J.TOOLS_CHANGED.data(d)
        parts = [f"+{n}" for n in changed.get("added", [])] + [
            f"-{n}" for n in changed.get("removed", [])
        ]
        return f"{len(changed.get('tools', []))} tools ({' '.join(parts) or 'reordered'})"
    if kind == J.RUN_FINISHED:
        finished = J.RUN_FINISHED.data(d)
        outcome = str(finished.get("outcome", "?"))
        if outcome == "suspended" and finished.get("suspension"):
            return f"suspended after {finished.get('steps', '?')} steps: waits for " + str(
                finished["suspension"].get("reason", "input")
            )
        detail = finished.get("error") or _quote(finished.get("output") or "")
        return f"{outcome} after {finished.get('steps', '?')} steps: {detail}"
    if "." in kind:  # a plugin's own event: its summary, if the plugin gives one
        from koboi_cli.host import get_host

        said = get_host().summarize_event(kind, d)
        if said is not None:
            return said
    return _compact(d)  # a plugin's own event (or a newer kernel's): its data as it is


def _provider_event(d: Mapping[str, Any]) -> str:
    kind = str(d.get("kind", "?"))
    who = d.get("provider") or "?"
    reason = f": {d['reason']}" if d.get("reason") else ""
    if kind == "retry":
        return f"retry {d.get('attempt', '?')} in {d.get('delay_seconds', '?')} s{reason}"
    if kind == "failover":
        following = d.get("next") or "nothing left"
        return f"failover from {who} to {following}{reason}"
    if kind == "breaker_open":
        cooldown = d.get("cooldown_seconds", "?")
        return f"{who} benched for {cooldown} s after {d.get('failures', '?')} failures{reason}"
    if kind == "breaker_closed":
        return f"{who} is back"
    if kind == "cache_hit":
        return f"answer from the response cache ({d.get('key', '?')})"
    rest = {k: v for k, v in d.items() if k not in ("kind", "step")}
    return f"{kind} {_compact(rest)}"


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _response(response: Any) -> str:
    if not isinstance(response, Mapping):
        return "?"
    message = response.get("message") or {}
    calls = message.get("tool_calls") or []
    if calls:
        shown = []
        for call in calls:
            # Already redacted by the caller (redact_event_data).
            raw = call.get("raw_arguments")
            args = raw if isinstance(raw, str) else _compact(call.get("arguments", {}))
            shown.append(f"{call.get('name', '?')} {args}")
        return "tool calls: " + ", ".join(shown)
    return f"answer: {_quote(message.get('content', ''))}"


def _quote(text: Any) -> str:
    return json.dumps(mask_secrets(str(text)), ensure_ascii=False)


def _one_line(text: str) -> str:
    text = " ".join(text.split())
    if len(text) > SUMMARY_CHARS:
        text = text[: SUMMARY_CHARS - 1].rstrip() + "…"
    return text
