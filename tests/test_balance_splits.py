"""Load-driven bundle splits against Pulsar's own tests, as data: DefaultNamespaceBundleSplitStrategyTest,
SplitSchedulerTest (the enable switches), BundleSplitterTaskTest, and the split algorithms' tests
(RangeEquallyDivide, TopicCountEquallyDivide, SpecifiedPositions, FlowOrQpsEquallyDivide); then the
lab's splits: the load divided by hash range, through the channel on both storages, and bad settings."""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import pytest
from pydantic import ValidationError

from statechan.balance.lab import LabConfig, run
from statechan.balance.load import MB, BrokerReport, LoadData
from statechan.balance.settings import (
    SEED_001,
    BalancerConfig,
    PlacementKind,
    ShedderKind,
    SplitAlgorithm,
    Workload,
    settings_problems,
)
from statechan.balance.split import (
    BundleStats,
    ExtensibleSplitStrategy,
    SplitReason,
    TopicStats,
    modular_bundles_to_split,
    scheduler_enabled,
    split_boundaries,
)
from statechan.keys import parse_key

# -- DefaultNamespaceBundleSplitStrategyTest ---------------------------------------------------

BUNDLE1 = "tenant/namespace/0x00000000_0xFFFFFFFF"
BUNDLE2 = "tenant/namespace/0x00000000_0x0FFFFFFF"
BOUNDARY = {0: 0x7FFFFFFF, 1: 0x07FFFFFF}
"""The test's mocked ``getSplitBoundary`` answers for bundle1 and bundle2."""

SETUP = BalancerConfig(
    namespace_max_bundles=100,
    bundle_max_topics=100,
    bundle_max_sessions=100,
    bundle_max_msg_rate=100,
    bundle_max_bandwidth_mb=100,
    max_splits_per_cycle=1,
    split_hit_count_threshold=3,
)
"""``setup()``'s configuration."""


@dataclass
class FakeView:
    """The test's mocks: the broker owns every bundle (unless told), the namespace has ``count``
    bundles, ``splitting`` keys are Splitting in the channel, boundaries as mocked."""

    keys: tuple[str, ...] = (BUNDLE1, BUNDLE2)
    owner: bool = True
    count: int | Exception = 1
    splitting_keys: tuple[str, ...] = ()

    def key(self, bundle: int) -> str:
        return self.keys[bundle]

    def namespace(self, bundle: int) -> int:
        return 0

    def bounds(self, bundle: int) -> tuple[int, int]:
        b = parse_key(self.keys[bundle])
        return b.lower, b.upper

    def can_split(self, bundle: int) -> bool:
        lo, hi = self.bounds(bundle)
        return hi - lo > 1

    def is_owner(self, bundle: int, broker: int) -> bool:
        return self.owner

    def bundle_count(self, namespace: int) -> int:
        if isinstance(self.count, Exception):
            raise self.count
        return self.count

    def splitting(self) -> Iterable[int]:
        extra = [k for k in self.splitting_keys if k not in self.keys]
        self.keys = (*self.keys, *extra)
        return [self.keys.index(k) for k in self.splitting_keys]

    def boundaries(self, bundle: int, algorithm: SplitAlgorithm) -> list[int] | None:
        return [BOUNDARY[bundle]]


def _stats(**fields: float) -> dict[int, BundleStats]:
    base = {"topics": 5, **fields}
    return {0: BundleStats(**base), 1: BundleStats(**base)}  # type: ignore[arg-type]


@dataclass
class StrategyCase:
    name: str
    stats: dict[int, BundleStats]
    config: BalancerConfig = field(default_factory=lambda: SETUP.model_copy(update={"split_hit_count_threshold": 0}))
    view: FakeView = field(default_factory=FakeView)
    expected: list[tuple[int, SplitReason]] = field(default_factory=list)
    failures: int = 0


