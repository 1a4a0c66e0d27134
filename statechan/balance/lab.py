"""The run loop: minute by minute, traffic -> broker usage -> reports -> shedding -> placement,
and the measures of how it went.

Ownership changes only through a :class:`Carrier`: :class:`Direct` applies the decisions to the
lab's own table (balancer-only), :class:`statechan.balance.channel.ThroughChannel` carries each
one through the cluster model's channel protocol. Either way the decisions come from the same
code, in the same order, from the same seeded generators, so both modes make the same moves.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from statechan.balance.load import (
    MINUTE_MS,
    Capacity,
    Floats,
    Ints,
    LoadData,
    Reporter,
    Traffic,
    max_usage_with_weight,
    served,
    usages,
)
from statechan.balance.placement import Placement, make_placement, modular_select
from statechan.balance.settings import SEED_001, BalancerConfig, PlacementKind, ShedderKind, Workload
from statechan.balance.shedders import Move, make_shedder


class Verdict(enum.Enum):
    settles = "settles"
    oscillates = "oscillates"


class LabConfig(BaseModel):
    """One run: a workload, a shedder, a placement, Pulsar's settings, and the measures' targets."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    workload: Workload = Field(default_factory=Workload)
    shedder: ShedderKind = ShedderKind.threshold
    placement: PlacementKind = PlacementKind.least_long_term_message_rate
    balancer: BalancerConfig = SEED_001
    target_std: float = Field(0.1, gt=0, description="the broker-load standard deviation a run should stay under")
    settle_window_hours: float = Field(2.0, gt=0, description="the closing window the verdict looks at")
    oscillation_repeat_share: float = Field(
        0.4,
        ge=0,
        le=1,
        description="the run oscillates when more than this share of the closing window's moves take a "
        "bundle that had been moved before: placement keeps sending bundles where the shedder takes them "
        "from again (seed 001's description); moves that answer the workload's own changes mostly take "
        "bundles for the first time (0.4 lies between the two groups docs/balance.md shows)",
    )

    def label(self) -> str:
        return f"{self.shedder.value} + {self.placement.value}"


@dataclass(frozen=True)
class MoveEvent:
    minute: int
    bundle: int
    source: int
    destination: int
    transfer: bool


Chooser = Callable[[Sequence[int]], int | None]
"""The balancer's placement, for assignments the carrier needs on its own (a dead broker's bundles)."""


class Carrier(Protocol):
    """Carries the balancer's decisions out."""

    def bind(self, choose: Chooser) -> None: ...
    def assign(self, bundle: int, broker: int) -> None: ...
    def move(self, event: MoveEvent) -> None: ...
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

    def minute(self, minute: int, owner: Ints) -> frozenset[int]:
        return frozenset()


@dataclass
class Result:
    """A run's events, per-minute series and measures."""

    config: LabConfig
    events: list[MoveEvent]
    load: Floats
    """Minutes x brokers: each broker's weighted maximum usage (fraction), the shedder's metric."""
    channel: dict[str, int] = field(default_factory=dict)
    """What the channel mode counted (lookups delayed and failed, invariant breaches, ...)."""

    @property
    def hours(self) -> float:
        return float(self.load.shape[0]) / 60.0

    def std(self) -> Floats:
        return np.asarray(self.load.std(axis=1), dtype=np.float64)

    def settle_minute(self) -> int | None:
        """The first minute from which the load's standard deviation stays under the target."""
        above = np.flatnonzero(self.std() >= self.config.target_std)
        if above.size == 0:
            return 0
        last = int(above[-1]) + 1
        return last if last < self.load.shape[0] else None

    def repeat_share(self) -> float:
        """The share of the closing window's moves whose bundle had been moved before in the run
        (0 when the window has no move)."""
        start = self.load.shape[0] - self.config.settle_window_hours * 60
        seen: set[int] = set()
        late = repeats = 0
        for e in self.events:
            if e.minute >= start:
                late += 1
                repeats += e.bundle in seen
            seen.add(e.bundle)
        return repeats / late if late else 0.0

    def verdict(self) -> Verdict:
        """Oscillates when the closing window's share of repeat moves passes
        ``oscillation_repeat_share``; settles otherwise (also when it makes no move at all)."""
        return Verdict.oscillates if self.repeat_share() > self.config.oscillation_repeat_share else Verdict.settles

    def measures(self) -> dict[str, float | int | str | None]:
        unloads = sum(1 for e in self.events if not e.transfer)
        transfers = len(self.events) - unloads
        moved = Counter(e.bundle for e in self.events)
        settle = self.settle_minute()
        load = self.load
        late = load[-60:] if load.shape[0] >= 60 else load
        window = self.config.settle_window_hours
        start = load.shape[0] - window * 60
        return {
            "strategy": self.config.label(),
            "shedder": self.config.shedder.value,
            "placement": self.config.placement.value,
            "seed": self.config.workload.seed,
            "unloads": unloads,
            "transfers": transfers,
            "moves_per_hour": round(len(self.events) / self.hours, 2),
            "late_moves_per_hour": round(sum(1 for e in self.events if e.minute >= start) / window, 2),
            "bundles_moved": len(moved),
            "moved_again": sum(1 for c in moved.values() if c > 1),
            "late_repeat_share": round(self.repeat_share(), 3),
            "settle_minutes": settle,
            "final_std": round(float(self.std()[-60:].mean()), 4),
            "mean_load": round(float(load.mean()), 4),
            "max_load": round(float(load.max(axis=1).mean()), 4),
            "late_max_load": round(float(late.max(axis=1).mean()), 4),
            "verdict": self.verdict().value,
            **{f"channel_{k}": v for k, v in sorted(self.channel.items())},
        }


