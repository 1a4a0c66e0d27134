"""The workload and the load model: what bundles carry, what brokers feel, what the leader reads.

Traffic lives on topics. Each topic has a hash in its namespace's range (as Pulsar's
``NamespaceBundleFactory.getLongHashCode`` gives it) and belongs to the bundle whose range holds
that hash; a bundle carries the sum of its topics, so a split divides its load the way its range
divides (topics and rates go with the hash range they fall in). Traffic at minute ``m`` is a pure
function of the workload and ``m`` (a daily curve per tenant, bursts, hot bundles, bundles that go
quiet and new ones that start, heavy bundles that grow), so two runs that place or split bundles
differently still see the same traffic.

Brokers turn what they serve into usages with noise (heap swinging widely, seed 001's point 2);
they publish a report only when it changed enough or got old (``needBrokerDataUpdate`` of
``ModularLoadManagerImpl`` and of the extensible ``BrokerLoadDataReporter``), and every published
report makes the leader add a sample to every bundle's short- and long-term averages
(``ModularLoadManagerImpl.updateAll`` -> ``updateBundleData``; ``TimeAverageMessageData.update``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from statechan.balance.settings import BalancerConfig, Manager, Workload
from statechan.keys import FULL_RANGE, namespace_bundles

Floats = NDArray[np.float64]
Ints = NDArray[np.int64]
Bools = NDArray[np.bool_]

MINUTE_MS = 60_000
MB = 1024 * 1024
CPU, HEAP, DIRECT, BW_IN, BW_OUT = range(5)
"""Indices of a broker's usages (percent), in the order of Pulsar's resource weights."""

NUM_SHORT_SAMPLES = 10
NUM_LONG_SAMPLES = 1000
"""``ModularLoadManagerImpl``'s windows for a bundle's short- and long-term averages."""
DEFAULT_MESSAGE_RATE = 50.0
DEFAULT_MESSAGE_THROUGHPUT = 50_000.0
"""What the leader assumes of a bundle it has no data for (``ModularLoadManagerImpl``): per
direction, so in + out is twice these."""
HASH_END = FULL_RANGE[1]


def namespace_name(index: int) -> str:
    """The lab's namespaces are the channel model's: ``tenant/ns-N``."""
    return f"tenant/ns-{index}"


@dataclass
class Bundles:
    """The namespaces' bundles as they are now: a bundle is a hash range ``[lower, upper)`` of a
    namespace (the last range ends at 0xffffffff, inclusive); a split retires the parent and adds
    two children. Indexed by bundle id; ids only grow."""

    names: list[str]
    """Namespace names by index."""
    namespace: Ints
    lower: Ints
    upper: Ints
    alive: Bools
    parent: Ints
    born: Ints
    """The minute a bundle was created (0 for the starting ones)."""

    @classmethod
    def even(cls, names: list[str], counts: list[int]) -> Bundles:
        """Each namespace's bundles as Pulsar creates them (``count`` equal ranges)."""
        ns: list[int] = []
        lo: list[int] = []
        hi: list[int] = []
        for n, (name, count) in enumerate(zip(names, counts, strict=True)):
            for b in namespace_bundles(name, count):
                ns.append(n)
                lo.append(b.lower)
                hi.append(b.upper)
        size = len(ns)
        return cls(
            names,
            np.asarray(ns, dtype=np.int64),
            np.asarray(lo, dtype=np.int64),
            np.asarray(hi, dtype=np.int64),
            np.ones(size, dtype=np.bool_),
            np.full(size, -1, dtype=np.int64),
            np.zeros(size, dtype=np.int64),
        )

    @classmethod
    def from_ranges(cls, names: list[str], ranges: list[tuple[int, int, int]]) -> Bundles:
        """Bundles from (namespace index, lower, upper) triples (a recorded cluster's own ranges)."""
        size = len(ranges)
        return cls(
            names,
            np.asarray([r[0] for r in ranges], dtype=np.int64),
            np.asarray([r[1] for r in ranges], dtype=np.int64),
            np.asarray([r[2] for r in ranges], dtype=np.int64),
            np.ones(size, dtype=np.bool_),
            np.full(size, -1, dtype=np.int64),
            np.zeros(size, dtype=np.int64),
        )

    def __len__(self) -> int:
        return int(self.namespace.shape[0])

    def key(self, bundle: int) -> str:
        """The channel key: ``tenant/namespace/0xLLLLLLLL_0xUUUUUUUU``."""
        return (
            f"{self.names[int(self.namespace[bundle])]}/0x{int(self.lower[bundle]):08x}_0x{int(self.upper[bundle]):08x}"
        )

    def count(self, namespace: int) -> int:
        """Bundles the namespace has now (``NamespaceService.getBundleCount``)."""
        return int(np.count_nonzero(self.alive & (self.namespace == namespace)))

    def counts(self) -> Ints:
        """Bundles per namespace now."""
        return np.bincount(self.namespace[self.alive], minlength=len(self.names)).astype(np.int64)

    def can_split(self, bundle: int) -> bool:
        """``NamespaceBundleFactory.canSplitBundle``: a range wider than 1."""
        return int(self.upper[bundle]) - int(self.lower[bundle]) > 1

    def split(self, bundle: int, boundary: int, minute: int) -> tuple[int, int]:
        """Retire ``bundle``; add its children ``[lower, boundary)`` and ``[boundary, upper)``."""
        lo, hi = int(self.lower[bundle]), int(self.upper[bundle])
        if not lo < boundary < hi:
            raise ValueError(f"split boundary 0x{boundary:08x} is not inside {self.key(bundle)}")
        first = len(self)
        ns = int(self.namespace[bundle])
        self.namespace = np.append(self.namespace, [ns, ns])
        self.lower = np.append(self.lower, [lo, boundary])
        self.upper = np.append(self.upper, [boundary, hi])
        self.alive = np.append(self.alive, [True, True])
        self.alive[bundle] = False
        self.parent = np.append(self.parent, [bundle, bundle])
        self.born = np.append(self.born, [minute, minute])
        return first, first + 1


