"""Logical time. Nothing in the model reads a wall clock: the caller owns the clock and moves it."""

from __future__ import annotations

from typing import Protocol


class Clock(Protocol):
    """Milliseconds since an arbitrary epoch, as the caller says."""

    def now_ms(self) -> int: ...


class ManualClock:
    """A clock that moves only when told to (the simulator's and the tests' clock)."""

    def __init__(self, start_ms: int = 0) -> None:
        if start_ms < 0:
            raise ValueError(f"start_ms must be >= 0, not {start_ms}")
        self._now = start_ms

    def now_ms(self) -> int:
        return self._now

    def advance(self, ms: int) -> int:
        """Move forward by ``ms`` (>= 0) and return the new time."""
        if ms < 0:
            raise ValueError(f"time only moves forward; advance({ms}) refused")
        self._now += ms
        return self._now

    def set(self, now_ms: int) -> None:
        if now_ms < self._now:
            raise ValueError(f"time only moves forward; set({now_ms}) is before {self._now}")
        self._now = now_ms

    def __repr__(self) -> str:
        return f"ManualClock({self._now} ms)"
