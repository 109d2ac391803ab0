"""``koboi capture``, ``koboi export``, ``koboi import`` and ``koboi workflows``.

Imported only when one of these commands runs. Every command that reads a
store finds it by the kernel's one rule (the config's ``store.url``, else
``KOBOI_STORE``, else the default store in the working directory), as
``koboi sessions`` does.
"""

from __future__ import annotations

import json
import os
import sys
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import anyio
import typer

from koboi_replay import bundle as B
from koboi_replay.errors import CaptureError, WorkflowError

if TYPE_CHECKING:
    from koboi.store import Store
    from koboi_cli.api import StoreTarget
    from koboi_replay.capture import Captured
    from koboi_replay.workflows import StoredWorkflow

OutputOpt = Annotated[
    Path,
    typer.Option("--output", "-o", help="The bundle file to write.", show_default=False),
]
ForceOpt = Annotated[bool, typer.Option("--force", help="Replace the output file if it exists.")]
StoreConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--config",
        help="A config whose store to use. Without one: KOBOI_STORE, else the default store "
        "in the working directory.",
        show_default=False,
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")]


def _plain(help: str) -> typer.Typer:
    return typer.Typer(help=help, add_completion=False, rich_markup_mode=None)


def _write_bundle(captured: Captured, output: Path, *, force: bool, what: str) -> None:
    from koboi_cli.api import err, write

    for note in captured.notes:
        err(note, prefix="warning")
    size = captured.bundle.write(output, overwrite=force)
    write(
        sys.stdout,
        f"{what} into {output} ({_size(size)}, checksum sha256:{captured.bundle.checksum[:16]})\n",
    )


def _size(size: int) -> str:
    return f"{size} bytes" if size < 10_240 else f"{size // 1024} KiB"


# -- koboi capture ------------------------------------------------------------------------

capture_app = _plain("Freeze a finished or interrupted session into a bundle.")


@capture_app.command()
def capture(
    session: Annotated[
        str,
        typer.Argument(metavar="SESSION|last", help="The session: full id, unique prefix or last."),
    ],
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="The bundle file to write (default: <session id>.koboi here).",
            show_default=False,
        ),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            help="The config the session ran with (its store is read). Without one: the store "
            "is KOBOI_STORE or the default store, and the config is the YAML file in the "
            "working directory (or ./configs) whose hash the session recorded.",
            show_default=False,
        ),
    ] = None,
    with_cache: Annotated[
        bool,
        typer.Option(
            "--with-cache", help="Also put the response-cache entries of the session's answers in."
        ),
    ] = False,
    force: ForceOpt = False,
) -> None:
    """Freeze a finished or interrupted session into one portable bundle file.

    The bundle holds the config as written (${VAR} references kept, literal
    secrets replaced), the full event log, the model answers, the tool results,
    the approvals, the audit records, the versions of koboi and every plugin,
    and a checksum. Replay it anywhere, offline:
    koboi run RUN.koboi --replay-mode replay
    """
    from koboi_cli.api import err, get_host
    from koboi_replay.capture import capture_session

    if output is not None and output.exists() and not force:
        raise CaptureError(f"{output} already exists; choose another name or pass --force")
    target = _capture_store(config)

    async def go() -> Captured:
        from koboi_cli.api import open_store

        async with open_store(target) as store:
            chosen = config or await _find_config(store, session)
            captured = await capture_session(
                store, session, config_path=chosen, host=get_host(), with_cache=with_cache
            )
            if config is None:
                captured.notes.insert(0, f"the session's config is {chosen} (its hash matches)")
            return captured

    captured = anyio.run(go)
    if config is None and captured.notes:
        err(captured.notes.pop(0), prefix="note")
    info = captured.session
    contents = captured.bundle.manifest.get("contents", {})
    runs = contents.get("runs", 0)
    what = (
        f"captured session {info.id if info else session} ({runs} run{'' if runs == 1 else 's'}, "
        f"{contents.get('events', 0)} events, {contents.get('model_calls', 0)} model calls, "
        f"{contents.get('tool_results', 0)} tool results)"
    )
    if output is None:
        output = Path(f"{info.id if info else session}.koboi")
        if output.exists() and not force:
            raise CaptureError(f"{output} already exists; name another with -o or pass --force")
    _write_bundle(captured, output, force=force, what=what)


