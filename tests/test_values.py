"""ServiceUnitStateData: Pulsar's ServiceUnitStateDataTest ported, plus the JSON contract."""

from __future__ import annotations

import json

import pydantic
import pytest

from statechan import LONG_MAX, LONG_MIN, ServiceUnitState, ServiceUnitStateData, next_version, wrap_long
from tests.pulsar_values import Assigning, Free, Owned, sus

D = ServiceUnitStateData


def full(dst: str, src: str, split: dict[str, str | None], force: bool, ts: int, version: int) -> D:
    """The seven-argument Java constructor."""
    return D(
        state=Assigning,
        dst_broker=dst,
        source_broker=src,
        split_service_unit_to_dest_broker=split,
        force=force,
        timestamp=ts,
        version_id=version,
    )


def test_constructors() -> None:
    # Pulsar stamps System.currentTimeMillis(); the model takes the caller's clock instead.
    data1 = D(state=Owned, dst_broker="A", version_id=1, timestamp=1_000)
    assert data1.state is Owned
    assert data1.dst_broker == "A"
    assert data1.source_broker is None
    assert data1.timestamp == 1_000
    data2 = D(state=Assigning, dst_broker="A", source_broker="B", version_id=1, timestamp=1_010)
    assert data2.state is Assigning
    assert (data2.dst_broker, data2.source_broker) == ("A", "B")
    assert data2.timestamp > data1.timestamp


def test_null_state() -> None:
    with pytest.raises(pydantic.ValidationError) as info:
        D(state=None, dst_broker="A")
    assert info.value.errors()[0]["loc"] == ("state",)


@pytest.mark.parametrize(("dst", "src"), [(None, None), ("", ""), ("  ", None)])
def test_empty_brokers_rejected(dst: str | None, src: str | None) -> None:
    with pytest.raises(pydantic.ValidationError, match="Empty broker"):
        D(state=Owned, dst_broker=dst, source_broker=src)


@pytest.mark.parametrize("state", [s for s in ServiceUnitState if s is not Free])
def test_every_state_but_free_needs_a_broker(state: ServiceUnitState) -> None:
    with pytest.raises(pydantic.ValidationError, match="Empty broker"):
        D(state=state)


def test_free_may_have_no_broker() -> None:
    assert D(state=Free).dst_broker is None


def test_zero_version_id() -> None:
    assert sus(Owned, "A", LONG_MAX + 1).version_id == LONG_MIN


def test_versions_wrap_as_java_longs() -> None:
    assert wrap_long(LONG_MAX + 2) == LONG_MIN + 1
    assert wrap_long(LONG_MIN - 1) == LONG_MAX
    assert next_version(None) == 1
    assert next_version(sus(Owned, "A", LONG_MAX)) == LONG_MIN


def test_json_write_and_read() -> None:
    src = sus(Assigning, "A", "B", 1)
    assert D.from_json(src.to_json()) == src


def test_equals() -> None:
    d1 = full("A", "B", {"A": "B"}, True, 0, 1)
    d2 = full("A", "B", {"A": "B"}, True, 0, 1)
    assert d1 == d2
    assert hash(d1) == hash(d2)
    d3 = sus(Assigning, "C", "B", 1)
    d4 = full("A", "B", {"A": "C"}, True, 0, 1)
    assert d1 != d3
    assert d1 != d4
    d5 = full("A", "B", {"A": "B"}, True, 0, 2)
    assert d1 != d5
    d6 = full("C", "B", {"A": "B"}, True, 0, 1)
    assert d1 != d6


def test_split_map_equality_ignores_order() -> None:
    a = full("A", "B", {"0x00000000_0x7fffffff": None, "0x7fffffff_0xffffffff": "C"}, False, 0, 1)
    b = full("A", "B", {"0x7fffffff_0xffffffff": "C", "0x00000000_0x7fffffff": None}, False, 0, 1)
    assert a == b
    assert a.split_children == ("0x00000000_0x7fffffff", "0x7fffffff_0xffffffff")


def test_json_is_pulsar_shaped() -> None:
    value = D(
        state=ServiceUnitState.Splitting,
        source_broker="b1",
        timestamp=5,
        version_id=3,
        split_service_unit_to_dest_broker={"0x7fffffff_0xffffffff": None, "0x00000000_0x7fffffff": "b2"},
    )
    assert json.loads(value.to_json()) == {
        "state": "Splitting",
        "dstBroker": None,
        "sourceBroker": "b1",
        "splitServiceUnitToDestBroker": {"0x00000000_0x7fffffff": "b2", "0x7fffffff_0xffffffff": None},
        "force": False,
        "timestamp": 5,
        "versionId": 3,
    }


def test_reads_pulsar_json_with_missing_and_unknown_properties() -> None:
    value = D.from_json('{"state":"Owned","dstBroker":"b1","versionId":7,"someFutureField":1}')
    assert (value.state, value.dst_broker, value.version_id, value.force, value.timestamp) == (Owned, "b1", 7, False, 0)


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ('{"state":"Assigned","dstBroker":"b1"}', "state"),
        ('{"dstBroker":"b1"}', "state"),
        ('{"state":"Owned","dstBroker":"b1","versionId":"seven"}', "versionId"),
        ('{"state":"Owned","dstBroker":["b1"]}', "dstBroker"),
        ('{"state":"Owned","dstBroker":"b1","splitServiceUnitToDestBroker":5}', "splitServiceUnitToDestBroker"),
    ],
)
def test_malformed_json_names_the_field(text: str, field: str) -> None:
    with pytest.raises(pydantic.ValidationError) as info:
        D.from_json(text)
    assert info.value.errors()[0]["loc"][0] == field


def test_not_json_at_all() -> None:
    with pytest.raises(pydantic.ValidationError, match="Invalid JSON"):
        D.from_json("{not json")


def test_values_are_frozen() -> None:
    value = sus(Owned, "A", 1)
    with pytest.raises(pydantic.ValidationError):
        value.version_id = 2  # type: ignore[misc]
