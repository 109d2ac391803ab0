"""Documents from an S3-compatible object store.

An entry is ``s3://bucket/prefix/`` (credentials, region and endpoint from boto3's
usual chain: ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``,
``AWS_ENDPOINT_URL``, profiles…) or a mapping::

    - source: s3
      bucket: manuals
      prefix: widgets/
      endpoint_url: http://minio.internal:9000   # MinIO, R2, Ceph...
      region: eu-west-1
      access_key_id: ${S3_KEY}
      secret_access_key: ${S3_SECRET}
      suffixes: [.pdf, .md]                       # only these (default: every object)

Every object under the prefix is a document keyed ``s3://bucket/key``, its ETag is
its version (an unchanged object is not downloaded again), its size is checked
against ``rag.max_document_size_mb`` before downloading. The listing is complete
only when every page was read; an object deleted from the bucket then leaves the
index.
"""

from __future__ import annotations

import mimetypes
from collections.abc import AsyncIterator, Mapping
from typing import Any

import anyio.to_thread

from koboi.errors import KoboiError
from koboi_rag.hookspecs import ParseError, SourceDocument

_OPTIONS = {
    "source",
    "bucket",
    "prefix",
    "endpoint_url",
    "region",
    "access_key_id",
    "secret_access_key",
    "session_token",
    "suffixes",
    "label",
}


class S3Source:
    def __init__(self, bucket: str, prefix: str, options: Mapping[str, Any], label: str) -> None:
        self.bucket, self.prefix = bucket, prefix
        self.options = options
        self.label = label
        self.suffixes = tuple(s.lower() for s in options.get("suffixes") or ())
        self.complete = False
        self._client: Any = None

    def describe(self) -> str:
        return self.label

    def client(self) -> Any:
        if self._client is None:
            import boto3  # type: ignore[import-untyped]
            from botocore.config import Config  # type: ignore[import-untyped]

            secret = self.options.get("secret_access_key")
            self._client = boto3.client(
                "s3",
                endpoint_url=self.options.get("endpoint_url") or None,
                region_name=self.options.get("region") or None,
                aws_access_key_id=self.options.get("access_key_id") or None,
                aws_secret_access_key=str(secret) if secret else None,
                aws_session_token=self.options.get("session_token") or None,
                config=Config(retries={"max_attempts": 3, "mode": "standard"}),
            )
        return self._client

    def _list(self) -> list[dict[str, Any]]:
        from botocore.exceptions import BotoCoreError, ClientError  # type: ignore[import-untyped]

        found: list[dict[str, Any]] = []
        try:
            pages = (
                self.client()
                .get_paginator("list_objects_v2")
                .paginate(Bucket=self.bucket, Prefix=self.prefix)
            )
            for page in pages:
                found.extend(page.get("Contents") or ())
        except (BotoCoreError, ClientError) as exc:
            raise KoboiError(f"{self.label}: cannot list the bucket: {_reason(exc)}") from None
        return found

    def _read(self, key: str, limit: int) -> bytes:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            body = self.client().get_object(Bucket=self.bucket, Key=key)["Body"]
            data = body.read(limit + 1)
            body.close()
        except (BotoCoreError, ClientError) as exc:
            raise ParseError(f"cannot download the object: {_reason(exc)}") from None
        if len(data) > limit:
            raise ParseError(f"more than {limit / 1e6:g} MB (rag.max_document_size_mb)")
        return bytes(data)

    async def documents(self) -> AsyncIterator[SourceDocument]:
        objects = await anyio.to_thread.run_sync(self._list)
        limit = int(self.options.get("_max_bytes", 10_000_000))
        for item in objects:
            key = str(item["Key"])
            if key.endswith("/") or (self.suffixes and not key.lower().endswith(self.suffixes)):
                continue

            async def read(key: str = key) -> bytes:
                return await anyio.to_thread.run_sync(self._read, key, limit)

            yield SourceDocument(
                key=f"s3://{self.bucket}/{key}",
                read=read,
                size=int(item.get("Size", 0)),
                media_type=mimetypes.guess_type(key)[0] or "",
                version=str(item.get("ETag", "")).strip('"'),
                metadata={"bucket": self.bucket, "object": key},
            )
        self.complete = True


def _reason(exc: Exception) -> str:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        error = response.get("Error") or {}
        code, message = error.get("Code", ""), error.get("Message", "")
        if code or message:
            return f"{code} {message}".strip()
    return str(exc).splitlines()[0][:200]


def create_s3(entry: Any, context: Any) -> S3Source:
    if isinstance(entry, str):
        rest = entry.split("://", 1)[1]
        bucket, _, prefix = rest.partition("/")
        options: dict[str, Any] = {}
        label = entry
    else:
        unknown = sorted(set(entry) - _OPTIONS)
        if unknown:
            raise KoboiError(
                f"rag.documents (s3): unknown key(s) {', '.join(unknown)}; it takes {', '.join(sorted(_OPTIONS))}"
            )
        options = dict(entry)
        bucket, prefix = str(entry.get("bucket") or ""), str(entry.get("prefix") or "")
        label = str(entry.get("label") or f"s3://{bucket}/{prefix}")
    if not bucket:
        raise KoboiError("rag.documents (s3): name the bucket (s3://bucket/prefix)")
    options["_max_bytes"] = context.max_bytes
    return S3Source(bucket, prefix, options, label)