OVER_RATE = _stats(msg_rate_in=101)
STRATEGY_CASES = [
    StrategyCase("testNamespaceBundleSplitConditionThreshold", OVER_RATE, expected=[(0, SplitReason.msg_rate)]),
    StrategyCase("testNotEnoughTopics", _stats(msg_rate_in=101, topics=1)),
    StrategyCase("testNamespaceMaximumBundles", OVER_RATE, view=FakeView(count=100)),
    StrategyCase("testEmptyBundleStats", {}),
    StrategyCase("testNoBundleOwner", OVER_RATE, view=FakeView(owner=False)),
    StrategyCase("testError", OVER_RATE, view=FakeView(count=RuntimeError("getBundleCount")), failures=2),
    StrategyCase("testSplittingBundle", OVER_RATE, view=FakeView(splitting_keys=(BUNDLE1,))),
]


@pytest.mark.parametrize("case", STRATEGY_CASES, ids=lambda c: c.name)
def test_default_split_strategy_ports_pulsar(case: StrategyCase) -> None:
    strategy = ExtensibleSplitStrategy()
    decisions = strategy.find(0, case.stats, case.view, case.config)
    assert [(d.bundle, d.reason) for d in decisions] == case.expected
    assert all(d.boundaries == (BOUNDARY[d.bundle],) for d in decisions)
    assert strategy.counter.failed == case.failures


@pytest.mark.parametrize(
    ("name", "stats", "reason"),
    [
        ("testMaxMsgRate", _stats(msg_rate_in=51, msg_rate_out=51), SplitReason.msg_rate),
        ("testMaxTopics", _stats(topics=101), SplitReason.topics),
        ("testMaxSessions", _stats(producers=51, consumers=51), SplitReason.sessions),
        (
            "testMaxBandwidthMbytes",
            _stats(throughput_in=50 * MB + 1, throughput_out=50 * MB + 1),
            SplitReason.bandwidth,
        ),
    ],
)
def test_split_waits_for_the_hit_count_then_splits_one_a_cycle(
    name: str, stats: dict[int, BundleStats], reason: SplitReason
) -> None:
    """With the threshold at 3 and one split a cycle: nothing for three cycles, bundle1 in the
    fourth, bundle2 in the fifth (bundle1's count started again after its split)."""
    strategy = ExtensibleSplitStrategy()
    threshold = SETUP.split_hit_count_threshold
    for i in range(threshold + 2):
        found = [(d.bundle, d.reason) for d in strategy.find(0, stats, FakeView(), SETUP)]
        if i == threshold:
            assert found == [(0, reason)], name
        elif i == threshold + 1:
            assert found == [(1, reason)], name
        else:
            assert found == [], name
    assert strategy.counter.failed == 0


def test_split_needs_a_single_boundary() -> None:
    """``getSplitBoundary`` giving no boundary, or several, is a failure, not a split."""

    class Many(FakeView):
        def boundaries(self, bundle: int, algorithm: SplitAlgorithm) -> list[int] | None:
            return None if bundle == 0 else [1, 2]

    strategy = ExtensibleSplitStrategy()
    config = SETUP.model_copy(update={"split_hit_count_threshold": 0, "max_splits_per_cycle": 10})
    assert strategy.find(0, OVER_RATE, Many(), config) == []
    assert strategy.counter.failed == 2


def test_sibling_splitting_test_is_a_string_prefix_as_in_pulsar() -> None:
    """A Splitting bundle of ``t/ns-10`` with the same lower bound blocks a split of ``t/ns-1``'s bundle."""
    view = FakeView(keys=("t/ns-1/0x00000000_0x7fffffff",), splitting_keys=("t/ns-10/0x00000000_0x3fffffff",))
    strategy = ExtensibleSplitStrategy()
    config = SETUP.model_copy(update={"split_hit_count_threshold": 0})
    assert strategy.find(0, {0: BundleStats(5, msg_rate_in=101)}, view, config) == []


def test_split_scheduler_runs_only_when_the_balancer_and_auto_split_are_on() -> None:
    """SplitSchedulerTest.testDisableLoadBalancer."""
    assert scheduler_enabled(BalancerConfig())
    assert not scheduler_enabled(BalancerConfig(), load_balancer_enabled=False)
    assert not scheduler_enabled(BalancerConfig(auto_split_enabled=False))


# -- BundleSplitterTaskTest (the modular manager) ----------------------------------------------


