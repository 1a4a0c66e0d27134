"""``python -m statechan`` and the ``statechan`` script.

A command that needs an optional extra that is not installed exits 2 with one line naming the
extra to install (``statechan.extras``), not an import error's stack trace."""

from __future__ import annotations

import sys


def _missing(exc: ModuleNotFoundError) -> None:
    from statechan.extras import missing_extra_message

    message = missing_extra_message(exc.name or "", sys.argv[1:])
    if message is None:
        raise exc
    sys.stderr.write(message + "\n")
    raise SystemExit(2) from None


def main() -> None:
    try:
        from statechan.cli import main as cli_main
    except ModuleNotFoundError as exc:
        _missing(exc)
        raise
    try:
        cli_main()
    except ModuleNotFoundError as exc:
        _missing(exc)
        raise


if __name__ == "__main__":
    main()
