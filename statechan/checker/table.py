"""The visited set of a compact search: 64-bit fingerprints in an open-addressing table backed by
two flat arrays (the key and the state's index), 16 bytes a slot and at most 5/8 of the slots
used (26 to 100 bytes a state), instead of Python objects per state."""

from __future__ import annotations

from array import array
from hashlib import blake2b
from pathlib import Path

EMPTY = 0
"""The key of an empty slot: :func:`key64` never gives it."""


def key64(key: bytes) -> int:
    """A state's key (its fingerprint and the budgets it has left) folded into 64 bits, never 0.
    Two different keys share one with a chance of 2⁻⁶⁴ each pair: n²/2⁶⁵ among n states."""
    folded = int.from_bytes(blake2b(key, digest_size=8).digest(), "little")
    return folded or 1


def collision_probability(states: int) -> float:
    """The chance that two of ``states`` distinct states shared a 64-bit fingerprint (so the search
    merged them and missed what one of them leads to): n(n-1)/2 pairs at 2⁻⁶⁴ each, as TLC reports."""
    return min(1.0, states * (states - 1) / 2 / 2.0**64)


class FingerprintTable:
    """A set of 64-bit keys, each with the index of its state: linear probing in a power-of-two
    table of ``array``s ('Q' keys, 'q' indices), grown fourfold before it is 5/8 full."""

    __slots__ = ("_indices", "_keys", "_limit", "_mask", "_size")

    def __init__(self, capacity: int = 1 << 16) -> None:
        slots = 1 << max(4, (capacity - 1).bit_length())
        self._keys = array("Q", bytes(8 * slots))
        self._indices = array("q", bytes(8 * slots))
        self._mask = slots - 1
        self._limit = slots * 5 // 8
        self._size = 0

    def __len__(self) -> int:
        return self._size

    @property
    def nbytes(self) -> int:
        """The memory the two arrays hold."""
        return (len(self._keys) + len(self._indices)) * 8

    def get(self, key: int) -> int:
        """The index of the state with ``key``, or -1."""
        keys, mask = self._keys, self._mask
        slot = key & mask
        while True:
            found = keys[slot]
            if found == key:
                return self._indices[slot]
            if found == EMPTY:
                return -1
            slot = (slot + 1) & mask

    def __contains__(self, key: int) -> bool:
        return self.get(key) >= 0

    def add(self, key: int, index: int) -> bool:
        """Record ``key`` with ``index``; False (and nothing changed) if it is already there."""
        keys, mask = self._keys, self._mask
        slot = key & mask
        while True:
            found = keys[slot]
            if found == EMPTY:
                break
            if found == key:
                return False
            slot = (slot + 1) & mask
        keys[slot] = key
        self._indices[slot] = index
        self._size += 1
        if self._size > self._limit:
            self._grow()
        return True

    def items(self) -> list[tuple[int, int]]:
        """Every (key, index), in slot order (for tests and small tables)."""
        return [(k, i) for k, i in zip(self._keys, self._indices, strict=True) if k != EMPTY]

    def dump(self, keys: Path, indices: Path) -> tuple[int, int]:
        """Write the two arrays to ``keys`` and ``indices`` (a checkpoint's); the slots and the
        size, for :meth:`loaded`."""
        with open(keys, "wb") as out:
            self._keys.tofile(out)
        with open(indices, "wb") as out:
            self._indices.tofile(out)
        return self._mask + 1, self._size

    @classmethod
    def loaded(cls, keys: Path, indices: Path, slots: int, size: int) -> FingerprintTable:
        """The table :meth:`dump` wrote (a resumed search's); ValueError if a file is short."""
        table = cls(slots)
        for path, values in ((keys, table._keys), (indices, table._indices)):
            with open(path, "rb") as stream:
                if stream.readinto(values) != 8 * slots:
                    raise ValueError(f"{path} holds fewer than the table's {slots:,} slots")
        table._size = size
        return table

    def _grow(self) -> None:
        old_keys, old_indices = self._keys, self._indices
        slots = (self._mask + 1) * 4
        keys = self._keys = array("Q", bytes(8 * slots))
        indices = self._indices = array("q", bytes(8 * slots))
        mask = self._mask = slots - 1
        self._limit = slots * 5 // 8
        for key, index in zip(old_keys, old_indices, strict=True):
            if key != EMPTY:
                slot = key & mask
                while keys[slot] != EMPTY:
                    slot = (slot + 1) & mask
                keys[slot] = key
                indices[slot] = index
