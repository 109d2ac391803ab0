"""The ``tools_web`` section's allow-list: entries validated and normalized as the guard compares them."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from koboi_tools_web.config import WebSettings


def test_allow_list_entries_are_validated_and_normalized() -> None:
    settings = WebSettings(
        allow_hosts=["Wiki.Corp.", "*.Lab.Corp", "[::1]", "127.0.0.1", "bücher.example"],
        allow_networks=["10.0.0.0/8", "fd00::/8"],
    )
    assert settings.allow_hosts == [
        "wiki.corp",
        "*.lab.corp",
        "::1",
        "127.0.0.1",
        "xn--bcher-kva.example",
    ]


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("allow_networks", ["10.0.0.1/8"], "not a CIDR network"),
        ("allow_networks", ["intranet"], "not a CIDR network"),
        ("allow_hosts", ["a..b"], "not a host name"),
        ("allow_hosts", ["*"], "not a host name"),
        ("allow_hosts", ["a.*.b"], "not a host name"),
    ],
)
def test_bad_allow_list_entries_are_config_errors(
    field: str, value: list[str], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        WebSettings.model_validate({field: value})