def initial_owners(workload: Workload) -> Ints:
    """The cluster as the run finds it: bundles dealt round-robin over a seeded shuffle."""
    rng = np.random.default_rng([workload.seed, 4])
    order = rng.permutation(workload.bundles)
    owner = np.empty(workload.bundles, dtype=np.int64)
    owner[order] = np.arange(workload.bundles) % workload.brokers
    return owner


def run(
    config: LabConfig,
    carrier: Carrier | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Result:
    """Run one configuration; ``progress(minute, minutes)`` is called every simulated hour."""
    carrier = carrier if carrier is not None else Direct()
    w = config.workload
    cfg = config.balancer
    traffic = Traffic.build(w)
    capacity = Capacity.build(w)
    reporter = Reporter(cfg, w.brokers, w.bundles)
    data = reporter.data
    shedder = make_shedder(config.shedder)
    placement = make_placement(config.placement)
    rng = np.random.default_rng([w.seed, 5])
    owner = initial_owners(w)
    everyone = list(range(w.brokers))
    carrier.bind(lambda candidates: placement.select(candidates, -1, data, cfg, rng))
    for bundle in range(w.bundles):
        carrier.assign(bundle, int(owner[bundle]))
    down: frozenset[int] = frozenset()
    minutes = w.minutes
    load = np.empty((minutes, w.brokers), dtype=np.float64)
    events: list[MoveEvent] = []
    grace_ms = cfg.grace_period_min * MINUTE_MS
    weights = cfg.weights()
    for minute in range(minutes):
        now = minute * MINUTE_MS
        now_traffic = traffic.at(minute)
        now_load = served(now_traffic, owner, w.brokers)
        usage = usages(w, capacity, now_load, minute)
        load[minute] = max_usage_with_weight(usage, weights)
        if minute % cfg.host_usage_check_interval_min == 0:
            reporter.observe(now, usage, now_load, now_traffic, owner, down)
        if minute > 0 and minute % cfg.shedding_interval_min == 0:
            for bundle, at in list(data.recently_unloaded.items()):
                if now - at > grace_ms:
                    del data.recently_unloaded[bundle]
            for move in shedder.find(data, cfg, owner):
                event = _carry_out(move, minute, owner, traffic.namespace, data, placement, config, everyone, rng)
                if event is not None:
                    events.append(event)
                    carrier.move(event)
        now_down = carrier.minute(minute, owner)
        if now_down != down:
            down = now_down
            everyone = [b for b in range(w.brokers) if b not in down]
            for b in down:  # a broker out of the registry is out of the leader's load data
                data.reports.pop(b, None)
                data.preallocated.pop(b, None)
        if progress is not None and (minute + 1) % 60 == 0:
            progress(minute + 1, minutes)
    return Result(config, events, load)


def _carry_out(
    move: Move,
    minute: int,
    owner: Ints,
    namespace: Ints,
    data: LoadData,
    placement: Placement,
    config: LabConfig,
    everyone: list[int],
    rng: np.random.Generator,
) -> MoveEvent | None:
    """Apply one decision to the ownership table (a stale one, whose bundle moved already, is dropped)."""
    if int(owner[move.bundle]) != move.source:
        return None
    now = minute * MINUTE_MS
    cfg = config.balancer
    if move.destination is None:
        if config.placement is PlacementKind.extensible:
            chosen = placement.select(everyone, move.bundle, data, cfg, rng)
        else:
            mates = owner[namespace == namespace[move.bundle]]
            counts = np.bincount(mates[mates >= 0], minlength=config.workload.brokers)
            chosen = modular_select(placement, everyone, [int(c) for c in counts], move.bundle, data, cfg, rng)
        if chosen is None:
            return None
        destination, transfer = chosen, False
    else:
        destination, transfer = move.destination, True
        data.recently_unloaded_brokers[move.source] = now
        data.recently_unloaded_brokers[destination] = now
    data.recently_unloaded[move.bundle] = now
    data.preallocated.setdefault(destination, set()).add(move.bundle)
    owner[move.bundle] = destination
    return MoveEvent(minute, move.bundle, move.source, destination, transfer)
