"""Replaying a run bundle: the recorded session, run again offline, compared event by event.

The replay is the real agent loop (:class:`koboi.KoboiAgent`) with four parts
swapped for ones that answer from the bundle (:mod:`koboi_replay.served`) and
a store that compares (:mod:`koboi_replay.comparing_store`), so nothing in the
kernel knows it is being replayed. Each recorded run is run again the way it
ran, with the trace context it was given: a new message for ``run_started``,
the same direct tool call for ``run_started`` of kind ``tool_call``, a resume
for ``run_resumed`` (with the recorded reply when it continued a suspended
run). A run whose process was killed is replayed up to the point where its
journal ends; the next run then resumes from the replayed journal, as ``koboi
run --resume`` did.
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing
from pathlib import Path
from typing import TYPE_CHECKING, Any

from koboi import journal as J
from koboi.errors import KoboiError, describe_error
from koboi.sandbox import Sandbox
from koboi.tools import Tool
from koboi.tracing import TraceContext
from koboi_replay import bundle as B
from koboi_replay import config_text, environment, recording
from koboi_replay.comparing_store import CrashPointReached, ReplayDiverged, ReplayStore
from koboi_replay.errors import BundleError, ReplayError
from koboi_replay.recorded_tools import recorded_toolsets
from koboi_replay.recording import mapping
from koboi_replay.report import Divergence, ReplayReport, ToolsMode
from koboi_replay.served import Cursor, ReplayApprover, ReplayProvider, ReplaySandbox

if TYPE_CHECKING:
    from koboi.agent import KoboiAgent
    from koboi.config import AgentConfig
    from koboi.plugins import PluginHost

TOOLS_MODES: tuple[ToolsMode, ...] = ("recorded", "live")


def tools_mode(value: str) -> ToolsMode:
    """``value`` as a tools mode, or a clear error."""
    for mode in TOOLS_MODES:
        if value == mode:
            return mode
    raise ReplayError(f"--tools must be one of {', '.join(TOOLS_MODES)}, not {value!r}")


# -- assembling and running a replay -------------------------------------------------------


def replay_config(
    bundle: B.Bundle, host: PluginHost, *, base_dir: Path, label: str = "bundle"
) -> AgentConfig:
    """The bundle's config, for a replay: its own store and no response cache.

    The store becomes ``memory://`` (the replay journals into its comparing
    store) and ``cache.mode`` becomes ``live`` (answers come from the bundle);
    the config hash stays the one the session ran with. When capture replaced
    literal secrets, the hash is the recorded one: the config minus its secrets
    is the config the session ran with.
    """
    raw = config_text.parse_yaml(bundle.config_text, label)
    config = config_text.portable_config(
        raw,
        host.catalog(),
        base_dir=base_dir,
        env=os.environ,
        label=f"{label} ({B.CONFIG})",
        overrides={"store": {"url": "memory://"}, "cache": {"mode": "live"}},
    )
    recorded = mapping(bundle.manifest.get("config"))
    if recorded.get("redacted") and recorded.get("hash"):
        config.config_hash = str(recorded["hash"])
    return config


def _live_sandbox(config: AgentConfig, host: PluginHost) -> Sandbox:
    entry = host.catalog().sandboxes.get(config.sandbox.backend)
    if entry is None:
        raise ReplayError(f"sandbox backend {config.sandbox.backend!r} is not installed")
    sandbox = entry.target(config.sandbox_options, config)
    if not isinstance(sandbox, Sandbox):
        raise ReplayError(f"sandbox plugin {entry.plugin!r} returned {sandbox!r}, not a Sandbox")
    return sandbox


async def replay_bundle(
    bundle: B.Bundle,
    *,
    tools: ToolsMode = "recorded",
    host: PluginHost | None = None,
    base_dir: Path | None = None,
    extra_tools: Sequence[Tool] = (),
    label: str = "bundle",
) -> ReplayReport:
    """Replay a run bundle and compare what it journals with the recording.

    :param tools: ``recorded`` serves every tool result from the bundle and
        runs nothing; ``live`` runs each tool in the config's sandbox and the
        comparison shows where a result differs.
    :param base_dir: where the config's relative paths resolve (the working
        directory by default); only ``live`` tools touch anything there.
    :param extra_tools: tools the recorded agent had that its config does not
        name (an application's ``KoboiAgent(extra_tools=...)``).
    """
    from koboi.agent import KoboiAgent
    from koboi.plugins import default_host

    tools = tools_mode(tools)
    if bundle.kind != "run":
        raise ReplayError(
            f"{label} is a workflow bundle (koboi export): it holds a config but no recorded "
            f"run to replay; run it with: koboi run {label} -m MESSAGE"
        )
    override = os.environ.get("KOBOI_CACHE_MODE", "").strip().lower()
    if override not in ("", "live", "replay"):
        # The replay passes its own mode to the kernel, so the variable would not apply;
        # a user who set it to record or fill a cache is told so instead of ignored.
        raise ReplayError(
            f"KOBOI_CACHE_MODE={override} is set, but a bundle replay answers every model call "
            "from the bundle: it calls no model and writes no response cache; unset "
            "KOBOI_CACHE_MODE"
        )
    host = host or default_host()
    events = bundle.events()
    if not events:
        raise BundleError(f"{label} holds no events: there is nothing to replay")
    runs = recording.split_runs(events)
    try:
        model_calls = recording.index_model_calls(bundle.records(B.MODEL_CALLS))
        tool_results = recording.index_calls(bundle.records(B.TOOL_RESULTS))
        approvals = recording.index_calls(bundle.records(B.APPROVALS))
    except (KeyError, TypeError, ValueError) as exc:
        raise BundleError(f"{label}: a served record is malformed ({exc})") from None
    config = replay_config(bundle, host, base_dir=base_dir or Path.cwd(), label=label)
    identity, identity_note = await _recorded_identity(bundle, config, host)
    session_id = events[0].session_id or "replay"
    store = ReplayStore(events, bundle.records(B.AUDIT))
    cursor = Cursor()
    sandbox = ReplaySandbox(
        tool_results,
        cursor,
        store,
        live=_live_sandbox(config, host) if tools == "live" else None,
        recorded=mapping(bundle.manifest.get("sandbox"))
        or {"name": config.sandbox.backend, "isolated": config.sandbox.backend != "passthrough"},
    )
    agent = KoboiAgent(
        config,
        host=host,
        provider=ReplayProvider(
            model_calls,
            cursor,
            identity=identity,
            window=await environment.model_window(config, host),
        ),
        store=store,
        sandbox=sandbox,
        approver=ReplayApprover(approvals, cursor),
        extra_tools=extra_tools,
        # Recorded: the toolsets' tools as the journal defined them; no server is reached.
        # Live: the plugins' toolsets connect, and their tools run for real.
        toolsets=recorded_toolsets(events, store) if tools == "recorded" else (),
        plugin_toolsets=tools == "live",
        # As recorded: an autonomous run (a job) decides differently (the unattended-destruction rule).
        autonomous=bool(J.RUN_STARTED.of(events[0]).get("autonomous", False)),
        # Answers come from the bundle: no response cache, whatever the config (validated
        # keyless, as for cache.mode replay) or the environment says.
        cache_mode="live",
    )
    notes = environment.differences(mapping(bundle.manifest.get("versions")), host)
    if identity_note:
        notes.append(
            f"the bundle does not record its model's identity and {identity_note}: request keys "
            "(side calls, rewritten requests) will differ"
        )
    started = time.perf_counter()
    async with agent:
        for run in runs:
            cursor.start(run)
            store.start(run)
            if run.holder:
                # The replay plays the part of the process that resumed the run: its lease
                # holder (journaled in run_resumed) is the recorded one.
                agent.holder = run.holder
            if not await _replay_run(agent, run, session_id, store):
                break
    seconds = time.perf_counter() - started
    if store.divergence is None and store.committed < len(store.expected):
        store.missing_next("the replay ended before this event")
    if store.divergence is None and store.audit_committed < len(store.expected_audit):
        position = store.audit_committed + 1
        store.diverge(
            Divergence(
                "audit",
                position,
                store.expected_audit[position - 1],
                None,
                "the replay did not write this audit record",
            )
        )
    if store.divergence is not None and not store.divergence.reason:
        store.divergence.reason = explain(store.divergence, host, tools)
    return ReplayReport(
        session_id=session_id,
        tools=tools,
        runs=len(runs),
        expected_events=len(store.expected),
        replayed_events=store.committed,
        expected_audit=len(store.expected_audit),
        replayed_audit=store.audit_committed,
        seconds=seconds,
        divergence=store.divergence,
        notes=notes,
    )


async def _recorded_identity(
    bundle: B.Bundle, config: AgentConfig, host: PluginHost
) -> tuple[dict[str, Any] | None, str]:
    """The recorded provider's cache identity: the manifest's (capture took it where the
    session ran), else that of the provider the config builds here (a format-1 bundle);
    and a note when there is none."""
    recorded = mapping(mapping(bundle.manifest.get("model")).get("identity"))
    if recorded:
        return recorded, ""
    return await environment.model_identity(config, host)


async def _drain(events: AsyncGenerator[Any, None]) -> None:
    async with aclosing(events) as stream:
        async for _ in stream:
            pass


async def _replay_run(
    agent: KoboiAgent, run: recording.RecordedRun, session_id: str, store: ReplayStore
) -> bool:
    """Replay one recorded run the way it ran; False when the replay cannot go on.

    A new message for ``run_started``; the same direct tool call, with its
    recorded call id, for ``run_started`` of kind ``tool_call``; a resume for
    ``run_resumed``, with the recorded reply when it continued a suspended run.
    Each is given the trace context it was given, so the journaled trace ids are
    the recorded ones (a resume given none goes on in the trace of its run, as
    recorded).
    """
    trace = TraceContext.from_data(run.trace) if run.trace is not None else None
    try:
        if run.kind == J.RUN_RESUMED:
            await _drain(agent.resume(session_id, reply=run.reply, trace=trace))
        elif run.call is not None:
            call = run.call
            await agent.call_tool(
                str(call.get("name", "")),
                mapping(call.get("arguments")),
                session_id=session_id,
                trace=trace,
                call_id=str(call.get("id", "")) or None,
            )
        else:
            await _drain(agent.stream(run.input, session_id=session_id, trace=trace))
    except CrashPointReached:
        pass
    except ReplayDiverged:
        return False
    except KoboiError as exc:
        store.missing_next(f"the replayed run stopped: {describe_error(exc)}")
        return False
    if store.divergence is not None:
        return False
    if store.committed < run.last_seq:
        store.missing_next("the replayed run ended before this event")
        return False
    return True


def explain(divergence: Divergence, host: PluginHost, tools: ToolsMode) -> str:
    """Why a divergence probably happened, when the events say (else "")."""
    expected, actual = divergence.expected or {}, divergence.actual or {}
    expected_type, actual_type = str(expected.get("type", "")), str(actual.get("type", ""))
    if J.is_plugin_event(expected_type) and expected_type != actual_type:
        plugin = expected_type.split(".", 1)[0]
        info = host.get(plugin)
        if info is None or info.status != "loaded":
            return (
                f"the recording has an event of plugin {plugin!r}, which is not installed (or "
                "not loaded) here: nothing in this replay writes it"
            )
        return f"plugin {plugin!r} did not record this event in the replay"
    if J.SIDE_CALL_STARTED in (expected_type, actual_type):
        if expected_type == actual_type:
            return (
                "a plugin asked the model a different side call (another purpose or request) "
                "than in the recording"
            )
        if expected_type == J.SIDE_CALL_STARTED:
            where = (
                "; if the tool itself asked it (ctx.model), replay with --tools live: under "
                "--tools recorded the tool does not run"
                if tools == "recorded" and actual_type == J.TOOL_CALL_FINISHED
                else ""
            )
            return f"the recording made a side call here that the replay did not make{where}"
        return "a plugin asked the model a side call the recording did not make"
    return ""
