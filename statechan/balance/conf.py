"""An operator's own cluster as the lab reads it: their ``broker.conf`` (Pulsar's properties
format), a cluster description (``cluster.yaml``: brokers, capacities, namespaces and bundle
counts, optionally the synthetic traffic's knobs), and optionally the load their brokers recorded
(the JSON Pulsar's admin API returns: ``LocalBrokerData`` with its ``lastStats`` from
``/admin/v2/broker-stats/load-report``, or the extensible manager's ``BrokerLoadData`` with its
top-bundle load data).

Every problem is named with its place (``broker.conf:12``, ``cluster.yaml:7``, ``load.json:
broker-3``) and all of them are reported together; settings the lab does not model, and lines
that are not load-balance settings, are counted and listed, not refused.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from statechan.balance.settings import (
    STRATEGIES,
    BalancerConfig,
    ClusterSpec,
    PlacementKind,
    RecordedBundle,
    ShedderKind,
    Workload,
)
from statechan.keys import BadKeyError, namespace_bundles, parse_key

T = TypeVar("T")


@dataclass(frozen=True)
class Problem:
    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"


class InputError(ValueError):
    """Bad input: every problem found, each with its place."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


SHEDDER_CLASSES = {
    "org.apache.pulsar.broker.loadbalance.impl.ThresholdShedder": ShedderKind.threshold,
    "org.apache.pulsar.broker.loadbalance.impl.OverloadShedder": ShedderKind.overload,
    "org.apache.pulsar.broker.loadbalance.impl.UniformLoadShedder": ShedderKind.uniform,
}
PLACEMENT_CLASSES = {
    "org.apache.pulsar.broker.loadbalance.impl.LeastLongTermMessageRate": PlacementKind.least_long_term_message_rate,
    "org.apache.pulsar.broker.loadbalance.impl.LeastResourceUsageWithWeight": (
        PlacementKind.least_resource_usage_with_weight
    ),
}
MODULAR = "org.apache.pulsar.broker.loadbalance.impl.ModularLoadManagerImpl"
EXTENSIBLE = "org.apache.pulsar.broker.loadbalance.extensions.ExtensibleLoadManagerImpl"
STRATEGY_KEYS = ("loadManagerClassName", "loadBalancerLoadSheddingStrategy", "loadBalancerLoadPlacementStrategy")
DEPRECATED = {
    "loadBalancerBandwithInResourceWeight": "loadBalancerBandwidthInResourceWeight",
    "loadBalancerBandwithOutResourceWeight": "loadBalancerBandwidthOutResourceWeight",
}
"""Pulsar's misspelt names, still read: the new name wins when both differ from the default
(``ServiceConfiguration.getLoadBalancerBandwidthInResourceWeight``)."""

NOT_MODELLED = frozenset(
    {
        "loadBalancerEnabled",
        "loadBalancerPlacementStrategy",
        "lowerBoundarySheddingEnabled",
        "loadBalancerBrokerUnderloadedThresholdPercentage",
        "loadBalancerBrokerMaxTopics",
        "loadBalancerAvgShedderLowThreshold",
        "loadBalancerAvgShedderHighThreshold",
        "loadBalancerAvgShedderHitCountLowThreshold",
        "loadBalancerAvgShedderHitCountHighThreshold",
        "atLeastOneBundleSelected",
        "loadBalancerBrokerComfortLoadLevelPercentage",
        "topicBundleAssignmentStrategy",
        "supportedNamespaceBundleSplitAlgorithms",
        "loadBalancerOverrideBrokerNicSpeedGbps",
        "namespaceBundleUnloadingTimeoutMs",
        "loadBalancerDebugModeEnabled",
        "loadBalancerServiceUnitStateTombstoneDelayTimeInSeconds",
        "loadBalancerSheddingBundlesWithPoliciesEnabled",
        "loadBalancerInFlightServiceUnitStateWaitingTimeInMillis",
        "loadBalancerServiceUnitStateMonitorIntervalInSeconds",
        "loadBalancerMultiPhaseBundleUnload",
        "loadManagerServiceUnitStateTableViewClassName",
        "loadBalancerServiceUnitTableViewSyncer",
        "loadBalancerServiceUnitStateMaxConcurrentOverrides",
        "loadBalancerSheddingExcludedNamespaces",
        "defaultNumberOfNamespaceBundles",
    }
)
"""Pulsar's load-balance settings the lab reads but does not model (isolation policies, the
AvgShedder, the channel's own timers, which the channel model takes from its own configuration)."""

