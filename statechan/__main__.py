"""``python -m statechan`` and the ``statechan`` script."""

from __future__ import annotations

import sys


def main() -> None:
    try:
        from statechan.cli import main as cli_main
    except ModuleNotFoundError as exc:
        if exc.name in ("typer", "rich"):
            sys.stderr.write(
                f"statechan: the command line needs {exc.name}; install it with: pip install 'statechan[cli]'\n"
            )
            raise SystemExit(2) from None
        raise
    cli_main()


if __name__ == "__main__":
    main()
