"""Capture → offline replay: run an agent, freeze its session into a portable bundle
(config as written, every event, the model's answers, tool results, versions, a
checksum), then replay the bundle with no model and no network and compare what it
journals with the recording, event by event.

The command-line equivalent: koboi capture last -o run.koboi, then
koboi run run.koboi --replay-mode replay.

    python examples/36_capture_replay.py
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import anyio

from koboi import KoboiAgent
from koboi.plugins import default_host
from koboi_replay import capture_session, read_bundle, replay_bundle

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "replay_demo.yaml"


async def main(directory: Path) -> None:
    config = directory / CONFIG.name
    shutil.copy(CONFIG, config)
    # A durable store of its own: a capture reads the session back from it.
    async with KoboiAgent.from_config(config) as agent:
        result = await agent.run("What is 6 * 7?")
        print(f"ran: {result.output}")
        captured = await capture_session(
            agent.store, result.session_id, config_path=config, host=default_host()
        )
    bundle_path = directory / "run.koboi"
    size = captured.bundle.write(bundle_path)
    print(f"captured {result.session_id} into {bundle_path.name} ({size} bytes)")

    report = await replay_bundle(read_bundle(bundle_path), base_dir=directory)
    print("replay: identical" if report.identical else f"replay diverged: {report.divergence}")
    if not report.identical:
        raise SystemExit(1)


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        anyio.run(main, Path(tmp))
