"""``koboi sessions`` (the sessions of a store) and ``koboi show`` (one session's journal).

Both read the store directly (:mod:`koboi_cli.stores`); neither runs an agent
or takes a session's lease, so they are safe while a run is in progress.
Everything shown from the journal goes through :mod:`koboi_cli.redact` first.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
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
    from koboi.store import JournalEvent, Lease, SessionInfo, SessionStatus, Store

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


def session_row(
    info: SessionInfo, events: list[JournalEvent], lease: Lease | None = None
) -> SessionRow:
    from koboi import journal as J
    from koboi.store import holder_is_dead

    state = J.fold_state(events)
    status: str = info.status
    live = lease is not None and lease.expires_at > time.time() and not holder_is_dead(lease.holder)
    if state.interrupted and not live:
        status = "interrupted"
    elif state.interrupted and live:
        status = "running"
    return SessionRow(
        info=info,
        resumable=state.interrupted and not live,
        steps=sum(1 for e in events if e.type == J.MODEL_CALL_FINISHED),
        runs=sum(1 for e in events if e.type == J.RUN_STARTED),
        status=status,
        holder=lease.holder if live and lease is not None else None,
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
    }


def list_sessions(config: Path | None, *, limit: int, status: str | None, as_json: bool) -> None:
    target = store_target(config)
    rows = anyio.run(_session_rows, target, limit, status)
    if as_json:
        write(sys.stdout, json.dumps([row_json(r) for r in rows], indent=2) + "\n")
    else:
        style = Style(sys.stdout)
        now = time.time()
        header = ["ID", "STATUS", "RESUMABLE", "RUNS", "STEPS", "LAST ACTIVITY", "AGENT"]
        cells = [
            [
                r.info.id,
                r.status,
                "yes" if r.resumable else "no",
                str(r.runs),
                str(r.steps),
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
        return [
            session_row(info, await store.read(info.id), await store.get_lease(info.id))
            for info in infos
        ]


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


def show_session(ref: str, config: Path | None, *, as_json: bool) -> None:
    target = store_target(config)
    info, events, lease = anyio.run(_session_events, target, ref)
    if as_json:
        for event in events:
            line = {
                "session_id": event.session_id,
                "seq": event.seq,
                "at": event.at,
                "type": event.type,
                "data": redact_event_data(event.type, event.data),
            }
            write(sys.stdout, json.dumps(line, ensure_ascii=False) + "\n")
        return
    style = Style(sys.stdout)
    row = session_row(info, events, lease)
    created = datetime.fromtimestamp(info.created_at).strftime("%Y-%m-%d %H:%M:%S")
    write(
        sys.stdout,
        f"{style.bold('session')} {info.id}\n"
        f"  agent {info.config_name or '-'}, status {row.status}, "
        f"{row.runs} run{'' if row.runs == 1 else 's'}, {row.steps} "
        f"step{'' if row.steps == 1 else 's'}, created {created}"
        f"{', interrupted: resumable' if row.resumable else ''}\n\n",
    )
    if not events:
        write(sys.stdout, "(no events)\n")
        return
    same_day = len({datetime.fromtimestamp(e.at).date() for e in events}) == 1
    clock = "%H:%M:%S" if same_day else "%Y-%m-%d %H:%M:%S"
    rows = [
        [
            str(e.seq),
            datetime.fromtimestamp(e.at).strftime(clock),
            e.type,
            summarize(e.type, e.data),
        ]
        for e in events
    ]
    write(sys.stdout, table(["SEQ", "TIME", "TYPE", "SUMMARY"], rows, style, {2: style.cyan}))


async def _session_events(
    target: StoreTarget, ref: str
) -> tuple[SessionInfo, list[JournalEvent], Lease | None]:
    async with open_store(target) as store:
        info = await resolve(store, ref, target)
        return info, await store.read(info.id), await store.get_lease(info.id)


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
    step = f"step {d.get('step')}"
    name = str(d.get("name", "?"))
    if kind == "run_started":
        return f"input: {_quote(d.get('input', ''))}"
    if kind == "model_call_started":
        return step
    if kind == "model_call_finished":
        return f"{step}: {_response(d.get('response'))}"
    if kind == "model_call_failed":
        streamed = d.get("streamed")
        after = f" (after streaming {_quote(streamed)})" if streamed else ""
        return f"{step}: {d.get('error', '')}{after}"
    if kind == "provider_event":
        return _provider_event(d)
    if kind == "budget_exceeded":
        return f"{step}: {d.get('budget', '?')} used {d.get('used', '?')} of {d.get('limit', '?')}"
    if kind == "tool_call_started":
        args = _compact(d.get("arguments", {}))
        idempotent = " (idempotent)" if d.get("idempotent") else ""
        return f"{name} {args}{idempotent}"
    if kind == "tool_call_finished":
        label = "error: " if d.get("is_error") else ""
        return f"{name} → {label}{shorten(str(d.get('content', '')), lines=1, chars=80)}"
    if kind == "tool_call_refused":
        return f"{name} refused by {d.get('stage', '?')}: {d.get('reason', '')}"
    if kind == "approval_requested":
        return f"{name} (risk {d.get('risk', '?')}): {d.get('reason', '')}"
    if kind == "approval_decided":
        verdict = "approved" if d.get("approved") else "denied"
        by = f" by {d['decided_by']}" if d.get("decided_by") else ""
        reason = f": {d['reason']}" if d.get("reason") else ""
        return f"{verdict}{by}{reason}"
    if kind == "tool_call_interrupted":
        return f"{name}: outcome unknown (policy {d.get('policy', '?')})"
    if kind == "run_resumed":
        return f"after seq {d.get('after_seq')} at step {d.get('step')} by {d.get('holder') or '?'}"
    if kind == "run_finished":
        outcome = str(d.get("outcome", "?"))
        detail = d.get("error") if d.get("error") else _quote(d.get("output") or "")
        return f"{outcome} after {d.get('steps', '?')} steps: {detail}"
    return _compact(d)


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
