"""Where the CLI gets its plugin host. Tests replace :func:`get_host`.

Every command asks for the host through ``koboi_cli.host.get_host()`` at call
time (never ``from koboi_cli.host import get_host``), so that monkeypatching
this one function injects a host everywhere.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from koboi.plugins import PluginHost


def get_host(*, tolerant: bool = False) -> PluginHost:
    """The plugin host, with its plugins loaded.

    :param tolerant: the caller must keep working when a plugin is broken
        (``koboi plugins``, ``--version``, discovering plugin commands): broken
        plugins are listed with their reason even under ``KOBOI_STRICT_PLUGINS=1``.
        Otherwise the process-wide default host is used, strict or not as the
        environment says.
    """
    from koboi.plugins import PluginHost, default_host, strict_from_env

    if tolerant and strict_from_env():
        host = PluginHost(strict=False)
        host.load()
        return host
    return default_host()
