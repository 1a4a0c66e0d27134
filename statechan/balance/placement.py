"""Placement strategies: which broker an unloaded (or new) bundle goes to, as Pulsar chooses.

Ties and near-ties are broken by the caller's seeded generator, where Pulsar draws from
``ThreadLocalRandom``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from statechan.balance.load import LoadData, max_usage_with_heap, max_usage_with_weight, max_usage_without_heap
from statechan.balance.settings import BalancerConfig, PlacementKind


class Placement(Protocol):
    def select(
        self, candidates: Sequence[int], bundle: int, data: LoadData, config: BalancerConfig, rng: np.random.Generator
    ) -> int | None: ...


def _draw(best: Sequence[int], rng: np.random.Generator) -> int:
    return best[int(rng.integers(len(best)))]


@dataclass
class LeastLongTermMessageRate:
    """``org.apache.pulsar.broker.loadbalance.impl.LeastLongTermMessageRate``: the broker with the
    least long-term message rate (its reported bundles' plus those preallocated to it since); a
    broker above the overload threshold scores infinity. The score counts messages, not the
    resources the shedder measures: the mismatch seed 001 reports.

    ``pulsar_2_10``: the overload test as Pulsar 2.10 made it (``getMaxResourceUsage``: every
    resource unweighted, heap included), so a broker whose heap passes the threshold scores
    infinity whatever the weights (seed 001's point 2); master weighs the usages."""

    pulsar_2_10: bool = False

    def score(self, broker: int, data: LoadData, config: BalancerConfig) -> float:
        report = data.reports.get(broker)
        if report is not None:
            usage = np.asarray(report.usage)
            if self.pulsar_2_10:
                level = float(max_usage_with_heap(usage))
            else:
                level = float(max_usage_with_weight(usage, config.weights()))
            if level > config.overloaded_threshold_pct / 100.0:
                return math.inf
        return data.long_term_rate(broker) + data.preallocated_rate(broker)

    def select(
        self, candidates: Sequence[int], bundle: int, data: LoadData, config: BalancerConfig, rng: np.random.Generator
    ) -> int | None:
        best: list[int] = []
        low = math.inf
        for broker in candidates:
            value = self.score(broker, data, config)
            if value < low:
                best, low = [broker], value
            elif value == low:
                best.append(broker)
        if not best:
            best = list(candidates)
        return _draw(best, rng) if best else None


@dataclass
class LeastResourceUsageWithWeight:
    """``org.apache.pulsar.broker.loadbalance.impl.LeastResourceUsageWithWeight`` (PIP-174, seed
    001's proposal): the same weighted maximum usage the ThresholdShedder looks at (heap left out),
    smoothed with ``loadBalancerHistoryResourcePercentage`` on every call; a random broker among
    those at least ``loadBalancerAverageResourceUsageDifferenceThresholdPercentage`` under the
    candidates' average, or any candidate when none is."""

    history: dict[int, float] = field(default_factory=dict)

    def select(
        self, candidates: Sequence[int], bundle: int, data: LoadData, config: BalancerConfig, rng: np.random.Generator
    ) -> int | None:
        if not candidates:
            return None
        h = config.history_percentage
        total = 0.0
        for broker in candidates:
            report = data.reports.get(broker)
            if report is None:
                continue  # Pulsar reads a broker's data unconditionally; one without a report counts as idle
            previous = self.history.get(broker)
            if not report.bundles or report.msg_rate == 0:
                previous = None  # a restarted or idle broker starts its history afresh
            usage = float(max_usage_without_heap(np.asarray(report.usage), config.weights()))
            value = usage if previous is None else previous * h + (1 - h) * usage
            self.history[broker] = value
            total += value
        avg = total / len(candidates)
        diff = config.average_usage_difference_pct / 100.0
        best = [b for b in candidates if self.history.get(b, 1.0) + diff <= avg]
        return _draw(best or list(candidates), rng)


@dataclass
class ExtensibleLeastResourceUsageWithWeight:
    """``org.apache.pulsar.broker.loadbalance.extensions.strategy.LeastResourceUsageWithWeight``,
    the extensible load manager's default: the brokers' own moving average (``weightedMaxEMA``
    from their reports), brokers without load data skipped, a random one at least the difference
    threshold under the average."""

    def select(
        self, candidates: Sequence[int], bundle: int, data: LoadData, config: BalancerConfig, rng: np.random.Generator
    ) -> int | None:
        if not candidates:
            return None
        known = [b for b in candidates if b in data.reports]
        best: list[int] = []
        if known:
            avg = sum(data.reports[b].weighted_max_ema for b in known) / len(known)
            diff = config.average_usage_difference_pct / 100.0
            best = [b for b in known if data.reports[b].weighted_max_ema + diff <= avg]
        return _draw(best or list(candidates), rng)


def make_placement(kind: PlacementKind, pulsar_2_10: bool = False) -> Placement:
    """A fresh placement strategy (its history starts empty); ``pulsar_2_10`` gives
    ``LeastLongTermMessageRate`` its 2.10 overload test."""
    if kind is PlacementKind.least_long_term_message_rate:
        return LeastLongTermMessageRate(pulsar_2_10)
    if kind is PlacementKind.least_resource_usage_with_weight:
        return LeastResourceUsageWithWeight()
    return ExtensibleLeastResourceUsageWithWeight()


def modular_select(
    strategy: Placement,
    everyone: Sequence[int],
    same_namespace: Sequence[int],
    bundle: int,
    data: LoadData,
    config: BalancerConfig,
    rng: np.random.Generator,
    seen: list[int] | None = None,
) -> int | None:
    """``ModularLoadManagerImpl.selectBroker`` around a modular strategy: with
    ``loadBalancerDistributeBundlesEvenlyEnabled`` (the default), only the brokers serving the
    fewest bundles of the bundle's namespace are candidates
    (``LoadManagerShared.removeMostServicingBrokersForNamespace``; ``same_namespace[b]`` is that
    count); a choice whose weighted maximum usage (CPU, direct memory, bandwidth) is over the
    overload threshold is made again among every broker. ``seen`` collects the candidate count."""
    candidates = list(everyone)
    if config.distribute_bundles_evenly:
        least = min(same_namespace[b] for b in everyone)
        candidates = [b for b in everyone if same_namespace[b] == least]
    if seen is not None:
        seen.append(len(candidates))
    chosen = strategy.select(candidates, bundle, data, config, rng)
    if chosen is None:
        return None
    report = data.reports.get(chosen)
    over = config.overloaded_threshold_pct / 100.0
    if report is not None and float(max_usage_without_heap(np.asarray(report.usage), config.weights())) > over:
        retry = strategy.select(everyone, bundle, data, config, rng)
        if retry is not None:
            chosen = retry
    return chosen