@dataclass(frozen=True)
class BundleTraffic:
    """Per-bundle rates at one minute (arrays indexed by bundle id; retired bundles carry 0)."""

    rate_in: Floats
    rate_out: Floats
    throughput_in: Floats
    throughput_out: Floats
    entries: Floats
    """Entries/s in+out: what the CPU pays for (a batch is one entry)."""
    topics: Ints
    sessions: Ints
    """Producers + consumers."""

    @property
    def rate(self) -> Floats:
        return self.rate_in + self.rate_out

    @property
    def throughput(self) -> Floats:
        return self.throughput_in + self.throughput_out


@dataclass(frozen=True)
class TopicTraffic:
    """Per-topic rates at one minute (the split algorithms read them, as Pulsar's topic stats)."""

    rate: Floats
    throughput: Floats


@dataclass(frozen=True)
class Events:
    """Timed multipliers on starting bundles' traffic (bursts, hot spells, quiet and new bundles)."""

    bundle: Ints
    start: Floats
    end: Floats
    factor: Floats


def _events(workload: Workload, bundles: int, rng: np.random.Generator) -> Events:
    minutes = workload.minutes
    n = bundles
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
class Recorded:
    """A starting bundle's traffic as a broker reported it (Pulsar's ``NamespaceBundleStats``)."""

    msg_rate_in: float
    msg_rate_out: float
    throughput_in: float
    throughput_out: float
    topics: int
    producers: int
    consumers: int


