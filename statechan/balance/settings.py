"""What a lab run is made of, as plain values: the load balancer's settings (named and defaulted
as in Pulsar's ``ServiceConfiguration``), the workload, and the named strategies, settings and
workloads the command line and the sweep offer. No numpy here: the command line imports this
module to build its options.

Python names are snake_case; Pulsar's names are accepted as aliases, so a ``broker.conf`` line
carries over as it is. Percentages stay in Pulsar's units (``85`` means 85 %).
"""

from __future__ import annotations

import enum
from typing import Any

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator


class ShedderKind(enum.Enum):
    """``loadBalancerLoadSheddingStrategy`` (and the extensible manager's unload strategy);
    ``none`` is the no-shedding baseline (``loadBalancerSheddingEnabled=false``)."""

    threshold = "ThresholdShedder"
    overload = "OverloadShedder"
    uniform = "UniformLoadShedder"
    transfer = "TransferShedder"
    none = "none"


class PlacementKind(enum.Enum):
    """``loadBalancerLoadPlacementStrategy`` / the extensible manager's broker selection."""

    least_long_term_message_rate = "LeastLongTermMessageRate"
    least_resource_usage_with_weight = "LeastResourceUsageWithWeight"
    extensible = "ExtensibleLeastResourceUsageWithWeight"
    """The extensible load manager's default (``extensions.strategy.LeastResourceUsageWithWeight``)."""


class SplitAlgorithm(enum.Enum):
    """``defaultNamespaceBundleSplitAlgorithm``: the names ``supportedNamespaceBundleSplitAlgorithms`` lists."""

    range_equally_divide = "range_equally_divide"
    topic_count_equally_divide = "topic_count_equally_divide"
    specified_positions_divide = "specified_positions_divide"
    flow_or_qps_equally_divide = "flow_or_qps_equally_divide"


class Manager(enum.Enum):
    """Which load manager a run stands for: the modular one (``ModularLoadManagerImpl``: the leader
    samples every bundle on every report and splits by long-term averages) or the extensible one
    (``ExtensibleLoadManagerImpl``, PIP-192: each broker splits its own bundles)."""

    modular = "modular"
    extensible = "extensible"


SPLIT_THRESHOLD_WHY = {
    "bundle_max_topics": "a bundle with more topics is split",
    "bundle_max_msg_rate": "a bundle whose message rate (in + out) passes it is split",
    "bundle_max_bandwidth_mb": "a bundle whose throughput (in + out, MB/s) passes it is split",
}


