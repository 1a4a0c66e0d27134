"""The workload and the load model: what bundles carry, what brokers feel, what the leader reads.

Traffic at minute ``m`` is a pure function of the workload and ``m`` (a daily curve per tenant,
bursts, hot bundles, bundles that go quiet and new ones that start), so two runs that place
bundles differently still see the same traffic. Brokers turn what they serve into usages with
noise (heap swinging widely, seed 001's point 2); they publish a report only when it changed
enough or got old, as ``ModularLoadManagerImpl.needBrokerDataUpdate`` does, and the leader keeps
the short- and long-term averages of each bundle as ``TimeAverageMessageData`` does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from statechan.balance.settings import BalancerConfig, Workload

Floats = NDArray[np.float64]
Ints = NDArray[np.int64]

MINUTE_MS = 60_000
MB = 1024 * 1024
CPU, HEAP, DIRECT, BW_IN, BW_OUT = range(5)
"""Indices of a broker's usages (percent), in the order of Pulsar's resource weights."""

NUM_SHORT_SAMPLES = 10
NUM_LONG_SAMPLES = 1000
"""``ModularLoadManagerImpl``'s windows for a bundle's short- and long-term averages."""
DEFAULT_MESSAGE_RATE = 50.0
DEFAULT_MESSAGE_THROUGHPUT = 50_000.0
"""What the leader assumes of a bundle it has no data for (``ModularLoadManagerImpl``)."""


@dataclass(frozen=True)
class BundleTraffic:
    """Per-bundle rates at one minute (arrays indexed by bundle)."""

    rate_in: Floats
    rate_out: Floats
    throughput_in: Floats
    throughput_out: Floats
    entries: Floats
    """Entries/s in+out: what the CPU pays for (a batch is one entry)."""


@dataclass(frozen=True)
class Events:
    """Timed multipliers on bundles' traffic (bursts, hot spells, quiet and new bundles)."""

    bundle: Ints
    start: Floats
    end: Floats
    factor: Floats


def _events(workload: Workload, rng: np.random.Generator) -> Events:
    minutes = workload.minutes
    n = workload.bundles
    parts: list[tuple[Ints, Floats, Floats, Floats]] = []

    def spells(per_hour: float, length: float, factor: Floats | float, exponential: bool) -> None:
        count = int(rng.poisson(per_hour * workload.hours))
        start = rng.uniform(0, minutes, count)
        span = rng.exponential(length, count) if exponential else rng.uniform(0.5 * length, 1.5 * length, count)
        factors = np.broadcast_to(np.asarray(factor, dtype=np.float64), (count,)).copy() if count else np.zeros(0)
        parts.append((rng.integers(0, n, count), start, start + span, factors))

    low, high = workload.burst_factor
    bursts = int(rng.poisson(workload.bursts_per_hour * workload.hours))
    start = rng.uniform(0, minutes, bursts)
    parts.append(
        (
            rng.integers(0, n, bursts),
            start,
            start + rng.exponential(workload.burst_minutes, bursts),
            rng.uniform(low, high, bursts),
        )
    )
    spells(workload.hot_per_hour, workload.hot_hours * 60, workload.hot_factor, exponential=False)
    churn = int(rng.poisson(workload.churn_per_hour * workload.hours))
    # a bundle going quiet stays quiet; a new one is quiet until it starts
    when = rng.uniform(0, minutes, churn)
    parts.append((rng.integers(0, n, churn), when, np.full(churn, math.inf), np.full(churn, 0.02)))
    when = rng.uniform(0, minutes, churn)
    parts.append((rng.integers(0, n, churn), np.full(churn, -1.0), when, np.full(churn, 0.02)))
    return Events(
        np.concatenate([p[0] for p in parts]).astype(np.int64),
        np.concatenate([p[1] for p in parts]),
        np.concatenate([p[2] for p in parts]),
        np.concatenate([p[3] for p in parts]),
    )


