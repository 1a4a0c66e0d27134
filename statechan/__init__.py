"""statechan: a formally-checked model of Apache Pulsar's service unit state channel.

The public API answers for the default protocol model (``pulsar-4``); pass ``model=`` to the
functions that take one for another (see :func:`load_model` and ``models/``).
"""

from __future__ import annotations

from pathlib import Path

# first: chooses the compiled or the pure kernel before any of its modules is imported
from statechan import kernel  # noqa: F401
from statechan.model import (
    DEFAULT_MODEL,
    BrokerCheck,
    ModelError,
    ProtocolModel,
    builtin_model_names,
    load_model,
)
from statechan.resolver import Reason, Verdict, fold, resolve, should_reject
from statechan.states import ServiceUnitState, StorageType
from statechan.values import (
    LONG_MAX,
    LONG_MIN,
    VERSION_ID_INIT,
    ServiceUnitStateData,
    next_version,
    state_of,
    wrap_long,
)

__version__ = "0.12.0"


def is_valid_transition(
    src: ServiceUnitState,
    dst: ServiceUnitState,
    storage: StorageType = StorageType.SystemTopic,
    model: str | Path | ProtocolModel | None = None,
) -> bool:
    """Pulsar's ``ServiceUnitState.isValidTransition(from, to, storageType)``."""
    return load_model(model).is_valid_transition(src, dst, storage)


def is_in_flight(state: ServiceUnitState, model: str | Path | ProtocolModel | None = None) -> bool:
    """Pulsar's ``isInFlightState``: Assigning, Releasing, Splitting."""
    return load_model(model).is_in_flight(state)


def is_active(state: ServiceUnitState, model: str | Path | ProtocolModel | None = None) -> bool:
    """Pulsar's ``isActiveState``: Owned or in flight."""
    return load_model(model).is_active(state)


__all__ = [
    "DEFAULT_MODEL",
    "LONG_MAX",
    "LONG_MIN",
    "VERSION_ID_INIT",
    "BrokerCheck",
    "ModelError",
    "ProtocolModel",
    "Reason",
    "ServiceUnitState",
    "ServiceUnitStateData",
    "StorageType",
    "Verdict",
    "builtin_model_names",
    "fold",
    "is_active",
    "is_in_flight",
    "is_valid_transition",
    "load_model",
    "next_version",
    "resolve",
    "should_reject",
    "state_of",
    "wrap_long",
]