class BalancerConfig(BaseModel):
    """Every setting a shedder, a placement, the reports or the splits read, with the default of
    Pulsar's ``ServiceConfiguration`` on master (:data:`PULSAR_2_10` has the older defaults)."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="forbid")

    # shared by the modular and the extensible load managers
    shedding_enabled: bool = Field(True, alias="loadBalancerSheddingEnabled")
    shedding_interval_min: int = Field(1, alias="loadBalancerSheddingIntervalMinutes", gt=0)
    grace_period_min: int = Field(30, alias="loadBalancerSheddingGracePeriodMinutes", ge=0)
    overloaded_threshold_pct: float = Field(85, alias="loadBalancerBrokerOverloadedThresholdPercentage", gt=0)
    history_percentage: float = Field(0.9, alias="loadBalancerHistoryResourcePercentage", ge=0, le=1)
    cpu_weight: float = Field(1.0, alias="loadBalancerCPUResourceWeight", ge=0)
    memory_weight: float = Field(0.0, alias="loadBalancerMemoryResourceWeight", ge=0)
    direct_memory_weight: float = Field(0.0, alias="loadBalancerDirectMemoryResourceWeight", ge=0)
    bandwidth_in_weight: float = Field(
        1.0,
        alias="loadBalancerBandwidthInResourceWeight",
        validation_alias=AliasChoices(
            "loadBalancerBandwidthInResourceWeight", "loadBalancerBandwithInResourceWeight", "bandwidth_in_weight"
        ),
        ge=0,
    )
    bandwidth_out_weight: float = Field(
        1.0,
        alias="loadBalancerBandwidthOutResourceWeight",
        validation_alias=AliasChoices(
            "loadBalancerBandwidthOutResourceWeight", "loadBalancerBandwithOutResourceWeight", "bandwidth_out_weight"
        ),
        ge=0,
    )
    distribute_bundles_evenly: bool = Field(True, alias="loadBalancerDistributeBundlesEvenlyEnabled")
    # load reports
    report_threshold_pct: float = Field(10, alias="loadBalancerReportUpdateThresholdPercentage", ge=0)
    report_min_interval_ms: int = Field(5000, alias="loadBalancerReportUpdateMinIntervalMillis", gt=0)
    report_max_interval_min: int = Field(15, alias="loadBalancerReportUpdateMaxIntervalMinutes", gt=0)
    host_usage_check_interval_min: int = Field(1, alias="loadBalancerHostUsageCheckIntervalMinutes", gt=0)
    resource_quota_update_interval_min: int = Field(15, alias="loadBalancerResourceQuotaUpdateIntervalMinutes", gt=0)
    # ThresholdShedder
    threshold_shedder_pct: float = Field(10, alias="loadBalancerBrokerThresholdShedderPercentage", ge=0)
    bundle_unload_min_throughput_mb: float = Field(10, alias="loadBalancerBundleUnloadMinThroughputThreshold", ge=0)
    # LeastResourceUsageWithWeight
    average_usage_difference_pct: float = Field(
        10, alias="loadBalancerAverageResourceUsageDifferenceThresholdPercentage", ge=0
    )
    # UniformLoadShedder
    msg_rate_difference_pct: float = Field(50, alias="loadBalancerMsgRateDifferenceShedderThreshold")
    throughput_multiplier_difference: float = Field(
        4, alias="loadBalancerMsgThroughputMultiplierDifferenceShedderThreshold"
    )
    max_unload_percentage: float = Field(0.2, alias="maxUnloadPercentage", gt=0, le=1)
    min_unload_message: int = Field(1000, alias="minUnloadMessage", ge=0)
    min_unload_message_throughput: int = Field(1024 * 1024, alias="minUnloadMessageThroughput", ge=0)
    max_unload_bundles_per_shedding: int = Field(-1, alias="maxUnloadBundleNumPerShedding")
    # TransferShedder (PIP-192)
    target_std: float = Field(0.25, alias="loadBalancerBrokerLoadTargetStd", ge=0)
    condition_hit_count_threshold: int = Field(3, alias="loadBalancerSheddingConditionHitCountThreshold", ge=0)
    max_brokers_shedding_per_cycle: int = Field(3, alias="loadBalancerMaxNumberOfBrokerSheddingPerCycle", gt=0)
    shedding_delay_s: int = Field(180, alias="loadBalanceSheddingDelayInSeconds", ge=0)
    load_data_ttl_s: int = Field(1800, alias="loadBalancerBrokerLoadDataTTLInSeconds", gt=0)
    transfer_enabled: bool = Field(True, alias="loadBalancerTransferEnabled")
    top_bundles_in_report: int = Field(10, alias="loadBalancerMaxNumberOfBundlesInBundleLoadReport", gt=0)
    # bundle splits (both managers; the interval, cap and hit count are the extensible manager's)
    auto_split_enabled: bool = Field(True, alias="loadBalancerAutoBundleSplitEnabled")
    auto_unload_split_bundles: bool = Field(True, alias="loadBalancerAutoUnloadSplitBundlesEnabled")
    bundle_max_topics: int = Field(1000, alias="loadBalancerNamespaceBundleMaxTopics")
    bundle_max_sessions: int = Field(1000, alias="loadBalancerNamespaceBundleMaxSessions")
    bundle_max_msg_rate: int = Field(30000, alias="loadBalancerNamespaceBundleMaxMsgRate")
    bundle_max_bandwidth_mb: int = Field(100, alias="loadBalancerNamespaceBundleMaxBandwidthMbytes")
    namespace_max_bundles: int = Field(128, alias="loadBalancerNamespaceMaximumBundles", gt=0)
    split_interval_min: int = Field(1, alias="loadBalancerSplitIntervalMinutes", gt=0)
    max_splits_per_cycle: int = Field(10, alias="loadBalancerMaxNumberOfBundlesToSplitPerCycle", gt=0)
    split_hit_count_threshold: int = Field(3, alias="loadBalancerNamespaceBundleSplitConditionHitCountThreshold", ge=0)
    split_algorithm: SplitAlgorithm = Field(
        SplitAlgorithm.range_equally_divide, alias="defaultNamespaceBundleSplitAlgorithm"
    )
    flow_or_qps_difference_pct: int = Field(10, alias="flowOrQpsDifferenceThresholdPercentage", ge=0)

    @field_validator("bundle_max_topics", "bundle_max_msg_rate", "bundle_max_bandwidth_mb")
    @classmethod
    def _positive_split_threshold(cls, value: int, info: Any) -> int:
        if value <= 0:
            name = cls.model_fields[info.field_name].alias
            why = SPLIT_THRESHOLD_WHY[info.field_name]
            raise ValueError(f"{name} must be above 0 ({why}), not {value}")
        return value

    @field_validator("bundle_max_sessions")
    @classmethod
    def _sessions_threshold(cls, value: int) -> int:
        if value <= 0 and value != -1:
            raise ValueError(
                "loadBalancerNamespaceBundleMaxSessions must be above 0 (a bundle with more producers and "
                f"consumers is split), or -1 to leave sessions out as Pulsar documents; not {value}"
            )
        return value

    @field_validator("split_algorithm", mode="before")
    @classmethod
    def _known_algorithm(cls, value: object) -> object:
        names = [a.value for a in SplitAlgorithm]
        if isinstance(value, str) and value not in names:
            raise ValueError(
                f"defaultNamespaceBundleSplitAlgorithm {value!r} is not one Pulsar supports ({', '.join(names)})"
            )
        return value

    @model_validator(mode="after")
    def _weights_not_all_zero(self) -> BalancerConfig:
        if not any(self.weights()):
            raise ValueError("the resource weights are all 0: every broker would score 0 load")
        return self

    def weights(self) -> tuple[float, float, float, float, float]:
        """CPU, heap, direct memory, bandwidth in, bandwidth out: the order usages are kept in."""
        return (
            self.cpu_weight,
            self.memory_weight,
            self.direct_memory_weight,
            self.bandwidth_in_weight,
            self.bandwidth_out_weight,
        )

    def pulsar_lines(self, against: BalancerConfig | None = None) -> list[str]:
        """``broker.conf`` lines for every setting that differs from ``against`` (default: Pulsar's defaults)."""
        base = against if against is not None else BalancerConfig()
        lines = []
        for name, info in type(self).model_fields.items():
            mine, theirs = getattr(self, name), getattr(base, name)
            if mine != theirs:
                lines.append(f"{info.alias}={pulsar_value(mine)}")
        return lines


def pulsar_value(value: object) -> str:
    """A setting's value as ``broker.conf`` writes it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value)) if abs(value) >= 1 or value == 0 else str(value)
    return str(value)


def settings_problems(error: ValidationError) -> list[str]:
    """A validation error as one line per setting, named as Pulsar names it."""
    lines = []
    for item in error.errors():
        loc = item.get("loc", ())
        field = str(loc[0]) if loc else ""
        info = BalancerConfig.model_fields.get(field)
        name = info.alias if info is not None and info.alias else field
        message = str(item.get("msg", "")).removeprefix("Value error, ")
        value = item.get("input")
        if name and name not in message:
            message = f"{name}: {message} (got {value!r})"
        lines.append(message)
    return lines


PULSAR_2_10 = BalancerConfig(memory_weight=1.0, direct_memory_weight=1.0)
"""``ServiceConfiguration``'s defaults when seed 001 was reported (Pulsar 2.10): heap and direct
memory weighted 1.0 like the rest (master has made both 0)."""

SEED_001 = PULSAR_2_10.model_copy(
    update={
        "memory_weight": 0.1,  # loadBalancerMemoryResourceWeight
        "direct_memory_weight": 0.1,  # loadBalancerDirectMemoryResourceWeight
        "bundle_unload_min_throughput_mb": 0.1,  # loadBalancerBundleUnloadMinThroughputThreshold
    }
)
"""The ``broker.conf`` seed 001 reports (heap and direct memory weighted 0.1, a 0.1 MB floor);
the rest at Pulsar 2.10's defaults, which the reporter's file repeats."""


class Workload(BaseModel):
    """A cluster and its traffic. The default is seed 001's cluster: 136 brokers, 10 hours."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    brokers: int = Field(136, ge=2)
    namespaces: int = Field(30, ge=1)
    bundles_per_namespace: int = Field(100, ge=1)
    bundles_short_of_brokers: int | None = Field(
        None,
        ge=1,
        description="when set, every namespace has (brokers - this) bundles, dealt evenly: the brokers the "
        "even spread leaves out are the only candidates the namespace filter lets through (seed 001's point 1)",
    )
    hours: float = Field(10.0, gt=0)
    seed: int = 1
    start_hour: float = Field(8.0, description="local time of day when the run starts")
    daily_amplitude: float = Field(0.35, ge=0, lt=1, description="the daily curve's swing around its mean")
    timezones: tuple[float, ...] = Field((0.0, -3.0, -6.0, 5.5), description="tenants' offsets in hours")
    median_rate: float = Field(60.0, gt=0, description="a bundle's median message rate in (msg/s)")
    rate_sigma: float = Field(1.2, ge=0, description="log-normal spread of bundles' rates (the skew)")
    median_message_bytes: float = Field(1024.0, gt=0)
    size_sigma: float = Field(1.2, ge=0, description="log-normal spread of message sizes across bundles")
    size_rate_elasticity: float = Field(
        0.5, ge=0, description="bundles with bigger messages send fewer of them: rate scales by size^-this"
    )
    max_bundle_share: float = Field(
        0.06,
        gt=0,
        description="no bundle's base traffic takes more than this share of a broker's CPU: bigger ones "
        "are as Pulsar's bundle split (loadBalancerNamespaceBundleMax*) would have left them",
    )
    median_batch: float = Field(4.0, ge=1, description="messages per entry (producer batching), median")
    batch_sigma: float = Field(1.0, ge=0, description="log-normal spread of batching across bundles")
    max_fanout: int = Field(4, ge=1, description="subscriptions per topic: out rate is in rate times 1..this")
    mean_topics: float = Field(5.0, ge=0, description="topics per bundle: 1 + Poisson(this)")
    topic_sigma: float = Field(1.0, ge=0, description="log-normal spread of a bundle's traffic over its topics")
    bursts_per_hour: float = Field(20.0, ge=0)
    burst_minutes: float = Field(10.0, gt=0)
    burst_factor: tuple[float, float] = (1.5, 3.0)
    hot_per_hour: float = Field(2.0, ge=0, description="bundles turning hot (and cooling down later)")
    hot_factor: float = Field(4.0, ge=1)
    hot_hours: float = Field(2.0, gt=0)
    churn_per_hour: float = Field(2.0, ge=0, description="bundles going quiet, and as many new ones starting")
    heavy_bundles: int = Field(0, ge=0, description="bundles that grow past Pulsar's split thresholds")
    heavy_topics: int = Field(64, ge=2, description="topics in each heavy bundle")
    heavy_msg_rate: float = Field(
        90_000.0, gt=0, description="a heavy bundle's message rate (in + out, msg/s) once grown"
    )
    heavy_batch: float = Field(20.0, ge=1, description="messages per entry in a heavy bundle")
    heavy_message_bytes: float = Field(256.0, gt=0)
    heavy_start_hours: float = Field(1.0, ge=0, description="when heavy bundles start to grow")
    heavy_ramp_hours: float = Field(2.0, gt=0, description="how long they take to grow to their full rate")
    cpu_entries: float = Field(
        9_000.0,
        gt=0,
        description="entries/s (in+out) that fill one broker's CPU: CPU is paid per entry, "
        "while Pulsar's message rates count messages, batched or not",
    )
    cpu_bytes: float = Field(150e6, gt=0, description="bytes/s (in+out) that fill one broker's CPU")
    nic_bytes: float = Field(125e6, gt=0, description="a broker's NIC, bytes/s each way (1 Gbit/s)")
    direct_bytes: float = Field(600e6, gt=0, description="bytes/s (in+out) that fill the direct memory")
    capacity_spread: float = Field(0.0, ge=0, lt=1, description="brokers' capacities vary by up to this share")
    cpu_noise: float = Field(2.0, ge=0, description="standard deviation of CPU noise, percentage points")
    heap_range: tuple[float, float] = Field((20.0, 90.0), description="the heap's sawtooth, percent")
    heap_period_minutes: tuple[float, float] = (2.0, 9.0)

    @property
    def namespace_bundle_count(self) -> int:
        """Bundles each namespace starts with."""
        if self.bundles_short_of_brokers is not None:
            return max(1, self.brokers - self.bundles_short_of_brokers)
        return self.bundles_per_namespace

    @property
    def bundles(self) -> int:
        """Bundles at the start (splits add more as the run goes)."""
        return self.namespaces * self.namespace_bundle_count

    @property
    def minutes(self) -> int:
        return round(self.hours * 60)

    def for_brokers(self, brokers: int) -> Workload:
        """The same workload on ``brokers`` brokers, with as many bundles per broker (so each broker
        carries the same load): namespaces keep their count, their bundles scale."""
        if brokers == self.brokers:
            return self
        update: dict[str, object] = {"brokers": brokers}
        if self.bundles_short_of_brokers is None:
            update["bundles_per_namespace"] = max(1, round(self.bundles_per_namespace * brokers / self.brokers))
        if self.heavy_bundles:
            update["heavy_bundles"] = max(1, round(self.heavy_bundles * brokers / self.brokers))
        return self.model_copy(update=update)


STRATEGIES: dict[str, tuple[ShedderKind, PlacementKind]] = {
    "threshold+lltmr": (ShedderKind.threshold, PlacementKind.least_long_term_message_rate),
    "threshold+lruww": (ShedderKind.threshold, PlacementKind.least_resource_usage_with_weight),
    "transfer+extensible": (ShedderKind.transfer, PlacementKind.extensible),
    "overload+lltmr": (ShedderKind.overload, PlacementKind.least_long_term_message_rate),
    "uniform+lltmr": (ShedderKind.uniform, PlacementKind.least_long_term_message_rate),
    "none+lltmr": (ShedderKind.none, PlacementKind.least_long_term_message_rate),
}
"""The combinations by short name: Pulsar's modular defaults, seed 001's proposal, PIP-192's
extensible manager, the older shedders with the modular default placement, and the no-shedding
baseline (bundles stay where they were placed)."""

BASELINE = "none+lltmr"

SETTINGS: dict[str, BalancerConfig] = {
    "seed-001": SEED_001,
    "pulsar-defaults": BalancerConfig(),
    "pulsar-2.10-defaults": PULSAR_2_10,
    "target-std-0.1": SEED_001.model_copy(update={"target_std": 0.1}),
    "target-std-0.05": SEED_001.model_copy(update={"target_std": 0.05}),
    "seed-001-spread-evenly-off": SEED_001.model_copy(update={"distribute_bundles_evenly": False}),
    "no-split": SEED_001.model_copy(update={"auto_split_enabled": False}),
}
"""Settings by name: seed 001's ``broker.conf``, Pulsar's defaults (master and 2.10), seed 001's
with the TransferShedder's ``loadBalancerBrokerLoadTargetStd`` tightened (its default, 0.25, is
loose), seed 001's with ``loadBalancerDistributeBundlesEvenlyEnabled=false`` (the switch #16059
added), and seed 001's with automatic splits off."""

RATE_TRACKS_LOAD = {
    "median_batch": 3.0,
    "batch_sigma": 0.0,
    "median_message_bytes": 2100.0,
    "size_sigma": 0.0,
    "size_rate_elasticity": 0.0,
}
"""Every bundle batches alike and sends messages of one size, so a broker's message rate is
proportional to its CPU; the batch (3) and the size (2.1 KB) keep the cluster about as busy as
the seed-001 workload."""

WORKLOADS: dict[str, Workload] = {
    "seed-001": Workload(),
    "steady": Workload(bursts_per_hour=0, hot_per_hour=0, churn_per_hour=0),
    "bursty": Workload(bursts_per_hour=60, burst_factor=(2.0, 5.0), hot_per_hour=6),
    # seed 001's three causes, each on its own
    "starved-candidates": Workload(namespaces=22, bundles_short_of_brokers=2, **RATE_TRACKS_LOAD),
    "swinging-heap": Workload(heap_range=(40.0, 99.0), **RATE_TRACKS_LOAD),
    "rate-decoupled": Workload(),
    "rate-tracks-load": Workload(**RATE_TRACKS_LOAD),
    # bundles that need splitting
    "hot-bundles": Workload(heavy_bundles=6),
}
"""Workloads by name. ``seed-001``: the cluster the pictures use (message rate and CPU part ways
through batching and message sizes); ``steady``: its daily curves only; ``bursty``: more and
stronger bursts. Seed 001's causes, one at a time: ``starved-candidates`` (every namespace two
bundles short of the brokers, so the even spread leaves two candidates; rate tracks load),
``swinging-heap`` (heap between 40 % and 99 %; rate tracks load), ``rate-decoupled`` (the
seed-001 workload: plenty of candidates, heap weighted down, rate apart from CPU) against
``rate-tracks-load`` (the same with every message one entry of one size). ``hot-bundles``: six
bundles of 64 topics each grow to 90,000 msg/s between hours 1 and 3, past
``loadBalancerNamespaceBundleMaxMsgRate``."""


class BrokerSpec(BaseModel):
    """A broker of an operator's cluster: its name and its capacity relative to the workload's
    nominal machine (2.0 serves twice the traffic for the same usage)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    capacity: float = Field(1.0, gt=0)


class NamespaceSpec(BaseModel):
    """A namespace of an operator's cluster and its bundle count."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=r"^[^/\s]+/[^/\s]+$")
    bundles: int = Field(ge=1)


class RecordedBundle(BaseModel):
    """One bundle of a broker's recorded load report (``lastStats`` / top-bundle load data)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    key: str
    broker: str
    msg_rate_in: float = Field(0.0, ge=0)
    msg_rate_out: float = Field(0.0, ge=0)
    throughput_in: float = Field(0.0, ge=0)
    throughput_out: float = Field(0.0, ge=0)
    topics: int = Field(1, ge=0)
    producers: int = Field(0, ge=0)
    consumers: int = Field(0, ge=0)


class ClusterSpec(BaseModel):
    """An operator's cluster: brokers, namespaces, and optionally the load they recorded (which
    then drives the load model in place of the workload's drawn traffic for those bundles, and
    places them where they are)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = "cluster"
    brokers: tuple[BrokerSpec, ...] = Field(min_length=2)
    namespaces: tuple[NamespaceSpec, ...] = Field(min_length=1)
    recorded: tuple[RecordedBundle, ...] = ()
    recorded_usage: dict[str, tuple[float, float, float, float, float]] = Field(default_factory=dict)
    """Broker -> CPU, heap, direct memory, bandwidth in, out (percent) as recorded."""
