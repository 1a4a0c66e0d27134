"""Hypothesis strategies for channel values, shared by the property tests and the bench."""

from __future__ import annotations

from hypothesis import strategies as st

from statechan import LONG_MAX, LONG_MIN, ServiceUnitState, ServiceUnitStateData

BROKERS = ("broker-1", "broker-2", "broker-3")

brokers = st.one_of(st.none(), st.just(""), st.sampled_from(BROKERS))
versions = st.one_of(
    st.integers(min_value=-3, max_value=12),
    st.sampled_from([LONG_MAX - 1, LONG_MAX, LONG_MIN, LONG_MIN + 1]),
)
split_maps = st.one_of(
    st.none(),
    st.dictionaries(
        st.sampled_from(["0x00000000_0x7fffffff", "0x7fffffff_0xffffffff", "0x00000000_0x3fffffff"]),
        st.one_of(st.none(), st.sampled_from(BROKERS)),
        max_size=2,
    ),
)


@st.composite
def values(draw: st.DrawFn, version: st.SearchStrategy[int] = versions) -> ServiceUnitStateData:
    """Any value Pulsar's constructor accepts (a non-Free state needs a broker)."""
    state = draw(st.sampled_from(list(ServiceUnitState)))
    dst = draw(brokers)
    src = draw(brokers)
    if state is not ServiceUnitState.Free and not (dst or "").strip() and not (src or "").strip():
        dst = draw(st.sampled_from(BROKERS))
    return ServiceUnitStateData(
        state=state,
        dst_broker=dst,
        source_broker=src,
        split_service_unit_to_dest_broker=draw(split_maps),
        force=draw(st.booleans()),
        timestamp=draw(st.integers(min_value=0, max_value=2**40)),
        version_id=draw(version),
    )


optional_values = st.one_of(st.none(), values())


KEYS = ("pulsar/p/0x00000000_0x7fffffff", "pulsar/p/0x7fffffff_0xffffffff", "pulsar/q/0x00000000_0xffffffff")
channel_states = st.sampled_from([s for s in ServiceUnitState if s is not ServiceUnitState.Init])


@st.composite
def channel_values(draw: st.DrawFn, max_version: int = 12) -> ServiceUnitStateData:
    """Values a channel writes: never state Init (a deletion is a tombstone), small versions."""
    state = draw(channel_states)
    dst = draw(st.one_of(st.none(), st.sampled_from(BROKERS)))
    src = draw(st.one_of(st.none(), st.sampled_from(BROKERS)))
    if state is not ServiceUnitState.Free and dst is None and src is None:
        dst = draw(st.sampled_from(BROKERS))
    return ServiceUnitStateData(
        state=state,
        dst_broker=dst,
        source_broker=src,
        force=draw(st.booleans()),
        timestamp=draw(st.integers(min_value=0, max_value=10_000)),
        version_id=draw(st.integers(min_value=1, max_value=max_version)),
    )


records = st.tuples(st.sampled_from(KEYS), st.one_of(st.none(), channel_values()))
"""A (key, value-or-tombstone) record of the channel."""
logs = st.lists(records, max_size=30)
tombstone_free_logs = st.lists(st.tuples(st.sampled_from(KEYS), channel_values()), max_size=30)
