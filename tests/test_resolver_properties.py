"""Properties of the resolver over generated values (Hypothesis, ``ci`` profile by default)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from properties.strategies import optional_values, values
from statechan import (
    LONG_MAX,
    LONG_MIN,
    Reason,
    ServiceUnitState,
    ServiceUnitStateData,
    StorageType,
    fold,
    is_valid_transition,
    resolve,
    should_reject,
    wrap_long,
)

S = ServiceUnitState
storages = st.sampled_from(list(StorageType))


@given(optional_values, storages, st.booleans())
def test_a_tombstone_is_never_rejected(prev: ServiceUnitStateData | None, storage: StorageType, brokers: bool) -> None:
    assert not should_reject(prev, None, storage, brokers)
    assert resolve(prev, None, storage, brokers).reason is Reason.ACCEPTED_TOMBSTONE


@given(values(), values(), storages)
def test_an_equal_or_older_version_is_never_accepted(
    prev: ServiceUnitStateData, new: ServiceUnitStateData, storage: StorageType
) -> None:
    wraps = prev.version_id == LONG_MAX and new.version_id == LONG_MIN
    if new.version_id <= prev.version_id and not wraps:
        assert resolve(prev, new, storage).reason is Reason.STALE_VERSION


@given(optional_values, optional_values, storages, st.booleans())
def test_resolve_and_should_reject_agree(
    prev: ServiceUnitStateData | None, new: ServiceUnitStateData | None, storage: StorageType, brokers: bool
) -> None:
    verdict = resolve(prev, new, storage, brokers)
    assert should_reject(prev, new, storage, brokers) is verdict.rejected
    assert verdict.accepted is not verdict.rejected
    assert (verdict.check is not None) is (verdict.reason is Reason.BROKER_MISMATCH)


@given(values())
def test_json_round_trip_is_identity(value: ServiceUnitStateData) -> None:
    assert ServiceUnitStateData.from_json(value.to_json()) == value
    assert ServiceUnitStateData.model_validate_json(value.model_dump_json(by_alias=True)) == value


@given(values(), values(), storages)
def test_without_force_or_broker_checks_the_table_decides_consecutive_versions(
    prev: ServiceUnitStateData, new: ServiceUnitStateData, storage: StorageType
) -> None:
    offered = new.model_copy(update={"version_id": wrap_long(prev.version_id + 1), "force": False})
    accepted = resolve(prev, offered, storage, check_brokers=False).accepted
    assert accepted is is_valid_transition(prev.state, offered.state, storage)


@given(values(), values(), storages)
def test_force_skips_table_and_brokers_but_not_the_version_gate(
    prev: ServiceUnitStateData, new: ServiceUnitStateData, storage: StorageType
) -> None:
    forced = new.model_copy(update={"version_id": wrap_long(prev.version_id + 1), "force": True})
    assert resolve(prev, forced, storage).reason is Reason.ACCEPTED_FORCED
    stale = forced.model_copy(update={"version_id": prev.version_id})
    assert resolve(prev, stale, storage).reason is Reason.STALE_VERSION


@given(values(), st.integers(min_value=2, max_value=1000), values())
def test_a_version_gap_is_fast_forwarded_on_the_topic_and_refused_by_the_store(
    prev: ServiceUnitStateData, gap: int, new: ServiceUnitStateData
) -> None:
    if prev.version_id + gap > LONG_MAX:
        return
    jumped = new.model_copy(update={"version_id": prev.version_id + gap})
    assert resolve(prev, jumped, StorageType.SystemTopic).reason is Reason.ACCEPTED_VERSION_GAP
    assert resolve(prev, jumped, StorageType.MetadataStore).reason is Reason.VERSION_GAP_REJECTED


@given(values())
def test_metadata_store_first_write_must_be_version_one(new: ServiceUnitStateData) -> None:
    accepted = resolve(None, new, StorageType.MetadataStore).accepted
    assert accepted is (new.version_id == 1)


# Brokers a well-behaved channel writes for each step of a flow (A owns, B is the destination).
def _protocol_pair(a: S, b: S, version: int) -> tuple[ServiceUnitStateData | None, ServiceUnitStateData]:
    def v(state: S, dst: str | None, src: str | None, ver: int) -> ServiceUnitStateData:
        return ServiceUnitStateData(state=state, dst_broker=dst, source_broker=src, version_id=ver)

    held = {
        S.Init: None,
        S.Free: v(S.Free, None, "A", version),
        S.Owned: v(S.Owned, "A", None, version),
        S.Assigning: v(S.Assigning, "B", "A", version),
        # a plain unload releases to nobody; a transfer releases to B
        S.Releasing: v(S.Releasing, None if b is S.Free else "B", "A", version),
        S.Splitting: v(S.Splitting, None, "A", version),
        S.Deleted: v(S.Deleted, None, "A", version),
    }[a]
    nxt = version + 1 if held is not None else 1
    offered = {
        S.Init: v(S.Init, None, "A", nxt),
        S.Free: v(S.Free, None, "A", nxt),
        S.Owned: v(S.Owned, "B", "A", nxt) if a is S.Assigning else v(S.Owned, "A", None, nxt),
        S.Assigning: v(S.Assigning, "B", "A" if a is S.Releasing else None, nxt),
        S.Releasing: v(S.Releasing, "B", "A", nxt),
        S.Splitting: v(S.Splitting, None, "A", nxt),
        S.Deleted: v(S.Deleted, None, "A", nxt),
    }[b]
    return held, offered


@given(st.sampled_from(list(S)), st.sampled_from(list(S)), st.integers(min_value=1, max_value=10**6))
def test_with_consistent_brokers_exactly_the_table_is_accepted(a: S, b: S, version: int) -> None:
    held, offered = _protocol_pair(a, b, version)
    if a is S.Free and b is S.Assigning:
        offered = offered.model_copy(update={"source_broker": None})
    assert resolve(held, offered).accepted is is_valid_transition(a, b)


@given(st.lists(optional_values, max_size=12), storages)
def test_a_folded_view_never_goes_back_in_version(
    items: list[ServiceUnitStateData | None], storage: StorageType
) -> None:
    held: ServiceUnitStateData | None = None
    for item in items:
        after = fold([item], storage, start=held)
        if held is not None and after is not None and after is not held:
            assert after.version_id > held.version_id or (held.version_id == LONG_MAX and after.version_id == LONG_MIN)
        held = after
    assert held == fold(items, storage)


@given(st.lists(optional_values, max_size=12), optional_values, storages)
def test_the_fold_is_its_steps(
    offered: list[ServiceUnitStateData | None], start: ServiceUnitStateData | None, storage: StorageType
) -> None:
    """``offers`` takes each value the resolver accepts against what it holds, and keeps what it
    holds otherwise; ``settle`` and ``fold`` end where its last step does."""
    from statechan.resolver import offer, offers, rules_for, settle

    rules = rules_for(storage)
    steps = list(offers(rules, offered, start))
    held = start
    for value, (after, verdict) in zip(offered, steps, strict=True):
        assert verdict == resolve(held, value, storage)
        assert after is (value if verdict.accepted else held)
        assert offer(rules, held, value) == (after, verdict)
        held = after
    assert settle(rules, offered, start) is held
    assert fold(offered, storage, start) is held
    for value in offered:  # a view that skips the broker checks (Pulsar's table views may)
        verdict = resolve(start, value, storage, check_brokers=False)
        assert offer(rules, start, value, check_brokers=False) == (value if verdict.accepted else start, verdict)
