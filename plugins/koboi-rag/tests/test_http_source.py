"""Documents from http(s) URLs go through koboi-http's SSRF guard: a redirect to a
loopback address is refused, per document, while the allowed page is indexed."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import anyio
import pytest

from koboi_rag.engine import RagEngine
from koboi_testing.wire import Received, Reply, WireServer

pytestmark = pytest.mark.slow


def test_redirect_to_loopback_is_refused_and_the_rest_is_indexed(
    tmp_path: Path, make_engine: Callable[..., RagEngine]
) -> None:
    with WireServer() as server:
        port = server.port

        def handle(request: Received) -> Reply:
            if request.path == "/handbook.txt":
                return Reply.raw(
                    "Widgets ship on Mondays from the north depot.", content_type="text/plain"
                )
            if request.path == "/sneaky.txt":
                return Reply(
                    status=302, headers={"location": f"http://127.0.0.1:{port}/internal.txt"}
                )
            return Reply.raw("internal secrets", content_type="text/plain")

        server.handler = handle

        async def resolver(host: str, _: int) -> Sequence[str]:
            return ["127.0.0.1"] if host == "docs.test" else []

        engine = make_engine(
            documents=[
                f"http://docs.test:{port}/handbook.txt",
                f"http://docs.test:{port}/sneaky.txt",
                f"http://127.0.0.1:{port}/direct.txt",
            ],
            retriever="bm25",
            http={"allow_hosts": ["docs.test"]},
        )
        engine.extras["resolver"] = resolver

        async def go() -> tuple[object, object]:
            report = await engine.ingest()
            return report, await engine.search("when do widgets ship")

        report, outcome = anyio.run(go)
        paths = [r.path for r in server.requests]
    failed = {f["document"]: f["error"] for f in report.failed}  # type: ignore[attr-defined]
    assert "refused a redirect to http://127.0.0.1" in failed[f"http://docs.test:{port}/sneaky.txt"]
    assert "a loopback address" in failed[f"http://127.0.0.1:{port}/direct.txt"]
    assert "/internal.txt" not in paths and "/direct.txt" not in paths  # nothing was sent there
    assert outcome.results[0].source == f"http://docs.test:{port}/handbook.txt"  # type: ignore[attr-defined]
