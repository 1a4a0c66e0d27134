"""Load-driven bundle splits, as Pulsar decides them.

- :func:`split_boundaries`: the four split algorithms of ``org.apache.pulsar.common.naming``
  (``RangeEquallyDivideBundleSplitAlgorithm``, ``TopicCountEquallyDivideBundleSplitAlgorithm``,
  ``SpecifiedPositionsBundleSplitAlgorithm``, ``FlowOrQpsEquallyDivideBundleSplitAlgorithm``),
  each ``getSplitBoundary`` over the bundle's topics (their hashes and rates).
- :class:`ExtensibleSplitStrategy`: ``extensions.strategy.DefaultNamespaceBundleSplitStrategyImpl``
  (``findBundlesToSplit``), run by ``extensions.scheduler.SplitScheduler.execute`` on every broker
  every ``loadBalancerSplitIntervalMinutes`` over the bundles it owns, with their current stats.
- :func:`modular_bundles_to_split`: ``impl.BundleSplitterTask.findBundlesToSplit``, run by the
  leader's ``ModularLoadManagerImpl.checkNamespaceBundleSplit`` after every ``updateAll``, over
  every broker's last report and the bundles' long-term averages.

Both read the bundles through a :class:`SplitView`, so Pulsar's tests (which mock the broker
service, the namespace service and the channel) port as data.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from statechan.balance.load import MB, BrokerReport, LoadData
from statechan.balance.settings import BalancerConfig, SplitAlgorithm


class SplitReason(enum.Enum):
    """``SplitDecision.Reason``."""

    topics = "Topics"
    sessions = "Sessions"
    msg_rate = "MsgRate"
    bandwidth = "Bandwidth"
    unknown = "Unknown"


@dataclass(frozen=True)
class BundleStats:
    """A bundle's ``NamespaceBundleStats`` as the split strategies read them."""

    topics: int
    msg_rate_in: float = 0.0
    msg_rate_out: float = 0.0
    throughput_in: float = 0.0
    throughput_out: float = 0.0
    producers: int = 0
    consumers: int = 0

    @property
    def rate(self) -> float:
        return self.msg_rate_in + self.msg_rate_out

    @property
    def throughput(self) -> float:
        return self.throughput_in + self.throughput_out

    @property
    def sessions(self) -> int:
        return self.producers + self.consumers


@dataclass(frozen=True)
class TopicStats:
    """One topic of a bundle: its hash (``getLongHashCode``) and its rates (in + out)."""

    hash: int
    rate: float
    throughput: float


