"""koboi command line: the ``koboi`` script (``koboi_cli.app:main``).

Importing this package is cheap: the kernel, the plugins and the agent loop are
imported only by the commands that need them.
"""

from __future__ import annotations

# Not importlib.metadata (tens of milliseconds at startup): the file hatchling reads.
from koboi_cli._version import __version__

__all__ = ["__version__"]
