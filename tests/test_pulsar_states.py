"""Every assertion of Pulsar's ServiceUnitStateTest, per version, as data.

4.x (``testInFlights``, ``testActive``, ``testTransitionsOverSystemTopic``,
``testTransitionsOverMetadataStore``) against ``pulsar-4``; the 3.0-development table
(before #19683) against ``pulsar-3.0``; the first test (@04569b77) against ``pulsar-pip192-initial``.
Each table lists, per source state, the destinations Pulsar asserts true; every other pair of the
version's states is asserted false, as the Java tests do (49 asserts per 4.x table).
"""

from __future__ import annotations

import itertools

import pytest

import statechan
from statechan import ServiceUnitState, StorageType, load_model

S = ServiceUnitState
ST, MS = StorageType.SystemTopic, StorageType.MetadataStore

IN_FLIGHT = {
    S.Init: False,
    S.Free: False,
    S.Owned: False,
    S.Assigning: True,
    S.Releasing: True,
    S.Splitting: True,
    S.Deleted: False,
}
ACTIVE = {
    S.Init: False,
    S.Free: False,
    S.Owned: True,
    S.Assigning: True,
    S.Releasing: True,
    S.Splitting: True,
    S.Deleted: False,
}

VALID_4_SYSTEM_TOPIC = {
    "Init": {"Free", "Owned", "Assigning", "Releasing", "Splitting", "Deleted"},
    "Free": {"Init", "Assigning"},
    "Assigning": {"Owned"},
    "Owned": {"Releasing", "Splitting"},
    "Releasing": {"Free", "Assigning"},
    "Splitting": {"Deleted"},
    "Deleted": {"Init"},
}
VALID_4_METADATA_STORE = {
    "Init": {"Assigning"},
    "Free": {"Assigning"},
    "Assigning": {"Owned"},
    "Owned": {"Releasing", "Splitting"},
    "Releasing": {"Free", "Assigning"},
    "Splitting": {"Deleted"},
    "Deleted": {"Init"},
}
# ServiceUnitState.java @06897714 (3.0 development, before #19683).
VALID_3_0 = {
    "Init": {"Free", "Owned", "Assigning", "Releasing", "Splitting", "Deleted"},
    "Free": {"Assigning", "Init"},
    "Owned": {"Assigning", "Splitting", "Releasing"},
    "Assigning": {"Owned", "Releasing"},
    "Releasing": {"Owned", "Free"},
    "Splitting": {"Deleted"},
    "Deleted": {"Init"},
}
# ServiceUnitStateTest @04569b77: the 25 asserts of the first version (five states).
VALID_PIP192_INITIAL = {
    "Free": {"Assigned", "Owned", "Released", "Splitting"},
    "Assigned": {"Free", "Owned", "Released"},
    "Owned": {"Free", "Assigned", "Splitting"},
    "Released": {"Free", "Owned"},
    "Splitting": {"Free"},
}


def _expand(
    model: str, storage: StorageType, valid: dict[str, set[str]]
) -> list[tuple[str, StorageType, str, str, bool]]:
    states = list(valid)
    return [(model, storage, a, b, b in valid[a]) for a, b in itertools.product(states, states)]


CASES = (
    _expand("pulsar-4", ST, VALID_4_SYSTEM_TOPIC)
    + _expand("pulsar-4", MS, VALID_4_METADATA_STORE)
    + _expand("pulsar-3.0", ST, VALID_3_0)
    + _expand("pulsar-pip192-initial", ST, VALID_PIP192_INITIAL)
)


@pytest.mark.parametrize(
    ("model", "storage", "src", "dst", "valid"), CASES, ids=[f"{c[0]}-{c[1].value}-{c[2]}->{c[3]}" for c in CASES]
)
def test_is_valid_transition(model: str, storage: StorageType, src: str, dst: str, valid: bool) -> None:
    assert load_model(model).is_valid_transition(src, dst, storage) is valid


def test_case_counts() -> None:
    assert len(CASES) == 49 + 49 + 49 + 25


@pytest.mark.parametrize("storage", [ST, MS])
def test_public_api_answers_for_the_default_model(storage: StorageType) -> None:
    valid = VALID_4_SYSTEM_TOPIC if storage is ST else VALID_4_METADATA_STORE
    for a, b in itertools.product(ServiceUnitState, ServiceUnitState):
        assert statechan.is_valid_transition(a, b, storage) is (b.value in valid[a.value])


def test_default_storage_is_system_topic() -> None:
    assert statechan.is_valid_transition(S.Init, S.Free) is True
    assert statechan.is_valid_transition(S.Init, S.Free, StorageType.MetadataStore) is False


@pytest.mark.parametrize("state", list(ServiceUnitState))
def test_in_flight_and_active(state: ServiceUnitState) -> None:
    assert statechan.is_in_flight(state) is IN_FLIGHT[state]
    assert statechan.is_active(state) is ACTIVE[state]


def test_enum_contract() -> None:
    assert [s.name for s in ServiceUnitState] == [
        "Init",
        "Free",
        "Owned",
        "Assigning",
        "Releasing",
        "Splitting",
        "Deleted",
    ]
    assert all(s.value == s.name for s in ServiceUnitState)
    assert [s.name for s in StorageType] == ["SystemTopic", "MetadataStore"]


def test_three_zero_has_no_metadata_store_table() -> None:
    with pytest.raises(ValueError, match=r"pulsar-3\.0 has no MetadataStore table"):
        load_model("pulsar-3.0").is_valid_transition("Init", "Assigning", MS)


def test_unknown_state_name_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="has no state 'Assigned'"):
        load_model("pulsar-4").is_valid_transition("Owned", "Assigned")