def split_boundaries(
    algorithm: SplitAlgorithm,
    lower: int,
    upper: int,
    topics: Sequence[TopicStats],
    config: BalancerConfig,
    positions: Sequence[int] | None = None,
) -> list[int] | None:
    """``NamespaceBundleSplitAlgorithm.getSplitBoundary``: where to split ``[lower, upper)``, or
    None when the algorithm declines (too few topics, no load past the thresholds). A
    ``specified_positions_divide`` without positions raises, as Pulsar's does
    (``SplitBoundaries can't be empty``)."""
    if algorithm is SplitAlgorithm.range_equally_divide:
        return [lower + (upper - lower) // 2]
    if algorithm is SplitAlgorithm.specified_positions_divide:
        if not positions:
            raise ValueError("SplitBoundaries can't be empty")
        if len(topics) <= 1:
            return None
        inside = [p for p in sorted(positions) if lower < p < upper]
        return inside or None
    if len(topics) <= 1:
        return None
    if algorithm is SplitAlgorithm.topic_count_equally_divide:
        hashes = sorted(t.hash for t in topics)
        start = hashes[max(len(hashes) // 2 - 1, 0)]
        end = hashes[len(hashes) // 2]
        return [start + (end - start) // 2]
    # flow_or_qps_equally_divide
    max_rate = config.bundle_max_msg_rate
    max_bandwidth = config.bundle_max_bandwidth_mb * MB
    diff = config.flow_or_qps_difference_pct / 100.0
    by_hash: dict[int, TopicStats] = {}
    for t in topics:
        if t.rate <= 0 and t.throughput <= 0:
            continue  # an empty topic
        by_hash[t.hash] = t
    total_rate = sum(t.rate for t in by_hash.values())
    total_bandwidth = sum(t.throughput for t in by_hash.values())
    if len(by_hash) < 2 or (total_rate < max_rate * (1 + diff) and total_bandwidth < max_bandwidth * (1 + diff)):
        return None
    hashes = sorted(by_hash)
    out: list[int] = []
    rate, bandwidth = by_hash[hashes[0]].rate, by_hash[hashes[0]].throughput
    for i in range(1, len(hashes)):
        t = by_hash[hashes[i]]
        if rate + t.rate > max_rate or bandwidth + t.throughput > max_bandwidth:
            out.append(hashes[i - 1] + (hashes[i] - hashes[i - 1]) // 2 + 1)
            rate, bandwidth = t.rate, t.throughput
        else:
            rate += t.rate
            bandwidth += t.throughput
    return out


def split_reason(stats: BundleStats, config: BalancerConfig, long_rate: float | None = None) -> SplitReason:
    """The first threshold a bundle passes, in Pulsar's order: topics, sessions (when the
    threshold is above 0), message rate, throughput. ``long_rate`` (rate, throughput) replaces
    the current stats' rates (the modular manager compares long-term averages)."""
    if stats.topics > config.bundle_max_topics:
        return SplitReason.topics
    if config.bundle_max_sessions > 0 and stats.sessions > config.bundle_max_sessions:
        return SplitReason.sessions
    if stats.rate > config.bundle_max_msg_rate:
        return SplitReason.msg_rate
    if stats.throughput > config.bundle_max_bandwidth_mb * MB:
        return SplitReason.bandwidth
    return SplitReason.unknown


class SplitView(Protocol):
    """What the split strategies ask of the cluster (Pulsar: the broker service, the namespace
    service and its bundle factory, the channel)."""

    def key(self, bundle: int) -> str:
        """``tenant/namespace/0xLLLLLLLL_0xUUUUUUUU``."""
        ...

    def namespace(self, bundle: int) -> int: ...

    def bounds(self, bundle: int) -> tuple[int, int]: ...

    def can_split(self, bundle: int) -> bool: ...

    def is_owner(self, bundle: int, broker: int) -> bool: ...

    def bundle_count(self, namespace: int) -> int:
        """``NamespaceService.getBundleCount`` (may raise)."""
        ...

    def splitting(self) -> Iterable[int]:
        """Bundles the channel holds Splitting."""
        ...

    def boundaries(self, bundle: int, algorithm: SplitAlgorithm) -> list[int] | None:
        """``NamespaceService.getSplitBoundary`` with the default algorithm (may raise)."""
        ...


@dataclass(frozen=True)
class SplitDecision:
    """A split to publish (``SplitDecision`` with its ``Split``): the bundle, the broker that
    splits it, why, and the boundaries of its children."""

    bundle: int
    broker: int
    reason: SplitReason
    boundaries: tuple[int, ...]


@dataclass
class SplitCounter:
    """``SplitCounter``: decisions that went through, by reason, and failures."""

    succeeded: Counter[SplitReason] = field(default_factory=Counter)
    failed: int = 0

    def failure(self) -> None:
        self.failed += 1


@dataclass
class ExtensibleSplitStrategy:
    """``DefaultNamespaceBundleSplitStrategyImpl.findBundlesToSplit`` (one per broker).

    A bundle with fewer than 2 topics, not owned by this broker or whose range cannot split is
    skipped (the last counted as a failure); one past a threshold (:func:`split_reason`) adds a
    hit, one under all of them loses its hits; after more than
    ``loadBalancerNamespaceBundleSplitConditionHitCountThreshold`` hits in a row it is split,
    unless its namespace has ``loadBalancerNamespaceMaximumBundles`` bundles (counting this
    cycle's splits), a bundle of its namespace sharing its lower or upper bound is Splitting, or
    the default algorithm gives no single boundary (a failure). At most
    ``loadBalancerMaxNumberOfBundlesToSplitPerCycle`` a cycle."""

    counter: SplitCounter = field(default_factory=SplitCounter)
    hit_counts: dict[int, int] = field(default_factory=dict)

    def find(
        self, broker: int, stats: Mapping[int, BundleStats], view: SplitView, config: BalancerConfig
    ) -> list[SplitDecision]:
        decisions: list[SplitDecision] = []
        decided_in: Counter[int] = Counter()
        splitting = {b: view.key(b) for b in view.splitting()}
        for bundle in [b for b in self.hit_counts if b not in stats]:
            del self.hit_counts[bundle]
        for bundle, s in stats.items():
            if s.topics < 2 or not view.is_owner(bundle, broker):
                continue
            if not view.can_split(bundle):
                self.counter.failure()
                continue
            reason = split_reason(s, config)
            if reason is not SplitReason.unknown:
                self.hit_counts[bundle] = self.hit_counts.get(bundle, 0) + 1
            else:
                self.hit_counts.pop(bundle, None)
            if self.hit_counts.get(bundle, 0) <= config.split_hit_count_threshold:
                continue
            namespace = view.namespace(bundle)
            try:
                count = view.bundle_count(namespace)
            except Exception:
                self.counter.failure()
                continue
            if count + decided_in[namespace] >= config.namespace_max_bundles:
                continue
            if self._sibling_splitting(view.key(bundle), splitting.values()):
                continue
            try:
                boundaries = view.boundaries(bundle, config.split_algorithm)
            except Exception:
                self.counter.failure()
                continue
            if boundaries is None or len(boundaries) != 1:
                self.counter.failure()
                continue
            decisions.append(SplitDecision(bundle, broker, reason, (boundaries[0],)))
            decided_in[namespace] += 1
            self.hit_counts.pop(bundle, None)
            if len(decisions) == config.max_splits_per_cycle:
                break
        return decisions

    @staticmethod
    def _sibling_splitting(key: str, splitting: Iterable[str]) -> bool:
        """Pulsar's test: a Splitting key that starts with this bundle's namespace and whose range
        starts with this bundle's lower bound or ends with its upper bound (a string prefix test,
        so namespace ``t/ns-1`` also matches ``t/ns-10``'s keys)."""
        namespace, _, bundle_range = key.rpartition("/")
        lower, _, upper = bundle_range.partition("_")
        for other in splitting:
            if other.startswith(namespace):
                other_range = other.rpartition("/")[2]
                if other_range.lower().startswith(lower.lower()) or other_range.lower().endswith(upper.lower()):
                    return True
        return False


def scheduler_enabled(config: BalancerConfig, load_balancer_enabled: bool = True) -> bool:
    """``SplitScheduler.isLoadBalancerAutoBundleSplitEnabled``: the load balancer and auto split both on."""
    return load_balancer_enabled and config.auto_split_enabled


def modular_bundles_to_split(data: LoadData, view: SplitView, config: BalancerConfig) -> dict[int, int]:
    """``BundleSplitterTask.findBundlesToSplit``: bundle -> the broker whose last report lists it,
    for every bundle with at least 2 topics whose topics, sessions (when that threshold is above
    0), long-term message rate or long-term throughput pass the thresholds, while its namespace
    (counting this pass's picks) stays under ``loadBalancerNamespaceMaximumBundles``."""
    picked: dict[int, int] = {}
    per_namespace: Counter[int] = Counter()
    topics, sessions = data.topics, data.sessions
    size = min(topics.shape[0], data.long_rate.shape[0])
    over = (topics[:size] > config.bundle_max_topics) | (data.long_rate[:size] > config.bundle_max_msg_rate)
    over |= data.long_throughput[:size] > config.bundle_max_bandwidth_mb * MB
    if config.bundle_max_sessions > 0:
        over |= sessions[:size] > config.bundle_max_sessions
    hot = {int(b) for b in np.flatnonzero(over & (topics[:size] >= 2))}
    if not hot:
        return picked
    for broker in sorted(data.reports):
        report: BrokerReport = data.reports[broker]
        for bundle in sorted(report.bundles & hot):
            namespace = view.namespace(bundle)
            try:
                count = view.bundle_count(namespace)
            except Exception:
                continue
            if count + per_namespace[namespace] < config.namespace_max_bundles:
                picked[bundle] = broker
                per_namespace[namespace] += 1
    return picked