LB_PREFIXES = ("loadBalancer", "loadBalance", "loadManager")


def _modelled() -> dict[str, str]:
    """Pulsar's name -> the field it sets."""
    return {info.alias: name for name, info in BalancerConfig.model_fields.items() if info.alias}


@dataclass
class OperatorConf:
    """What an operator's ``broker.conf`` says, as the lab reads it."""

    balancer: BalancerConfig
    shedder: ShedderKind
    placement: PlacementKind
    path: str = "broker.conf"
    values: dict[str, tuple[int, str]] = field(default_factory=dict)
    """Pulsar's name -> (line, raw value) of every load-balance line."""
    not_modelled: list[str] = field(default_factory=list)
    ignored: int = 0
    """Lines that are not load-balance settings."""

    @property
    def strategy(self) -> str:
        """The short name in :data:`STRATEGIES` of the operator's combination ("custom" if none)."""
        for name, pair in STRATEGIES.items():
            if pair == (self.shedder, self.placement):
                return name
        return "custom"


def properties(text: str) -> list[tuple[int, str, str | None]]:
    """Java's ``Properties.load``, simplified: (line, key, value) for each entry; comments (``#``,
    ``!``) and blank lines skipped, a trailing backslash continues the line, the key ends at the
    first unescaped ``=``, ``:`` or whitespace. ``value`` is None for a line with no separator and
    nothing after the key."""
    out: list[tuple[int, str, str | None]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        number = i + 1
        line = lines[i].lstrip()
        i += 1
        if not line or line[0] in "#!":
            continue
        while (len(line) - len(line.rstrip("\\"))) % 2 == 1 and i < len(lines):
            line = line[:-1] + lines[i].lstrip()
            i += 1
        match = re.match(r"((?:\\.|[^=:\s\\])+)\s*([=:]?)\s*(.*)$", line)
        if match is None:
            out.append((number, line, None))
            continue
        key, separator, value = match.group(1), match.group(2), match.group(3)
        key = re.sub(r"\\(.)", r"\1", key)
        out.append((number, key, value.strip() if (separator or value) else None))
    return out


def _parse_value(kind: Any, raw: str) -> object:
    """A ``broker.conf`` value for a field of type ``kind`` (``ValueError`` naming what it expects)."""
    if kind is bool:
        if raw.lower() not in ("true", "false"):
            raise ValueError(f"expected true or false, got {raw!r}")
        return raw.lower() == "true"
    if kind is int:
        if not re.fullmatch(r"[+-]?\d+", raw):
            raise ValueError(f"expected a whole number, got {raw!r}")
        return int(raw)
    if kind is float:
        try:
            return float(raw)
        except ValueError:
            raise ValueError(f"expected a number, got {raw!r}") from None
    return raw


def read_broker_conf(path: Path) -> OperatorConf:
    """Read an operator's ``broker.conf``; :class:`InputError` lists every problem with its line."""
    where = path.name
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError([Problem(str(path), f"cannot read it: {exc.strerror or exc}")]) from None
    return parse_broker_conf(text, where)


def parse_broker_conf(text: str, where: str = "broker.conf") -> OperatorConf:
    modelled = _modelled()
    known = set(modelled) | set(DEPRECATED) | NOT_MODELLED | set(STRATEGY_KEYS)
    problems: list[Problem] = []
    values: dict[str, tuple[int, str]] = {}
    settings: dict[str, object] = {}
    not_modelled: list[str] = []
    ignored = 0
    for line, key, raw in properties(text):
        place = f"{where}:{line}"
        if key not in known:
            close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.85)
            if key.startswith(LB_PREFIXES) or close:
                hint = f" (did you mean {close[0]}?)" if close else ""
                problems.append(Problem(place, f"unknown load-balance setting {key!r}{hint}"))
            else:
                ignored += 1
            continue
        if raw is None or raw == "":
            if key in NOT_MODELLED:
                continue
            problems.append(Problem(place, f"{key} has no value (expected {key}=VALUE)"))
            continue
        if key in values:
            problems.append(
                Problem(place, f"{key} is set again (first at line {values[key][0]}); Pulsar keeps the last")
            )
        values[key] = (line, raw)
        if key in NOT_MODELLED:
            not_modelled.append(key)
            continue
        if key in STRATEGY_KEYS:
            continue
        target = DEPRECATED.get(key, key)
        field_name = modelled[target]
        annotation = BalancerConfig.model_fields[field_name].annotation
        try:
            value = _parse_value(annotation, raw)
        except ValueError as exc:
            problems.append(Problem(place, f"{key}: {exc}"))
            continue
        if key in DEPRECATED and target in values:
            continue  # the new name was given too: it wins
        settings[target] = value
    shedder, placement = _strategy(values, where, problems)
    balancer = BalancerConfig()
    try:
        balancer = BalancerConfig.model_validate(settings)
    except ValidationError as exc:
        for item in exc.errors():
            loc = item.get("loc", ())
            name = str(loc[0]) if loc else ""
            name = BalancerConfig.model_fields[name].alias or name if name in BalancerConfig.model_fields else name
            line = values.get(name, (0, ""))[0]
            message = str(item.get("msg", "")).removeprefix("Value error, ")
            if name and name not in message:
                message = f"{name}: {message}"
            problems.append(Problem(f"{where}:{line}" if line else where, message))
    if problems:
        raise InputError(problems)
    return OperatorConf(balancer, shedder, placement, where, values, not_modelled, ignored)


