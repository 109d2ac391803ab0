"""koboi-replay: capture a session into a portable bundle and replay it offline, byte-identical.

Library use::

    from koboi_replay import read_bundle, replay_bundle

    report = await replay_bundle(read_bundle("run.koboi"))
    assert report.identical, report.divergence

Names are imported on first use, so loading the plugin imports none of this.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from koboi_replay._version import __version__
    from koboi_replay.bundle import FORMAT_VERSION, Bundle, parse_bundle, read_bundle
    from koboi_replay.capture import Captured, capture_session, export_workflow
    from koboi_replay.errors import BundleError, CaptureError, ReplayError, WorkflowError
    from koboi_replay.normalise import Normaliser
    from koboi_replay.replayer import replay_bundle
    from koboi_replay.report import Divergence, ReplayReport

_LAZY = {
    "__version__": "koboi_replay._version",
    "FORMAT_VERSION": "koboi_replay.bundle",
    "Bundle": "koboi_replay.bundle",
    "parse_bundle": "koboi_replay.bundle",
    "read_bundle": "koboi_replay.bundle",
    "Captured": "koboi_replay.capture",
    "capture_session": "koboi_replay.capture",
    "export_workflow": "koboi_replay.capture",
    "BundleError": "koboi_replay.errors",
    "CaptureError": "koboi_replay.errors",
    "ReplayError": "koboi_replay.errors",
    "WorkflowError": "koboi_replay.errors",
    "Normaliser": "koboi_replay.normalise",
    "Divergence": "koboi_replay.report",
    "ReplayReport": "koboi_replay.report",
    "replay_bundle": "koboi_replay.replayer",
}

__all__ = [
    "FORMAT_VERSION",
    "Bundle",
    "BundleError",
    "CaptureError",
    "Captured",
    "Divergence",
    "Normaliser",
    "ReplayError",
    "ReplayReport",
    "WorkflowError",
    "__version__",
    "capture_session",
    "export_workflow",
    "parse_bundle",
    "read_bundle",
    "replay_bundle",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