def _capture_store(config: Path | None) -> StoreTarget:
    """The store of ``config``, found without needing the secrets the config refers to."""
    from koboi.config import read_with_extends, resolve_store
    from koboi_cli.api import StoreTarget, get_host, store_target
    from koboi_replay.config_text import portable_config, referenced_variables

    if config is None:
        return store_target(None)
    raw = read_with_extends(config)
    unset = [
        name
        for name, has_default in referenced_variables(raw.get("store")).items()
        if not has_default and name not in os.environ
    ]
    if unset:
        raise CaptureError(
            f"{config}: store.url needs {', '.join(unset)}, which is not set; set it to the "
            "value the session ran with"
        )
    catalog = get_host().catalog()
    loaded = portable_config(
        raw, catalog, base_dir=config.resolve().parent, env=os.environ, label=str(config)
    )
    return StoreTarget(*resolve_store(loaded, catalog))


async def _find_config(store: Store, ref: str) -> Path:
    from koboi_replay.capture import find_config, session_config_hashes

    info = await store.resolve_session(ref)
    hashes = sorted(set(session_config_hashes(await store.read(info.id)))) or [info.config_hash]
    directories = [Path.cwd(), Path.cwd() / "configs"]
    found = find_config(hashes[0], directories) if len(hashes) == 1 else []
    if len(found) == 1:
        return found[0]
    where = " or ".join(str(d) for d in directories)
    if not found:
        raise CaptureError(
            f"no config in {where} has the hash session {info.id} recorded ({', '.join(hashes)}); "
            "pass the config it ran with: --config CONFIG"
        )
    names = ", ".join(str(p) for p in found)
    raise CaptureError(f"several configs match session {info.id}: {names}; pick one with --config")


# -- koboi export ---------------------------------------------------------------------------

export_app = _plain("Export a config as a reusable workflow bundle.")


@export_app.command()
def export(
    config: Annotated[
        Path, typer.Argument(metavar="CONFIG", help="The config to export.", show_default=False)
    ],
    output: OutputOpt,
    force: ForceOpt = False,
) -> None:
    """Export a config (with what it extends) as a workflow bundle: no secrets, versions, checksum.

    Store it with koboi import FLOW.koboi, or run it with koboi run FLOW.koboi -m MESSAGE.
    """
    from koboi_cli.api import get_host
    from koboi_replay.capture import export_workflow

    if output.exists() and not force:
        raise CaptureError(f"{output} already exists; choose another name or pass --force")
    captured = export_workflow(config, get_host())
    _write_bundle(captured, output, force=force, what=f"exported {config} as a workflow")


# -- koboi import ---------------------------------------------------------------------------

import_app = _plain("Store a workflow bundle under a name.")


@import_app.command(name="import")
def import_(
    path: Annotated[
        Path, typer.Argument(metavar="BUNDLE", help="A workflow bundle (koboi export).")
    ],
    name: Annotated[
        str | None,
        typer.Option("--name", help="The name to store it under (default: its agent's name)."),
    ] = None,
    config: StoreConfigOpt = None,
    replace: Annotated[
        bool, typer.Option("--replace", help="Overwrite a stored workflow of the same name.")
    ] = False,
) -> None:
    """Verify a workflow bundle and keep it in the store (see koboi workflows)."""
    from koboi_cli.api import write
    from koboi_replay.workflows import default_name, import_bundle

    bundle = B.read_bundle(path)
    target = _persistent_store(config)
    chosen = name or default_name(bundle, str(path))

    async def go() -> StoredWorkflow:
        from koboi_cli.api import open_store

        async with open_store(target) as store:
            return await import_bundle(
                store, bundle, name=chosen, source=str(path), replace=replace
            )

    stored = anyio.run(go)
    write(
        sys.stdout,
        f"imported {path} as workflow {stored.name!r} into {target.shown_url} "
        f"(checksum sha256:{stored.checksum[:16]})\n",
    )


def _persistent_store(config: Path | None) -> StoreTarget:
    from koboi_cli.api import store_target

    target = store_target(config)
    if target.is_memory:
        raise WorkflowError(
            "the store is memory://, which keeps nothing between commands; set store.url in the "
            "config or KOBOI_STORE, or install koboi-store-sql"
        )
    return target


# -- koboi workflows ------------------------------------------------------------------------

