"""Seed 001's three causes, each reproducible on its own, and the study that compares
``LeastLongTermMessageRate`` with ``LeastResourceUsageWithWeight`` (under the ThresholdShedder)
and with no shedding at all, over held-out seeds and several cluster sizes.

Each scenario names a workload and a setting from :mod:`statechan.balance.settings` that turn one
cause on and keep the other two off:

1. **the namespace filter starves the candidates** (``removeMostServicingBrokersForNamespace``
   keeps only the brokers serving the fewest bundles of the namespace): every namespace two
   bundles short of the brokers, dealt evenly, leaves two candidates; message rate tracks load,
   heap weighted 0.1. Beside it, the same with ``loadBalancerDistributeBundlesEvenlyEnabled=false``.
2. **swinging heap memory dominates the usage**: heap between 40 % and 99 %; message rate tracks
   load, plenty of candidates. With the seed's weights (heap 0.1) heap acts through Pulsar 2.10's
   ``LeastLongTermMessageRate`` overload test (every usage unweighted: a broker whose heap passes
   85 % scores infinity); with Pulsar 2.10's defaults (heap weighted 1.0) it also drives the
   ThresholdShedder's own metric.
3. **placing by message rate, not load**: the seed-001 workload (batching and message sizes part
   message rate from CPU), plenty of candidates, heap weighted 0.1; beside it the control where
   every message is one entry of one size, so rate tracks load.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from statechan.balance.lab import LabConfig
from statechan.balance.settings import BASELINE, SETTINGS, STRATEGIES, WORKLOADS
from statechan.balance.sweep import HELD_OUT_SEEDS, Cell, Row, show


@dataclass(frozen=True)
class Scenario:
    name: str
    cause: str
    workload: str
    setting: str
    pulsar_2_10_overload: bool = False


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("starved-candidates", "1 namespace filter", "starved-candidates", "seed-001"),
    Scenario("starved-candidates, spread evenly off", "1 control", "starved-candidates", "seed-001-spread-evenly-off"),
    Scenario("swinging-heap, seed's weights, 2.10 overload test", "2 memory", "swinging-heap", "seed-001", True),
    Scenario("swinging-heap, Pulsar 2.10 defaults", "2 memory", "swinging-heap", "pulsar-2.10-defaults", True),
    Scenario("rate-decoupled", "3 rate vs load", "rate-decoupled", "seed-001"),
    Scenario("rate-tracks-load", "3 control", "rate-tracks-load", "seed-001"),
)

STUDY_STRATEGIES = ("threshold+lltmr", "threshold+lruww", BASELINE)
STUDY_BROKERS = (20, 60, 136)


def study_cells(
    scenarios: Sequence[Scenario] = SCENARIOS,
    brokers: Sequence[int] = STUDY_BROKERS,
    seeds: Iterable[int] = HELD_OUT_SEEDS,
    hours: float | None = None,
    strategies: Sequence[str] = STUDY_STRATEGIES,
) -> list[Cell]:
    cells = []
    seeds = list(seeds)
    for scenario in scenarios:
        for size in brokers:
            workload = WORKLOADS[scenario.workload].for_brokers(size)
            for name in strategies:
                shedder, placement = STRATEGIES[name]
                for seed in seeds:
                    update: dict[str, object] = {"seed": seed}
                    if hours is not None:
                        update["hours"] = hours
                    lab = LabConfig(
                        workload=workload.model_copy(update=update),
                        shedder=shedder,
                        placement=placement,
                        balancer=SETTINGS[scenario.setting],
                        pulsar_2_10_overload=scenario.pulsar_2_10_overload,
                    )
                    cells.append(
                        Cell(
                            strategy=name,
                            setting=scenario.setting,
                            workload_name=scenario.workload,
                            lab=lab,
                            group=scenario.name,
                        )
                    )
    return cells


def study_table(rows: Sequence[Row]) -> list[Row]:
    """One row per scenario and size: each strategy's moves and late spread of broker load
    (median [range] over seeds), the no-shedding baseline's spread, and, paired seed by seed,
    how many times more moves ``LeastLongTermMessageRate`` makes than
    ``LeastResourceUsageWithWeight`` and in how many seeds LRUWW balances better."""
    by: dict[tuple[str, int, str], dict[int, Row]] = {}
    for row in rows:
        key = (str(row["group"]), int(row["brokers"] or 0), str(row["strategy_name"]))
        by.setdefault(key, {})[int(row["seed"] or 0)] = row
    out: list[Row] = []
    order = {s.name: i for i, s in enumerate(SCENARIOS)}
    for group, size in sorted({(g, b) for g, b, _ in by}, key=lambda k: (order.get(k[0], 99), k[1])):
        lltmr = by.get((group, size, "threshold+lltmr"), {})
        lruww = by.get((group, size, "threshold+lruww"), {})
        base = by.get((group, size, BASELINE), {})
        seeds = sorted(set(lltmr) & set(lruww))
        entry: Row = {"scenario": group, "brokers": size, "seeds": len(seeds)}
        for label, runs in (("lltmr", lltmr), ("lruww", lruww)):
            if runs:
                entry[f"{label}_moves"] = show([float(r["moves"] or 0) for r in runs.values()], 0)
                entry[f"{label}_moved_3plus"] = show([float(r["moved_3plus"] or 0) for r in runs.values()], 0)
                entry[f"{label}_late_spread"] = show([float(r["late_spread"] or 0) for r in runs.values()], 3)
                entry[f"{label}_late_peak"] = show([float(r["late_peak"] or 0) for r in runs.values()], 3)
        if base:
            entry["no_shedding_late_spread"] = show([float(r["late_spread"] or 0) for r in base.values()], 3)
        if seeds:
            ratios = [float(lltmr[s]["moves"] or 0) / max(1.0, float(lruww[s]["moves"] or 0)) for s in seeds]
            entry["moves_ratio_lltmr_to_lruww"] = show(ratios, 2)
            better = sum(1 for s in seeds if float(lruww[s]["late_spread"] or 0) < float(lltmr[s]["late_spread"] or 0))
            entry["lruww_balances_better"] = f"{better}/{len(seeds)}"
            cands = [
                float(lltmr[s]["candidates_median"] or 0) for s in seeds if lltmr[s]["candidates_median"] is not None
            ]
            entry["candidates"] = round(statistics.median(cands), 1) if cands else None
        out.append(entry)
    return out
