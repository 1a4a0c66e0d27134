"""Where an assignment goes: Pulsar's ``LeastResourceUsageWithWeight`` and a uniform choice.

Brokers carry simple load figures that grow with the bundles they own; randomness comes from
the simulator's seeded generator, never from global state.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from statechan.cluster.config import PlacementKind


@dataclass
class BrokerLoad:
    """Usage percentages a broker reports, and the smoothed score the strategy keeps."""

    cpu: float = 5.0
    memory: float = 20.0
    direct_memory: float = 5.0
    bandwidth_in: float = 2.0
    bandwidth_out: float = 2.0
    history: float | None = None

    def apply_bundles(self, owned: int) -> None:
        """Load grows with owned bundles (a fixed cost per bundle; a model, not a measurement)."""
        self.cpu = min(100.0, 5.0 + 1.5 * owned)
        self.memory = min(100.0, 20.0 + 0.5 * owned)
        self.direct_memory = min(100.0, 5.0 + 0.3 * owned)
        self.bandwidth_in = min(100.0, 2.0 + 1.2 * owned)
        self.bandwidth_out = min(100.0, 2.0 + 1.4 * owned)


@dataclass(frozen=True)
class Weights:
    """Pulsar's defaults: loadBalancer{CPU,Memory,DirectMemory,BandwithIn,BandwithOut}ResourceWeight."""

    cpu: float = 1.0
    memory: float = 0.1
    direct_memory: float = 0.1
    bandwidth_in: float = 1.0
    bandwidth_out: float = 1.0
    history_percentage: float = 0.9
    """loadBalancerHistoryResourcePercentage: how much the previous score counts."""
    difference_threshold: float = 10.0
    """loadBalancerAverageResourceUsageDifferenceThresholdPercentage: near-best candidates."""


class Placement(Protocol):
    def select(self, candidates: Sequence[str], loads: dict[str, BrokerLoad], rng: random.Random) -> str | None: ...


@dataclass
class UniformPlacement:
    """Any registered broker, uniformly."""

    def select(self, candidates: Sequence[str], loads: dict[str, BrokerLoad], rng: random.Random) -> str | None:
        return rng.choice(sorted(candidates)) if candidates else None


@dataclass
class LeastResourceUsageWithWeight:
    """The weighted maximum of a broker's usages, smoothed with its history; a random choice
    among the brokers within ``difference_threshold`` points of the least loaded one."""

    weights: Weights = field(default_factory=Weights)

    def score(self, load: BrokerLoad) -> float:
        w = self.weights
        current = max(
            load.cpu * w.cpu,
            load.memory * w.memory,
            load.direct_memory * w.direct_memory,
            load.bandwidth_in * w.bandwidth_in,
            load.bandwidth_out * w.bandwidth_out,
        )
        if load.history is None:
            return current
        return w.history_percentage * load.history + (1 - w.history_percentage) * current

    def select(self, candidates: Sequence[str], loads: dict[str, BrokerLoad], rng: random.Random) -> str | None:
        if not candidates:
            return None
        scores = {broker: self.score(loads.setdefault(broker, BrokerLoad())) for broker in sorted(candidates)}
        for broker, value in scores.items():
            loads[broker].history = value
        best = min(scores.values())
        near = [broker for broker, value in scores.items() if value <= best + self.weights.difference_threshold]
        return rng.choice(near)


def make_placement(kind: PlacementKind) -> Placement:
    if kind is PlacementKind.uniform:
        return UniformPlacement()
    return LeastResourceUsageWithWeight()