@dataclass(frozen=True)
class Traffic:
    """Every bundle's base traffic and the timed events; :meth:`at` is a pure function of the minute."""

    workload: Workload
    base_rate: Floats
    message_bytes: Floats
    batch: Floats
    fanout: Floats
    topics: Ints
    namespace: Ints
    phase_hours: Floats
    events: Events

    @classmethod
    def build(cls, workload: Workload) -> Traffic:
        rng = np.random.default_rng([workload.seed, 1])
        n = workload.bundles
        size = workload.median_message_bytes * rng.lognormal(0.0, workload.size_sigma, n)
        relative = size / workload.median_message_bytes
        base = (
            workload.median_rate * rng.lognormal(0.0, workload.rate_sigma, n) * relative**-workload.size_rate_elasticity
        )
        fanout = rng.integers(1, workload.max_fanout + 1, n).astype(np.float64)
        batch = np.maximum(1.0, workload.median_batch * rng.lognormal(0.0, workload.batch_sigma, n))
        messages = base * (1 + fanout)
        share = messages / batch / workload.cpu_entries + messages * size / workload.cpu_bytes
        base = base * np.minimum(1.0, workload.max_bundle_share / share)
        topics = rng.poisson(5, n).astype(np.int64) + 1
        namespace = np.repeat(np.arange(workload.namespaces), workload.bundles_per_namespace).astype(np.int64)
        zones = np.asarray(workload.timezones, dtype=np.float64)
        phase = zones[rng.integers(0, len(zones), workload.namespaces)][namespace]
        return cls(workload, base, size, batch, fanout, topics, namespace, phase, _events(workload, rng))

    def multiplier(self, minute: int) -> Floats:
        w = self.workload
        hour = w.start_hour + minute / 60.0 + self.phase_hours
        mult = 1.0 + w.daily_amplitude * np.sin(2 * math.pi * (hour - 9.0) / 24.0)
        ev = self.events
        active = (ev.start <= minute) & (minute < ev.end)
        np.multiply.at(mult, ev.bundle[active], ev.factor[active])
        return mult

    def at(self, minute: int) -> BundleTraffic:
        rate_in = self.base_rate * self.multiplier(minute)
        rate_out = rate_in * self.fanout
        return BundleTraffic(
            rate_in,
            rate_out,
            rate_in * self.message_bytes,
            rate_out * self.message_bytes,
            (rate_in + rate_out) / self.batch,
        )


@dataclass(frozen=True)
class Capacity:
    """Per-broker scale of what fills it (1.0 is the workload's nominal machine) and heap rhythm."""

    scale: Floats
    heap_period: Floats
    heap_phase: Floats

    @classmethod
    def build(cls, workload: Workload) -> Capacity:
        rng = np.random.default_rng([workload.seed, 2])
        b = workload.brokers
        spread = workload.capacity_spread
        low, high = workload.heap_period_minutes
        return cls(rng.uniform(1 - spread, 1 + spread, b), rng.uniform(low, high, b), rng.uniform(0, 1, b))


@dataclass(frozen=True)
class Served:
    """What each broker serves at one minute (arrays indexed by broker)."""

    rate_in: Floats
    rate_out: Floats
    throughput_in: Floats
    throughput_out: Floats
    entries: Floats
    bundles: Ints


def served(traffic: BundleTraffic, owner: Ints, brokers: int) -> Served:
    """Sum each bundle's traffic on its owner (``owner[i] < 0``: nobody serves it)."""
    live = owner >= 0
    where = owner[live]

    def total(values: Floats) -> Floats:
        return np.bincount(where, weights=values[live], minlength=brokers).astype(np.float64)

    return Served(
        total(traffic.rate_in),
        total(traffic.rate_out),
        total(traffic.throughput_in),
        total(traffic.throughput_out),
        total(traffic.entries),
        np.bincount(where, minlength=brokers).astype(np.int64),
    )


def usages(workload: Workload, capacity: Capacity, load: Served, minute: int) -> Floats:
    """Each broker's CPU, heap, direct memory and bandwidth in/out (percent, shape brokers x 5).

    The noise at a minute is drawn from a generator seeded by (seed, minute), so it does not
    depend on how earlier minutes went."""
    rng = np.random.default_rng([workload.seed, 3, minute])
    b = workload.brokers
    scale = capacity.scale
    volume = load.throughput_in + load.throughput_out
    out = np.empty((b, 5))
    out[:, CPU] = 3.0 + 100.0 * (load.entries / workload.cpu_entries + volume / workload.cpu_bytes) / scale
    out[:, CPU] += rng.normal(0.0, workload.cpu_noise, b)
    low, high = workload.heap_range
    saw = np.mod(minute / capacity.heap_period + capacity.heap_phase, 1.0)
    out[:, HEAP] = low + (high - low) * saw + rng.normal(0.0, 2.0, b)
    out[:, DIRECT] = 5.0 + 100.0 * volume / (workload.direct_bytes * scale) + rng.normal(0.0, 1.0, b)
    out[:, BW_IN] = 100.0 * load.throughput_in / (workload.nic_bytes * scale)
    out[:, BW_OUT] = 100.0 * load.throughput_out / (workload.nic_bytes * scale)
    return np.clip(out, 0.0, 100.0)


