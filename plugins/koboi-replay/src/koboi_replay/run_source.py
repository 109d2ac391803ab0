"""``koboi run BUNDLE``: replay a captured run, or run a bundle's config.

Registered as the run source of ``.koboi`` files (``koboi_register_run_sources``),
so ``koboi run`` hands bundles here with all its options:

- ``koboi run RUN.koboi --replay-mode replay [--tools recorded|live] [--json]``
  replays the recorded session offline and prints ``replay: identical`` (exit
  0) or the first divergence (exit 1);
- ``koboi run FLOW.koboi -m MESSAGE`` (or ``--resume``) runs the bundle's config
  as ``koboi run CONFIG`` would, as if the config were a file in the working
  directory; ``--replay-mode``/``--cache-mode`` then set the response cache's
  mode, and a bundle captured ``--with-cache`` seeds the store's cache first.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from koboi_replay import bundle as B
from koboi_replay.errors import ReplayError

if TYPE_CHECKING:
    from koboi.config import AgentConfig
    from koboi.store import Store
    from koboi_replay.report import Divergence, ReplayReport

#: How much of an event or a value a divergence report shows.
SHOWN_CHARS = 600


def run(path: Path, options: Mapping[str, Any]) -> int:
    """The run source's entry point: ``target(path, options)`` (see koboi.hookspecs)."""
    bundle = B.read_bundle(path)
    message, resume = options.get("message"), options.get("resume")
    mode = options.get("replay_mode") or options.get("cache_mode")
    if message is None and resume is None:
        if mode != "replay":
            raise ReplayError(
                f"{path} is a bundle: give -m MESSAGE to run its config, or --replay-mode "
                "replay to replay its recorded session"
            )
        for option, flag in (("session", "--session"), ("assume_yes", "--yes")):
            if options.get(option):
                raise ReplayError(
                    f"{flag} does not apply to a replay: the replay runs the recorded session, "
                    "with the recorded approvals"
                )
        return replay(
            bundle,
            path,
            tools=str(options.get("tools") or "recorded"),
            as_json=bool(options.get("as_json")),
        )
    if options.get("tools"):
        raise ReplayError(
            "--tools applies only to a replay (koboi run RUN.koboi --replay-mode replay, "
            "without -m)"
        )
    return run_config_of(bundle, path, options, mode)


# -- replaying --------------------------------------------------------------------------


def replay(bundle: B.Bundle, path: Path, *, tools: str, as_json: bool) -> int:
    from koboi_cli.api import err, get_host, write
    from koboi_replay.replayer import replay_bundle, tools_mode

    mode = tools_mode(tools)
    report = anyio.run(
        lambda: replay_bundle(
            bundle,
            tools=mode,
            host=get_host(),
            base_dir=Path.cwd(),
            label=str(path),
        )
    )
    for note in report.notes:
        err(note, prefix="note")
    if as_json:
        write(sys.stdout, json.dumps(_masked_report(report), ensure_ascii=False) + "\n")
    else:
        write(sys.stdout, render(report))
    return 0 if report.identical else 1


def render(report: ReplayReport) -> str:
    """The text a replay prints: ``replay: identical``, or the first divergence."""
    runs = f"{report.runs} run{'' if report.runs == 1 else 's'}"
    summary = (
        f"{report.replayed_events} of {report.expected_events} events, {report.replayed_audit} "
        f"of {report.expected_audit} audit records, {runs}, tools {report.tools}, "
        f"{report.seconds:.3f} s"
    )
    divergence = report.divergence
    if divergence is None:
        return f"replay: identical\n  {summary}\n"
    return describe_divergence(divergence, report) + f"  replayed: {summary}\n"


def describe_divergence(divergence: Divergence, report: ReplayReport) -> str:
    from koboi_replay.normalise import MISSING

    total = report.expected_events if divergence.stream == "events" else report.expected_audit
    noun = "event" if divergence.stream == "events" else "audit record"
    kind = ""
    for event in (divergence.expected, divergence.actual):
        if event is not None and "type" in event:
            kind = f" ({event['type']})"
            break
    lines = [f"replay: diverged at {noun} {divergence.index} of {total}{kind}"]
    if divergence.reason:
        lines.append(f"  why:      {divergence.reason}")
    path = divergence.path
    if path:
        expected, actual = divergence.values()
        shown_expected, shown_actual = _window(
            "(absent)" if expected is MISSING else expected,
            "(absent)" if actual is MISSING else actual,
        )
        lines.append(f"  differs at {path}")
        lines.append(f"  expected: {shown_expected}")
        lines.append(f"  actual:   {shown_actual}")
        if shown_expected == shown_actual:
            lines.append("  (the two differ inside a value masked as a secret)")
    lines.append(f"  expected {noun}: {_event_text(divergence.expected, divergence.stream)}")
    lines.append(f"  actual {noun}:   {_event_text(divergence.actual, divergence.stream)}")
    return "\n".join(lines) + "\n"


