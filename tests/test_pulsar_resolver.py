"""Every assertion of Pulsar's ServiceUnitStateDataConflictResolverTest (4.x, pulsar-4 model) and of
the versioned 3.0 ServiceUnitStateCompactionStrategyTest (@14ff5824, pulsar-3.0 model), as data.

Each case is (held, offered, keep_left): keep_left is the Java assertTrue/assertFalse of
``shouldKeepLeft(held, offered)``.
"""

from __future__ import annotations

import pytest

from statechan import ServiceUnitStateData, StorageType, load_model, resolve, should_reject
from tests.pulsar_values import (
    LONG_MAX,
    Assigning,
    Deleted,
    Free,
    Init,
    Owned,
    Releasing,
    Splitting,
    data,
    data2,
    sus,
    sus_forced,
)

K, A = True, False  # keep left (reject the offered value) / accept it
dst, src = "dst", "src"

Case = tuple[ServiceUnitStateData | None, ServiceUnitStateData | None, bool]

RESOLVER_VERSION_ID: list[Case] = [
    (sus(Assigning, dst, 1), sus(Assigning, dst, 1), K),
    (sus(Assigning, dst, 1), sus(Assigning, dst, 2), K),
    (sus(Owned, dst, src, 10), sus(Releasing, "broker2", dst, 11), A),
    (sus(Owned, dst, src, LONG_MAX), sus(Releasing, "broker2", dst, LONG_MAX + 1), A),
    (sus(Owned, dst, src, LONG_MAX + 1), sus(Releasing, "broker2", dst, LONG_MAX + 2), A),
    (sus(Owned, dst, src, 10), sus(Releasing, "broker2", dst, 5), K),
    (sus(Owned, dst, src, 10), sus(Owned, "broker2", dst, 12), A),
]

RESOLVER_STORE_TYPE: list[tuple[StorageType, ServiceUnitStateData | None, ServiceUnitStateData, bool]] = [
    (StorageType.SystemTopic, None, sus(Owned, dst, 1), A),
    (StorageType.SystemTopic, None, sus(Owned, dst, 2), A),
    (StorageType.SystemTopic, sus(Owned, dst, 1), sus(Owned, dst, 3), A),
    (StorageType.MetadataStore, None, sus(Owned, dst, 1), A),
    (StorageType.MetadataStore, None, sus(Owned, dst, 2), K),
    (StorageType.MetadataStore, sus(Owned, dst, 1), sus(Owned, dst, 3), K),
]

FORCE: list[Case] = [
    (sus(Init, dst, 1), sus_forced(Init, dst, True, 2), A),
    (sus(Init, dst, 1), sus_forced(Init, dst, True, 1), K),
]

TOMBSTONE: list[Case] = [(data(s), None, A) for s in (Init, Assigning, Owned, Releasing, Splitting, Free, Deleted)]

RESOLVER_TRANSITIONS_AND_BROKERS: list[Case] = [
    (data(Init), data2(Init), K),
    (data(Init), data2(Free), A),
    (data(Init), data2(Assigning), A),
    (data(Init), data2(Owned), A),
    (data(Init), data2(Releasing), A),
    (data(Init), data2(Splitting), A),
    (data(Init), data2(Deleted), A),
    (data(Assigning), data2(Init), K),
    (data(Assigning), data2(Free), K),
    (data(Assigning), data2(Assigning), K),
    (data(Assigning, "dst1"), data2(Owned, "dst2"), K),
    (data(Assigning, dst), data2(Owned, src, dst), K),
    (data(Assigning, dst), data2(Owned, dst), A),
    (data(Assigning, src, dst), data2(Owned, src, dst), A),
    (data(Assigning, src, dst), data2(Releasing, dst), K),
    (data(Assigning, src, dst), data2(Releasing, src, dst), K),
    (data(Assigning), data2(Splitting, dst), K),
    (data(Assigning), data2(Deleted, dst), K),
    (data(Owned), data2(Init), K),
    (data(Owned), data2(Free), K),
    (data(Owned), data2(Assigning), K),
    (data(Owned), data2(Owned), K),
    (data(Owned), data2(Releasing, dst), K),
    (data(Owned, src, "dst1"), data2(Releasing, src, "dst2"), K),
    (data(Owned, "dst1"), data2(Releasing, "dst2"), K),
    (data(Owned, dst), data2(Releasing, dst), K),
    (data(Owned, src, dst), data2(Releasing, None, dst), K),
    (data(Owned, src, dst), data2(Releasing, src, None), K),
    (data(Owned, src, dst), data2(Releasing, dst, None), A),
    (data(Owned, src, "dst1"), data2(Releasing, src, "dst2"), K),
    (data(Owned, "src1", dst), data2(Releasing, "src2", dst), K),
    (data(Owned, src, dst), data2(Releasing, src, dst), K),
    (data(Owned, src, dst), data2(Releasing, dst, "dst2"), A),
    (data(Owned, src, "dst1"), data2(Splitting, src, "dst2"), K),
    (data(Owned, "dst1"), data2(Splitting, "dst2"), K),
    (data(Owned, dst), data2(Splitting, dst, None), A),
    (data(Owned, src, dst), data2(Splitting, dst, None), A),
    (data(Owned), data2(Deleted, dst), K),
    (data(Releasing), data2(Init), K),
    (data(Releasing), data2(Free), A),
    (data(Releasing, "dst1"), data2(Free, "dst2"), K),
    (data(Releasing, "src1", dst), data2(Free, "src2", dst), K),
    (data(Releasing, src, "dst1"), data2(Assigning, src, "dst2"), K),
    (data(Releasing, src, "dst1"), data2(Assigning, src, "dst2"), K),
    (data(Releasing, "src1", dst), data2(Assigning, "src2", dst), K),
    (data(Releasing, src, dst), data2(Assigning, src, dst), A),
    (data(Releasing), data2(Owned), K),
    (data(Releasing), data2(Releasing), K),
    (data(Releasing), data2(Splitting), K),
    (data(Releasing), data2(Deleted, dst), K),
    (data(Splitting), data2(Init), K),
    (data(Splitting), data2(Free), K),
    (data(Splitting), data2(Assigning), K),
    (data(Splitting), data2(Owned), K),
    (data(Splitting), data2(Releasing), K),
    (data(Splitting), data2(Splitting), K),
    (data(Splitting, src, "dst1"), data2(Deleted, src, "dst2"), K),
    (data(Splitting, "dst1"), data2(Deleted, "dst2"), K),
    (data(Splitting, "src1", dst), data2(Deleted, "src2", dst), K),
    (data(Splitting, dst), data2(Deleted, dst), A),
    (data(Splitting, src, dst), data2(Deleted, src, dst), A),
    (data(Deleted), data2(Init), A),
    (data(Deleted), data2(Free), K),
    (data(Deleted), data2(Assigning), K),
    (data(Deleted), data2(Owned), K),
    (data(Deleted), data2(Releasing), K),
    (data(Deleted), data2(Splitting), K),
    (data(Deleted), data2(Deleted), K),
    (data(Free), data2(Init), A),
    (data(Free), data2(Free), K),
    (data(Free), data2(Assigning), A),
    (data(Free), data2(Assigning, src, dst), K),
    (data(Free), data2(Owned), K),
    (data(Free), data2(Releasing), K),
    (data(Free), data2(Splitting), K),
    (data(Free), data2(Deleted), K),
]

