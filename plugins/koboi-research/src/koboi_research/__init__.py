"""koboi-research: deep research as a runner (``agent.runner: deep_research``).

Plan sub-questions, search, fetch, extract quotes, loop until every
sub-question has a source (or the budget ends), and write a report whose every
claim cites a fetched source (URL and quote). Importing this package costs
nothing: every module is imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from koboi_research._version import __version__
    from koboi_research.config import ResearchSection
    from koboi_research.runner import DeepResearch

__all__ = ["DeepResearch", "ResearchSection", "__version__"]

_LAZY = {
    "__version__": "koboi_research._version",
    "ResearchSection": "koboi_research.config",
    "DeepResearch": "koboi_research.runner",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
