"""A breadth-first level's states, past the first few thousand, on disk: written as they are found,
read back in the same order when the level is expanded, so the search holds a bounded number of
states whatever the level's size."""

from __future__ import annotations

import contextlib
import heapq
import os
import pickle
import shutil
import struct
import zlib
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from statechan.checker import _Expansion, _Step

CHUNK = 256
"""States pickled together: states of one level share records, which one pickle writes once."""

_LENGTH = struct.Struct("<Q")


KEEP = 20_000
"""States of a level kept as they are (not pickled) before the rest go to disk: pickling a state
and reading it back costs about as much as expanding it, so small levels stay in memory."""


def packed_spent(spent: Counter[str] | tuple[int, ...], kinds: Sequence[str]) -> tuple[int, ...]:
    """A queued state's budgets spent as they go to disk: a count per kind, in ``kinds``' order."""
    if isinstance(spent, Counter):
        return tuple(spent.get(k, 0) for k in kinds)
    return spent


def unpacked_spent(spent: Counter[str] | tuple[int, ...], kinds: Sequence[str]) -> Counter[str]:
    """The budgets spent as an expansion takes them, from what :func:`packed_spent` wrote (or as held)."""
    if isinstance(spent, Counter):
        return spent
    return Counter({k: n for k, n in zip(kinds, spent, strict=True) if n})


def _write_chunk(out: Any, items: list[tuple[Any, ...]]) -> int:
    """Append one chunk of items to a level file's stream; the bytes written."""
    packed = zlib.compress(pickle.dumps(items, protocol=pickle.HIGHEST_PROTOCOL), 1)
    out.write(_LENGTH.pack(len(packed)))
    out.write(packed)
    return _LENGTH.size + len(packed)


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
        self.bytes += _write_chunk(self._out, self._buffer)
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

    def copy_to(self, path: Path) -> int:
        """Write every item, in order, to a level file at ``path`` that :meth:`written` reads in
        another process (this one keeps them: a checkpoint's copy); the bytes written. The items on
        disk are copied as they are, without pickling them again."""
        self.close()
        written = 0
        with open(path, "wb") as out:
            held = [item if self.pack is None else self.pack(item) for item in self._held]
            for at in range(0, len(held), CHUNK):
                written += _write_chunk(out, held[at : at + CHUNK])
            if self._out is not None:
                with open(self.path, "rb") as stream:
                    shutil.copyfileobj(stream, out, 1 << 20)
                written += self.bytes
        return written

    def remove(self) -> None:
        self._held.clear()
        self._buffer = []
        if self._out is None:
            return
        self._out.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


class Parts:
    """A level saved as several level files (a checkpoint's, one a process), read as one: their
    items merged in the order of the states' indices. The files are the checkpoint's: reading them
    leaves them in place (:meth:`remove` removes nothing)."""

    def __init__(self, paths: Sequence[Path], items: int) -> None:
        self.paths = list(paths)
        self.items = items
        self.bytes = sum(path.stat().st_size for path in self.paths)

    def read(self) -> Iterator[tuple[Any, ...]]:
        files = [LevelFile.written(path) for path in self.paths]
        try:
            yield from heapq.merge(*(file.read() for file in files), key=lambda item: item[0])
        finally:
            for file in files:
                file.close()

    def close(self) -> None:
        """(Nothing to write: the parts are complete.)"""

    def remove(self) -> None:
        """(The checkpoint's files stay until a later checkpoint replaces them.)"""


class Source:
    """Where a level's expansions come from, in the order of the states' indices, and where the
    new states the merge keeps go (for the next level)."""

    merges_reduction = False
    """Whether the merge applies the partial-order reduction's cycle proviso (workers cannot)."""
    disk_peak = 0
    """The most bytes its level files held at once."""

    @property
    def queued(self) -> int:
        """States queued for the next level (after :meth:`end_level`)."""
        raise NotImplementedError

    @property
    def waiting(self) -> int:
        """States queued and not yet expanded (for progress reports)."""
        raise NotImplementedError

    def start(self, item: tuple[Any, ...]) -> None:
        raise NotImplementedError

    def level(self, depth: int) -> Iterator[tuple[int, _Expansion]]:
        raise NotImplementedError

    def keep(self, index: int, step: _Step, target: int, key: int) -> None:
        """Queue ``step``'s state (``key``: its 64-bit fingerprint) as state ``target`` of the next level."""
        raise NotImplementedError

    def end_level(self) -> None:
        raise NotImplementedError

    def save(self, into: Path) -> list[Path]:
        """Copy the states queued for the next level into folder ``into`` (level files, each in the
        order of the states' indices; the states stay queued here); the files written."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError
