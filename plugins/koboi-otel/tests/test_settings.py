"""The section's errors are one line that says what to fix; contents are masked and cut."""

from __future__ import annotations

import pytest
from otel_kit import CANARY

from koboi.errors import KoboiError
from koboi_otel.content import CUT, masked_json
from koboi_otel.exporting import exporter_choice, protocol_choice
from koboi_otel.settings import TelemetrySettings


def test_an_endpoint_must_be_a_url() -> None:
    with pytest.raises(ValueError, match="write http://host:4318"):
        TelemetrySettings(endpoint="collector:4318")
    assert TelemetrySettings(endpoint="http://c:4318/").endpoint == "http://c:4318"


def test_the_variables_fill_what_the_section_leaves(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    assert exporter_choice(None, "OTEL_TRACES_EXPORTER") == "console"
    assert exporter_choice("none", "OTEL_TRACES_EXPORTER") == "none"  # the section wins
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "zipkin")
    with pytest.raises(KoboiError, match="use otlp, console or none"):
        exporter_choice(None, "OTEL_TRACES_EXPORTER")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    assert protocol_choice(TelemetrySettings(), "traces") == "grpc"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json")
    with pytest.raises(KoboiError, match="http/protobuf or grpc"):
        protocol_choice(TelemetrySettings(), "traces")


def test_sdk_disabled_turns_the_section_off(monkeypatch: pytest.MonkeyPatch) -> None:
    assert TelemetrySettings().active({})
    assert not TelemetrySettings().active({"OTEL_SDK_DISABLED": "true"})
    assert not TelemetrySettings(enabled=False).active({})


def test_contents_are_masked_then_cut() -> None:
    shown = masked_json({"task": f"deploy with {CANARY}", "notes": "x" * 500}, 120)
    assert CANARY not in shown and "deploy with" in shown
    assert len(shown) == 120 and shown.endswith(CUT)
