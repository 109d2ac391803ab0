"""Play (or resume) the scripted long session in a process of its own.

    python run_session.py STORE_URL STRATEGY TURNS WINDOW start|resume [PAUSE_AT MARKER]

With PAUSE_AT, the model writes MARKER and sleeps when it is asked for that turn, so
the test can SIGKILL the process in the middle of a model call. Prints the run's
outcome as JSON.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from conftest import load_testkit  # noqa: E402


async def main() -> int:
    import koboi_context.plugin
    import koboi_store_sql.plugin
    from koboi import KoboiAgent, PluginHost

    url, strategy, turns, window, mode = sys.argv[1:6]
    pause_at = int(sys.argv[6]) if len(sys.argv) > 6 else None
    marker = Path(sys.argv[7]) if len(sys.argv) > 7 else None
    testkit = load_testkit()
    host = PluginHost(load_entry_points=False, strict=True)
    host.add_plugin(koboi_store_sql.plugin, "store-sql", dist="koboi-store-sql")
    host.add_plugin(koboi_context.plugin, "context", dist="koboi-context")
    host.add_plugin(testkit.PLUGIN, "testkit", dist="koboi-context-tests")

    class Pausing(testkit.WindowedModel):  # type: ignore[misc,name-defined]
        async def _answer(self, request):  # type: ignore[no-untyped-def]
            users = [m for m in request.messages if m.role == "user"]
            if pause_at is not None and users and users[-1].content.startswith(f"Turn {pause_at}:"):
                assert marker is not None
                marker.write_text("paused", encoding="utf-8")
                await anyio.sleep(3600)
            return await super()._answer(request)

    config = testkit.session_config(strategy, turns=int(turns), window=int(window))
    config["store"] = {"url": url}
    model = Pausing(int(window))
    async with KoboiAgent.from_dict(config, host=host, provider=model) as agent:
        if mode == "start":
            result = await agent.run(testkit.turn_text(1), session_id="long")
        else:
            result = await agent.resume_run("long")
    print(json.dumps({"outcome": result.outcome, "error": result.error, "output": result.output}))
    return 0 if result.outcome == "completed" else 1


if __name__ == "__main__":
    sys.exit(anyio.run(main))
