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


IN_FLIGHT: frozenset[ServiceUnitState] = frozenset(
    {ServiceUnitState.Assigning, ServiceUnitState.Releasing, ServiceUnitState.Splitting}
)
"""Pulsar's in-flight states (``ServiceUnitState.isInFlightState``). The invariants and the
checker's settledness read these, not a model file's classes: they are the specification, and a
model under test (or a mutant of one, ``statechan mutate``) may declare its classes otherwise."""

ACTIVE: frozenset[ServiceUnitState] = IN_FLIGHT | {ServiceUnitState.Owned}
"""Pulsar's active states (``ServiceUnitState.isActiveState``): a broker owns, or is about to."""
