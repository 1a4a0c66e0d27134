"""What every invariant reports: one breach, with what shows it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Violation:
    """One breach of an invariant, with what shows it (``offset``: the record that shows it, if any)."""

    invariant: str
    detail: str
    key: str | None = None
    offset: int | None = None

    def __str__(self) -> str:
        at = "" if self.offset is None else f" @ {self.offset}"
        where = f" [{self.key}{at}]" if self.key else at
        return f"{self.invariant}{where}: {self.detail}"