def _strategy(
    values: dict[str, tuple[int, str]], where: str, problems: list[Problem]
) -> tuple[ShedderKind, PlacementKind]:
    """The operator's load manager, shedder and placement (Pulsar's defaults where unset)."""
    manager = values.get("loadManagerClassName", (0, MODULAR))
    if manager[1] == EXTENSIBLE:
        return ShedderKind.transfer, PlacementKind.extensible
    if manager[1] != MODULAR:
        problems.append(
            Problem(
                f"{where}:{manager[0]}",
                f"loadManagerClassName {manager[1]!r}: the lab models {MODULAR} and {EXTENSIBLE}",
            )
        )
    shedder = _chosen(values, "loadBalancerLoadSheddingStrategy", SHEDDER_CLASSES, where, problems)
    placement = _chosen(values, "loadBalancerLoadPlacementStrategy", PLACEMENT_CLASSES, where, problems)
    return shedder or ShedderKind.threshold, placement or PlacementKind.least_long_term_message_rate


def _chosen(
    values: dict[str, tuple[int, str]], key: str, classes: dict[str, T], where: str, problems: list[Problem]
) -> T | None:
    """The strategy a class-name setting names (None when unset or not one the lab models)."""
    line, raw = values.get(key, (0, ""))
    if not raw:
        return None
    if raw not in classes:
        names = ", ".join(c.rsplit(".", 1)[1] for c in classes)
        problems.append(Problem(f"{where}:{line}", f"{key} {raw!r}: the lab models {names}"))
    return classes.get(raw)


def strategy_lines(shedder: ShedderKind, placement: PlacementKind) -> list[str]:
    """The ``broker.conf`` lines that choose a combination."""
    if shedder is ShedderKind.transfer:
        return [f"loadManagerClassName={EXTENSIBLE}"]
    if shedder is ShedderKind.none:
        return ["loadBalancerSheddingEnabled=false"]
    shed = {v: k for k, v in SHEDDER_CLASSES.items()}[shedder]
    place = {v: k for k, v in PLACEMENT_CLASSES.items()}[placement]
    return [
        f"loadManagerClassName={MODULAR}",
        f"loadBalancerLoadSheddingStrategy={shed}",
        f"loadBalancerLoadPlacementStrategy={place}",
    ]


# -- cluster.yaml ----------------------------------------------------------------------------


class _BrokerCount(BaseModel):
    count: int
    capacity: float = 1.0
    prefix: str = "broker-"


def _line_of(node: yaml.Node | None, loc: tuple[Any, ...]) -> int | None:
    """The line (1-based) of the YAML node at ``loc`` (its nearest parent that exists)."""
    line = None
    for part in loc:
        if node is None:
            break
        line = node.start_mark.line + 1
        child: yaml.Node | None = None
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                if getattr(k, "value", None) == part:
                    child = v
                    break
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            child = node.value[part]
        node = child
    if node is not None:
        line = node.start_mark.line + 1
    return line


