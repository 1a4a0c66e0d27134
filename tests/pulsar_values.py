"""Constructors shaped like the Java ones Pulsar's channel tests use, so ported cases read alike.

``sus(state, dst, version)`` is ``new ServiceUnitStateData(state, dst, versionId)``;
``sus(state, dst, src, version)`` is the four-argument form (note: dst before src);
``sus_forced(state, dst, force, version)`` is ``new ServiceUnitStateData(state, dst, force, versionId)``.
``data``/``data2`` are the tests' helpers: ``data(state)``, ``data(state, dst)``,
``data(state, src, dst)`` (here src comes first, as in the tests), at version 1 or 2.
"""

from __future__ import annotations

from statechan import ServiceUnitState, ServiceUnitStateData

Init = ServiceUnitState.Init
Free = ServiceUnitState.Free
Owned = ServiceUnitState.Owned
Assigning = ServiceUnitState.Assigning
Releasing = ServiceUnitState.Releasing
Splitting = ServiceUnitState.Splitting
Deleted = ServiceUnitState.Deleted

LONG_MAX = 2**63 - 1


def sus(state: ServiceUnitState, dst: str | None, *rest: str | int | None) -> ServiceUnitStateData:
    if len(rest) == 1:
        (version,) = rest
        src = None
    else:
        src, version = rest
    assert isinstance(version, int)
    assert src is None or isinstance(src, str)
    return ServiceUnitStateData(state=state, dst_broker=dst, source_broker=src, version_id=version)


def sus_forced(state: ServiceUnitState, dst: str, force: bool, version: int) -> ServiceUnitStateData:
    return ServiceUnitStateData(state=state, dst_broker=dst, force=force, version_id=version)


def _data(version: int, state: ServiceUnitState, *brokers: str | None) -> ServiceUnitStateData:
    if not brokers:
        return sus(state, "broker", version)
    if len(brokers) == 1:
        return sus(state, brokers[0], None, version)
    src, dst = brokers
    return sus(state, dst, src, version)


def data(state: ServiceUnitState, *brokers: str | None) -> ServiceUnitStateData:
    return _data(1, state, *brokers)


def data2(state: ServiceUnitState, *brokers: str | None) -> ServiceUnitStateData:
    return _data(2, state, *brokers)