def _mask(value: Any, stream: str) -> Any:
    """Secrets masked, as ``koboi show`` masks them. A kernel event's fields are masked
    by what they are (tool arguments, responses); any other event — a plugin's, or a type
    this kernel does not know — is shown as it is, every string masked by value, never
    read as a kernel event."""
    from koboi.journal import KINDS_BY_NAME
    from koboi_cli.api import mask_strings, redact_event_data

    if isinstance(value, dict) and stream == "events" and isinstance(value.get("data"), dict):
        kind = str(value.get("type"))
        if kind in KINDS_BY_NAME:
            return {**value, "data": redact_event_data(kind, value["data"])}
    return mask_strings(value)


def _event_text(event: dict[str, Any] | None, stream: str) -> str:
    if event is None:
        return "(none)"
    return _cut(B.canonical_json(_mask(event, stream)))


def _cut(text: str, limit: int = SHOWN_CHARS) -> str:
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text) - limit} more characters)"


def _window(expected: Any, actual: Any) -> tuple[str, str]:
    """Both values as JSON (secrets masked); long strings around where they first differ."""
    from koboi_cli.api import mask_strings

    if isinstance(expected, str) and isinstance(actual, str):
        a, b = mask_strings(expected), mask_strings(actual)
        start = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
        if start is None:
            start = min(len(a), len(b))
        if max(len(a), len(b)) > 200:
            begin = max(0, start - 60)

            def piece(text: str) -> str:
                shown = text[begin : begin + 200]
                prefix = f"…({begin} characters) " if begin else ""
                more = len(text) - begin - len(shown)
                return (
                    prefix
                    + json.dumps(shown, ensure_ascii=False)
                    + (f" …({more} more)" if more > 0 else "")
                )

            return piece(a), piece(b)
        return json.dumps(a, ensure_ascii=False), json.dumps(b, ensure_ascii=False)
    return (
        _cut(B.canonical_json(mask_strings(expected)), 300),
        _cut(B.canonical_json(mask_strings(actual)), 300),
    )


def _masked_report(report: ReplayReport) -> dict[str, Any]:
    data = report.as_dict()
    divergence = data.get("divergence")
    if divergence:
        stream = divergence["stream"]
        from koboi_cli.api import mask_strings

        for key in ("expected", "actual"):
            if divergence[key] is not None:
                divergence[key] = _mask(divergence[key], stream)
        for key in ("expected_value", "actual_value"):
            divergence[key] = mask_strings(divergence[key])
    return data


# -- running a bundle's config ------------------------------------------------------------


def bundle_config(bundle: B.Bundle, path: Path, *, cache_mode: str | None = None) -> AgentConfig:
    """The bundle's config, loaded as a config file in the working directory would be.

    ``${VAR}`` references take their values from the environment (and ``.env``);
    an unset one is an error naming it, as for any config. ``cache_mode``, when
    given, is the response cache mode it is validated (and run) for, as
    ``koboi run CONFIG --cache-mode`` does.
    """
    from koboi.config import load_env_files, validate_config
    from koboi_cli.api import get_host
    from koboi_replay.config_text import parse_yaml

    label = f"{path} ({B.CONFIG})"
    raw = parse_yaml(bundle.config_text, label)
    base_dir = Path.cwd()
    load_env_files(base_dir)
    return validate_config(
        raw,
        get_host().catalog(),
        source=Path(label),
        base_dir=base_dir,
        cache_mode=cache_mode,
    )


def run_config_of(bundle: B.Bundle, path: Path, options: Mapping[str, Any], mode: Any) -> int:
    from koboi_cli.api import err, run_config

    cache_mode = str(mode) if mode is not None else None
    config = bundle_config(bundle, path, cache_mode=cache_mode)
    cache = bundle.records(B.CACHE)
    prepare = None
    if cache and mode in ("replay", "cache"):

        async def seed(store: Store) -> None:
            added = await seed_cache(store, cache)
            err(f"seeded the response cache with {added} answer(s) from {path}", prefix="note")

        prepare = seed
    return run_config(
        config,
        options.get("message"),
        as_json=bool(options.get("as_json")),
        session_id=options.get("session"),
        assume_yes=bool(options.get("assume_yes")),
        resume=options.get("resume"),
        prepare=prepare,
        cache_mode=cache_mode,
    )


async def seed_cache(store: Store, entries: list[dict[str, Any]]) -> int:
    """Put a bundle's cache entries into ``store``'s response cache; an entry already
    there is kept."""
    from koboi.store import cache_of

    cache = cache_of(store, f"seeding the response cache from a bundle's {B.CACHE}")
    added = 0
    for item in entries:
        key, entry = item.get("key"), item.get("entry")
        if not isinstance(key, str) or not isinstance(entry, dict):
            raise ReplayError(f"{B.CACHE}: every line needs a key and an entry")
        if await cache.cache_get(key) is None:
            await cache.cache_put(key, entry)
            added += 1
    return added
