"""An operator's own cluster: broker.conf (Pulsar's properties format), cluster.yaml, recorded
load as the admin API returns it; the clear messages for bad input; the recommendation's
candidates, ranking and dry run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from statechan.balance.cli import app
from statechan.balance.conf import (
    EXTENSIBLE,
    InputError,
    OperatorCluster,
    check_against_cluster,
    example_cluster,
    parse_broker_conf,
    properties,
    read_cluster,
    read_recorded_load,
)
from statechan.balance.lab import LabConfig
from statechan.balance.recommend import candidates, dry_run, rank
from statechan.balance.settings import BalancerConfig, PlacementKind, ShedderKind
from statechan.balance.sweep import Row


def _problems(text: str) -> list[str]:
    with pytest.raises(InputError) as info:
        parse_broker_conf(text)
    return [str(p) for p in info.value.problems]


def test_properties_format() -> None:
    """Java's Properties: comments, '=', ':' or whitespace separators, continued lines."""
    text = "# comment\n! also\n\na=1\nb : two\nc three\nd=x\\\n  y\ne\n"
    assert properties(text) == [(4, "a", "1"), (5, "b", "two"), (6, "c", "three"), (7, "d", "xy"), (9, "e", None)]


def test_broker_conf_sets_pulsars_names() -> None:
    conf = parse_broker_conf(
        "loadBalancerBrokerThresholdShedderPercentage=20\n"
        "loadBalancerDistributeBundlesEvenlyEnabled=false\n"
        "defaultNamespaceBundleSplitAlgorithm=topic_count_equally_divide\n"
        "loadBalancerLoadPlacementStrategy=org.apache.pulsar.broker.loadbalance.impl.LeastResourceUsageWithWeight\n"
        "clusterName=prod\nmanagedLedgerDefaultEnsembleSize=3\n"
    )
    assert conf.balancer.threshold_shedder_pct == 20
    assert conf.balancer.distribute_bundles_evenly is False
    assert conf.balancer.split_algorithm.value == "topic_count_equally_divide"
    assert (conf.shedder, conf.placement) == (ShedderKind.threshold, PlacementKind.least_resource_usage_with_weight)
    assert conf.ignored == 2  # not load-balance settings
    assert conf.strategy == "threshold+lruww"


def test_broker_conf_extensible_manager_and_deprecated_name() -> None:
    conf = parse_broker_conf(f"loadManagerClassName={EXTENSIBLE}\nloadBalancerBandwithInResourceWeight=0.5\n")
    assert conf.shedder is ShedderKind.transfer
    assert conf.balancer.bandwidth_in_weight == 0.5
    both = parse_broker_conf("loadBalancerBandwithInResourceWeight=0.5\nloadBalancerBandwidthInResourceWeight=0.7\n")
    assert both.balancer.bandwidth_in_weight == 0.7  # the new name wins, as Pulsar's getter has it


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "loadBalancerSheddingIntervalMinute=2\n",
            "broker.conf:1: unknown load-balance setting 'loadBalancerSheddingIntervalMinute' "
            "(did you mean loadBalancerSheddingIntervalMinutes?)",
        ),
        (
            "\nloadBalancerBrokerThresholdShedderPercentage=ten\n",
            "broker.conf:2: loadBalancerBrokerThresholdShedderPercentage: expected a number, got 'ten'",
        ),
        (
            "loadBalancerSheddingIntervalMinutes=1.5\n",
            "broker.conf:1: loadBalancerSheddingIntervalMinutes: expected a whole number, got '1.5'",
        ),
        (
            "loadBalancerSheddingEnabled=yes\n",
            "broker.conf:1: loadBalancerSheddingEnabled: expected true or false, got 'yes'",
        ),
        (
            "loadBalancerBrokerOverloadedThresholdPercentage\n",
            "broker.conf:1: loadBalancerBrokerOverloadedThresholdPercentage has no value",
        ),
        (
            "loadBalancerNamespaceBundleMaxMsgRate=0\n",
            "broker.conf:1: loadBalancerNamespaceBundleMaxMsgRate must be above 0",
        ),
        (
            "defaultNamespaceBundleSplitAlgorithm=half\n",
            "broker.conf:1: defaultNamespaceBundleSplitAlgorithm 'half' is not one Pulsar supports",
        ),
        ("loadBalancerHistoryResourcePercentage=1.5\n", "broker.conf:1: loadBalancerHistoryResourcePercentage"),
        (
            "loadBalancerLoadSheddingStrategy=com.acme.MyShedder\n",
            "broker.conf:1: loadBalancerLoadSheddingStrategy 'com.acme.MyShedder'",
        ),
        (
            "a=1\nloadBalancerCPUResourceWeight=1\nloadBalancerCPUResourceWeight=2\n",
            "broker.conf:3: loadBalancerCPUResourceWeight is set again (first at line 2)",
        ),
    ],
)
def test_broker_conf_problems_name_the_line(text: str, expected: str) -> None:
    assert any(p.startswith(expected) for p in _problems(text)), _problems(text)


