"""What a lab run is made of, as plain values: the load balancer's settings (named and defaulted
as in Pulsar's ``ServiceConfiguration``), the workload, and the named strategies, settings and
workloads the command line and the sweep offer. No numpy here: the command line imports this
module to build its options.

Python names are snake_case; Pulsar's names are accepted as aliases, so a ``broker.conf`` line
carries over as it is. Percentages stay in Pulsar's units (``85`` means 85 %).
"""

from __future__ import annotations

import enum

from pydantic import BaseModel, ConfigDict, Field


class ShedderKind(enum.Enum):
    """``loadBalancerLoadSheddingStrategy`` (and the extensible manager's unload strategy)."""

    threshold = "ThresholdShedder"
    overload = "OverloadShedder"
    uniform = "UniformLoadShedder"
    transfer = "TransferShedder"


class PlacementKind(enum.Enum):
    """``loadBalancerLoadPlacementStrategy`` / the extensible manager's broker selection."""

    least_long_term_message_rate = "LeastLongTermMessageRate"
    least_resource_usage_with_weight = "LeastResourceUsageWithWeight"
    extensible = "ExtensibleLeastResourceUsageWithWeight"
    """The extensible load manager's default (``extensions.strategy.LeastResourceUsageWithWeight``)."""


class BalancerConfig(BaseModel):
    """Every setting a shedder or a placement reads, with Pulsar's default."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="forbid")

    # shared by the modular and the extensible load managers
    shedding_interval_min: int = Field(1, alias="loadBalancerSheddingIntervalMinutes", gt=0)
    grace_period_min: int = Field(30, alias="loadBalancerSheddingGracePeriodMinutes", ge=0)
    overloaded_threshold_pct: float = Field(85, alias="loadBalancerBrokerOverloadedThresholdPercentage")
    history_percentage: float = Field(0.9, alias="loadBalancerHistoryResourcePercentage", ge=0, le=1)
    cpu_weight: float = Field(1.0, alias="loadBalancerCPUResourceWeight", ge=0)
    memory_weight: float = Field(1.0, alias="loadBalancerMemoryResourceWeight", ge=0)
    direct_memory_weight: float = Field(1.0, alias="loadBalancerDirectMemoryResourceWeight", ge=0)
    bandwidth_in_weight: float = Field(1.0, alias="loadBalancerBandwithInResourceWeight", ge=0)
    bandwidth_out_weight: float = Field(1.0, alias="loadBalancerBandwithOutResourceWeight", ge=0)
    # load reports
    report_threshold_pct: float = Field(10, alias="loadBalancerReportUpdateThresholdPercentage")
    report_max_interval_min: int = Field(15, alias="loadBalancerReportUpdateMaxIntervalMinutes", gt=0)
    host_usage_check_interval_min: int = Field(1, alias="loadBalancerHostUsageCheckIntervalMinutes", gt=0)
    # ThresholdShedder
    threshold_shedder_pct: float = Field(10, alias="loadBalancerBrokerThresholdShedderPercentage")
    bundle_unload_min_throughput_mb: float = Field(10, alias="loadBalancerBundleUnloadMinThroughputThreshold")
    # LeastResourceUsageWithWeight
    average_usage_difference_pct: float = Field(
        10, alias="loadBalancerAverageResourceUsageDifferenceThresholdPercentage"
    )
    # UniformLoadShedder
    msg_rate_difference_pct: float = Field(50, alias="loadBalancerMsgRateDifferenceShedderThreshold")
    throughput_multiplier_difference: float = Field(
        4, alias="loadBalancerMsgThroughputMultiplierDifferenceShedderThreshold"
    )
    max_unload_percentage: float = Field(0.2, alias="maxUnloadPercentage")
    min_unload_message: int = Field(1000, alias="minUnloadMessage")
    min_unload_message_throughput: int = Field(1024 * 1024, alias="minUnloadMessageThroughput")
    max_unload_bundles_per_shedding: int = Field(-1, alias="maxUnloadBundleNumPerShedding")
    # TransferShedder (PIP-192)
    target_std: float = Field(0.25, alias="loadBalancerBrokerLoadTargetStd", ge=0)
    condition_hit_count_threshold: int = Field(3, alias="loadBalancerSheddingConditionHitCountThreshold", ge=0)
    max_brokers_shedding_per_cycle: int = Field(3, alias="loadBalancerMaxNumberOfBrokerSheddingPerCycle", gt=0)
    shedding_delay_s: int = Field(180, alias="loadBalanceSheddingDelayInSeconds", ge=0)
    load_data_ttl_s: int = Field(1800, alias="loadBalancerBrokerLoadDataTTLInSeconds", gt=0)
    transfer_enabled: bool = Field(True, alias="loadBalancerTransferEnabled")
    top_bundles_in_report: int = Field(10, alias="loadBalancerMaxNumberOfBundlesInBundleLoadReport", gt=0)

    def weights(self) -> tuple[float, float, float, float, float]:
        """CPU, heap, direct memory, bandwidth in, bandwidth out: the order usages are kept in."""
        return (
            self.cpu_weight,
            self.memory_weight,
            self.direct_memory_weight,
            self.bandwidth_in_weight,
            self.bandwidth_out_weight,
        )


SEED_001 = BalancerConfig(
    memory_weight=0.1,  # loadBalancerMemoryResourceWeight
    direct_memory_weight=0.1,  # loadBalancerDirectMemoryResourceWeight
    bundle_unload_min_throughput_mb=0.1,  # loadBalancerBundleUnloadMinThroughputThreshold
)
"""The ``broker.conf`` seed 001 reports (heap and direct memory weighted 0.1, a 0.1 MB floor);
the rest at Pulsar's defaults, which the reporter's file repeats."""


class Workload(BaseModel):
    """A cluster and its traffic. The default is seed 001's cluster: 136 brokers, 10 hours."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    brokers: int = Field(136, ge=2)
    namespaces: int = Field(30, ge=1)
    bundles_per_namespace: int = Field(100, ge=1)
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
    bursts_per_hour: float = Field(20.0, ge=0)
    burst_minutes: float = Field(10.0, gt=0)
    burst_factor: tuple[float, float] = (1.5, 3.0)
    hot_per_hour: float = Field(2.0, ge=0, description="bundles turning hot (and cooling down later)")
    hot_factor: float = Field(4.0, ge=1)
    hot_hours: float = Field(2.0, gt=0)
    churn_per_hour: float = Field(2.0, ge=0, description="bundles going quiet, and as many new ones starting")
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
    def bundles(self) -> int:
        return self.namespaces * self.bundles_per_namespace

    @property
    def minutes(self) -> int:
        return round(self.hours * 60)