def _modular_data(bundles: dict[int, tuple[int, float]]) -> LoadData:
    """One broker whose last report lists ``bundles`` (topics, long-term rate in)."""
    n = max(bundles) + 1
    report = BrokerReport((0, 0, 0, 0, 0), 0, 0, 0, 0, frozenset(bundles), 0)
    long_rate = np.zeros(n)
    topics = np.zeros(n, dtype=np.int64)
    for b, (t, rate) in bundles.items():
        long_rate[b] = rate + 1  # msgRateIn and msgRateOut=1
        topics[b] = t
    z = np.zeros(n)
    return LoadData(
        0, {0: report}, z, z.copy(), long_rate, z.copy(), topics=topics, sessions=np.zeros(n, dtype=np.int64)
    )


def test_modular_split_skips_a_bundle_with_one_topic() -> None:
    """testSplitTaskWhenTopicJustOne: long-term rate at the threshold plus 1, but a single topic."""
    data = _modular_data({0: (1, 30000)})
    view = FakeView(keys=("ten/ns/0x00000000_0x80000000",))
    assert modular_bundles_to_split(data, view, BalancerConfig()) == {}


def test_modular_split_stops_at_the_namespace_maximum() -> None:
    """testLoadBalancerNamespaceMaximumBundles: three hot bundles, a maximum of 3, one bundle
    counted now: picks + current count == the maximum."""
    data = _modular_data({0: (5, 60000), 1: (5, 60000), 2: (5, 60000)})
    config = BalancerConfig(namespace_max_bundles=3)
    view = FakeView(
        keys=("ten/ns/0x00000000_0x20000000", "ten/ns/0x20000000_0x40000000", "ten/ns/0x40000000_0x60000000")
    )
    picked = modular_bundles_to_split(data, view, config)
    assert isinstance(view.count, int)
    assert len(picked) + view.count == config.namespace_max_bundles


# -- the split algorithms' tests ---------------------------------------------------------------


def _crc(name: str) -> int:
    """Guava's ``Hashing.crc32().hashString(name, UTF_8).padToLong()``."""
    return zlib.crc32(name.encode()) & 0xFFFFFFFF


def test_range_equally_divide() -> None:
    """RangeEquallyDivideBundleSplitAlgorithmTest."""
    lower, upper = 10, 0xFFFFFFFF
    assert split_boundaries(SplitAlgorithm.range_equally_divide, lower, upper, [], BalancerConfig()) == [
        lower + (upper - lower) // 2
    ]