@dataclass(frozen=True)
class Traffic:
    """Every topic's base traffic and the timed events; :meth:`at` is a pure function of the minute.

    A starting bundle's traffic (its rate, message size, batching and fan-out) is drawn per
    bundle, then shared among its topics by log-normal weights; every topic keeps its starting
    bundle's message size, batching and fan-out, and the events of its starting bundle."""

    workload: Workload
    start_bundles: int
    topic_origin: Ints
    """The starting bundle each topic was in."""
    topic_hash: Ints
    topic_namespace: Ints
    topic_rate_in: Floats
    topic_bytes: Floats
    topic_fanout: Floats
    topic_batch: Floats
    topic_sessions: Ints
    phase_hours: Floats
    """Per starting bundle: its tenant's time zone."""
    heavy: Ints
    """Starting bundles that grow past the split thresholds."""
    events: Events

    @classmethod
    def build(cls, workload: Workload, bundles: Bundles, recorded: dict[int, Recorded] | None = None) -> Traffic:
        """Draw the workload's traffic over the starting ``bundles``; ``recorded`` replaces the
        drawn base traffic of the bundles it names (an operator's recorded load)."""
        rng = np.random.default_rng([workload.seed, 1])
        n = len(bundles)
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
        topics = rng.poisson(workload.mean_topics, n).astype(np.int64) + 1
        namespaces = len(bundles.names)
        zones = np.asarray(workload.timezones, dtype=np.float64)
        phase = zones[rng.integers(0, len(zones), namespaces)][bundles.namespace]
        events = _events(workload, n, rng)
        heavy = np.sort(rng.choice(n, size=min(workload.heavy_bundles, n), replace=False)).astype(np.int64)
        if heavy.size:
            topics[heavy] = workload.heavy_topics
            size[heavy] = workload.heavy_message_bytes
            batch[heavy] = workload.heavy_batch
            base[heavy] = workload.heavy_msg_rate / (1 + fanout[heavy])
        if recorded:
            for b, r in recorded.items():
                base[b] = r.msg_rate_in
                fanout[b] = r.msg_rate_out / r.msg_rate_in if r.msg_rate_in > 0 else 0.0
                moved = r.throughput_in + r.throughput_out
                count = r.msg_rate_in + r.msg_rate_out
                size[b] = moved / count if count > 0 else workload.median_message_bytes
                batch[b] = 1.0
                topics[b] = max(1, r.topics)
        if recorded:  # a recorded bundle carries what was recorded now: no spell already under way
            keep = ~(np.isin(events.bundle, np.fromiter(recorded, dtype=np.int64)) & (events.start < 0))
            events = Events(events.bundle[keep], events.start[keep], events.end[keep], events.factor[keep])
        # topics: hashes spread over their starting bundle's range, traffic shared by weights
        origin = np.repeat(np.arange(n, dtype=np.int64), topics)
        lo, hi = bundles.lower[origin], bundles.upper[origin]
        topic_hash = lo + np.floor(rng.uniform(0.0, 1.0, origin.shape[0]) * (hi - lo)).astype(np.int64)
        weight = rng.lognormal(0.0, workload.topic_sigma, origin.shape[0])
        weight = weight / np.bincount(origin, weights=weight, minlength=n)[origin]
        sessions = (1 + rng.poisson(0.5, origin.shape[0])) + fanout[origin].astype(np.int64) * (
            1 + rng.poisson(0.5, origin.shape[0])
        )
        if recorded:
            for b, r in recorded.items():
                mine = origin == b
                count = int(np.count_nonzero(mine))
                total = r.producers + r.consumers
                sessions[mine] = total // count + (np.arange(count) < total % count)
        return cls(
            workload,
            n,
            origin,
            topic_hash,
            bundles.namespace[origin],
            base[origin] * weight,
            size[origin],
            fanout[origin],
            batch[origin],
            sessions.astype(np.int64),
            phase,
            heavy,
            events,
        )

    @property
    def topics(self) -> int:
        return int(self.topic_origin.shape[0])

    def multiplier(self, minute: int) -> Floats:
        """Each starting bundle's traffic multiplier at ``minute``."""
        w = self.workload
        hour = w.start_hour + minute / 60.0 + self.phase_hours
        mult = 1.0 + w.daily_amplitude * np.sin(2 * math.pi * (hour - 9.0) / 24.0)
        ev = self.events
        active = (ev.start <= minute) & (minute < ev.end)
        np.multiply.at(mult, ev.bundle[active], ev.factor[active])
        if self.heavy.size:
            grown = np.clip((minute - w.heavy_start_hours * 60) / (w.heavy_ramp_hours * 60), 0.0, 1.0)
            mult[self.heavy] *= 0.05 + 0.95 * grown
        return mult

    def topic_traffic(self, minute: int) -> TopicTraffic:
        rate_in = self.topic_rate_in * self.multiplier(minute)[self.topic_origin]
        rate = rate_in * (1 + self.topic_fanout)
        return TopicTraffic(rate, rate * self.topic_bytes)

    def at(self, minute: int, topic_bundle: Ints, bundles: int) -> BundleTraffic:
        """Every bundle's traffic: the sum of the topics it holds now."""
        rate_in = self.topic_rate_in * self.multiplier(minute)[self.topic_origin]
        rate_out = rate_in * self.topic_fanout

        def total(values: Floats) -> Floats:
            return np.bincount(topic_bundle, weights=values, minlength=bundles).astype(np.float64)

        return BundleTraffic(
            total(rate_in),
            total(rate_out),
            total(rate_in * self.topic_bytes),
            total(rate_out * self.topic_bytes),
            total((rate_in + rate_out) / self.topic_batch),
            np.bincount(topic_bundle, minlength=bundles).astype(np.int64),
            np.bincount(topic_bundle, weights=self.topic_sessions, minlength=bundles).astype(np.int64),
        )