def max_usage_with_weight(usage: Floats, weights: tuple[float, ...]) -> Floats:
    """``LocalBrokerData.getMaxResourceUsageWithWeight`` (five weights): the largest weighted usage, as a fraction."""
    return np.asarray(np.max(usage * np.asarray(weights), axis=-1) / 100.0, dtype=np.float64)


def max_usage_without_heap(usage: Floats, weights: tuple[float, ...]) -> Floats:
    """The four-weight overload Pulsar's placement calls: heap left out, since it swings with GC."""
    w = np.asarray(weights)
    keep = [CPU, DIRECT, BW_IN, BW_OUT]
    return np.asarray(np.max(usage[..., keep] * w[keep], axis=-1) / 100.0, dtype=np.float64)


def max_usage(usage: Floats) -> Floats:
    """``LocalBrokerData.getMaxResourceUsage``: CPU, direct memory and bandwidth, unweighted (heap left out)."""
    return np.asarray(np.max(usage[..., [CPU, DIRECT, BW_IN, BW_OUT]], axis=-1) / 100.0, dtype=np.float64)


def percent_change(old: Floats, new: Floats) -> Floats:
    """``ModularLoadManagerImpl.percentChange``: 0 -> 0 is no change, 0 -> x is infinite."""
    with np.errstate(divide="ignore", invalid="ignore"):
        change = 100.0 * np.abs(new - old) / old
    return np.where(old == 0, np.where(new == 0, 0.0, math.inf), change)


@dataclass(frozen=True)
class BrokerReport:
    """One broker's load report as the leader holds it (``LocalBrokerData`` and, for the
    extensible manager, ``BrokerLoadData``'s moving averages and top bundles)."""

    usage: tuple[float, float, float, float, float]
    msg_rate_in: float
    msg_rate_out: float
    throughput_in: float
    throughput_out: float
    bundles: frozenset[int]
    updated_at_ms: int
    weighted_max_ema: float = 0.0
    throughput_ema: float = 0.0
    top_bundles: tuple[tuple[int, float], ...] = ()
    """(bundle, throughput in+out) of the broker's busiest bundles, the least busy of them first:
    the order ``TopKBundles`` leaves them in, which the TransferShedder walks."""

    @property
    def msg_rate(self) -> float:
        return self.msg_rate_in + self.msg_rate_out

    @property
    def throughput(self) -> float:
        return self.throughput_in + self.throughput_out


@dataclass
class LoadData:
    """What the leader's load manager reads when it sheds and places (``LoadData``)."""

    now_ms: int
    reports: dict[int, BrokerReport]
    short_rate: Floats
    short_throughput: Floats
    long_rate: Floats
    long_throughput: Floats
    recently_unloaded: dict[int, int] = field(default_factory=dict)
    """Bundle -> when it was unloaded (``getRecentlyUnloadedBundles``)."""
    recently_unloaded_brokers: dict[int, int] = field(default_factory=dict)
    """Broker -> when a transfer last touched it (the extensible manager's cool-down)."""
    preallocated: dict[int, set[int]] = field(default_factory=dict)
    """Broker -> bundles assigned to it since its last report (``getPreallocatedBundleData``)."""

    def long_term_rate(self, broker: int) -> float:
        """``TimeAverageBrokerData``'s long-term rate: the long-term rates of its reported bundles."""
        report = self.reports.get(broker)
        if report is None or not report.bundles:
            return 0.0
        return float(self.long_rate[list(report.bundles)].sum())

    def preallocated_rate(self, broker: int) -> float:
        pre = self.preallocated.get(broker)
        return float(self.long_rate[list(pre)].sum()) if pre else 0.0


