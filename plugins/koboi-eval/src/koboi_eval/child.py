"""A case run in a process of its own: ``python -m koboi_eval.child SPEC.json``.

The runner starts this for crash cases and for cases that set environment
variables. The child loads the case's eval file again (so everything the case
holds, functions too, is exactly what the file defines), builds the same agent
the runner would (koboi_eval.assembly), and:

* phase ``run``: sends the case's user messages. For a crash case it carries a
  kill switch: right after the case's kill point is committed to the journal
  it writes a marker file and blocks, so the runner can SIGKILL it there — the
  process dies with the kill point as the journal's last word.
* phase ``resume``: resumes the interrupted run from the journal (a new
  process, as after a real crash), then sends any user messages the killed
  process never got to.

At the end it writes the session's journal (and the session's working
directory) to the spec's ``result`` file for the runner to judge.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import anyio

from koboi import journal as J
from koboi.interceptors import Interceptor, RunInfo
from koboi.store import JournalEvent
from koboi_eval.dsl import KillPoint

#: How long a child blocks at its kill point waiting for the SIGKILL (the runner's
#: case timeout ends it much sooner if the kill never comes).
BLOCK_SECONDS = 3600.0


class KillSwitch(Interceptor):
    """Freezes the process right after the kill point's event is committed."""

    name = "koboi-eval-kill-switch"
    priority = 100_000

    def __init__(self, point: KillPoint, marker: Path) -> None:
        self.point = point
        self.marker = marker
        self.seen = 0

    async def on_event(self, event: JournalEvent, run: RunInfo) -> None:
        if not self.point.matches(event.type, event.data):
            return
        self.seen += 1
        if self.seen == self.point.nth:
            _freeze(self.marker, f"{event.type} {event.seq}")


def _freeze(marker: Path, where: str) -> None:
    """Say where the process stopped, then block it, event loop and all: nothing may
    happen in this process after the kill point (the runner SIGKILLs it here).

    Should the runner itself die first, the child leaves at once rather than
    sleeping on as an orphan.
    """
    parent = os.getppid()
    marker.write_text(where + "\n", encoding="utf-8")
    deadline = time.monotonic() + BLOCK_SECONDS
    while time.monotonic() < deadline:
        if os.getppid() != parent:
            os._exit(3)  # no cleanup of any kind: this process is a crash being staged
        time.sleep(0.05)


async def _child(spec: dict[str, Any]) -> None:
    from koboi.agent import KoboiAgent
    from koboi.errors import KoboiError
    from koboi_eval.assembly import (
        approver_for,
        build_sandbox,
        case_config,
        plugin_host,
        seed_files,
    )
    from koboi_eval.loader import load_file

    cases = {c.name: c for c in load_file(Path(spec["file"]))}
    case = cases.get(spec["case"])
    if case is None:
        raise KoboiError(f"{spec['file']} no longer defines the case {spec['case']!r}")
    host = plugin_host()
    catalog = host.catalog()
    config = case_config(
        case,
        mock=bool(spec["mock"]),
        store_url=spec["store_url"],
        workdir=Path(spec["workdir"]),
        catalog=catalog,
    )
    sandbox = build_sandbox(config, catalog)
    session_id = spec["session_id"]
    workdir = sandbox.workdir_for(session_id)
    phase = spec["phase"]
    interceptors = []
    if phase == "run":
        seed_files(workdir, case.files)
        if case.crash is not None:
            interceptors.append(KillSwitch(case.crash, Path(spec["marker"])))
    agent = KoboiAgent(
        config,
        host=host,
        approver=approver_for(case),
        sandbox=sandbox,
        interceptors=interceptors,
    )
    async with agent:
        pending = list(case.inputs)
        if phase == "resume":
            await agent.resume_run(session_id)
            journal = await agent.store.read(session_id)
            started = sum(1 for e in journal if e.type == J.RUN_STARTED)
            pending = pending[started:]
        for message in pending:
            await agent.run(message, session_id=session_id)
        events = await agent.store.read(session_id)
    result = {
        "journal": [
            {"seq": e.seq, "type": e.type, "data": dict(e.data), "at": e.at} for e in events
        ],
        "workdir": str(workdir) if workdir is not None else None,
    }
    _write_json(Path(spec["result"]), result)


def _write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data), encoding="utf-8")


def main(argv: list[str]) -> int:
    from koboi.errors import KoboiError, describe_error

    if len(argv) != 2:
        print("usage: python -m koboi_eval.child SPEC.json", file=sys.stderr)
        return 2
    spec = json.loads(Path(argv[1]).read_text(encoding="utf-8"))
    try:
        anyio.run(_child, spec)
    except KoboiError as exc:
        print(f"error: {describe_error(exc)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