@dataclass
class OperatorCluster:
    """An operator's cluster description and the workload knobs it sets."""

    spec: ClusterSpec
    workload: Workload
    notes: list[str] = field(default_factory=list)


def read_cluster(path: Path, hours: float | None = None) -> OperatorCluster:
    """Read ``cluster.yaml``: brokers (a list of ``{name, capacity}``, or ``{count, capacity}``),
    namespaces (``{name: tenant/ns, bundles: N}``), and optionally ``workload:`` (any field of
    :class:`Workload` but the cluster's shape)."""
    where = path.name
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError([Problem(str(path), f"cannot read it: {exc.strerror or exc}")]) from None
    try:
        root = yaml.compose(text)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f"{where}:{mark.line + 1}" if mark is not None else where
        raise InputError([Problem(at, f"not valid YAML: {getattr(exc, 'problem', exc)}")]) from None
    if not isinstance(data, dict):
        raise InputError([Problem(where, "expected a mapping with brokers: and namespaces:")])
    problems: list[Problem] = []

    def place(*loc: Any) -> str:
        line = _line_of(root, loc)
        return f"{where}:{line}" if line else where

    for key in data:
        if key not in ("name", "brokers", "namespaces", "workload"):
            problems.append(Problem(place(key), f"unknown key {key!r} (expected name, brokers, namespaces, workload)"))
    brokers_raw = data.get("brokers")
    brokers: list[dict[str, Any]] = []
    if isinstance(brokers_raw, dict):
        try:
            count = _BrokerCount.model_validate(brokers_raw)
            brokers = [{"name": f"{count.prefix}{i}", "capacity": count.capacity} for i in range(1, count.count + 1)]
        except ValidationError as exc:
            for item in exc.errors():
                problems.append(Problem(place("brokers", *item["loc"]), f"brokers: {item['msg']}"))
    elif isinstance(brokers_raw, list):
        brokers = [b if isinstance(b, dict) else {"name": b} for b in brokers_raw]
    else:
        problems.append(Problem(place("brokers"), "brokers: expected a list of brokers or {count: N}"))
    spec_data = {"name": data.get("name", path.stem), "brokers": brokers, "namespaces": data.get("namespaces") or []}
    spec: ClusterSpec | None = None
    try:
        spec = ClusterSpec.model_validate(spec_data)
    except ValidationError as exc:
        errors = exc.errors()
        for item in errors:
            loc = tuple(item["loc"])
            if item["type"] == "too_short" and any(
                tuple(o["loc"])[: len(loc)] == loc and o is not item for o in errors
            ):
                continue  # pydantic also counts the items it refused: the item's own problem says it
            value = item.get("input")
            what = ".".join(str(p) for p in loc)
            shown = "" if isinstance(value, (dict, list)) else f" (got {value!r})"
            problems.append(Problem(place(*loc), f"{what}: {item['msg']}{shown}"))
    if spec is not None:
        names = [b.name for b in spec.brokers]
        for dup in sorted({n for n in names if names.count(n) > 1}):
            problems.append(Problem(place("brokers"), f"broker {dup!r} is listed more than once"))
        namespaces = [n.name for n in spec.namespaces]
        for dup in sorted({n for n in namespaces if namespaces.count(n) > 1}):
            problems.append(Problem(place("namespaces"), f"namespace {dup!r} is listed more than once"))
    knobs = dict(data.get("workload") or {})
    for shape in ("brokers", "namespaces", "bundles_per_namespace", "bundles_short_of_brokers"):
        if shape in knobs:
            problems.append(
                Problem(
                    place("workload", shape),
                    f"workload.{shape}: the cluster's shape comes from brokers: and namespaces:",
                )
            )
            knobs.pop(shape)
    workload = Workload()
    if spec is not None:
        knobs.update({"brokers": len(spec.brokers), "namespaces": len(spec.namespaces)})
        if hours is not None:
            knobs["hours"] = hours
        try:
            workload = Workload.model_validate(knobs)
        except ValidationError as exc:
            for item in exc.errors():
                loc = tuple(item["loc"])
                problems.append(Problem(place("workload", *loc), f"workload.{'.'.join(map(str, loc))}: {item['msg']}"))
    if problems or spec is None:
        raise InputError(problems)
    return OperatorCluster(spec, workload)


