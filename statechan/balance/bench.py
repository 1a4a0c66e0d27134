"""The lab's benchmark figures, for ``make bench`` (``statechan.bench`` calls :func:`bench_balance`).

Seed 001's cluster (136 brokers, 3,000 bundles, 10 simulated hours) with ThresholdShedder +
LeastLongTermMessageRate: balancer-only, and with every move through the channel (checked every
10 simulated minutes); then a sweep grid on local Spark beside a one-process loop over the same
grid. Nothing here asserts a time.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from statechan.balance.lab import LabConfig, run
from statechan.balance.sweep import grid, sweep_local, sweep_spark

if TYPE_CHECKING:
    from statechan.benchharness import Figure

SWEEP_STRATEGIES = ("threshold+lltmr", "threshold+lruww", "transfer+extensible", "uniform+lltmr")
SWEEP_SEEDS = (1, 2)


def bench_balance(_: int) -> list[Figure]:
    """Three figures: balancer-only (baseline: none), through the channel (baseline: balancer-only),
    the Spark sweep (baseline: the same grid in one process)."""
    from statechan.balance.channel import ThroughChannel
    from statechan.benchharness import Figure

    config = LabConfig()
    minutes = config.workload.minutes
    start = time.perf_counter()
    alone = run(config)
    alone_s = time.perf_counter() - start

    carrier = ThroughChannel(config.workload)
    start = time.perf_counter()
    carried = run(config, carrier)
    counts = carrier.finish()
    channel_s = time.perf_counter() - start

    cells = grid(list(SWEEP_STRATEGIES), ["seed-001"], ["seed-001"], SWEEP_SEEDS)
    start = time.perf_counter()
    sweep_local(cells)
    local_s = time.perf_counter() - start
    from statechan.audit import spark_session

    spark = spark_session(None, app="statechan-balance-bench")
    sweep_spark(cells[:1], spark=spark)  # the JVM and the Python workers started before the clock
    start = time.perf_counter()
    sweep_spark(cells, spark=spark)
    spark_s = time.perf_counter() - start
    return [
        Figure(
            "balance: 136 brokers, 10 h, balancer-only",
            minutes,
            alone_s,
            notes={"moves": len(alone.events), "late_spread": alone.measures()["late_spread"]},
        ),
        Figure(
            "balance: the same, every move through the channel",
            minutes,
            channel_s,
            "balancer-only",
            alone_s,
            notes={"moves": len(carried.events), "same_moves": carried.events == alone.events, **counts},
        ),
        Figure(
            f"balance sweep: {len(cells)} runs on local Spark",
            len(cells),
            spark_s,
            "one process",
            local_s,
        ),
    ]
