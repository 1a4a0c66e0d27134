"""Short constructors for channel values in store and channel tests."""

from __future__ import annotations

from statechan import ServiceUnitState, ServiceUnitStateData

S = ServiceUnitState
KEY = "pulsar/test/0x00000000_0xffffffff"
KEY2 = "pulsar/test/0x00000000_0x7fffffff"


def v(
    state: ServiceUnitState,
    dst: str | None = None,
    src: str | None = None,
    version: int = 1,
    force: bool = False,
    ts: int = 0,
) -> ServiceUnitStateData:
    return ServiceUnitStateData(
        state=state, dst_broker=dst, source_broker=src, version_id=version, force=force, timestamp=ts
    )
