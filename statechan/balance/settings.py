"""The load balancer's settings, named and defaulted as in Pulsar's ``ServiceConfiguration``.

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