def test_broker_conf_reports_every_problem_at_once() -> None:
    problems = _problems("loadBalancerFoo=1\nloadBalancerSheddingEnabled=maybe\n")
    assert len(problems) == 2


def _cluster(tmp_path: Path, text: str) -> OperatorCluster:
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    return read_cluster(path)


GOOD = "brokers:\n  - name: b1\n  - name: b2\n    capacity: 2\nnamespaces:\n  - name: t/ns\n    bundles: 4\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            GOOD.replace("capacity: 2", "capacity: -2"),
            "cluster.yaml:4: brokers.1.capacity: Input should be greater than 0",
        ),
        (GOOD.replace("bundles: 4", "bundles: 0"), "cluster.yaml:7: namespaces.0.bundles"),
        (GOOD.replace("name: t/ns", "name: tns"), "cluster.yaml:6: namespaces.0.name"),
        (GOOD + "workload:\n  median_rat: 3\n", "cluster.yaml:9: workload.median_rat: Extra inputs are not permitted"),
        (GOOD + "workload:\n  brokers: 3\n", "cluster.yaml:9: workload.brokers: the cluster's shape comes from"),
        (GOOD.replace("- name: b2", "- name: b1"), "cluster.yaml:2: broker 'b1' is listed more than once"),
        (GOOD + "nodes: 3\n", "cluster.yaml:8: unknown key 'nodes'"),
        ("brokers: [b1, b2\n", "cluster.yaml:2: not valid YAML"),
    ],
)
def test_cluster_problems_name_the_line(tmp_path: Path, text: str, expected: str) -> None:
    with pytest.raises(InputError) as info:
        _cluster(tmp_path, text)
    problems = [str(p) for p in info.value.problems]
    assert any(p.startswith(expected) for p in problems), problems


def test_cluster_by_count(tmp_path: Path) -> None:
    cluster = _cluster(tmp_path, "brokers: {count: 3, capacity: 2}\nnamespaces:\n  - {name: t/ns, bundles: 2}\n")
    assert [b.name for b in cluster.spec.brokers] == ["broker-1", "broker-2", "broker-3"]
    assert cluster.workload.brokers == 3


def _load(tmp_path: Path, cluster: OperatorCluster, data: object) -> OperatorCluster:
    path = tmp_path / "load.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return read_recorded_load(path, cluster)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"b9": {"lastStats": {}}}, "load.json: b9: broker 'b9' is not in the cluster (cluster lists b1, b2)"),
        ({"b1": {"lastStats": {"t/ns/zzz": {}}}}, "load.json: b1 bundle 't/ns/zzz': not a service-unit key"),
        (
            {"b1": {"lastStats": {"x/y/0x00000000_0x3fffffff": {}}}},
            "load.json: b1 bundle 'x/y/0x00000000_0x3fffffff': namespace x/y",
        ),
        (
            {"b1": {"lastStats": {"t/ns/0x00000000_0x3fffffff": {"msgRateIn": -3}}}},
            "load.json: b1 bundle 't/ns/0x00000000_0x3fffffff': msgRateIn: Input should be greater than or equal to 0",
        ),
        ('{\n  "b1": [,]\n}', "load.json:2: not valid JSON"),
    ],
)
def test_recorded_load_problems_name_the_place(tmp_path: Path, data: object, expected: str) -> None:
    cluster = _cluster(tmp_path, GOOD)
    with pytest.raises(InputError) as info:
        _load(tmp_path, cluster, data)
    problems = [str(p) for p in info.value.problems]
    assert any(p.startswith(expected) for p in problems), problems


