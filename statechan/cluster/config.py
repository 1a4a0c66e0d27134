"""Configuration of a simulated cluster: Pulsar's channel settings (Pulsar's names and defaults),
the simulation's shape, and the switches that re-introduce historical bugs."""

from __future__ import annotations

import enum

from pydantic import BaseModel, ConfigDict, Field, model_validator

from statechan.model import DEFAULT_MODEL
from statechan.states import StorageType


class StoreKind(enum.Enum):
    """Which table view the brokers use; ``both`` runs the syncer between the two."""

    system_topic = "system-topic"
    metadata_store = "metadata-store"
    both = "both"


class PlacementKind(enum.Enum):
    least_resource_usage = "least-resource-usage"
    uniform = "uniform"


MAX_CLEAN_UP_DELAY_TIME_IN_SECS = 180
OWNERSHIP_CLEAN_UP_MAX_WAIT_TIME_IN_MILLIS = 5_000
OWNERSHIP_CLEAN_UP_WAIT_RETRY_DELAY_IN_MILLIS = 2_500
"""How long a clean-up waits between looks at its overrides (master: a flush, then 2.5 s)."""
BUNDLE_SPLIT_RETRY_LIMIT = 7
VERSION_ID_INIT = 1


class ChannelConfig(BaseModel):
    """The channel's settings, named and defaulted as in Pulsar's ``ServiceConfiguration``.

    Python names are snake_case; Pulsar's names are accepted as aliases.
    """

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="forbid")

    in_flight_wait_ms: int = Field(30_000, alias="loadBalancerInFlightServiceUnitStateWaitingTimeInMillis", gt=0)
    monitor_interval_s: int = Field(60, alias="loadBalancerServiceUnitStateMonitorIntervalInSeconds", gt=0)
    tombstone_delay_s: int = Field(3_600, alias="loadBalancerServiceUnitStateTombstoneDelayTimeInSeconds", ge=0)
    multi_phase_unload: bool = Field(True, alias="loadBalancerMultiPhaseBundleUnload")
    max_concurrent_overrides: int = Field(64, alias="loadBalancerServiceUnitStateMaxConcurrentOverrides", gt=0)
    session_timeout_ms: int = Field(30_000, alias="zooKeeperSessionTimeoutMillis", gt=0)
    unloading_timeout_ms: int = Field(60_000, alias="namespaceBundleUnloadingTimeoutMs", gt=0)

    @model_validator(mode="after")
    def _pulsar_constraints(self) -> ChannelConfig:
        if self.tombstone_delay_s * 1000 < self.in_flight_wait_ms:
            raise ValueError(
                "loadBalancerServiceUnitStateTombstoneDelayTimeInSeconds "
                f"({self.tombstone_delay_s} s) must not be shorter than "
                f"loadBalancerInFlightServiceUnitStateWaitingTimeInMillis ({self.in_flight_wait_ms} ms); "
                "Pulsar's channel refuses to start with it"
            )
        return self


