"""File tools for koboi, confined to the session's working directory.

``read_file``, ``write_file``, ``edit_file``, ``apply_patch``, ``list_dir``,
``glob``, ``grep``, ``delete_file`` and ``move_file``: every path is resolved
beneath the working directory in the kernel (see :mod:`koboi_confine.paths`),
and every operation works on directory descriptors, never following a symlink.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from koboi_tools_fs._version import __version__
    from koboi_tools_fs.config import FsSettings

__all__ = ["FsSettings", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from koboi_tools_fs._version import __version__

        return __version__
    # Lazy: the plugin host imports this package at start-up, and `koboi --help`
    # must not pay for pydantic.
    if name == "FsSettings":
        from koboi_tools_fs.config import FsSettings

        return FsSettings
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
