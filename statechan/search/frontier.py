"""A breadth-first level's states, past the first few thousand, on disk: written as they are found,
read back in the same order when the level is expanded, so the search holds a bounded number of
states whatever the level's size."""

from __future__ import annotations

import contextlib
import os
import pickle
import struct
import zlib
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

CHUNK = 256
"""States pickled together: states of one level share records, which one pickle writes once."""

_LENGTH = struct.Struct("<Q")


KEEP = 20_000
"""States of a level kept as they are (not pickled) before the rest go to disk: pickling a state
and reading it back costs about as much as expanding it, so small levels stay in memory."""


class LevelFile:
    """One level's queued items (each a tuple of picklable values), appended in order and read
    back in that order: the first ``keep`` held as they are, the rest pickled a chunk at a time,
    compressed (zlib, level 1: a chunk's states share much), into one file."""

    def __init__(
        self, path: Path, keep: int = KEEP, pack: Callable[[tuple[Any, ...]], tuple[Any, ...]] | None = None
    ) -> None:
        self.path = path
        self.keep = keep
        self.pack = pack
        """What an item becomes on disk (caches dropped, say)."""
        self._held: deque[tuple[Any, ...]] = deque()
        self._out: Any = None
        self._buffer: list[tuple[Any, ...]] = []
        self.items = 0
        """Items appended."""
        self.bytes = 0
        """Bytes written to disk."""

    @classmethod
    def written(cls, path: Path) -> LevelFile:
        """A level file another process wrote (every item on disk), to read here."""
        found = cls(path, 0)
        found._out = open(path, "ab")  # noqa: SIM115 (closed by read())
        found.items = -1  # not known here
        return found

    def append(self, item: tuple[Any, ...]) -> None:
        self.items += 1
        if self.items <= self.keep:
            self._held.append(item)
            return
        self._buffer.append(item if self.pack is None else self.pack(item))
        if len(self._buffer) >= CHUNK:
            self._flush()

    def _flush(self) -> None:
        if not self._buffer:
            return
        if self._out is None:
            self._out = open(self.path, "wb")  # noqa: SIM115 (closed by close())
        packed = zlib.compress(pickle.dumps(self._buffer, protocol=pickle.HIGHEST_PROTOCOL), 1)
        self._out.write(_LENGTH.pack(len(packed)))
        self._out.write(packed)
        self.bytes += _LENGTH.size + len(packed)
        self._buffer = []

    def close(self) -> None:
        self._flush()
        if self._out is not None and not self._out.closed:
            self._out.close()

    def read(self) -> Iterator[tuple[Any, ...]]:
        """The items in the order they were appended, each given up as it is read (closes the
        file for writing first)."""
        self.close()
        held = self._held
        while held:
            yield held.popleft()
        if self._out is None:
            return
        with open(self.path, "rb") as stream:
            while True:
                head = stream.read(_LENGTH.size)
                if not head:
                    return
                (length,) = _LENGTH.unpack(head)
                yield from pickle.loads(zlib.decompress(stream.read(length)))

    def remove(self) -> None:
        self._held.clear()
        self._buffer = []
        if self._out is None:
            return
        self._out.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