def topic_bundles(traffic: Traffic, bundles: Bundles) -> Ints:
    """Which live bundle holds each topic (its namespace's range that contains the topic's hash)."""
    out = np.empty(traffic.topics, dtype=np.int64)
    live = np.flatnonzero(bundles.alive)
    for ns in range(len(bundles.names)):
        mine = live[bundles.namespace[live] == ns]
        order = mine[np.argsort(bundles.lower[mine], kind="stable")]
        topics = np.flatnonzero(traffic.topic_namespace == ns)
        where = np.searchsorted(bundles.lower[order], traffic.topic_hash[topics], side="right") - 1
        out[topics] = order[np.clip(where, 0, len(order) - 1)]
    return out


@dataclass(frozen=True)
class Capacity:
    """Per-broker scale of what fills it (1.0 is the workload's nominal machine) and heap rhythm."""

    scale: Floats
    heap_period: Floats
    heap_phase: Floats

    @classmethod
    def build(cls, workload: Workload, scale: Floats | None = None) -> Capacity:
        rng = np.random.default_rng([workload.seed, 2])
        b = workload.brokers
        spread = workload.capacity_spread
        low, high = workload.heap_period_minutes
        drawn = rng.uniform(1 - spread, 1 + spread, b)
        return cls(drawn if scale is None else scale, rng.uniform(low, high, b), rng.uniform(0, 1, b))


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
    """The four-weight overload Pulsar's placement and the modular reports call (CPU, direct
    memory, bandwidth in, out): heap left out, since it swings with GC."""
    w = np.asarray(weights)
    keep = [CPU, DIRECT, BW_IN, BW_OUT]
    return np.asarray(np.max(usage[..., keep] * w[keep], axis=-1) / 100.0, dtype=np.float64)


def max_usage(usage: Floats) -> Floats:
    """``BrokerLoadData.getMaxResourceUsage``: CPU, direct memory and bandwidth, unweighted (heap left out).

    The lab also measures balance with it: it does not depend on the settings under comparison."""
    return np.asarray(np.max(usage[..., [CPU, DIRECT, BW_IN, BW_OUT]], axis=-1) / 100.0, dtype=np.float64)


def max_usage_with_heap(usage: Floats) -> Floats:
    """Pulsar 2.10's ``LocalBrokerData.getMaxResourceUsage``: every resource unweighted, heap included."""
    return np.asarray(np.max(usage, axis=-1) / 100.0, dtype=np.float64)


