"""Where an assignment goes: Pulsar's ``LeastResourceUsageWithWeight`` and a uniform choice, as
pure functions over the loads brokers report.

Brokers carry simple load figures that grow with the bundles they own (a model, not a
measurement); the random choice among the near-best brokers comes from the caller.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol


class Load(NamedTuple):
    """Usage percentages a broker reports, and the smoothed score placement keeps."""

    cpu: float = 5.0
    memory: float = 20.0
    direct_memory: float = 5.0
    bandwidth_in: float = 2.0
    bandwidth_out: float = 2.0
    history: float | None = None

    @staticmethod
    def of_bundles(owned: int, history: float | None) -> Load:
        """Load grows with owned bundles (a fixed cost per bundle)."""
        return Load(
            min(100.0, 5.0 + 1.5 * owned),
            min(100.0, 20.0 + 0.5 * owned),
            min(100.0, 5.0 + 0.3 * owned),
            min(100.0, 2.0 + 1.2 * owned),
            min(100.0, 2.0 + 1.4 * owned),
            history,
        )


BrokerLoad = Load


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


def score(load: Load, w: Weights) -> float:
    """The weighted maximum of a broker's usages, smoothed with its history."""
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


def near_best(candidates: Sequence[int], loads: Sequence[Load], w: Weights) -> tuple[list[int], list[Load]]:
    """``LeastResourceUsageWithWeight``: the candidates within ``difference_threshold`` points of the
    least loaded (the caller chooses among them at random), and the loads with each candidate's
    score kept as its history."""
    updated = list(loads)
    scores: list[tuple[int, float]] = []
    for broker in candidates:
        value = score(loads[broker], w)
        updated[broker] = loads[broker]._replace(history=value)
        scores.append((broker, value))
    best = min(value for _, value in scores)
    return [broker for broker, value in scores if value <= best + w.difference_threshold], updated


class Placer(Protocol):
    """A placement decided outside the channel (the load-balance lab's balancer): given the
    candidates by name, the broker chosen, or None."""

    def select(self, candidates: Sequence[str], loads: Any, rng: Any) -> str | None: ...
