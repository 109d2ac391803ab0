"""Documents from a real S3 API served on loopback (moto's standalone server)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

import koboi_rag.plugin
import koboi_rag_s3.plugin
from koboi import PluginHost
from koboi_rag.config import RagSettings
from koboi_rag.engine import RagEngine
from koboi_rag.index import SQLiteIndex

pytestmark = pytest.mark.slow


@pytest.fixture
def s3_url(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


def test_objects_under_a_prefix_are_indexed_and_follow_the_bucket(
    tmp_path: Path, s3_url: str
) -> None:
    import boto3

    s3 = boto3.client("s3", endpoint_url=s3_url)
    s3.create_bucket(Bucket="manuals")
    s3.put_object(
        Bucket="manuals", Key="widgets/refunds.txt", Body=b"Refunds are paid within 30 days."
    )
    s3.put_object(Bucket="manuals", Key="widgets/shipping.txt", Body=b"Boxes ship on Mondays.")
    s3.put_object(Bucket="manuals", Key="widgets/big.txt", Body=b"x" * 2_000_001)
    s3.put_object(Bucket="manuals", Key="other/ignored.txt", Body=b"Refunds elsewhere.")
    host = PluginHost(load_entry_points=False, strict=True)
    host.add_plugin(koboi_rag.plugin, "rag", dist="koboi-rag")
    host.add_plugin(koboi_rag_s3.plugin, "rag-s3", dist="koboi-rag-s3")
    settings = RagSettings(
        documents=[
            {"source": "s3", "bucket": "manuals", "prefix": "widgets/", "endpoint_url": s3_url}
        ],
        retriever="bm25",
        top_k=1,
        max_document_size_mb=2,
    )
    engine = RagEngine(settings, SQLiteIndex(tmp_path / "i.db"), host=host, base_dir=tmp_path)

    async def go() -> None:
        first = await engine.ingest()
        assert first.added == 2
        assert [f["document"] for f in first.failed] == ["s3://manuals/widgets/big.txt"]
        assert "over rag.max_document_size_mb" in first.failed[0]["error"]
        hit = (await engine.search("when are refunds paid")).results[0]
        assert hit.source == "s3://manuals/widgets/refunds.txt"
        again = await engine.ingest()
        assert again.unchanged == 2  # same ETags: nothing downloaded again
        s3.delete_object(Bucket="manuals", Key="widgets/refunds.txt")
        third = await engine.ingest()
        assert third.deleted == 1
        assert (await engine.stats())["documents"] == 1

    anyio.run(go)


def test_an_unreachable_bucket_is_one_line_and_deletes_nothing(tmp_path: Path, s3_url: str) -> None:
    host = PluginHost(load_entry_points=False, strict=True)
    host.add_plugin(koboi_rag.plugin, "rag", dist="koboi-rag")
    host.add_plugin(koboi_rag_s3.plugin, "rag-s3", dist="koboi-rag-s3")
    settings = RagSettings(documents=["s3://no-such-bucket/docs/"], retriever="bm25")
    engine = RagEngine(settings, SQLiteIndex(tmp_path / "i.db"), host=host, base_dir=tmp_path)
    import os

    os.environ["AWS_ENDPOINT_URL"] = s3_url
    try:
        report = anyio.run(engine.ingest)
    finally:
        del os.environ["AWS_ENDPOINT_URL"]
    assert report.failed and "cannot list the bucket: NoSuchBucket" in report.failed[0]["error"]
