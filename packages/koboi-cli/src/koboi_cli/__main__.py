"""``python -m koboi_cli``: the same as the ``koboi`` script."""

from __future__ import annotations

from koboi_cli.app import main

if __name__ == "__main__":
    main()
