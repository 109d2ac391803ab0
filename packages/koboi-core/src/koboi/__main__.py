"""``python -m koboi``: the ``koboi`` command, when koboi-cli is installed.

The kernel does not depend on the CLI; without it this says what to install.
"""

from __future__ import annotations

import sys


def main() -> None:
    try:
        from koboi_cli.app import main as cli_main
    except ImportError:
        sys.stderr.write(
            "error: python -m koboi needs the koboi command (install koboi-cli, or koboi-agent)\n"
        )
        raise SystemExit(2) from None
    cli_main()


if __name__ == "__main__":
    main()