def percent_change(old: Floats, new: Floats) -> Floats:
    """``ModularLoadManagerImpl.percentChange``: 0 -> 0 is no change, 0 -> x is infinite."""
    with np.errstate(divide="ignore", invalid="ignore"):
        change = 100.0 * np.abs(new - old) / old
    return np.where(old == 0, np.where(new == 0, 0.0, math.inf), change)


def averaged(old: Floats, value: Floats, samples: Ints, added: Ints, window: int) -> Floats:
    """``TimeAverageMessageData.update`` applied ``added`` times with the same ``value``:
    the first sample replaces the old value; a running mean until ``window`` samples; then each
    sample weighs 1/``window``. Closed form: the unsaturated steps telescope to
    ``samples / min(samples + added, window)``, the saturated ones multiply by (1 - 1/window)."""
    reached = np.minimum(samples + added, window)
    with np.errstate(divide="ignore", invalid="ignore"):
        unsaturated = np.where(reached > 0, samples.astype(np.float64) / reached, 1.0)
    saturated = np.power(1.0 - 1.0 / window, np.maximum(0, samples + added - window))
    keep = np.where(added > 0, np.minimum(unsaturated, 1.0) * saturated, 1.0)
    return np.asarray(value + (old - value) * keep, dtype=np.float64)


@dataclass(frozen=True)
class BrokerReport:
    """One broker's load report as the leader holds it (``LocalBrokerData`` with its ``lastStats``,
    and, for the extensible manager, ``BrokerLoadData``'s moving average and top bundles)."""

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
    """What the leader's load manager reads when it sheds, places and splits (``LoadData``)."""

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
    topics: Ints = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    """Each bundle's topics and sessions as last reported (``lastStats``)."""
    sessions: Ints = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    def long_term_rate(self, broker: int) -> float:
        """``TimeAverageBrokerData``'s long-term rate: the long-term rates of its reported bundles."""
        report = self.reports.get(broker)
        if report is None or not report.bundles:
            return 0.0
        return float(self.long_rate[list(report.bundles)].sum())

    def preallocated_rate(self, broker: int) -> float:
        pre = self.preallocated.get(broker)
        return float(self.long_rate[list(pre)].sum()) if pre else 0.0

    def grow(self, size: int) -> None:
        """Room for bundles up to ``size``: a new bundle starts from Pulsar's default bundle data."""
        have = self.short_rate.shape[0]
        if size <= have:
            return
        extra = size - have
        self.short_rate = np.append(self.short_rate, np.full(extra, 2 * DEFAULT_MESSAGE_RATE))
        self.short_throughput = np.append(self.short_throughput, np.full(extra, 2 * DEFAULT_MESSAGE_THROUGHPUT))
        self.long_rate = np.append(self.long_rate, np.full(extra, 2 * DEFAULT_MESSAGE_RATE))
        self.long_throughput = np.append(self.long_throughput, np.full(extra, 2 * DEFAULT_MESSAGE_THROUGHPUT))
        self.topics = np.append(self.topics, np.zeros(size - self.topics.shape[0], dtype=np.int64))
        self.sessions = np.append(self.sessions, np.zeros(size - self.sessions.shape[0], dtype=np.int64))


def report_changes(
    manager: Manager,
    config: BalancerConfig,
    old_usage: Floats,
    usage: Floats,
    old: Floats,
    new: Floats,
) -> Floats:
    """``needBrokerDataUpdate``'s largest change since the last published report, per broker:
    the percent change of the message rate, the throughput and the bundle count (``old``/``new``:
    brokers x those three), and the absolute change, in points, of the maximum usage — weighted
    with CPU, direct memory and bandwidth weights (``ModularLoadManagerImpl``) or unweighted (the
    extensible ``BrokerLoadDataReporter``, ``BrokerLoadData.getMaxResourceUsage``); heap left out
    in both."""
    if manager is Manager.modular:
        weights = config.weights()
        usage_change = 100.0 * np.abs(
            max_usage_without_heap(old_usage, weights) - max_usage_without_heap(usage, weights)
        )
    else:
        usage_change = 100.0 * np.abs(max_usage(old_usage) - max_usage(usage))
    return np.asarray(np.maximum(usage_change, percent_change(old, new).max(axis=-1)), dtype=np.float64)