STRATEGIES: dict[str, tuple[ShedderKind, PlacementKind]] = {
    "threshold+lltmr": (ShedderKind.threshold, PlacementKind.least_long_term_message_rate),
    "threshold+lruww": (ShedderKind.threshold, PlacementKind.least_resource_usage_with_weight),
    "transfer+extensible": (ShedderKind.transfer, PlacementKind.extensible),
    "overload+lltmr": (ShedderKind.overload, PlacementKind.least_long_term_message_rate),
    "uniform+lltmr": (ShedderKind.uniform, PlacementKind.least_long_term_message_rate),
}
"""The combinations by short name: Pulsar's modular defaults, seed 001's proposal, PIP-192's
extensible manager, and the older shedders with the modular default placement."""

SETTINGS: dict[str, BalancerConfig] = {
    "seed-001": SEED_001,
    "pulsar-defaults": BalancerConfig(),
    "target-std-0.1": SEED_001.model_copy(update={"target_std": 0.1}),
    "target-std-0.05": SEED_001.model_copy(update={"target_std": 0.05}),
}
"""Settings by name: seed 001's ``broker.conf``, Pulsar's defaults, and seed 001's with the
TransferShedder's ``loadBalancerBrokerLoadTargetStd`` tightened (its default, 0.25, is loose)."""

WORKLOADS: dict[str, Workload] = {
    "seed-001": Workload(),
    "steady": Workload(bursts_per_hour=0, hot_per_hour=0, churn_per_hour=0),
    "bursty": Workload(bursts_per_hour=60, burst_factor=(2.0, 5.0), hot_per_hour=6),
}
"""Workloads by name: seed 001's cluster, the same traffic without events (only the daily curves),
and a burstier one."""
