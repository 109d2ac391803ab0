"""Where the CLI gets its plugin host.

The host is the kernel's: :func:`koboi.plugins.default_host`. A test or an
application that wants the CLI to use a host of its own makes it the default
with :func:`koboi.plugins.use_host` — every command, and every agent a command
builds, then uses it.
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
    from koboi.plugins import PluginHost, default_host, injected_host, strict_from_env

    chosen = injected_host()
    if chosen is not None:
        return chosen
    if tolerant and strict_from_env():
        host = PluginHost(strict=False)
        host.load()
        return host
    return default_host()
