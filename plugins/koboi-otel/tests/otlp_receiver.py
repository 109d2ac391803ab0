"""An OTLP receiver on loopback for tests: a real HTTP server (``/v1/traces``,
``/v1/metrics``, ``/v1/logs``) and a real gRPC server, decoding the payloads with the
``opentelemetry-proto`` package (what a collector does), nothing of ours in between."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as ProtoSpan


def value_of(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [value_of(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: value_of(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, kind) if kind else None


@dataclass
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: int
    attributes: dict[str, Any]
    status_code: int
    status_message: str
    events: list[tuple[str, dict[str, Any]]]
    scope: str
    start_ns: int
    end_ns: int

    @classmethod
    def of(cls, span: ProtoSpan, scope: str) -> ReceivedSpan:
        return cls(
            name=span.name,
            trace_id=span.trace_id.hex(),
            span_id=span.span_id.hex(),
            parent_span_id=span.parent_span_id.hex(),
            kind=span.kind,
            attributes={kv.key: value_of(kv.value) for kv in span.attributes},
            status_code=span.status.code,
            status_message=span.status.message,
            events=[
                (e.name, {kv.key: value_of(kv.value) for kv in e.attributes}) for e in span.events
            ],
            scope=scope,
            start_ns=span.start_time_unix_nano,
            end_ns=span.end_time_unix_nano,
        )


@dataclass
class Received:
    """Everything a receiver got, decoded, and the raw bytes (to search for secrets)."""

    spans: list[ReceivedSpan] = field(default_factory=list)
    metrics: list[Any] = field(default_factory=list)
    resources: list[dict[str, Any]] = field(default_factory=list)
    raw: list[bytes] = field(default_factory=list)
    #: The Authorization header of each export request (None when absent).
    authorizations: list[str | None] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add_traces(self, body: bytes) -> None:
        request = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
        with self.lock:
            self.raw.append(body)
            for resource_spans in request.resource_spans:
                self.resources.append(
                    {kv.key: value_of(kv.value) for kv in resource_spans.resource.attributes}
                )
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        self.spans.append(ReceivedSpan.of(span, scope_spans.scope.name))

    def add_metrics(self, body: bytes) -> None:
        request = metrics_service_pb2.ExportMetricsServiceRequest.FromString(body)
        with self.lock:
            self.raw.append(body)
            for resource_metrics in request.resource_metrics:
                for scope_metrics in resource_metrics.scope_metrics:
                    self.metrics.extend(scope_metrics.metrics)

    def wait_for(self, predicate: Callable[[Received], bool], timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if predicate(self):
                    return
            time.sleep(0.05)
        raise AssertionError(f"the receiver did not get what was expected: {self.spans!r}")

    def metric_points(self, name: str) -> list[tuple[dict[str, Any], Any]]:
        """``(labels, data point)`` of every point of metric ``name`` received."""
        found = []
        for metric in self.metrics:
            if metric.name != name:
                continue
            kind = metric.WhichOneof("data")
            for point in getattr(metric, kind).data_points:
                labels = {kv.key: value_of(kv.value) for kv in point.attributes}
                found.append((labels, point))
        return found


class _Handler(BaseHTTPRequestHandler):
    received: Received
    prefix: str

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length", "0"))
        body = self.rfile.read(length)
        if self.headers.get("content-type") != "application/x-protobuf":
            self.send_response(415)
            self.end_headers()
            return
        with self.received.lock:
            self.received.authorizations.append(self.headers.get("authorization"))
        if self.path == f"{self.prefix}/v1/traces":
            self.received.add_traces(body)
        elif self.path == f"{self.prefix}/v1/metrics":
            self.received.add_metrics(body)
        elif self.path != f"{self.prefix}/v1/logs":
            self.send_response(404)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return


class HTTPReceiver:
    """``with HTTPReceiver() as receiver:`` ``receiver.endpoint`` is ``http://127.0.0.1:<port>``.

    ``prefix``: the path under which it answers (``/api/public/otel``, as Langfuse does).
    """

    def __init__(self, prefix: str = "") -> None:
        self.received = Received()
        handler = type("Handler", (_Handler,), {"received": self.received, "prefix": prefix})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> HTTPReceiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


class GRPCReceiver:
    """A real gRPC OTLP receiver (the collector's TraceService and MetricsService)."""

    def __init__(self) -> None:
        import grpc
        from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

        self.received = received = Received()

        class Traces(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(self, request: Any, context: Any) -> Any:
                received.add_traces(request.SerializeToString())
                return trace_service_pb2.ExportTraceServiceResponse()

        class Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
            def Export(self, request: Any, context: Any) -> Any:
                received.add_metrics(request.SerializeToString())
                return metrics_service_pb2.ExportMetricsServiceResponse()

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), self.server)
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Metrics(), self.server)
        port = self.server.add_insecure_port("127.0.0.1:0")
        self.endpoint = f"http://127.0.0.1:{port}"

    def __enter__(self) -> GRPCReceiver:
        self.server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop(grace=None)


def spans_by_name(spans: list[ReceivedSpan]) -> Iterator[tuple[str, ReceivedSpan]]:
    for span in spans:
        yield span.name, span
