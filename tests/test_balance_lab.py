"""The lab's load model, run loop, channel mode and command line."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from statechan.balance.channel import ThroughChannel
from statechan.balance.cli import app
from statechan.balance.lab import Direct, LabConfig, MoveEvent, Result, run
from statechan.balance.load import (
    MINUTE_MS,
    NUM_LONG_SAMPLES,
    NUM_SHORT_SAMPLES,
    Bundles,
    BundleTraffic,
    Ints,
    Reporter,
    Served,
    Traffic,
    averaged,
)
from statechan.balance.settings import SEED_001, BalancerConfig, Manager, PlacementKind, ShedderKind, Workload
from statechan.balance.sweep import grid, summary, sweep_local

SMALL = Workload(brokers=12, namespaces=4, bundles_per_namespace=30, hours=2.0)


def _bundles(w: Workload) -> Bundles:
    return Bundles.even([f"tenant/ns-{n}" for n in range(w.namespaces)], [w.namespace_bundle_count] * w.namespaces)


def test_traffic_is_a_function_of_the_minute() -> None:
    """Two builds of the same workload give the same traffic; another seed does not."""
    b = _bundles(SMALL)
    owner_of_topics = Traffic.build(SMALL, b).topic_origin
    a, c = Traffic.build(SMALL, b), Traffic.build(SMALL, b)
    assert np.array_equal(
        a.at(37, owner_of_topics, len(b)).throughput_out, c.at(37, owner_of_topics, len(b)).throughput_out
    )
    other = Traffic.build(SMALL.model_copy(update={"seed": 2}), b)
    assert not np.array_equal(a.topic_rate_in, other.topic_rate_in)


def test_no_bundle_exceeds_its_share_before_events() -> None:
    w = Workload()
    b = _bundles(w)
    t = Traffic.build(w, b)
    base = t.at(-10_000, t.topic_origin, len(b))  # long before any event, at the daily curve's mean
    mult = t.multiplier(-10_000)
    share = (base.entries / w.cpu_entries + base.throughput / w.cpu_bytes) / mult
    assert share.max() <= w.max_bundle_share + 1e-9


def _served(rates: list[float], bundles: list[int]) -> Served:
    r = np.array(rates)
    return Served(r, r, r * 1000, r * 1000, r, np.array(bundles))


def _traffic(rates: list[float]) -> BundleTraffic:
    r = np.array(rates)
    n = len(rates)
    return BundleTraffic(r, r, r * 1000, r * 1000, r, np.ones(n, dtype=np.int64), np.ones(n, dtype=np.int64))


USAGE = [40.0, 50.0, 10.0, 5.0, 5.0]


@pytest.mark.parametrize(
    ("manager", "later_rate", "cpu", "minutes_later", "reports"),
    [
        (Manager.modular, 100.0, 40.0, 1, False),  # nothing moved
        (Manager.modular, 109.0, 40.0, 1, False),  # 9 % is under loadBalancerReportUpdateThresholdPercentage
        (Manager.modular, 120.0, 40.0, 1, True),  # 20 % is over it
        (Manager.modular, 100.0, 49.0, 1, False),  # CPU 40 -> 49 %: 9 points
        (Manager.modular, 100.0, 51.0, 1, True),  # 11 points: an absolute change, not 27.5 % of 40
        (Manager.extensible, 100.0, 51.0, 1, True),
        (Manager.modular, 100.0, 40.0, 15, True),  # loadBalancerReportUpdateMaxIntervalMinutes passed
    ],
)
def test_reports_follow_pulsars_update_rule(
    manager: Manager, later_rate: float, cpu: float, minutes_later: int, reports: bool
) -> None:
    """``needBrokerDataUpdate``: the percent change of rate, throughput or bundle count, or the
    change of the maximum usage in points, over 10; or the last report 15 minutes old."""
    reporter = Reporter(BalancerConfig(), 1, 1, manager)
    owner = np.array([0])
    assert reporter.observe(0, np.array([USAGE]), _served([100.0], [1]), _traffic([100.0]), owner) == [0]
    usage = np.array([[cpu, *USAGE[1:]]])
    published = reporter.observe(
        minutes_later * MINUTE_MS, usage, _served([later_rate], [1]), _traffic([later_rate]), owner
    )
    assert (published == [0]) is reports


def test_modular_report_weighs_usage_and_leaves_heap_out() -> None:
    """The modular change is of the maximum of CPU, direct memory and bandwidth, weighted: with
    the CPU weighted 0.5 an 11-point CPU change is 5.5 points; heap never counts."""
    cfg = BalancerConfig(cpu_weight=0.5)
    reporter = Reporter(cfg, 1, 1, Manager.modular)
    owner = np.array([0])
    reporter.observe(0, np.array([USAGE]), _served([100.0], [1]), _traffic([100.0]), owner)
    usage = np.array([[51.0, 95.0, *USAGE[2:]]])
    assert reporter.observe(MINUTE_MS, usage, _served([100.0], [1]), _traffic([100.0]), owner) == []


def test_every_report_samples_every_bundle() -> None:
    """``updateAll`` -> ``updateBundleData``: a report from broker 0 adds a sample to broker 1's
    bundle too (from broker 1's last report), so a quiet broker's bundles keep being sampled."""
    cfg = BalancerConfig(resource_quota_update_interval_min=10_000)
    reporter = Reporter(cfg, 2, 2)
    owner = np.array([0, 1])
    reporter.observe(0, np.array([USAGE, USAGE]), _served([100.0, 10.0], [1, 1]), _traffic([100.0, 10.0]), owner)
    assert reporter.long_samples.tolist() == [2, 2]  # two reports: two samples of each bundle
    quiet = _served([150.0, 10.0], [1, 1])
    assert reporter.observe(MINUTE_MS, np.array([USAGE, USAGE]), quiet, _traffic([150.0, 10.0]), owner) == [0]
    assert reporter.long_samples.tolist() == [3, 3]
    assert reporter.data.long_rate[1] == pytest.approx(20.0)  # broker 1's own last stats, again


def test_short_term_average_is_the_mean_of_its_last_samples() -> None:
    """``TimeAverageMessageData``: the first sample replaces the default, then a running mean
    over at most ``NUM_SHORT_SAMPLES`` samples."""
    reporter = Reporter(BalancerConfig(report_max_interval_min=1), 1, 1)
    usage = np.array([USAGE])
    for minute, rate in enumerate([10.0, 30.0]):
        reporter.observe(minute * MINUTE_MS, usage, _served([rate], [1]), _traffic([rate]), np.array([0]))
    assert reporter.data.short_rate[0] == pytest.approx(40.0)  # in+out: mean of 20 and 60
    for minute in range(2, 2 + 3 * NUM_SHORT_SAMPLES):
        reporter.observe(minute * MINUTE_MS, usage, _served([50.0], [1]), _traffic([50.0]), np.array([0]))
    assert reporter.data.short_rate[0] == pytest.approx(100.0, rel=0.05)
    assert reporter.data.long_rate[0] < reporter.data.short_rate[0]  # the long window remembers the start


@pytest.mark.parametrize(
    ("samples", "added", "window"), [(0, 1, 10), (0, 25, 10), (3, 4, 10), (9, 5, 10), (998, 7, NUM_LONG_SAMPLES)]
)
def test_averaged_is_time_average_message_data_update_repeated(samples: int, added: int, window: int) -> None:
    """The closed form equals ``TimeAverageMessageData.update`` applied ``added`` times."""
    old, value = 70.0, 10.0
    x, n = old, samples
    for _ in range(added):
        n = min(n + 1, window)
        x = ((n - 1) * x + value) / n
    got = averaged(np.array([old]), np.array([value]), np.array([samples]), np.array([added]), window)
    assert got[0] == pytest.approx(x)


def test_extensible_weighted_max_ema_moves_once_per_report_interval() -> None:
    """``BrokerLoadData.updateWeightedMaxEMA`` runs at every ``generateLoadData`` (every
    ``loadBalancerReportUpdateMinIntervalMillis``): twelve steps a minute at the 5 s default."""
    cfg = BalancerConfig()
    reporter = Reporter(cfg, 1, 1, Manager.extensible)
    owner = np.array([0])
    reporter.observe(0, np.array([[20.0, 0, 0, 0, 0]]), _served([1.0], [1]), _traffic([1.0]), owner)
    reporter.observe(MINUTE_MS, np.array([[80.0, 0, 0, 0, 0]]), _served([1.0], [1]), _traffic([1.0]), owner)
    h = cfg.history_percentage
    assert reporter.ema[0] == pytest.approx(0.8 + (0.2 - 0.8) * h**12)


def test_a_run_is_reproducible() -> None:
    config = LabConfig(workload=SMALL)
    first, second = run(config), run(config)
    assert first.events == second.events
    assert np.array_equal(first.load, second.load)


@pytest.mark.parametrize(
    ("shedder", "placement"),
    [
        (ShedderKind.threshold, PlacementKind.least_long_term_message_rate),
        (ShedderKind.transfer, PlacementKind.extensible),
    ],
)
def test_through_channel_makes_the_same_moves_and_breaks_nothing(
    shedder: ShedderKind, placement: PlacementKind
) -> None:
    workload = SMALL.model_copy(update={"bursts_per_hour": 60.0, "hot_per_hour": 6.0})
    eager = SEED_001.model_copy(update={"target_std": 0.05})  # so the TransferShedder acts on a small cluster
    config = LabConfig(workload=workload, shedder=shedder, placement=placement, balancer=eager)
    alone = run(config)
    carrier = ThroughChannel(workload, check_every_minutes=5)
    carried = run(config, carrier)
    counts = carrier.finish()
    assert alone.events, "the workload should make the balancer act"
    assert carried.events == alone.events
    assert counts["mismatches"] == 0
    assert counts["breaches"] == 0, carrier.breaches
    assert counts["move_lookups"] == len(alone.events)
    unloads = sum(1 for e in alone.events if not e.transfer)
    # a lookup after an unload waits for the new assignment; after a transfer the owner is there
    assert counts["move_lookups_delayed"] == unloads


def test_crashes_move_bundles_without_the_balancer_and_the_lab_follows() -> None:
    """With faults, the leader's clean-up places a dead broker's bundles (asking the balancer's
    placement); the lab's table follows the channel's owners, and the catalogue still holds."""
    config = LabConfig(workload=SMALL)
    carrier = ThroughChannel(SMALL, check_every_minutes=5, crashes_per_hour=3.0)
    run(config, carrier)
    counts = carrier.finish()
    assert counts["crashes"] > 0
    assert counts["moved_by_channel"] > 0
    assert counts["breaches"] == 0, carrier.breaches


@dataclass
class _OneDown(Direct):
    """Balancer-only, with broker 0 down from the first minute on and its bundles on broker 1
    (as the leader's clean-up would have put them)."""

    def minute(self, minute: int, owner: Ints) -> frozenset[int]:
        owner[owner == 0] = 1
        return frozenset({0})


def test_a_down_broker_gets_no_bundle() -> None:
    # fewer bundles per namespace than brokers: most namespaces have none on the last broker
    sparse = SMALL.model_copy(update={"namespaces": 24, "bundles_per_namespace": 5, "bursts_per_hour": 60.0})
    result = run(LabConfig(workload=sparse), _OneDown())
    assert result.events
    assert all(e.destination != 0 for e in result.events)


def _result(moves: list[tuple[int, int]], hours: float = 4.0) -> Result:
    """A run of two idle brokers with the given (minute, bundle) moves."""
    workload = Workload(brokers=2, namespaces=1, bundles_per_namespace=3, hours=hours)
    events = [MoveEvent(m, bundle, 0, 1, False) for m, bundle in moves]
    return Result(LabConfig(workload=workload), events, np.zeros((workload.minutes, 2)))


@pytest.mark.parametrize(
    ("moves", "share", "three"),
    [
        ([], 0.0, 0),
        ([(10, 0), (200, 1)], 0.0, 0),  # each bundle moved once
        ([(10, 0), (200, 0)], 1.0, 0),  # the same bundle again, late
        ([(10, 0), (20, 0), (30, 0)], 0.0, 1),  # early repeats do not count as late
        ([(10, 0), (200, 0), (201, 1), (202, 2)], 1 / 3, 0),
        ([(10, 0), (11, 1), (200, 0), (201, 1), (230, 0)], 1.0, 1),
    ],
)
def test_movement_measures(moves: list[tuple[int, int]], share: float, three: int) -> None:
    result = _result(moves)
    assert result.repeat_share() == pytest.approx(share)
    assert result.measures()["moved_3plus"] == three


def test_balance_measures_read_the_closing_window() -> None:
    result = _result([])
    result.load[:, 0] = 0.9
    result.load[:, 1] = 0.1
    result.load[result.late_start() :] = 0.5
    m = result.measures()
    assert m["late_spread"] == 0.0
    assert m["late_peak"] == 0.5
    assert float(m["peak"] or 0) > 0.5


def test_seed_001_lltmr_moves_more_than_lruww_where_rate_parts_from_load() -> None:
    """Seed 001's claim on its workload (60 brokers, 6 hours, a held-out seed): placing by
    message rate keeps the ThresholdShedder busier and moves bundles again and again; placing by
    the shedder's own metric makes fewer moves and balances better (docs/balance.md has the
    spread over ten seeds and three sizes)."""
    workload = Workload().for_brokers(60).model_copy(update={"hours": 6.0, "seed": 101})
    lltmr = run(LabConfig(workload=workload)).measures()
    lruww = run(LabConfig(workload=workload, placement=PlacementKind.least_resource_usage_with_weight)).measures()
    base = run(LabConfig(workload=workload, shedder=ShedderKind.none)).measures()
    assert int(lltmr["moves"] or 0) > int(lruww["moves"] or 0)
    assert float(lltmr["late_spread"] or 0) > float(lruww["late_spread"] or 0)
    assert float(base["late_spread"] or 0) > float(lruww["late_spread"] or 0)  # shedding balances at all


def test_cli_run_writes_table_and_pictures(tmp_path: Path) -> None:
    png, page = tmp_path / "run.png", tmp_path / "run.html"
    result = CliRunner().invoke(
        app, ["--brokers", "10", "--hours", "1", "--through-channel", "--png", str(png), "--html", str(page)]
    )
    assert result.exit_code == 0, result.output
    assert "late_spread" in result.output
    assert png.read_bytes()[:4] == b"\x89PNG"
    text = page.read_text()
    assert "<svg" in text
    assert "http" not in text.replace('xmlns="http://www.w3.org/2000/svg"', "")  # nothing fetched


def test_cli_refuses_a_missing_folder_before_running(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["--png", str(tmp_path / "nowhere" / "run.png")])
    assert result.exit_code == 2
    assert "does not exist" in " ".join(result.output.split())  # rich wraps at the terminal width


def test_cli_sweep_local_writes_parquet_and_ranking(tmp_path: Path) -> None:
    out = tmp_path / "sweep.parquet"
    args = ["sweep", "--engine", "local", "--hours", "0.5", "--seeds", "2", "--out", str(out)]
    result = CliRunner().invoke(app, [*args, "--strategy", "threshold+lltmr", "--strategy", "transfer+extensible"])
    assert result.exit_code == 0, result.output
    table = pq.read_table(out)
    assert table.num_rows == 4
    assert set(table.column("strategy_name").to_pylist()) == {"threshold+lltmr", "transfer+extensible"}
    assert set(table.column("seed").to_pylist()) == {101, 102}  # held-out seeds by default
    assert "[" in result.output  # medians with their range


def test_summary_gives_median_and_range_and_ranks_by_balance() -> None:
    rows = sweep_local(
        grid(["threshold+lltmr", "none+lltmr"], ["seed-001"], ["steady"], [1, 2], hours=1.0, brokers=[8])
    )
    ranked = summary(rows)
    assert [r["rank"] for r in ranked] == [1, 2]
    for r in ranked:
        mid, rest = str(r["late_spread"]).split(" [")
        low, high = (float(x) for x in rest.rstrip("]").split("–"))
        assert low <= float(mid) <= high
    assert ranked[-1]["strategy_name"] == "none+lltmr"  # no shedding balances worst


def test_sweep_and_recommend_on_spark(tmp_path: Path) -> None:
    """One Spark session for both: the grid on Spark equals the one-process loop; and
    ``statechan balance recommend`` on a small cluster (the example's six brokers, with recorded
    load) ranks its candidates with their spreads from a Spark sweep, prints the broker.conf lines
    and a dry run, and writes the trade-off pictures."""
    from statechan.audit import spark_session
    from statechan.balance.conf import example_cluster
    from statechan.balance.sweep import sweep_spark

    cells = grid(["threshold+lltmr"], ["seed-001"], ["seed-001"], [1, 2], hours=0.5, brokers=[20])
    spark = spark_session("local[2]", app="statechan-balance-test")
    try:
        on_spark = sweep_spark(cells, spark=spark)
        assert len(on_spark) == len(cells)
        assert sorted(on_spark, key=str) == sorted(sweep_local(cells), key=str)
        for name, text in zip(("broker.conf", "cluster.yaml", "load.json"), example_cluster(), strict=True):
            (tmp_path / name).write_text(text)
        png, page = tmp_path / "trade-off.png", tmp_path / "trade-off.html"
        args = [
            "recommend",
            "--conf",
            str(tmp_path / "broker.conf"),
            "--cluster",
            str(tmp_path / "cluster.yaml"),
            "--load",
            str(tmp_path / "load.json"),
            "--strategy",
            "threshold+lruww",
            "--seeds",
            "2",
            "--hours",
            "1",
            "--master",
            "local[2]",
            "--png",
            str(png),
            "--html",
            str(page),
        ]
        result = CliRunner().invoke(app, args)
    finally:
        spark.stop()  # no session left behind for the next module's tests
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "current (threshold+lltmr)" in text
    assert "threshold+lruww" in text
    assert "recommended" in text
    assert "Recommended:" in text
    assert "broker.conf lines to apply" in text or "keep your settings" in text
    assert "Dry run on the recorded state" in text
    assert " [" in text  # medians with their range over seeds
    assert "–" in text
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert "<svg" in page.read_text()


def test_the_lab_drains_through_the_cluster_syncer_steps_included() -> None:
    """With both views and the syncer, the lab's channel drains with Cluster.drain, the syncer's
    steps included (a drain of its own once recursed without taking them, until RecursionError)."""
    from statechan.balance import channel
    from statechan.cluster import Cluster, Lookup, SimConfig, StoreKind

    assert not hasattr(channel, "settle")
    cluster = Cluster(SimConfig(brokers=3, bundles_per_namespace=2, store=StoreKind.both, seed=1))
    cluster.step(Lookup(cluster.config.broker_ids()[0], cluster.sorted_bundle_keys()[0]))
    assert cluster.drain() > 0
    assert cluster.quiescent()