def test_recorded_load_drives_the_bundles(tmp_path: Path) -> None:
    """Both report shapes: ``LocalBrokerData`` with ``lastStats``, and the extensible manager's
    broker load data with its top bundles."""
    cluster = _cluster(tmp_path, GOOD)
    stats = {"msgRateIn": 500.0, "msgRateOut": 1000.0, "msgThroughputIn": 5e6, "msgThroughputOut": 1e7, "topics": 4}
    data = {
        "b1": {"cpu": {"usage": 400, "limit": 800}, "lastStats": {"t/ns/0x00000000_0x3fffffff": stats}},
        "b2": {
            "brokerLoadData": {"cpu": {"usage": 100, "limit": 800}},
            "topBundlesLoadData": {
                "topBundlesLoadData": [{"bundleName": "t/ns/0x3fffffff_0x7ffffffe", "stats": stats}]
            },
        },
    }
    loaded = _load(tmp_path, cluster, data)
    assert {r.broker for r in loaded.spec.recorded} == {"b1", "b2"}
    assert loaded.spec.recorded_usage["b1"][0] == pytest.approx(50.0)
    from statechan.balance.lab import setup

    s = setup(LabConfig(workload=loaded.workload, cluster=loaded.spec))
    keys = {s.bundles.key(b): b for b in range(len(s.bundles))}
    assert s.owner[keys["t/ns/0x00000000_0x3fffffff"]] == 0
    assert s.owner[keys["t/ns/0x3fffffff_0x7ffffffe"]] == 1


def test_maximum_bundles_below_a_namespaces_count_is_refused(tmp_path: Path) -> None:
    cluster = _cluster(tmp_path, GOOD)
    conf = parse_broker_conf("\nloadBalancerNamespaceMaximumBundles=3\n")
    with pytest.raises(InputError) as info:
        check_against_cluster(conf, cluster)
    assert str(info.value.problems[0]).startswith(
        "broker.conf:2: loadBalancerNamespaceMaximumBundles=3 is below namespace t/ns's 4 bundles"
    )


def test_candidates_change_one_setting_each_and_say_how() -> None:
    conf = parse_broker_conf("loadBalancerMemoryResourceWeight=0.1\n")
    found = candidates(conf, ["threshold+lruww"])
    assert found[0].name.startswith("current")
    assert found[0].lines == ()
    for c in found[1:]:
        lines = {
            k: v for _, k, v in properties("\n".join(c.lines)) if not k.startswith(("loadManager", "loadBalancerLoad"))
        }
        changed = BalancerConfig.model_validate({**conf.balancer.model_dump(by_alias=True), **lines})
        assert changed == c.balancer, c.name
    names = [c.name for c in found]
    assert "threshold+lruww, loadBalancerMemoryResourceWeight=0.0" in names
    assert names[-1] == "no shedding (baseline)"


def test_rank_marks_the_frontier_and_picks_fewest_moves_near_the_best_balance() -> None:
    conf = parse_broker_conf("")
    found = candidates(conf, ["threshold+lltmr"])[:3]
    rows: list[Row] = []
    for i, c in enumerate(found):
        for seed in (1, 2):
            spread, moves = [(0.30, 20.0), (0.31, 5.0), (0.40, 1.0)][i]
            rows.append(
                {
                    "group": c.name,
                    "late_spread": spread + seed / 1000,
                    "moves_per_hour": moves,
                    "late_peak": 0.5,
                    "moved_3plus": 0,
                    "splits": 0,
                }
            )
    rec = rank(found, rows)
    assert [r.frontier for r in rec.ranked] == [True, True, True]
    assert rec.chosen.candidate is found[1]  # within 5 % of the best balance, four times fewer moves
    assert "Recommended" in rec.trade_off()


def test_dry_run_moves_load_off_the_busy_broker(tmp_path: Path) -> None:
    conf_text, cluster_text, load_text = example_cluster()
    (tmp_path / "cluster.yaml").write_text(cluster_text)
    (tmp_path / "load.json").write_text(load_text)
    cluster = read_recorded_load(tmp_path / "load.json", read_cluster(tmp_path / "cluster.yaml", 1.0))
    conf = parse_broker_conf(conf_text)
    dry = dry_run(LabConfig(workload=cluster.workload, balancer=conf.balancer, cluster=cluster.spec))
    assert dry.recorded
    assert dry.proposals
    assert all(p.source == "broker-3:8080" for p in dry.proposals)
    assert dry.after["peak"] < dry.before["peak"]


def test_recommend_refuses_bad_input_naming_each_place(tmp_path: Path) -> None:
    (tmp_path / "broker.conf").write_text("loadBalancerFoo=1\n")
    (tmp_path / "cluster.yaml").write_text(GOOD.replace("capacity: 2", "capacity: -1"))
    args = ["recommend", "--conf", str(tmp_path / "broker.conf"), "--cluster", str(tmp_path / "cluster.yaml")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    text = " ".join(result.output.split())
    assert "broker.conf:1: unknown load-balance setting 'loadBalancerFoo'" in text
    assert "cluster.yaml:4: brokers.1.capacity" in text
    assert "at least 2 items" not in text  # only the broker that is wrong
