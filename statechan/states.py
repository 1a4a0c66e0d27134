"""The seven service-unit states and the two channel storages, spelled as Pulsar spells them."""

from __future__ import annotations

import enum


class ServiceUnitState(enum.Enum):
    """A bundle's state in the channel (Pulsar's ``ServiceUnitState``, declaration order kept).

    ``Init`` means "no record": a tombstoned (null) value *is* Init.
    """

    Init = "Init"
    Free = "Free"
    Owned = "Owned"
    Assigning = "Assigning"
    Releasing = "Releasing"
    Splitting = "Splitting"
    Deleted = "Deleted"

    # Members are singletons, so identity hashing agrees with equality; it is C-level, where
    # Enum's own __hash__ is a Python call on every dict lookup in the resolver's hot path.
    __hash__ = object.__hash__

    def __str__(self) -> str:
        return self.value


class StorageType(enum.Enum):
    """Where the channel lives: the system topic (PIP-192) or the metadata store (PIP-378)."""

    SystemTopic = "SystemTopic"
    MetadataStore = "MetadataStore"

    __hash__ = object.__hash__

    def __str__(self) -> str:
        return self.value