class Variant(BaseModel):
    """Switches that put a fixed Pulsar bug back, each named by the PR that fixed it, and switches
    that apply a fix proposed upstream (docs/upstream/), each named by its report.

    All off is the current protocol. The resolver bugs are protocol models (``model``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str = Field(DEFAULT_MODEL, description="protocol model (a bug variant may name one)")
    ignore_existing_assigning: bool = Field(
        False, description="#25379: a restarted broker does not act on an Assigning addressed to it"
    )
    cleanup_without_retry: bool = Field(
        False, description="#26520: cleanup overrides once and never re-checks a lost race"
    )
    assign_after_disable: bool = Field(
        False, description="#26520: a lookup that chose a broker before it was disabled still assigns to it"
    )
    syncer_drops_deletions: bool = Field(
        False, description="#25946: the syncer forwards a tombstone as put(null) and drops refused forwards"
    )
    store_retry_without_recheck: bool = Field(
        False, description="#24186: a lost compare-and-set is retried without the resolver"
    )
    stale_after_session_loss: bool = Field(
        False,
        description="#24478: without a session a system-topic broker answers lookups from its view "
        "unchecked, and re-registers without catching its view up first",
    )
    unregistered_lookup_checks_owner: bool = Field(
        False,
        description="the model before getActiveOwnerAsync's best-efforts branch: a lookup on a broker out of "
        "the registry checks the owner as any other (fails without a session, defers on an inactive owner)",
    )
    split_rereads_parent: bool = Field(
        False,
        description="safer than Pulsar: a queued split reads its parent again and is dropped when the "
        "parent's Splitting names another source (handleSplitEvent does not re-read it)",
    )
    restart_in_one_step: bool = Field(
        False,
        description="the model before the restart in phases: a restarted broker is registered, its view loaded "
        "and its channel started in one step (ExtensibleLoadManagerImpl.start registers first and starts the "
        "channel once the broker is ready for requests)",
    )
    two_heartbeat_namespaces: bool = Field(
        False,
        description="before #25304: a broker's table view starts its owned set with two heartbeat namespaces' "
        "bundles (pulsar/<cluster>/<broker> and pulsar/<broker>) besides the SLA monitor's, not one",
    )
    graceful_cleanup_without_leader: bool = Field(
        False,
        description="the model before it read doCleanup's channel-owner check: a broker's own graceful "
        "clean-up runs with no leader known",
    )

    monitor_tombstones_active: bool = Field(
        False,
        description="#21721: the leader's monitor tombstones any record older than the tombstone delay, Owned too",
    )
    cleanup_by_source: bool = Field(
        False,
        description="#23064: the clean-up of a broker overrides every active bundle naming it, as owner or as "
        "source (an Owned bundle whose owner is alive included)",
    )
    lookup_skips_owner_check: bool = Field(
        False, description="#21811: a lookup answers the recorded owner without checking the registry"
    )
    cleanup_keeps_unplaceable: bool = Field(
        False, description="#21811: an orphan no broker can take is left as it is (no Free written)"
    )
    free_override_needs_broker: bool = Field(
        False,
        description="#23349: an override with no broker to select (a Free with no destination) is never "
        "published (the record's constructor refused it)",
    )
    no_reregister_on_deletion: bool = Field(
        False, description="#23359: a broker does not register again when its own registry node is deleted"
    )
    no_register_on_reconnect: bool = Field(
        False, description="#24932: a broker does not register again when its metadata session is re-established"
    )
    no_election_on_reconnect: bool = Field(
        False,
        description="#23516: a broker whose session comes back does not take part in the election again "
        "(the election can stay empty)",
    )
    leader_id_mismatch: bool = Field(
        False,
        description="#21894: the leader writes its service URL to the election node, which no broker id "
        "matches (nobody takes on the leader's duties)",
    )
    assign_defers_late: bool = Field(
        False,
        description="#20677: a lookup of an unowned bundle defers only when its assignment is published, "
        "with no look at the view in between (a racing Owned already handled never answers it)",
    )
    session_state_stale: bool = Field(
        False,
        description="#25132: the monitor and the clean-up keep reading the metadata state as Unstable after "
        "the session comes back (the field was not volatile)",
    )
    semi_terminal_waits_for_monitor: bool = Field(
        False,
        description="#22743: a Deleted, or a forced Free, is left for the leader's monitor to tombstone after "
        "the tombstone delay instead of being tombstoned at once by its source",
    )
    unload_done_on_any_owned: bool = Field(
        False,
        description="#22379: an unload is reported done on any Owned or Free of its bundle, an assignment's "
        "Owned (no source) included",
    )
    forced_unload_never_done: bool = Field(
        False,
        description="#22859: an unload is never reported done by its bundle's tombstone, nor by a forced Free "
        "(which waits for the tombstone)",
    )
    registry_read_without_wait: bool = Field(
        False,
        description="#22899: a lookup's owner check reads the registry cache without waiting for it: an owner "
        "this broker never read before looks unregistered, so the lookup is deferred",
    )

    # -- the fixes proposed upstream (docs/upstream/), each named by its report; off is master ------
    compaction_keeps_tombstones: bool = Field(
        False,
        description="fix 01: compaction keeps each key's last tombstone in the compacted snapshot (beside the "
        "key's new value, if any), so a reader behind the horizon applies the deletion",
    )
    act_on_existing_in_flight: bool = Field(
        False,
        description="fix 02: a starting broker acts on each existing record whose source it is as the event "
        "would have been acted on (a Releasing or Splitting run, a Deleted or forced Free tombstoned)",
    )
    assign_without_namespace_check: bool = Field(
        False,
        description="master as it is (finding 3): a lookup's Assigning is published even if its bundle has left "
        "the namespace (the model's guard removed)",
    )
    registry_not_sticky: bool = Field(
        False,
        description="master as it is (#24371): a broker shutting down gracefully that reads its own unregistration's "
        "deletion after BrokerRegistryImpl.unregister has set its state back to Started registers again "
        "(handleMetadataStoreNotification); off, the notification is read while Unregistering and ignored",
    )
    keep_split_parent_deleted: bool = Field(
        False,
        description="fix 03/08: a split parent's Deleted is not tombstoned by its source; the leader's monitor "
        "tombstones it after the tombstone delay",
    )
    split_needs_registration: bool = Field(
        False,
        description="fix 04: a broker runs its split, and is admin-split, only while registered; it reads the "
        "channel to its end before registering again, then re-queues its own Splitting",
    )
    cleanup_redirects_transfer: bool = Field(
        False,
        description="fix 05: the clean-up of a transfer's departing destination writes Releasing to the "
        "selected broker from the live source instead of Owned",
    )
    monitor_redrives_split_on_source: bool = Field(
        False,
        description="fix 07: the monitor re-publishes a timed-out Splitting on its registered source (forced) "
        "before it hands a split over",
    )
    conditional_tombstones: bool = Field(
        False,
        description="fix 09: a forced Free's or a Deleted's tombstone takes effect only over a record that is "
        "not active (system topic: the resolver's rule) or at the node's version (metadata store)",
    )
    split_event_answers_lookups: bool = Field(
        False,
        description="fix 10: a Splitting event answers a lookup deferred on the bundle with the split's source, "
        "as getOwnerAsync answers a Splitting (a store's notification may skip the Owned that would have)",
    )

    def label(self) -> str:
        on = [name for name, field in Variant.model_fields.items() if name != "model" and getattr(self, name)]
        base = self.model if self.model != DEFAULT_MODEL else "current"
        return base + (" + " + ", ".join(on) if on else "")


VARIANTS: dict[str, Variant] = {
    "current": Variant(),
    "20110": Variant(model="pulsar-4-bug-20110"),
    "19546": Variant(model="pulsar-4-bug-19546"),
    "25379": Variant(ignore_existing_assigning=True),
    "26520": Variant(cleanup_without_retry=True, assign_after_disable=True),
    "25946": Variant(syncer_drops_deletions=True),
    "24186": Variant(store_retry_without_recheck=True),
    "24478": Variant(stale_after_session_loss=True),
    "21721": Variant(monitor_tombstones_active=True),
    "23064": Variant(cleanup_by_source=True),
    "21811": Variant(lookup_skips_owner_check=True, cleanup_keeps_unplaceable=True),
    "23349": Variant(free_override_needs_broker=True),
    "23359": Variant(no_reregister_on_deletion=True),
    "24932": Variant(no_register_on_reconnect=True),
    "23516": Variant(no_election_on_reconnect=True),
    "21894": Variant(leader_id_mismatch=True),
    "20677": Variant(assign_defers_late=True),
    "25132": Variant(session_state_stale=True),
    "22743": Variant(semi_terminal_waits_for_monitor=True),
    "22379": Variant(unload_done_on_any_owned=True),
    "22859": Variant(forced_unload_never_done=True),
    "22899": Variant(registry_read_without_wait=True),
    "master-03": Variant(assign_without_namespace_check=True),
    "master-24371": Variant(registry_not_sticky=True),
    "fix-01": Variant(compaction_keeps_tombstones=True),
    "fix-02": Variant(act_on_existing_in_flight=True),
    "fix-03": Variant(assign_without_namespace_check=True, keep_split_parent_deleted=True),
    "fix-04": Variant(split_needs_registration=True),
    "fix-05": Variant(cleanup_redirects_transfer=True),
    "fix-07": Variant(act_on_existing_in_flight=True, monitor_redrives_split_on_source=True),
    "fix-04-07": Variant(
        split_needs_registration=True, act_on_existing_in_flight=True, monitor_redrives_split_on_source=True
    ),
    "fix-08": Variant(keep_split_parent_deleted=True),
    "fix-09": Variant(conditional_tombstones=True),
    "fix-10": Variant(split_event_answers_lookups=True),
}
"""Named variants: the current protocol, one per historical bug (by PR number), and the fixes
proposed upstream, one per report (``fix-NN``, on the current protocol; ``fix-03`` on
``master-03``, the current protocol without the model's namespace guard, which is master;
``fix-04-07`` both reports' fixes, for finding 7's bound, where finding 4's window shows too)."""


MAX_BUNDLES = 100_000
"""Bundles a simulated cluster may have (namespaces × bundles per namespace): each is kept and
checked at every step, so a cluster with more would not get through a run."""


def check_cluster_size(namespaces: int, bundles_per_namespace: int) -> None:
    """``ValueError`` for a cluster of more than :data:`MAX_BUNDLES` bundles (the one rule: a
    configuration, a saved run and ``statechan simulate`` all meet it here)."""
    bundles = namespaces * bundles_per_namespace
    if bundles > MAX_BUNDLES:
        raise ValueError(
            f"{bundles:,} bundles: a simulated cluster has at most {MAX_BUNDLES:,} "
            "(every bundle is checked at every step)"
        )


class SimConfig(BaseModel):
    """A simulated cluster: its shape, its store, its faults, and the channel settings."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    brokers: int = Field(3, ge=1, le=64)
    namespaces: int = Field(1, ge=1)
    bundles_per_namespace: int = Field(2, ge=1)
    store: StoreKind = StoreKind.system_topic
    placement: PlacementKind = PlacementKind.least_resource_usage
    seed: int = 0
    start_ms: int = Field(1_700_000_000_000, ge=0, description="the logical clock's start (epoch ms)")
    channel: ChannelConfig = Field(default_factory=ChannelConfig)
    variant: Variant = Field(default_factory=Variant)
    trace_views: bool = Field(True, description="record each broker's view changes in the trace")
    compaction_threshold: int = Field(
        5 * 1024 * 1024, ge=0, description="the channel topic's compaction threshold as a topic policy (bytes)"
    )
    topic_policies: bool = Field(
        True,
        description="topic-level policies enabled (Pulsar's topicLevelPoliciesEnabled, the usual case): only then "
        "does the channel topic get its compaction threshold; without them the broker default "
        "brokerServiceCompactionThresholdInBytes, 0, applies and nothing compacts the channel",
    )
    timely_delivery_ms: int | None = Field(
        None,
        ge=0,
        description="a timing assumption: no timer fires more than this long after work (a delivery, "
        "a notification, a task) became waiting; None lets timers race any backlog",
    )

    @property
    def channel_compaction_threshold(self) -> int:
        """The threshold the channel topic gets (master sets it as a topic policy, so only with them)."""
        return self.compaction_threshold if self.topic_policies else 0

    @property
    def storage(self) -> StorageType:
        """The storage whose table the brokers' views apply (``both`` runs the system topic)."""
        return StorageType.MetadataStore if self.store is StoreKind.metadata_store else StorageType.SystemTopic

    @model_validator(mode="after")
    def _not_too_many_bundles(self) -> SimConfig:
        check_cluster_size(self.namespaces, self.bundles_per_namespace)
        return self

    def broker_ids(self) -> list[str]:
        return [f"broker-{i}:8080" for i in range(1, self.brokers + 1)]