# ServiceUnitStateCompactionStrategyTest @14ff5824: the 3.0 table, CS-2fb broker checks.
COMPACTION_3_0_VERSION_ID: list[Case] = [
    (sus(Assigning, dst, 1), sus(Assigning, dst, 1), K),
    (sus(Assigning, dst, 1), sus(Assigning, dst, 2), K),
    (sus(Owned, dst, src, 10), sus(Assigning, "broker2", dst, 11), A),
    (sus(Owned, dst, src, LONG_MAX), sus(Assigning, "broker2", dst, LONG_MAX + 1), A),
    (sus(Owned, dst, src, LONG_MAX + 1), sus(Assigning, "broker2", dst, LONG_MAX + 2), A),
    (sus(Owned, dst, src, 10), sus(Assigning, "broker2", dst, 5), K),
]

COMPACTION_3_0_TRANSITIONS_AND_BROKERS: list[Case] = [
    (data(Init), data2(Init), K),
    (data(Init), data2(Free), A),
    (data(Init), data2(Assigning), A),
    (data(Init), data2(Owned), A),
    (data(Init), data2(Releasing), A),
    (data(Init), data2(Splitting), A),
    (data(Init), data2(Deleted), A),
    (data(Assigning), data2(Init), K),
    (data(Assigning), data2(Free), K),
    (data(Assigning), data2(Assigning), K),
    (data(Assigning, "dst1"), data2(Owned, "dst2"), K),
    (data(Assigning, dst), data2(Owned, src, dst), K),
    (data(Assigning, dst), data2(Owned, dst), A),
    (data(Assigning, src, dst), data2(Releasing, dst), K),
    (data(Assigning, src, "dst1"), data2(Releasing, src, "dst2"), K),
    (data(Assigning, "src1", dst), data2(Releasing, "src2", dst), K),
    (data(Assigning, src, dst), data2(Releasing, src, dst), A),
    (data(Assigning), data2(Splitting, dst), K),
    (data(Assigning), data2(Deleted, dst), K),
    (data(Owned), data2(Init), K),
    (data(Owned), data2(Free), K),
    (data(Owned, src, "dst1"), data2(Assigning, src, "dst2"), K),
    (data(Owned, src, dst), data2(Assigning, dst), K),
    (data(Owned, src, dst), data2(Assigning, src, dst), K),
    (data(Owned, src, dst), data2(Assigning, dst, dst), K),
    (data(Owned, src, dst), data2(Assigning, dst, "dst1"), A),
    (data(Owned), data2(Owned), K),
    (data(Owned), data2(Releasing, dst), K),
    (data(Owned, src, "dst1"), data2(Releasing, src, "dst2"), K),
    (data(Owned, "dst1"), data2(Releasing, "dst2"), K),
    (data(Owned, dst), data2(Releasing, dst), A),
    (data(Owned, src, dst), data2(Releasing, dst), A),
    (data(Owned, src, "dst1"), data2(Splitting, src, "dst2"), K),
    (data(Owned, "dst1"), data2(Splitting, "dst2"), K),
    (data(Owned, dst), data2(Splitting, dst), A),
    (data(Owned, src, dst), data2(Splitting, dst), A),
    (data(Owned), data2(Deleted, dst), K),
    (data(Releasing), data2(Init), K),
    (data(Releasing), data2(Free), A),
    (data(Releasing, "dst1"), data2(Free, "dst2"), K),
    (data(Releasing, "src1", dst), data2(Free, "src2", dst), K),
    (data(Releasing), data2(Assigning), K),
    (data(Releasing, "dst1"), data2(Owned, "dst2"), K),
    (data(Releasing, src, "dst1"), data2(Owned, src, "dst2"), K),
    (data(Releasing, "src1", dst), data2(Owned, "src2", dst), K),
    (data(Releasing, src, dst), data2(Owned, src, dst), A),
    (data(Releasing), data2(Releasing), K),
    (data(Releasing), data2(Splitting), K),
    (data(Releasing), data2(Deleted, dst), K),
    (data(Splitting), data2(Init), K),
    (data(Splitting), data2(Free), K),
    (data(Splitting), data2(Assigning), K),
    (data(Splitting), data2(Owned), K),
    (data(Splitting), data2(Releasing), K),
    (data(Splitting), data2(Splitting), K),
    (data(Splitting, src, "dst1"), data2(Deleted, src, "dst2"), K),
    (data(Splitting, "dst1"), data2(Deleted, "dst2"), K),
    (data(Splitting, "src1", dst), data2(Deleted, "src2", dst), K),
    (data(Splitting, dst), data2(Deleted, dst), A),
    (data(Splitting, src, dst), data2(Deleted, src, dst), A),
    (data(Deleted), data2(Init), A),
    (data(Deleted), data2(Free), K),
    (data(Deleted), data2(Assigning), K),
    (data(Deleted), data2(Owned), K),
    (data(Deleted), data2(Releasing), K),
    (data(Deleted), data2(Splitting), K),
    (data(Deleted), data2(Deleted), K),
    (data(Free), data2(Init), A),
    (data(Free), data2(Free), K),
    (data(Free), data2(Assigning), A),
    (data(Free), data2(Assigning, src, dst), K),
    (data(Free), data2(Owned), K),
    (data(Free), data2(Releasing), K),
    (data(Free), data2(Splitting), K),
    (data(Free), data2(Deleted), K),
]