@dataclass
class Reporter:
    """Brokers' reporting and the leader's averages: publish when any figure moved by more than
    ``loadBalancerReportUpdateThresholdPercentage`` or the last report is older than
    ``loadBalancerReportUpdateMaxIntervalMinutes``."""

    config: BalancerConfig
    brokers: int
    bundles: int
    data: LoadData = field(init=False)
    ema: Floats = field(init=False)
    throughput_ema: Floats = field(init=False)
    samples: Ints = field(init=False)

    def __post_init__(self) -> None:
        n = self.bundles
        self.data = LoadData(
            0,
            {},
            np.full(n, 2 * DEFAULT_MESSAGE_RATE),
            np.full(n, 2 * DEFAULT_MESSAGE_THROUGHPUT),
            np.full(n, 2 * DEFAULT_MESSAGE_RATE),
            np.full(n, 2 * DEFAULT_MESSAGE_THROUGHPUT),
        )
        self.ema = np.full(self.brokers, np.nan)
        self.throughput_ema = np.zeros(self.brokers)
        self.samples = np.zeros(n, dtype=np.int64)

    def observe(
        self,
        now_ms: int,
        usage: Floats,
        load: Served,
        traffic: BundleTraffic,
        owner: Ints,
        down: frozenset[int] = frozenset(),
    ) -> list[int]:
        """Take one host-usage check; return the brokers that published a report (a broker that
        is ``down`` publishes nothing)."""
        cfg = self.config
        data = self.data
        data.now_ms = now_ms
        weighted = max_usage_with_weight(usage, cfg.weights())
        throughput = load.throughput_in + load.throughput_out
        h = cfg.history_percentage
        self.ema = np.where(np.isnan(self.ema), weighted, h * self.ema + (1 - h) * weighted)
        self.throughput_ema = h * self.throughput_ema + (1 - h) * throughput
        published: list[int] = []
        max_age = cfg.report_max_interval_min * MINUTE_MS
        rate = load.rate_in + load.rate_out
        for b in range(self.brokers):
            if b in down:
                continue
            last = data.reports.get(b)
            if last is not None and now_ms - last.updated_at_ms < max_age:
                old = np.array([float(max_usage(np.asarray(last.usage))), last.msg_rate, last.throughput])
                new = np.array([float(max_usage(usage[b])), rate[b], throughput[b]])
                bundles_changed = percent_change(
                    np.array([len(last.bundles)], dtype=np.float64), np.array([load.bundles[b]], dtype=np.float64)
                )
                if max(percent_change(old, new).max(), bundles_changed[0]) <= cfg.report_threshold_pct:
                    continue
            published.append(b)
        if not published:
            return published
        bundle_throughput = traffic.throughput_in + traffic.throughput_out
        for b in published:
            mine = np.flatnonzero(owner == b)
            top = mine[np.argsort(-bundle_throughput[mine], kind="stable")][: cfg.top_bundles_in_report][::-1]
            u = usage[b]
            data.reports[b] = BrokerReport(
                (float(u[0]), float(u[1]), float(u[2]), float(u[3]), float(u[4])),
                float(load.rate_in[b]),
                float(load.rate_out[b]),
                float(load.throughput_in[b]),
                float(load.throughput_out[b]),
                frozenset(int(i) for i in mine),
                now_ms,
                float(self.ema[b]),
                float(self.throughput_ema[b]),
                tuple((int(i), float(bundle_throughput[i])) for i in top),
            )
            data.preallocated.pop(b, None)
        reported = np.isin(owner, np.asarray(published))
        self._sample(reported, traffic)
        return published

    def _sample(self, which: NDArray[np.bool_], traffic: BundleTraffic) -> None:
        """One sample into each listed bundle's short- and long-term averages."""
        data = self.data
        self.samples[which] += 1
        n = self.samples[which].astype(np.float64)
        rate = (traffic.rate_in + traffic.rate_out)[which]
        volume = (traffic.throughput_in + traffic.throughput_out)[which]
        for arr, value, window in (
            (data.short_rate, rate, NUM_SHORT_SAMPLES),
            (data.short_throughput, volume, NUM_SHORT_SAMPLES),
            (data.long_rate, rate, NUM_LONG_SAMPLES),
            (data.long_throughput, volume, NUM_LONG_SAMPLES),
        ):
            k = np.minimum(n, window)
            arr[which] = arr[which] + (value - arr[which]) / k
