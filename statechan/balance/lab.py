"""The run loop: minute by minute, traffic -> broker usage -> reports -> splits -> shedding ->
placement, and the measures of how it went.

Ownership changes only through a :class:`Carrier`: :class:`Direct` applies the decisions to the
lab's own table (balancer-only), :class:`statechan.balance.channel.ThroughChannel` carries each
one through the cluster model's channel protocol. Either way the decisions come from the same
code, in the same order, from the same seeded generators, so both modes make the same moves
and splits.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from statechan.balance.load import (
    MINUTE_MS,
    Bundles,
    BundleTraffic,
    Capacity,
    Floats,
    Ints,
    LoadData,
    Recorded,
    Reporter,
    TopicTraffic,
    Traffic,
    max_usage,
    max_usage_with_weight,
    namespace_name,
    served,
    topic_bundles,
    usages,
)
from statechan.balance.placement import Placement, make_placement, modular_select
from statechan.balance.settings import (
    SEED_001,
    BalancerConfig,
    ClusterSpec,
    Manager,
    PlacementKind,
    ShedderKind,
    SplitAlgorithm,
    Workload,
)
from statechan.balance.shedders import Move, make_shedder
from statechan.balance.split import (
    BundleStats,
    ExtensibleSplitStrategy,
    SplitCounter,
    SplitDecision,
    SplitReason,
    TopicStats,
    modular_bundles_to_split,
    scheduler_enabled,
    split_boundaries,
    split_reason,
)
from statechan.keys import parse_key


class LabConfig(BaseModel):
    """One run: a workload (or an operator's cluster), a shedder, a placement, Pulsar's settings."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    workload: Workload = Field(default_factory=Workload)
    shedder: ShedderKind = ShedderKind.threshold
    placement: PlacementKind = PlacementKind.least_long_term_message_rate
    balancer: BalancerConfig = SEED_001
    pulsar_2_10_overload: bool = Field(
        False,
        description="LeastLongTermMessageRate's overload test as Pulsar 2.10 made it (every usage unweighted, "
        "heap included), the version seed 001 ran",
    )
    late_hours: float = Field(2.0, gt=0, description="the closing window the late measures look at")
    cluster: ClusterSpec | None = Field(None, description="an operator's cluster in place of the workload's")

    @property
    def manager(self) -> Manager:
        """The TransferShedder is the extensible manager's; the other shedders are the modular one's."""
        return Manager.extensible if self.shedder is ShedderKind.transfer else Manager.modular

    def label(self) -> str:
        return f"{self.shedder.value} + {self.placement.value}"


@dataclass(frozen=True)
class MoveEvent:
    minute: int
    bundle: int
    source: int
    destination: int
    transfer: bool
    cause: str = "shed"
    """``shed``: the shedder's; ``split``: a split child unloaded (the modular manager's
    ``loadBalancerAutoUnloadSplitBundlesEnabled``)."""


@dataclass(frozen=True)
class SplitEvent:
    """A bundle split in two (a multi-way split is a chain of these)."""

    minute: int
    bundle: int
    children: tuple[int, int]
    broker: int
    reason: str
    boundary: int


Chooser = Callable[[Sequence[int]], int | None]
"""The balancer's placement, for assignments the carrier needs on its own (a dead broker's bundles)."""


class Carrier(Protocol):
    """Carries the balancer's decisions out."""

    def bind(self, choose: Chooser) -> None: ...
    def assign(self, bundle: int, broker: int) -> None: ...
    def move(self, event: MoveEvent) -> None: ...
    def split(self, event: SplitEvent) -> bool:
        """Split the bundle; False when the channel refused (the split failed)."""
        ...

    def minute(self, minute: int, owner: Ints) -> frozenset[int]:
        """Let the minute pass; bring ``owner`` in line with where bundles really are (faults move
        them without the balancer) and return the brokers that are down."""
        ...


@dataclass
class Direct:
    """Balancer-only: the lab's ownership table is the truth, nothing else to do."""

    def bind(self, choose: Chooser) -> None:
        return None

    def assign(self, bundle: int, broker: int) -> None:
        return None

    def move(self, event: MoveEvent) -> None:
        return None

    def split(self, event: SplitEvent) -> bool:
        return True

    def minute(self, minute: int, owner: Ints) -> frozenset[int]:
        return frozenset()


Measures = dict[str, float | int | str | None]


@dataclass
class Result:
    """A run's events, per-minute series and measures."""

    config: LabConfig
    events: list[MoveEvent]
    load: Floats
    """Minutes x brokers: each broker's maximum resource usage (CPU, direct memory, bandwidth;
    unweighted, heap left out, as a fraction), the balance the measures judge: it does not
    depend on the weights a run is set with."""
    splits: list[SplitEvent] = field(default_factory=list)
    namespace_bundles: Ints = field(default_factory=lambda: np.zeros((0, 0), dtype=np.int64))
    """Minutes x namespaces: bundles per namespace."""
    candidates: list[int] = field(default_factory=list)
    """Candidates the namespace filter left at each modular placement."""
    split_failures: int = 0
    heavy: frozenset[int] = frozenset()
    """The workload's heavy bundles and every bundle split from them."""
    channel: dict[str, int] = field(default_factory=dict)
    """What the channel mode counted (lookups delayed and failed, invariant breaches, ...)."""

    @property
    def hours(self) -> float:
        return float(self.load.shape[0]) / 60.0

    def std(self) -> Floats:
        return np.asarray(self.load.std(axis=1), dtype=np.float64)

    def late_start(self) -> int:
        """The first minute of the closing window (at most half the run)."""
        minutes = self.load.shape[0]
        return int(max(minutes // 2, minutes - round(self.config.late_hours * 60)))

    def repeat_share(self) -> float:
        """The share of the closing window's moves whose bundle had been moved before in the run
        (0 when the window has no move)."""
        start = self.late_start()
        seen: set[int] = set()
        late = repeats = 0
        for e in self.events:
            if e.minute >= start:
                late += 1
                repeats += e.bundle in seen
            seen.add(e.bundle)
        return repeats / late if late else 0.0

    def measures(self) -> Measures:
        shed = [e for e in self.events if e.cause == "shed"]
        unloads = sum(1 for e in shed if not e.transfer)
        moved = Counter(e.bundle for e in shed)
        load = self.load
        start = self.late_start()
        late = load[start:]
        window_h = (load.shape[0] - start) / 60.0
        ns = self.namespace_bundles
        out: Measures = {
            "strategy": self.config.label(),
            "shedder": self.config.shedder.value,
            "placement": self.config.placement.value,
            "seed": self.config.workload.seed,
            "brokers": int(load.shape[1]),
            "moves": len(shed),
            "unloads": unloads,
            "transfers": len(shed) - unloads,
            "moves_per_hour": round(len(shed) / self.hours, 2),
            "late_moves_per_hour": round(sum(1 for e in shed if e.minute >= start) / window_h, 2),
            "bundles_moved": len(moved),
            "moved_again": sum(1 for c in moved.values() if c > 1),
            "moved_3plus": sum(1 for c in moved.values() if c >= 3),
            "late_repeat_share": round(self.repeat_share(), 3),
            "late_std": round(float(late.std(axis=1).mean()), 4),
            "late_spread": round(float((late.max(axis=1) - late.min(axis=1)).mean()), 4),
            "late_peak": round(float(late.max(axis=1).mean()), 4),
            "peak": round(float(load.max(axis=1).mean()), 4),
            "mean_load": round(float(load.mean()), 4),
            "splits": len(self.splits),
            "splits_per_hour": round(len(self.splits) / self.hours, 2),
            "split_moves": sum(1 for e in self.events if e.cause == "split"),
            "split_failures": self.split_failures,
            "bundles_end": int(ns[-1].sum()) if ns.size else 0,
            "max_bundles_per_namespace": int(ns[-1].max()) if ns.size else 0,
            "candidates_median": statistics.median(self.candidates) if self.candidates else None,
        }
        if self.heavy:
            out["heavy_moves"] = sum(1 for e in self.events if e.bundle in self.heavy)
            out["heavy_moved_3plus"] = sum(1 for b, c in moved.items() if b in self.heavy and c >= 3)
        out.update({f"channel_{k}": v for k, v in sorted(self.channel.items())})
        return out


def initial_owners(workload: Workload, bundles: Bundles) -> Ints:
    """The cluster as the run finds it: each namespace's bundles dealt evenly over the brokers
    from a seeded shuffle, as the modular manager's namespace filter spreads them."""
    rng = np.random.default_rng([workload.seed, 4])
    owner = np.empty(len(bundles), dtype=np.int64)
    for ns in range(len(bundles.names)):
        mine = np.flatnonzero(bundles.namespace == ns)
        order = rng.permutation(workload.brokers)
        owner[mine] = order[np.arange(mine.shape[0]) % workload.brokers]
    return owner


@dataclass
class Setup:
    """What a run starts from: the bundles, their topics' traffic, the brokers' capacity, the owners."""

    bundles: Bundles
    traffic: Traffic
    capacity: Capacity
    owner: Ints
    broker_names: list[str]
    workload: Workload
    """The workload, its CPU and NIC capacities calibrated on the recorded usage when there is one."""


def setup(config: LabConfig) -> Setup:
    """The workload's cluster, or the operator's (:class:`ClusterSpec`) with its recorded load."""
    w = config.workload
    spec = config.cluster
    if spec is None:
        names = [namespace_name(n) for n in range(w.namespaces)]
        bundles = Bundles.even(names, [w.namespace_bundle_count] * w.namespaces)
        traffic = Traffic.build(w, bundles)
        names_b = [str(b) for b in range(w.brokers)]
        return Setup(bundles, traffic, Capacity.build(w), initial_owners(w, bundles), names_b, w)
    names = [n.name for n in spec.namespaces]
    index = {name: i for i, name in enumerate(names)}
    recorded_ranges: dict[int, set[tuple[int, int]]] = {}
    for r in spec.recorded:
        parsed = parse_key(r.key)
        recorded_ranges.setdefault(index[parsed.namespace], set()).add((parsed.lower, parsed.upper))
    ranges: list[tuple[int, int, int]] = []
    for i, ns in enumerate(spec.namespaces):
        even = Bundles.even([ns.name], [ns.bundles])
        even_ranges = {(int(lo), int(hi)) for lo, hi in zip(even.lower, even.upper, strict=True)}
        seen = recorded_ranges.get(i, set())
        chosen = even_ranges if seen <= even_ranges else _cover(seen, ns.bundles)
        ranges.extend((i, lo, hi) for lo, hi in sorted(chosen))
    bundles = Bundles.from_ranges(names, ranges)
    by_key = {bundles.key(b): b for b in range(len(bundles))}
    brokers = {b.name: i for i, b in enumerate(spec.brokers)}
    recorded = {
        by_key[r.key]: Recorded(
            r.msg_rate_in, r.msg_rate_out, r.throughput_in, r.throughput_out, r.topics, r.producers, r.consumers
        )
        for r in spec.recorded
    }
    reporting = {brokers[r.broker] for r in spec.recorded}
    owner = initial_owners(w, bundles)
    for r in spec.recorded:
        owner[by_key[r.key]] = brokers[r.broker]
    # a broker's lastStats lists all its bundles: others are idle (every broker reported) or elsewhere
    others = [b for b in range(len(spec.brokers)) if b not in reporting]
    unrecorded = [b for b in range(len(bundles)) if b not in recorded]
    for k, b in enumerate(x for x in unrecorded if int(owner[x]) in reporting):
        if others:
            owner[b] = others[k % len(others)]
        else:
            recorded[b] = Recorded(0.0, 0.0, 0.0, 0.0, 1, 0, 0)
    traffic = Traffic.build(w, bundles, recorded)
    scale = np.asarray([b.capacity for b in spec.brokers], dtype=np.float64)
    w = _calibrated(w, spec, traffic, bundles, owner, scale)
    return Setup(bundles, traffic, Capacity.build(w, scale), owner, [b.name for b in spec.brokers], w)


def _calibrated(
    w: Workload, spec: ClusterSpec, traffic: Traffic, bundles: Bundles, owner: Ints, scale: Floats
) -> Workload:
    """The workload's CPU and NIC capacities scaled so the model's usage of the recorded brokers
    matches what they recorded (the median ratio over them; CPU above 5 %, bandwidth above 1 %)."""
    if not spec.recorded_usage:
        return w
    bt = traffic.at(0, topic_bundles(traffic, bundles), len(bundles))
    load = served(bt, owner, w.brokers)
    cpu_ratios, nic_ratios = [], []
    for i, b in enumerate(spec.brokers):
        rec = spec.recorded_usage.get(b.name)
        if rec is None:
            continue
        model_cpu = (
            100.0
            * (load.entries[i] / w.cpu_entries + (load.throughput_in[i] + load.throughput_out[i]) / w.cpu_bytes)
            / scale[i]
        )
        if rec[0] > 5.0 and model_cpu > 0:
            cpu_ratios.append(model_cpu / (rec[0] - 3.0 if rec[0] > 8.0 else rec[0]))
        model_nic = 100.0 * max(load.throughput_in[i], load.throughput_out[i]) / (w.nic_bytes * scale[i])
        recorded_nic = max(rec[3], rec[4])
        if recorded_nic > 1.0 and model_nic > 0:
            nic_ratios.append(model_nic / recorded_nic)
    update: dict[str, object] = {}
    if cpu_ratios:
        k = float(np.median(cpu_ratios))
        update.update({"cpu_entries": w.cpu_entries * k, "cpu_bytes": w.cpu_bytes * k})
    if nic_ratios:
        update["nic_bytes"] = w.nic_bytes * float(np.median(nic_ratios))
    return w.model_copy(update=update) if update else w


def _cover(seen: set[tuple[int, int]], count: int) -> set[tuple[int, int]]:
    """A namespace whose recorded ranges are not its even division (it was split before): the
    recorded ranges, and the gaps between them divided evenly into the rest of its ``count``
    bundles (at least one per gap)."""
    gaps: list[tuple[int, int]] = []
    edge = 0
    for lo, hi in sorted(seen):
        if lo > edge:
            gaps.append((edge, lo))
        edge = max(edge, hi)
    if edge < 0xFFFFFFFF:
        gaps.append((edge, 0xFFFFFFFF))
    out = set(seen)
    spare = max(len(gaps), count - len(seen))
    total = sum(hi - lo for lo, hi in gaps) or 1
    for lo, hi in gaps:
        pieces = max(1, min(hi - lo, round(spare * (hi - lo) / total)))
        step = (hi - lo) // pieces
        bounds = [lo + k * step for k in range(pieces)] + [hi]
        out.update((bounds[k], bounds[k + 1]) for k in range(pieces))
    return out


@dataclass
class LabView:
    """The split strategies' view of the lab (:class:`statechan.balance.split.SplitView`)."""

    s: Setup
    topic_bundle: Ints
    config: BalancerConfig = SEED_001
    now: TopicTraffic | None = None

    def key(self, bundle: int) -> str:
        return self.s.bundles.key(bundle)

    def namespace(self, bundle: int) -> int:
        return int(self.s.bundles.namespace[bundle])

    def bounds(self, bundle: int) -> tuple[int, int]:
        return int(self.s.bundles.lower[bundle]), int(self.s.bundles.upper[bundle])

    def can_split(self, bundle: int) -> bool:
        return self.s.bundles.can_split(bundle)

    def is_owner(self, bundle: int, broker: int) -> bool:
        return int(self.s.owner[bundle]) == broker

    def bundle_count(self, namespace: int) -> int:
        return self.s.bundles.count(namespace)

    def splitting(self) -> Iterable[int]:
        return ()  # a split completes within the minute it is decided (through the channel too)

    def topics(self, bundle: int) -> list[TopicStats]:
        now = self.now
        mine = np.flatnonzero(self.topic_bundle == bundle)
        hashes = self.s.traffic.topic_hash[mine]
        if now is None:
            return [TopicStats(int(h), 0.0, 0.0) for h in hashes]
        return [
            TopicStats(int(h), float(now.rate[t]), float(now.throughput[t])) for h, t in zip(hashes, mine, strict=True)
        ]

    def boundaries(self, bundle: int, algorithm: SplitAlgorithm) -> list[int] | None:
        lower, upper = self.bounds(bundle)
        return split_boundaries(algorithm, lower, upper, self.topics(bundle), self.config)


@dataclass
class _Run:
    """One run's moving parts."""

    config: LabConfig
    carrier: Carrier
    s: Setup
    reporter: Reporter
    placement: Placement
    rng: np.random.Generator
    topic_bundle: Ints
    events: list[MoveEvent] = field(default_factory=list)
    splits: list[SplitEvent] = field(default_factory=list)
    candidates: list[int] = field(default_factory=list)
    counter: SplitCounter = field(default_factory=SplitCounter)
    everyone: list[int] = field(default_factory=list)
    strategies: dict[int, ExtensibleSplitStrategy] = field(default_factory=dict)

    @property
    def owner(self) -> Ints:
        return self.s.owner

    @property
    def data(self) -> LoadData:
        return self.reporter.data

    def place(self, bundle: int) -> int | None:
        """Where an unloaded bundle goes: the extensible selection, or the modular one inside
        ``selectBroker``'s frame (namespace filter, overload retry)."""
        cfg = self.config.balancer
        if self.config.placement is PlacementKind.extensible:
            return self.placement.select(self.everyone, bundle, self.data, cfg, self.rng)
        bundles = self.s.bundles
        mates = self.owner[(bundles.namespace == bundles.namespace[bundle]) & bundles.alive]
        counts = np.bincount(mates[mates >= 0], minlength=self.config.workload.brokers)
        return modular_select(
            self.placement, self.everyone, [int(c) for c in counts], bundle, self.data, cfg, self.rng, self.candidates
        )

    def carry_out(self, move: Move, minute: int) -> None:
        """Apply one shedding decision (a stale one, whose bundle moved already, is dropped)."""
        if int(self.owner[move.bundle]) != move.source:
            return
        now = minute * MINUTE_MS
        data = self.data
        if move.destination is None:
            chosen = self.place(move.bundle)
            if chosen is None:
                return
            destination, transfer = chosen, False
        else:
            destination, transfer = move.destination, True
            data.recently_unloaded_brokers[move.source] = now
            data.recently_unloaded_brokers[destination] = now
        data.recently_unloaded[move.bundle] = now
        data.preallocated.setdefault(destination, set()).add(move.bundle)
        self.owner[move.bundle] = destination
        event = MoveEvent(minute, move.bundle, move.source, destination, transfer)
        self.events.append(event)
        self.carrier.move(event)

    def split(self, bundle: int, broker: int, reason: SplitReason, boundaries: Sequence[int], minute: int) -> list[int]:
        """Split ``bundle`` at each boundary in turn (the channel splits in two; a multi-way split
        is a chain); return the resulting bundles, or [] when the channel refused."""
        pieces = [bundle]
        for boundary in sorted(boundaries):
            last = pieces[-1]
            lo, hi = int(self.s.bundles.lower[last]), int(self.s.bundles.upper[last])
            if not lo < boundary < hi:
                continue
            children = self.s.bundles.split(last, boundary, minute)
            event = SplitEvent(minute, last, children, broker, reason.value, boundary)
            self.reporter.grow(len(self.s.bundles))
            if not self.carrier.split(event):
                self.s.bundles.alive[last] = True
                self.s.bundles.alive[list(children)] = False
                self.s.owner = np.append(self.s.owner, [-1, -1])
                self.counter.failure()
                break
            mine = np.flatnonzero(self.topic_bundle == last)
            left = self.s.traffic.topic_hash[mine] < boundary
            self.topic_bundle[mine[left]] = children[0]
            self.topic_bundle[mine[~left]] = children[1]
            owner = np.append(self.s.owner, [self.s.owner[last], self.s.owner[last]])
            owner[last] = -1
            self.s.owner = owner
            self.data.recently_unloaded.pop(last, None)
            for pre in self.data.preallocated.values():
                pre.discard(last)
            self.splits.append(event)
            pieces = [*pieces[:-1], *children]
        if len(pieces) > 1:
            self.counter.succeeded[reason] += 1
        return pieces if len(pieces) > 1 else []

    def extensible_splits(self, minute: int, bt: BundleTraffic, view: LabView) -> None:
        """``SplitScheduler.execute`` on every broker: its strategy over the bundles it owns."""
        cfg = self.config.balancer
        bundles = self.s.bundles
        owner = self.owner
        size = len(bundles)
        over = (bt.topics[:size] > cfg.bundle_max_topics) | (bt.rate[:size] > cfg.bundle_max_msg_rate)
        over |= bt.throughput[:size] > cfg.bundle_max_bandwidth_mb * 1024 * 1024
        if cfg.bundle_max_sessions > 0:
            over |= bt.sessions[:size] > cfg.bundle_max_sessions
        hot = np.flatnonzero(over & bundles.alive & (owner >= 0))
        brokers = {int(owner[b]) for b in hot} | {b for b, s in self.strategies.items() if s.hit_counts}
        for broker in sorted(brokers):
            if broker not in self.everyone:
                continue
            strategy = self.strategies.setdefault(broker, ExtensibleSplitStrategy(self.counter))
            mine = {int(b) for b in hot if int(owner[b]) == broker}
            mine |= {b for b in strategy.hit_counts if int(owner[b]) == broker}
            stats = {
                b: BundleStats(
                    int(bt.topics[b]),
                    float(bt.rate_in[b]),
                    float(bt.rate_out[b]),
                    float(bt.throughput_in[b]),
                    float(bt.throughput_out[b]),
                    int(bt.sessions[b]),
                )
                for b in sorted(mine)
            }
            for decision in strategy.find(broker, stats, view, cfg):
                self.apply_split(decision, minute, unload=False)

    def modular_splits(self, minute: int, view: LabView) -> None:
        """``ModularLoadManagerImpl.checkNamespaceBundleSplit`` after ``updateAll`` (the leader,
        with more than one broker): split each bundle ``BundleSplitterTask`` picks, then unload
        its children when ``loadBalancerAutoUnloadSplitBundlesEnabled``."""
        cfg = self.config.balancer
        if len(self.everyone) <= 1:
            return
        for bundle in modular_bundles_to_split(self.data, view, cfg):
            if not self.s.bundles.alive[bundle] or not self.s.bundles.can_split(bundle):
                continue
            stats = BundleStats(
                int(self.data.topics[bundle]),
                msg_rate_in=float(self.data.long_rate[bundle]),
                throughput_in=float(self.data.long_throughput[bundle]),
                producers=int(self.data.sessions[bundle]),
            )
            reason = split_reason(stats, cfg)
            try:
                boundaries = view.boundaries(bundle, cfg.split_algorithm)
            except ValueError:
                self.counter.failure()
                continue
            if not boundaries:
                self.counter.failure()
                continue
            self.reporter.forget(bundle)
            decision = SplitDecision(bundle, int(self.owner[bundle]), reason, tuple(boundaries))
            self.apply_split(decision, minute, unload=cfg.auto_unload_split_bundles)

    def apply_split(self, decision: SplitDecision, minute: int, unload: bool) -> None:
        pieces = self.split(decision.bundle, decision.broker, decision.reason, decision.boundaries, minute)
        if not unload:
            return
        for child in pieces:
            source = int(self.owner[child])
            destination = self.place(child)
            if destination is None or destination == source:
                continue
            self.owner[child] = destination
            self.data.preallocated.setdefault(destination, set()).add(child)
            event = MoveEvent(minute, child, source, destination, False, cause="split")
            self.events.append(event)
            self.carrier.move(event)


def run(
    config: LabConfig,
    carrier: Carrier | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Result:
    """Run one configuration; ``progress(minute, minutes)`` is called every simulated hour."""
    carrier = carrier if carrier is not None else Direct()
    cfg = config.balancer
    s = setup(config)
    w = s.workload
    reporter = Reporter(cfg, w.brokers, len(s.bundles), config.manager)
    r = _Run(
        config,
        carrier,
        s,
        reporter,
        make_placement(config.placement, config.pulsar_2_10_overload),
        np.random.default_rng([w.seed, 5]),
        topic_bundles(s.traffic, s.bundles),
        everyone=list(range(w.brokers)),
    )
    data = reporter.data
    shedder = make_shedder(config.shedder if cfg.shedding_enabled else ShedderKind.none)
    carrier.bind(lambda candidates: r.placement.select(candidates, -1, data, cfg, r.rng))
    for bundle in range(len(s.bundles)):
        carrier.assign(bundle, int(s.owner[bundle]))
    down: frozenset[int] = frozenset()
    minutes = w.minutes
    load = np.empty((minutes, w.brokers), dtype=np.float64)
    per_namespace = np.empty((minutes, len(s.bundles.names)), dtype=np.int64)
    grace_ms = cfg.grace_period_min * MINUTE_MS
    splits_on = scheduler_enabled(cfg)
    view = LabView(s, r.topic_bundle, cfg)
    for minute in range(minutes):
        now = minute * MINUTE_MS
        bt = s.traffic.at(minute, r.topic_bundle, len(s.bundles))
        now_load = served(bt, r.owner, w.brokers)
        usage = usages(w, s.capacity, now_load, minute)
        load[minute] = max_usage(usage)
        published: list[int] = []
        if minute % cfg.host_usage_check_interval_min == 0:
            published = reporter.observe(now, usage, now_load, bt, r.owner, down)
        if splits_on:
            view.now = s.traffic.topic_traffic(minute)
            if config.manager is Manager.modular and published:
                r.modular_splits(minute, view)
            elif config.manager is Manager.extensible and minute > 0 and minute % cfg.split_interval_min == 0:
                r.extensible_splits(minute, bt, view)
        if minute > 0 and minute % cfg.shedding_interval_min == 0:
            for bundle, at in list(data.recently_unloaded.items()):
                if now - at > grace_ms:
                    del data.recently_unloaded[bundle]
            if len(r.everyone) > 1:
                for move in shedder.find(data, cfg, r.owner):
                    r.carry_out(move, minute)
        now_down = carrier.minute(minute, r.owner)
        if now_down != down:
            down = now_down
            r.everyone = [b for b in range(w.brokers) if b not in down]
            for b in down:  # a broker out of the registry is out of the leader's load data
                data.reports.pop(b, None)
                data.preallocated.pop(b, None)
        per_namespace[minute] = s.bundles.counts()
        if progress is not None and (minute + 1) % 60 == 0:
            progress(minute + 1, minutes)
    heavy = {int(b) for b in s.traffic.heavy}
    for child in range(len(s.bundles)):  # children come after their parents
        if int(s.bundles.parent[child]) in heavy:
            heavy.add(child)
    return Result(config, r.events, load, r.splits, per_namespace, r.candidates, r.counter.failed, frozenset(heavy))


def weighted_load(usage: Floats, config: BalancerConfig) -> Floats:
    """The shedders' metric (``getMaxResourceUsageWithWeight``), for callers that want it."""
    return max_usage_with_weight(usage, config.weights())