def test_topic_count_equally_divide() -> None:
    """TopicCountEquallyDivideBundleSplitAlgorithmTest: one topic gives none; a, b, c the middle."""
    one = [TopicStats(_crc("a"), 0, 0)]
    assert split_boundaries(SplitAlgorithm.topic_count_equally_divide, 0, 0xFFFFFFFF, one, BalancerConfig()) is None
    hashes = sorted(_crc(t) for t in "abc")
    start, end = hashes[max(len(hashes) // 2 - 1, 0)], hashes[len(hashes) // 2]
    topics = [TopicStats(_crc(t), 0, 0) for t in "abc"]
    found = split_boundaries(SplitAlgorithm.topic_count_equally_divide, 0, 0xFFFFFFFF, topics, BalancerConfig())
    assert found == [start + (end - start) // 2]


def test_specified_positions_divide() -> None:
    """SpecifiedPositionsBundleSplitAlgorithmTest: one topic gives none; no positions raise; the
    positions strictly inside (1, 1000) are kept."""
    algo = SplitAlgorithm.specified_positions_divide
    one = [TopicStats(1, 0, 0)]
    assert split_boundaries(algo, 1, 1000, one, BalancerConfig(), positions=[1, 2]) is None
    empty: list[list[int] | None] = [None, []]
    for positions in empty:
        with pytest.raises(ValueError, match="can't be empty"):
            split_boundaries(algo, 1, 1000, one, BalancerConfig(), positions=positions)
    two = [TopicStats(1, 0, 0), TopicStats(2, 0, 0)]
    found = split_boundaries(algo, 1, 1000, two, BalancerConfig(), positions=[-1, 0, 1, 100, 200, 500, 800, 1000, 1100])
    assert found == [100, 200, 500, 800]


def _flow_config() -> BalancerConfig:
    return BalancerConfig(bundle_max_msg_rate=1010, bundle_max_bandwidth_mb=100, flow_or_qps_difference_pct=10)


def test_flow_or_qps_equally_divide_keeps_each_part_under_the_thresholds() -> None:
    """FlowOrQpsEquallyDivideBundleSplitAlgorithmTest.testSplitBundleByFlowOrQps: 241 topics; every
    part the boundaries cut stays under the message rate and bandwidth thresholds."""
    topics: list[TopicStats] = []
    for i in range(1, 13):
        rate_in = 24.5 if i < 6 else 25.5
        for j in range(20):
            topics.append(
                TopicStats(_crc(f"persistent://test-tenant1/test-namespace1/test{i}-partition-{j}"), rate_in + 25, 2000)
            )
    topics.append(TopicStats(_crc("persistent://test-tenant1/test-namespace1/test695-partition-0"), 60, 2000))
    config = _flow_config()
    found = split_boundaries(SplitAlgorithm.flow_or_qps_equally_divide, 0, 0xFFFFFFFF, topics, config)
    assert found
    by_hash = sorted(topics, key=lambda t: t.hash)
    i = 0
    for position in found:
        rate = bandwidth = 0.0
        while by_hash[i].hash < position:
            rate += by_hash[i].rate
            bandwidth += by_hash[i].throughput
            i += 1
        assert rate < config.bundle_max_msg_rate
        assert bandwidth < config.bundle_max_bandwidth_mb * MB


def test_flow_or_qps_first_position_overloaded() -> None:
    """testFirstPositionIsOverLoad: the first topic alone passes the threshold, so the first
    boundary falls just past it."""
    names = [f"persistent://test-tenant1/test-namespace1/test-partition-{i}" for i in range(5)]
    hashes = sorted(_crc(n) for n in names)
    topics = [TopicStats(hashes[0], 2000, 2000)] + [TopicStats(h, 49.5, 2000) for h in hashes[1:]]
    found = split_boundaries(SplitAlgorithm.flow_or_qps_equally_divide, 0, 0xFFFFFFFF, topics, _flow_config())
    assert found is not None
    assert found[0] == hashes[0] + (hashes[1] - hashes[0]) // 2 + 1


# -- bad settings --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("setting", "value", "message"),
    [
        ("loadBalancerNamespaceBundleMaxMsgRate", 0, "loadBalancerNamespaceBundleMaxMsgRate must be above 0"),
        ("loadBalancerNamespaceBundleMaxTopics", -5, "loadBalancerNamespaceBundleMaxTopics must be above 0"),
        ("loadBalancerNamespaceBundleMaxBandwidthMbytes", 0, "loadBalancerNamespaceBundleMaxBandwidthMbytes"),
        ("loadBalancerNamespaceBundleMaxSessions", 0, "or -1 to leave sessions out"),
        ("defaultNamespaceBundleSplitAlgorithm", "half", "'half' is not one Pulsar supports"),
        ("loadBalancerNamespaceMaximumBundles", 0, "loadBalancerNamespaceMaximumBundles"),
    ],
)
def test_bad_split_settings_are_named(setting: str, value: object, message: str) -> None:
    with pytest.raises(ValidationError) as info:
        BalancerConfig.model_validate({setting: value})
    assert any(message in line for line in settings_problems(info.value)), settings_problems(info.value)


def test_sessions_threshold_minus_one_leaves_sessions_out() -> None:
    config = BalancerConfig(bundle_max_sessions=-1)
    assert split_boundaries(SplitAlgorithm.range_equally_divide, 0, 4, [], config) == [2]


# -- the lab's splits ----------------------------------------------------------------------------

HOT = Workload(
    brokers=6,
    namespaces=2,
    bundles_per_namespace=6,
    hours=2.0,
    heavy_bundles=1,
    heavy_start_hours=0.0,
    heavy_ramp_hours=0.5,
    bursts_per_hour=0,
    hot_per_hour=0,
    churn_per_hour=0,
)


@pytest.mark.parametrize(
    ("shedder", "placement"),
    [
        (ShedderKind.threshold, PlacementKind.least_long_term_message_rate),
        (ShedderKind.transfer, PlacementKind.extensible),
    ],
)
def test_a_hot_bundle_is_split_and_its_topics_go_with_their_hashes(
    shedder: ShedderKind, placement: PlacementKind
) -> None:
    result = run(LabConfig(workload=HOT, shedder=shedder, placement=placement))
    assert result.splits, "the heavy bundle passes loadBalancerNamespaceBundleMaxMsgRate"
    assert {s.reason for s in result.splits} == {SplitReason.msg_rate.value}
    counts = result.namespace_bundles
    assert counts[-1].sum() == counts[0].sum() + len(result.splits)
    off = run(
        LabConfig(
            workload=HOT,
            shedder=shedder,
            placement=placement,
            balancer=SEED_001.model_copy(update={"auto_split_enabled": False}),
        )
    )
    assert off.splits == []
    # the same traffic either way: splitting moves load between brokers, it does not make any
    assert result.load.sum(axis=1).mean() == pytest.approx(off.load.sum(axis=1).mean(), rel=0.1)
    if shedder is ShedderKind.transfer:
        assert not any(e.cause == "split" for e in result.events)  # the extensible split keeps children in place
    else:
        assert any(e.cause == "split" for e in result.events)  # the modular split unloads its children


def test_split_divides_the_load_by_hash_range() -> None:
    from statechan.balance.lab import _Run, setup
    from statechan.balance.load import Reporter, topic_bundles
    from statechan.balance.placement import make_placement

    config = LabConfig(workload=HOT)
    s = setup(config)
    r = _Run(
        config,
        __import__("statechan.balance.lab", fromlist=["Direct"]).Direct(),
        s,
        Reporter(config.balancer, 6, len(s.bundles)),
        make_placement(config.placement),
        np.random.default_rng(0),
        topic_bundles(s.traffic, s.bundles),
    )
    heavy = int(s.traffic.heavy[0])
    before = s.traffic.at(120, r.topic_bundle, len(s.bundles))
    lo, hi = int(s.bundles.lower[heavy]), int(s.bundles.upper[heavy])
    children = r.split(heavy, 0, SplitReason.msg_rate, [lo + (hi - lo) // 3], 1)
    after = s.traffic.at(120, r.topic_bundle, len(s.bundles))
    assert len(children) == 2
    assert after.rate[children].sum() == pytest.approx(before.rate[heavy])
    assert after.topics[children].sum() == before.topics[heavy]
    hashes = s.traffic.topic_hash
    assert (hashes[r.topic_bundle == children[0]] < lo + (hi - lo) // 3).all()
    assert (hashes[r.topic_bundle == children[1]] >= lo + (hi - lo) // 3).all()
    assert s.owner[heavy] == -1
    assert (s.owner[list(children)] == s.owner[children[0]]).all()


@pytest.mark.parametrize("store", ["system-topic", "metadata-store"])
def test_splits_through_the_channel_break_no_invariant(store: str) -> None:
    """Every split the lab decides is the channel's split flow; the catalogue holds on both storages,
    and the lookups during each split are counted."""
    from statechan.balance.channel import ThroughChannel
    from statechan.cluster import StoreKind

    workload = HOT.model_copy(update={"hours": 1.0})
    config = LabConfig(workload=workload, shedder=ShedderKind.transfer, placement=PlacementKind.extensible)
    alone = run(config)
    carrier = ThroughChannel(workload, store=StoreKind(store), check_every_minutes=5)
    carried = run(config, carrier)
    counts = carrier.finish()
    assert alone.splits
    assert carried.splits == alone.splits
    assert carried.events == alone.events
    assert counts["splits"] == len(alone.splits)
    assert counts["breaches"] == 0, carrier.breaches
    assert counts["mismatches"] == 0
    assert counts["split_lookups"] == 3 * len(alone.splits)
    assert counts["split_lookups_failed"] == 0