def check_against_cluster(conf: OperatorConf, cluster: OperatorCluster) -> None:
    """Settings that cannot work on this cluster: a namespace already past
    ``loadBalancerNamespaceMaximumBundles`` could never split."""
    problems = []
    limit = conf.balancer.namespace_max_bundles
    for ns in cluster.spec.namespaces:
        if ns.bundles > limit:
            line = conf.values.get("loadBalancerNamespaceMaximumBundles", (0, ""))[0]
            problems.append(
                Problem(
                    f"{conf.path}:{line}" if line else conf.path,
                    f"loadBalancerNamespaceMaximumBundles={limit} is below namespace {ns.name}'s {ns.bundles} bundles: "
                    "none of its bundles could ever split",
                )
            )
    if problems:
        raise InputError(problems)


# -- recorded load ---------------------------------------------------------------------------


def _percent(resource: object) -> float:
    """``ResourceUsage.percentUsage``: usage over limit, in percent (0 without a limit)."""
    if isinstance(resource, dict):
        usage, limit = float(resource.get("usage", 0.0)), float(resource.get("limit", 0.0))
        return 100.0 * usage / limit if limit > 0 else 0.0
    return 0.0


def read_recorded_load(path: Path, cluster: OperatorCluster) -> OperatorCluster:
    """Add the brokers' recorded load to ``cluster``: a JSON object broker name -> either
    ``LocalBrokerData`` (``lastStats``: bundle -> ``NamespaceBundleStats``) or
    ``{"brokerLoadData": ..., "topBundlesLoadData": {"topBundlesLoadData": [{"bundleName", "stats"}]}}``."""
    where = path.name
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError([Problem(str(path), f"cannot read it: {exc.strerror or exc}")]) from None
    except json.JSONDecodeError as exc:
        raise InputError(
            [Problem(f"{where}:{exc.lineno}", f"not valid JSON: {exc.msg} (column {exc.colno})")]
        ) from None
    if not isinstance(data, dict):
        raise InputError([Problem(where, "expected a JSON object: broker name -> its load report")])
    spec = cluster.spec
    brokers = {b.name for b in spec.brokers}
    namespaces = {n.name for n in spec.namespaces}
    problems: list[Problem] = []
    recorded: list[RecordedBundle] = []
    usage: dict[str, tuple[float, float, float, float, float]] = {}
    seen: dict[str, str] = {}
    for broker, report in data.items():
        place = f"{where}: {broker}"
        if broker not in brokers:
            listed = ", ".join(sorted(brokers)[:5]) + (", ..." if len(brokers) > 5 else "")
            problems.append(Problem(place, f"broker {broker!r} is not in the cluster ({spec.name} lists {listed})"))
            continue
        if not isinstance(report, dict):
            problems.append(Problem(place, "expected a load report object"))
            continue
        local = report.get("brokerLoadData", report)
        usage[broker] = tuple(  # type: ignore[assignment]
            _percent(local.get(k)) for k in ("cpu", "memory", "directMemory", "bandwidthIn", "bandwidthOut")
        )
        if "topBundlesLoadData" in report:
            top = report["topBundlesLoadData"]
            items = top.get("topBundlesLoadData", []) if isinstance(top, dict) else []
            stats = {i.get("bundleName"): i.get("stats", {}) for i in items if isinstance(i, dict)}
        else:
            stats = local.get("lastStats", {})
        if not isinstance(stats, dict):
            problems.append(Problem(place, "lastStats: expected an object bundle -> stats"))
            continue
        for key, s in stats.items():
            at = f"{place} bundle {key!r}"
            try:
                bundle = parse_key(str(key))
            except BadKeyError as exc:
                problems.append(Problem(at, str(exc)))
                continue
            if bundle.namespace not in namespaces:
                problems.append(Problem(at, f"namespace {bundle.namespace} is not in {spec.name}'s namespaces"))
                continue
            if key in seen:
                problems.append(Problem(at, f"also reported by {seen[key]}"))
                continue
            seen[key] = broker
            fields = {
                "msg_rate_in": s.get("msgRateIn", 0.0),
                "msg_rate_out": s.get("msgRateOut", 0.0),
                "throughput_in": s.get("msgThroughputIn", 0.0),
                "throughput_out": s.get("msgThroughputOut", 0.0),
                "topics": s.get("topics", 1),
                "producers": s.get("producerCount", 0),
                "consumers": s.get("consumerCount", 0),
            }
            try:
                recorded.append(RecordedBundle(key=str(key), broker=broker, **fields))
            except ValidationError as exc:
                for item in exc.errors():
                    name = str(item["loc"][0]) if item["loc"] else ""
                    pulsar = {
                        "msg_rate_in": "msgRateIn",
                        "msg_rate_out": "msgRateOut",
                        "throughput_in": "msgThroughputIn",
                        "throughput_out": "msgThroughputOut",
                        "topics": "topics",
                        "producers": "producerCount",
                        "consumers": "consumerCount",
                    }.get(name, name)
                    problems.append(Problem(at, f"{pulsar}: {item['msg']} (got {item.get('input')!r})"))
    if problems:
        raise InputError(problems)
    new_spec = spec.model_copy(update={"recorded": tuple(recorded), "recorded_usage": usage})
    notes = [*cluster.notes, f"{len(recorded)} bundles of recorded load from {len(usage)} brokers ({where})"]
    return OperatorCluster(new_spec, cluster.workload, notes)