workflows_app = typer.Typer(
    help="List, show, export and delete stored workflows.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)
NameArg = Annotated[str, typer.Argument(metavar="NAME", help="The stored workflow's name.")]


def _with_store(config: Path | None, work: Any) -> Any:
    target = _persistent_store(config)

    async def go() -> Any:
        from koboi_cli.api import open_store

        async with open_store(target) as store:
            return await work(store)

    return anyio.run(go)


def _summary(workflow: StoredWorkflow) -> dict[str, Any]:
    manifest = workflow.bundle.manifest
    return {
        "name": workflow.name,
        "agent": workflow.agent,
        "imported_at": workflow.imported_at,
        "source": workflow.source,
        "checksum": workflow.checksum,
        "created_at": manifest.get("created_at"),
        "koboi_core": manifest.get("versions", {}).get("koboi-core"),
        "variables": manifest.get("config", {}).get("variables", []),
        "redacted": manifest.get("config", {}).get("redacted", []),
    }


@workflows_app.command("list")
def workflows_list(config: StoreConfigOpt = None, as_json: JsonOpt = False) -> None:
    """The stored workflows, by name."""
    from koboi_cli.api import Style, err, table, write
    from koboi_replay.workflows import list_workflows

    async def work(store: Store) -> Any:
        return await list_workflows(store)

    listed = _with_store(config, work)
    if as_json:
        rows = [
            _summary(item.workflow)
            if item.workflow is not None
            else {"name": item.name, "problem": item.problem}
            for item in listed
        ]
        write(sys.stdout, json.dumps(rows, indent=2, ensure_ascii=False) + "\n")
        return
    if not listed:
        err("no workflows are stored; import one with koboi import FLOW.koboi", prefix="note")
        return
    cells = []
    for item in listed:
        workflow = item.workflow
        if workflow is None:
            cells.append([item.name, "-", "-", "-", f"damaged: {item.problem}"])
            continue
        when = datetime.fromtimestamp(workflow.imported_at).strftime("%Y-%m-%d %H:%M")
        cells.append(
            [workflow.name, workflow.agent or "-", when, workflow.checksum[:12], workflow.source]
        )
    header = ["NAME", "AGENT", "IMPORTED", "CHECKSUM", "SOURCE"]
    write(sys.stdout, table(header, cells, Style(sys.stdout)))


@workflows_app.command("show")
def workflows_show(name: NameArg, config: StoreConfigOpt = None, as_json: JsonOpt = False) -> None:
    """A stored workflow: where it came from, its versions, and its config."""
    from koboi_cli.api import write
    from koboi_replay.workflows import get_workflow

    async def work(store: Store) -> Any:
        return await get_workflow(store, name)

    workflow = _with_store(config, work)
    summary = _summary(workflow)
    if as_json:
        summary["config"] = workflow.bundle.config_text
        summary["versions"] = workflow.bundle.manifest.get("versions", {})
        write(sys.stdout, json.dumps(summary, indent=2, ensure_ascii=False) + "\n")
        return
    imported = datetime.fromtimestamp(workflow.imported_at).strftime("%Y-%m-%d %H:%M:%S")
    lines = [
        f"workflow {workflow.name}",
        f"  agent:     {workflow.agent or '-'}",
        f"  imported:  {imported} from {workflow.source or '-'}",
        f"  created:   {summary['created_at'] or '-'} with koboi-core {summary['koboi_core'] or '?'}",
        f"  checksum:  sha256:{workflow.checksum}",
        f"  variables: {', '.join(summary['variables']) or 'none'}",
    ]
    if summary["redacted"]:
        lines.append(f"  secrets taken out: {', '.join(summary['redacted'])}")
    lines.append("  config:")
    lines += [f"    {line}" for line in workflow.bundle.config_text.splitlines()]
    write(sys.stdout, "\n".join(lines) + "\n")


@workflows_app.command("export")
def workflows_export(
    name: NameArg, output: OutputOpt, config: StoreConfigOpt = None, force: ForceOpt = False
) -> None:
    """Write a stored workflow back to a bundle file (run it with koboi run FILE -m ...)."""
    from koboi_cli.api import write
    from koboi_replay.workflows import get_workflow

    if output.exists() and not force:
        raise WorkflowError(f"{output} already exists; choose another name or pass --force")

    async def work(store: Store) -> Any:
        return await get_workflow(store, name)

    workflow = _with_store(config, work)
    size = workflow.bundle.write(output, overwrite=force)
    write(sys.stdout, f"wrote workflow {name!r} to {output} ({_size(size)})\n")


@workflows_app.command("delete")
def workflows_delete(name: NameArg, config: StoreConfigOpt = None) -> None:
    """Delete a stored workflow."""
    from koboi_cli.api import write
    from koboi_replay.workflows import delete_workflow

    async def work(store: Store) -> None:
        await delete_workflow(store, name)

    _with_store(config, work)
    write(sys.stdout, f"deleted workflow {name!r}\n")
