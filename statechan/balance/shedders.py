"""Load shedding strategies, each following the Pulsar class it is named after.

A shedder reads the leader's :class:`LoadData` and proposes moves; the run loop carries them
out (directly, or through the channel). Bundles unloaded within the grace period are never
proposed again, as Pulsar's ``recentlyUnloadedBundles`` has it. Brokers are visited in index
order where Pulsar iterates a hash map, so a run is reproducible.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from statechan.balance.load import MB, Floats, Ints, LoadData, max_usage, max_usage_with_weight
from statechan.balance.settings import BalancerConfig, ShedderKind

ADDITIONAL_THRESHOLD_PERCENT_MARGIN = 0.05
"""ThresholdShedder and OverloadShedder aim this far below their line."""


@dataclass(frozen=True, order=True)
class Move:
    """Take ``bundle`` off ``source``: an unload (the placement picks the new owner on the
    clients' lookup) or, with ``destination``, a transfer (PIP-307)."""

    bundle: int
    source: int
    destination: int | None = None


class Shedder(Protocol):
    def find(self, data: LoadData, config: BalancerConfig, owner: Ints) -> list[Move]: ...


def _heaviest_first(data: LoadData, broker: int, key: Floats, minimum: float, recent: dict[int, int]) -> list[Move]:
    """The broker's reported bundles by ``key`` descending (recently unloaded ones skipped),
    taken until at least ``minimum`` is marked, and always at least one."""
    report = data.reports[broker]
    candidates = sorted((b for b in report.bundles if b not in recent), key=lambda b: (-float(key[b]), b))
    moves: list[Move] = []
    marked = 0.0
    for bundle in candidates:
        if marked < minimum or not moves:
            moves.append(Move(bundle, broker))
            marked += float(key[bundle])
    return moves


def _usage_within_limit(usage: tuple[float, ...], weights: tuple[float, ...]) -> float:
    """The weighted maximum usage; when it passes 100 % (a mis-set limit), the signals above
    100 % are skipped, as ``getMaxResourceUsageWithWeightWithinLimit``."""
    value = float(max_usage_with_weight(np.asarray(usage), weights))
    if value <= 1.0:
        return value
    return max((u * w for u, w in zip(usage, weights, strict=True) if u <= 100.0), default=0.0) / 100.0


@dataclass
class ThresholdShedder:
    """``org.apache.pulsar.broker.loadbalance.impl.ThresholdShedder``: a broker whose smoothed
    weighted maximum usage is more than ``loadBalancerBrokerThresholdShedderPercentage`` above the
    cluster's average sheds its busiest bundles (short-term throughput) until enough throughput to
    come 5 % under that line is marked."""

    average_usage: dict[int, float] = field(default_factory=dict)
    """``brokerAvgResourceUsage``: the history, updated once per shedding cycle (a broker's first
    value is its current usage)."""

    def find(self, data: LoadData, config: BalancerConfig, owner: Ints) -> list[Move]:
        threshold = config.threshold_shedder_pct / 100.0
        min_throughput = config.bundle_unload_min_throughput_mb * MB
        h = config.history_percentage
        weights = config.weights()
        brokers = sorted(data.reports)
        for b in brokers:
            current = _usage_within_limit(data.reports[b].usage, weights)
            previous = self.average_usage.get(b)
            self.average_usage[b] = current if previous is None else previous * h + (1 - h) * current
        if not brokers:
            return []
        avg = sum(self.average_usage.get(b, 0.0) for b in brokers) / len(brokers)
        if avg == 0:
            return []
        moves: list[Move] = []
        for b in brokers:
            usage = self.average_usage.get(b, 0.0)
            if avg - threshold < usage < avg + threshold:
                continue
            report = data.reports[b]
            to_offload = report.throughput * (usage - avg - threshold + ADDITIONAL_THRESHOLD_PERCENT_MARGIN)
            if to_offload < min_throughput or len(report.bundles) <= 1:
                continue
            moves.extend(_heaviest_first(data, b, data.short_throughput, to_offload, data.recently_unloaded))
        return moves


@dataclass
class OverloadShedder:
    """``org.apache.pulsar.broker.loadbalance.impl.OverloadShedder``: a broker whose maximum usage
    (CPU, direct memory, bandwidth) reaches ``loadBalancerBrokerOverloadedThresholdPercentage``
    sheds its busiest bundles until 5 % under the line is marked."""

    def find(self, data: LoadData, config: BalancerConfig, owner: Ints) -> list[Move]:
        line = config.overloaded_threshold_pct / 100.0
        moves: list[Move] = []
        for b in sorted(data.reports):
            report = data.reports[b]
            usage = float(max_usage(np.asarray(report.usage)))
            if usage < line or len(report.bundles) <= 1:
                continue
            to_offload = report.throughput * (usage - line + ADDITIONAL_THRESHOLD_PERCENT_MARGIN)
            moves.extend(_heaviest_first(data, b, data.short_throughput, to_offload, data.recently_unloaded))
        return moves


@dataclass
class UniformLoadShedder:
    """``org.apache.pulsar.broker.loadbalance.impl.UniformLoadShedder``: when the busiest broker's
    message rate exceeds the idlest's by ``loadBalancerMsgRateDifferenceShedderThreshold`` percent
    (or its throughput by ``...MsgThroughputMultiplierDifferenceShedderThreshold`` times), the
    busiest sheds bundles worth ``maxUnloadPercentage`` of the difference."""

    def find(self, data: LoadData, config: BalancerConfig, owner: Ints) -> list[Move]:
        eps = 1e-6
        brokers = sorted(data.reports)
        if not brokers:
            return []
        rate_max = thr_max = brokers[0]  # Pulsar also tracks the idlest brokers, only to log them
        max_rate, max_thr, min_rate, min_thr = -1.0, -1.0, float(2**31 - 1), float(2**31 - 1)
        for b in brokers:
            r = data.reports[b]
            if r.msg_rate > max_rate:
                rate_max, max_rate = b, r.msg_rate
            if r.throughput > max_thr:
                thr_max, max_thr = b, r.throughput
            min_rate = min(min_rate, r.msg_rate)
            min_thr = min(min_thr, r.throughput)
        if abs(min_rate) <= eps:
            min_rate = 1.0
        if abs(min_thr) <= eps:
            min_thr = 1.0
        rate_exceeded = (
            config.msg_rate_difference_pct > 0
            and (max_rate - min_rate) * 100 / min_rate > config.msg_rate_difference_pct
        )
        thr_exceeded = (
            config.throughput_multiplier_difference > 0 and max_thr / min_thr > config.throughput_multiplier_difference
        )
        if rate_exceeded:
            source, key = rate_max, data.short_rate
            required = float(int((max_rate - min_rate) * config.max_unload_percentage))
            floor = config.min_unload_message
        elif thr_exceeded:
            source, key = thr_max, data.short_throughput
            required = float(int((max_thr - min_thr) * config.max_unload_percentage))
            floor = config.min_unload_message_throughput
        else:
            return []
        report = data.reports[source]
        if len(report.bundles) <= 1 or required < floor:
            return []
        moves: list[Move] = []
        ranked = sorted(
            (b for b in report.bundles if b not in data.recently_unloaded and key[b] > 0),
            key=lambda b: (-float(key[b]), b),
        )
        cap = config.max_unload_bundles_per_shedding
        for bundle in ranked:
            if cap != -1 and len(moves) >= cap:
                break
            value = float(key[bundle])
            if value <= required + 1000:
                required -= value
                moves.append(Move(bundle, source))
        return moves


@dataclass
class _Stats:
    """``TransferShedder.LoadStats``: the brokers' average and standard deviation of load, and the
    brokers sorted by load, consumed from both ends as moves are planned."""

    avg: float = 0.0
    std: float = 0.0
    sq_sum: float = 0.0
    total: int = 0
    order: list[int] = field(default_factory=list)
    max_index: int = 0
    min_index: int = 0
    shed: int = 0
    max_shed: int = 0

    def offload(self, high: float, low: float, amount: float) -> None:
        self.sq_sum -= high * high + low * low
        high_after = max(0.0, high - amount)
        low_after = low + amount
        self.sq_sum += high_after * high_after + low_after * low_after
        self.std = math.sqrt(abs(self.sq_sum / self.total - self.avg * self.avg))
        self.shed += 1
        self.min_index += 1

    def transferable(self) -> bool:
        return self.shed < self.max_shed and self.min_index < self.max_index


@dataclass
class TransferShedder:
    """``org.apache.pulsar.broker.loadbalance.extensions.scheduler.TransferShedder`` (PIP-192):
    while the standard deviation of the brokers' smoothed load is above
    ``loadBalancerBrokerLoadTargetStd`` (or the idlest broker is underloaded, or the busiest
    overloaded) for more than ``loadBalancerSheddingConditionHitCountThreshold`` cycles in a row,
    move bundles from the busiest brokers to the idlest ones — half their difference each —
    by transfer, at most ``loadBalancerMaxNumberOfBrokerSheddingPerCycle`` pairs a cycle."""

    hit_count: int = 0

    def find(self, data: LoadData, config: BalancerConfig, owner: Ints) -> list[Move]:
        stats = self._stats(data, config)
        if stats is None:
            return []
        target = config.target_std
        reports = data.reports
        if stats.std > target or self._underloaded(data, config, stats) or self._overloaded(data, config, stats):
            self.hit_count += 1
        else:
            self.hit_count = 0
        if self.hit_count <= config.condition_hit_count_threshold:
            return []
        moves: list[Move] = []
        while stats.transferable():
            if not (
                stats.std > target or self._underloaded(data, config, stats) or self._overloaded(data, config, stats)
            ):
                break
            high_broker = stats.order[stats.max_index]
            stats.max_index -= 1
            low_broker = stats.order[stats.min_index]
            high, low = reports[high_broker], reports[low_broker]
            max_load, min_load = high.weighted_max_ema, low.weighted_max_ema
            offload = (max_load - min_load) / 2
            max_thr = high.throughput
            min_thr = low.throughput
            target_thr = max_thr * offload / max_load if max_load > 0 else 0.0
            tops = high.top_bundles
            if len(tops) <= 1:
                continue
            low_tops = iter(low.top_bundles)
            marked = gained = 0.0
            remaining = len(tops)
            for bundle, bundle_thr in tops:
                if int(owner[bundle]) != high_broker or bundle in data.recently_unloaded:
                    continue
                if remaining <= 1:
                    break
                swaps: list[Move] = []
                swap = False
                if marked - gained + bundle_thr > target_thr:
                    if config.transfer_enabled:
                        high_new = max_thr - marked + gained - bundle_thr
                        low_new = min_thr + marked - gained + bundle_thr
                        for other, other_thr in low_tops:
                            if high_new + other_thr < max_thr and low_new - other_thr < max_thr:
                                swaps.append(Move(other, low_broker, high_broker))
                                high_new += other_thr
                                low_new -= other_thr
                                if low_new <= high_new and high_new < max_thr * 0.75:
                                    swap = True
                                    break
                    if not swap:
                        break
                if config.transfer_enabled:
                    moves.extend(swaps)
                    # Pulsar adds the swapped traffic to the gain only in its debug branch
                moves.append(Move(bundle, high_broker, low_broker if config.transfer_enabled else None))
                marked += bundle_thr
                remaining -= 1
            if marked > 0 and max_thr > 0:
                stats.offload(max_load, min_load, (marked - gained) * max_load / max_thr)
        if moves:
            self.hit_count = 0
        return moves

    @staticmethod
    def _stats(data: LoadData, config: BalancerConfig) -> _Stats | None:
        """``LoadStats.update``: None when the cycle is skipped (outdated or missing load data,
        or a broker that took part in a transfer has not reported since the shedding delay)."""
        total = sq = 0.0
        count = 0
        for b in sorted(data.reports):
            report = data.reports[b]
            if data.now_ms - report.updated_at_ms > config.load_data_ttl_s * 1000:
                continue
            moved_at = data.recently_unloaded_brokers.get(b)
            if moved_at is not None:
                if report.updated_at_ms - moved_at < config.shedding_delay_s * 1000:
                    return None
                del data.recently_unloaded_brokers[b]
            total += report.weighted_max_ema
            sq += report.weighted_max_ema**2
            count += 1
        if count == 0:
            return None
        avg = total / count
        order = sorted(data.reports, key=lambda b: (data.reports[b].weighted_max_ema, b))
        return _Stats(
            avg,
            math.sqrt(max(0.0, sq / count - avg * avg)),
            sq,
            count,
            order,
            len(order) - 1,
            0,
            0,
            config.max_brokers_shedding_per_cycle,
        )

    @staticmethod
    def _underloaded(data: LoadData, config: BalancerConfig, stats: _Stats) -> bool:
        low = data.reports[stats.order[stats.min_index]]
        multiplier = min(0.5, max(0.0, config.target_std / 2.0))
        if low.weighted_max_ema < stats.avg * multiplier:
            return True
        high = data.reports[stats.order[stats.max_index]]
        return low.throughput_ema < high.throughput_ema * multiplier

    @staticmethod
    def _overloaded(data: LoadData, config: BalancerConfig, stats: _Stats) -> bool:
        load = data.reports[stats.order[stats.max_index]].weighted_max_ema
        return load > config.overloaded_threshold_pct / 100.0 and load > stats.avg + config.target_std


@dataclass
class NoShedder:
    """The no-shedding baseline: ``loadBalancerSheddingEnabled=false`` (bundles stay where they
    were placed; splits and faults still move them)."""

    def find(self, data: LoadData, config: BalancerConfig, owner: Ints) -> list[Move]:
        return []


def make_shedder(kind: ShedderKind) -> Shedder:
    """A fresh shedder (its history starts empty)."""
    shedders: dict[ShedderKind, type[Shedder]] = {
        ShedderKind.none: NoShedder,
        ShedderKind.threshold: ThresholdShedder,
        ShedderKind.overload: OverloadShedder,
        ShedderKind.uniform: UniformLoadShedder,
        ShedderKind.transfer: TransferShedder,
    }
    return shedders[kind]()