def example_cluster() -> tuple[str, str, str]:
    """A small cluster's ``broker.conf``, ``cluster.yaml`` and recorded load (for docs and tests)."""
    conf = "\n".join(
        [
            "# seed 001's load-balance settings",
            "loadBalancerLoadSheddingStrategy=org.apache.pulsar.broker.loadbalance.impl.ThresholdShedder",
            "loadBalancerLoadPlacementStrategy=org.apache.pulsar.broker.loadbalance.impl.LeastLongTermMessageRate",
            "loadBalancerBrokerThresholdShedderPercentage=10",
            "loadBalancerHistoryResourcePercentage=0.9",
            "loadBalancerMemoryResourceWeight=0.1",
            "loadBalancerDirectMemoryResourceWeight=0.1",
            "loadBalancerBundleUnloadMinThroughputThreshold=0.1",
            "clusterName=example",
            "brokerServicePort=6650",
            "",
        ]
    )
    cluster = "\n".join(
        [
            "name: example",
            "brokers:",
            *[f"  - name: broker-{i}:8080\n    capacity: {1.5 if i <= 2 else 1.0}" for i in range(1, 7)],
            "namespaces:",
            "  - name: public/default",
            "    bundles: 16",
            "  - name: iot/telemetry",
            "    bundles: 8",
            "workload:",
            "  median_rate: 30",
            "",
        ]
    )
    default = namespace_bundles("public/default", 16)
    busy = {
        "msgRateIn": 900.0,
        "msgRateOut": 1800.0,
        "msgThroughputIn": 9.0e6,
        "msgThroughputOut": 18.0e6,
        "topics": 12,
        "producerCount": 12,
        "consumerCount": 24,
    }
    quiet = {**busy, "msgRateIn": 90.0, "msgRateOut": 180.0, "msgThroughputIn": 0.9e6, "msgThroughputOut": 1.8e6}
    stats: dict[str, dict[str, float]] = {default[0].key: busy, default[1].key: quiet, default[2].key: quiet}
    stats[namespace_bundles("iot/telemetry", 8)[3].key] = {
        "msgRateIn": 12000.0,
        "msgRateOut": 12000.0,
        "msgThroughputIn": 1.0e6,
        "msgThroughputOut": 1.0e6,
        "topics": 40,
        "producerCount": 40,
        "consumerCount": 40,
    }
    load = {
        "broker-3:8080": {
            "cpu": {"usage": 620.0, "limit": 800.0},
            "memory": {"usage": 3000.0, "limit": 4096.0},
            "directMemory": {"usage": 900.0, "limit": 4096.0},
            "bandwidthIn": {"usage": 90000.0, "limit": 1000000.0},
            "bandwidthOut": {"usage": 180000.0, "limit": 1000000.0},
            "lastStats": stats,
        }
    }
    return conf, cluster, json.dumps(load, indent=2) + "\n"
