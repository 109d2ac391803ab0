"""koboi hooks of koboi-rag-s3 (plugin id ``rag-s3``): the ``s3`` document source of
koboi-rag (``s3://bucket/prefix`` entries). boto3 is imported when a source lists."""

from __future__ import annotations

from typing import Any

from koboi.hookspecs import hookimpl


def create_s3(entry: Any, context: Any) -> Any:
    from koboi_rag_s3.source import create_s3 as make

    return make(entry, context)


@hookimpl
def koboi_rag_register_sources(register: Any) -> None:
    register(
        "s3",
        create_s3,
        schemes=("s3",),
        description="Objects under an S3 prefix (AWS S3, MinIO, R2, Ceph: any S3 API).",
    )
