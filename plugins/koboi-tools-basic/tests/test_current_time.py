from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from koboi.errors import ToolError
from koboi.sandbox import PassthroughSandbox
from koboi.tools import Risk, ToolContext
from koboi_tools_basic.tools import current_time


def context() -> ToolContext:
    return ToolContext(session_id="s", call_id="c", step=1, sandbox=PassthroughSandbox())


async def now_in(arguments: dict[str, str]) -> datetime:
    before = datetime.now(UTC).replace(microsecond=0)
    result = await current_time(current_time.parse_arguments(arguments), context())
    after = datetime.now(UTC)
    stamp = datetime.fromisoformat(result.content)
    assert before <= stamp <= after
    return stamp


def test_metadata() -> None:
    assert current_time.risk is Risk.SAFE
    assert current_time.idempotent is True
    assert current_time.spec().parameters["properties"]["timezone"]["default"] == "UTC"


@pytest.mark.anyio
async def test_defaults_to_utc() -> None:
    stamp = await now_in({})
    assert stamp.utcoffset() == timedelta(0)


@pytest.mark.anyio
@pytest.mark.parametrize("zone", ["Europe/Paris", "America/New_York", "Asia/Kolkata"])
async def test_uses_the_zone_offset(zone: str) -> None:
    stamp = await now_in({"timezone": zone})
    assert stamp.utcoffset() == ZoneInfo(zone).utcoffset(stamp.replace(tzinfo=None))


@pytest.mark.anyio
async def test_half_hour_zone_is_iso_8601() -> None:
    stamp = await now_in({"timezone": "Asia/Kolkata"})
    assert stamp.isoformat().endswith("+05:30")


@pytest.mark.anyio
@pytest.mark.parametrize("zone", ["Mars/Olympus_Mons", "../../etc/passwd", "/etc/localtime", ""])
async def test_unknown_zone_is_a_tool_error_naming_it(zone: str) -> None:
    with pytest.raises(ToolError, match="unknown time zone") as info:
        await current_time(current_time.parse_arguments({"timezone": zone}), context())
    assert repr(zone) in str(info.value)