def report_change(
    manager: Manager, config: BalancerConfig, last: BrokerReport, usage: Floats, rate: float, thr: float, bundles: int
) -> float:
    """:func:`report_changes` for one broker against its last report."""
    old = np.array([[last.msg_rate, last.throughput, float(len(last.bundles))]])
    new = np.array([[rate, thr, float(bundles)]])
    return float(
        report_changes(manager, config, np.asarray([last.usage], dtype=np.float64), np.asarray([usage]), old, new)[0]
    )


@dataclass
class Reporter:
    """Brokers' reporting and the leader's averages.

    Every ``loadBalancerHostUsageCheckIntervalMinutes`` a broker checks its usage and publishes
    when :func:`report_change` passes ``loadBalancerReportUpdateThresholdPercentage`` or its last
    report is ``loadBalancerReportUpdateMaxIntervalMinutes`` old. Each published report makes the
    leader run ``updateAll``: one sample into every bundle of every broker's last report (a bundle
    two reports still list gets two); the leader's ``writeBundleDataOnZooKeeper`` every
    ``loadBalancerResourceQuotaUpdateIntervalMinutes`` adds one more. The extensible brokers'
    ``weightedMaxEMA`` moves at every ``generateLoadData``, once per
    ``loadBalancerReportUpdateMinIntervalMillis``."""

    config: BalancerConfig
    brokers: int
    bundles: int
    manager: Manager = Manager.modular
    data: LoadData = field(init=False)
    ema: Floats = field(init=False)
    throughput_ema: Floats = field(init=False)
    short_samples: Ints = field(init=False)
    long_samples: Ints = field(init=False)
    reported_rate: Floats = field(init=False)
    reported_throughput: Floats = field(init=False)
    listed: Ints = field(init=False)
    """How many brokers' last reports list each bundle."""
    updates: int = 0
    """``updateAll`` calls so far (one per published report)."""

    def __post_init__(self) -> None:
        n = self.bundles
        self.data = LoadData(
            0,
            {},
            np.full(n, 2 * DEFAULT_MESSAGE_RATE),
            np.full(n, 2 * DEFAULT_MESSAGE_THROUGHPUT),
            np.full(n, 2 * DEFAULT_MESSAGE_RATE),
            np.full(n, 2 * DEFAULT_MESSAGE_THROUGHPUT),
            topics=np.zeros(n, dtype=np.int64),
            sessions=np.zeros(n, dtype=np.int64),
        )
        self.ema = np.full(self.brokers, np.nan)
        self.throughput_ema = np.zeros(self.brokers)
        self.short_samples = np.zeros(n, dtype=np.int64)
        self.long_samples = np.zeros(n, dtype=np.int64)
        self.reported_rate = np.zeros(n)
        self.reported_throughput = np.zeros(n)
        self.listed = np.zeros(n, dtype=np.int64)

    def grow(self, size: int) -> None:
        """Room for new bundles (split children): no samples yet, Pulsar's default data."""
        have = self.short_samples.shape[0]
        if size <= have:
            return
        extra = size - have
        self.data.grow(size)
        self.short_samples = np.append(self.short_samples, np.zeros(extra, dtype=np.int64))
        self.long_samples = np.append(self.long_samples, np.zeros(extra, dtype=np.int64))
        self.reported_rate = np.append(self.reported_rate, np.zeros(extra))
        self.reported_throughput = np.append(self.reported_throughput, np.zeros(extra))
        self.listed = np.append(self.listed, np.zeros(extra, dtype=np.int64))
        self.bundles = size

    def forget(self, bundle: int) -> None:
        """``checkNamespaceBundleSplit``: a split bundle's data and ``lastStats`` entry are removed."""
        data = self.data
        for broker, report in list(data.reports.items()):
            if bundle in report.bundles:
                data.reports[broker] = BrokerReport(
                    report.usage,
                    report.msg_rate_in,
                    report.msg_rate_out,
                    report.throughput_in,
                    report.throughput_out,
                    report.bundles - {bundle},
                    report.updated_at_ms,
                    report.weighted_max_ema,
                    report.throughput_ema,
                    tuple(t for t in report.top_bundles if t[0] != bundle),
                )
        self.listed[bundle] = 0

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
        # BrokerLoadData.updateWeightedMaxEMA runs at every generateLoadData (the usage changes once a check)
        steps = max(1, round(cfg.host_usage_check_interval_min * MINUTE_MS / cfg.report_min_interval_ms))
        self.ema = np.where(np.isnan(self.ema), weighted, weighted + (self.ema - weighted) * h**steps)
        self.throughput_ema = h * self.throughput_ema + (1 - h) * throughput
        max_age = cfg.report_max_interval_min * MINUTE_MS
        rate = load.rate_in + load.rate_out
        known = [b for b in range(self.brokers) if b in data.reports and b not in down]
        due = [b for b in range(self.brokers) if b not in data.reports and b not in down]
        if known:
            reports = [data.reports[b] for b in known]
            idx = np.asarray(known, dtype=np.int64)
            old = np.asarray([[r.msg_rate, r.throughput, float(len(r.bundles))] for r in reports])
            new = np.stack([rate[idx], throughput[idx], load.bundles[idx].astype(np.float64)], axis=1)
            old_usage = np.asarray([r.usage for r in reports], dtype=np.float64)
            change = report_changes(self.manager, cfg, old_usage, usage[idx], old, new)
            age = now_ms - np.asarray([r.updated_at_ms for r in reports])
            publish = (change > cfg.report_threshold_pct) | (age >= max_age)
            due.extend(int(b) for b in idx[publish])
        published = sorted(due)
        minute = now_ms // MINUTE_MS
        quota = minute > 0 and minute % cfg.resource_quota_update_interval_min == 0
        if not published and not quota:
            return published
        bundle_throughput = traffic.throughput
        bundle_rate = traffic.rate
        for b in published:
            mine = np.flatnonzero(owner == b)
            top = mine[np.argsort(-bundle_throughput[mine], kind="stable")][: cfg.top_bundles_in_report][::-1]
            u = usage[b]
            previous = data.reports.get(b)
            if previous is not None and previous.bundles:
                self.listed[np.fromiter(previous.bundles, dtype=np.int64)] -= 1
            self.listed[mine] += 1
            self.reported_rate[mine] = bundle_rate[mine]
            self.reported_throughput[mine] = bundle_throughput[mine]
            data.topics[mine] = traffic.topics[mine]
            data.sessions[mine] = traffic.sessions[mine]
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
        updates = len(published) + (1 if quota else 0)
        self.updates += len(published)
        self._sample(self.listed * updates)
        return published

    def _sample(self, added: Ints) -> None:
        """``added[i]`` samples of bundle ``i``'s last reported stats into its averages."""
        data = self.data
        for arr, value, samples, window in (
            (data.short_rate, self.reported_rate, self.short_samples, NUM_SHORT_SAMPLES),
            (data.short_throughput, self.reported_throughput, self.short_samples, NUM_SHORT_SAMPLES),
            (data.long_rate, self.reported_rate, self.long_samples, NUM_LONG_SAMPLES),
            (data.long_throughput, self.reported_throughput, self.long_samples, NUM_LONG_SAMPLES),
        ):
            arr[:] = averaged(arr, value, samples, added, window)
        self.short_samples = np.minimum(self.short_samples + added, NUM_SHORT_SAMPLES)
        self.long_samples = np.minimum(self.long_samples + added, NUM_LONG_SAMPLES)