def _ids(cases: list[Case]) -> list[str]:
    def brief(v: ServiceUnitStateData | None) -> str:
        if v is None:
            return "null"
        return f"{v.state.value}(dst={v.dst_broker},src={v.source_broker},v{v.version_id}{',force' if v.force else ''})"

    return [f"{i}:{brief(a)}->{brief(b)}" for i, (a, b, _) in enumerate(cases)]


PULSAR_4_CASES = RESOLVER_VERSION_ID + FORCE + TOMBSTONE + RESOLVER_TRANSITIONS_AND_BROKERS
PULSAR_3_0_CASES = COMPACTION_3_0_VERSION_ID + FORCE + TOMBSTONE + COMPACTION_3_0_TRANSITIONS_AND_BROKERS


@pytest.mark.parametrize(("held", "offered", "keep_left"), PULSAR_4_CASES, ids=_ids(PULSAR_4_CASES))
def test_conflict_resolver_pulsar_4(
    held: ServiceUnitStateData | None, offered: ServiceUnitStateData | None, keep_left: bool
) -> None:
    assert should_reject(held, offered) is keep_left
    assert resolve(held, offered).rejected is keep_left


@pytest.mark.parametrize(
    ("storage", "held", "offered", "keep_left"),
    RESOLVER_STORE_TYPE,
    ids=[f"{i}:{c[0].value}" for i, c in enumerate(RESOLVER_STORE_TYPE)],
)
def test_conflict_resolver_store_type(
    storage: StorageType, held: ServiceUnitStateData | None, offered: ServiceUnitStateData, keep_left: bool
) -> None:
    assert should_reject(held, offered, storage) is keep_left


@pytest.mark.parametrize(("held", "offered", "keep_left"), PULSAR_3_0_CASES, ids=_ids(PULSAR_3_0_CASES))
def test_compaction_strategy_pulsar_3_0(
    held: ServiceUnitStateData | None, offered: ServiceUnitStateData | None, keep_left: bool
) -> None:
    assert should_reject(held, offered, model=load_model("pulsar-3.0")) is keep_left


def test_case_counts_match_pulsar_sources() -> None:
    # 7 + 6 + 2 + 7 + 76 asserts in the resolver test; 6 + 2 + 7 + 75 in the 3.0 strategy test.
    assert len(RESOLVER_VERSION_ID) == 7
    assert len(RESOLVER_STORE_TYPE) == 6
    assert len(RESOLVER_TRANSITIONS_AND_BROKERS) == 76
    assert len(COMPACTION_3_0_TRANSITIONS_AND_BROKERS) == 75
