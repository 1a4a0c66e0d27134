"""The PIP-378 syncer (``ServiceUnitStateTableViewSyncer``): copies the channel between the system
topic and the metadata store while a cluster migrates, then mirrors changes both ways.

As on Pulsar's master since #25946 (each can be switched back off to reproduce the bug): a
deletion is forwarded as a delete, not ``put(key, null)``; a forward the destination refuses is
remembered, not dropped; and a periodic reconcile (:meth:`TableViewSyncer.reconcile_periodic`,
every 5 s upstream) copies the items the destination is missing and deletes its leftovers from
before the syncer started. :meth:`TableViewSyncer.reconcile` is a stronger repair of our own
(the destination made equal to the source), for operators and tests.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from statechan.clock import Clock
from statechan.model import ProtocolModel
from statechan.resolver import Verdict
from statechan.stores.metadata import MetadataClient, Store
from statechan.stores.tableview import (
    PATH_PREFIX,
    MetadataStoreTableView,
    SystemTopicTableView,
    path_of,
)
from statechan.stores.topic import COMPACTION_THRESHOLD, MalformedValueError, Message, Topic
from statechan.values import ServiceUnitStateData


class SyncerMode(enum.Enum):
    """Pulsar's ``loadBalancerServiceUnitTableViewSyncer`` values (besides ``None``)."""

    SystemTopicToMetadataStore = "SystemTopicToMetadataStoreSyncer"
    MetadataStoreToSystemTopic = "MetadataStoreToSystemTopicSyncer"


@dataclass
class ReconcileReport:
    """What :meth:`TableViewSyncer.reconcile` changed on the destination (and the source)."""

    copied: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    copied_back: list[str] = field(default_factory=list)

    @property
    def changes(self) -> int:
        return len(self.copied) + len(self.deleted) + len(self.copied_back)


@dataclass
class SyncerStats:
    forwarded: int = 0
    refused: int = 0
    dropped: int = 0


class TableViewSyncer:
    """Mirrors the channel between a topic and a metadata store.

    Its two views are ordinary table views: the caller advances the topic view and delivers the
    metadata client's notifications (``step_topic``, ``step_store``, or ``drain``); each update a
    view takes is forwarded to the other side.
    """

    def __init__(
        self,
        topic: Topic,
        store: Store,
        mode: SyncerMode,
        clock: Clock,
        model: str | Path | ProtocolModel | None = None,
        forward_tombstones_as_put_null: bool = False,
        drop_refused_forwards: bool = False,
        name: str = "syncer",
    ) -> None:
        self.topic = topic
        self.store = store
        self.mode = mode
        self.clock = clock
        self.model = model
        self.forward_tombstones_as_put_null = forward_tombstones_as_put_null
        self.drop_refused_forwards = drop_refused_forwards
        self.client: MetadataClient = store.connect(name)
        self.topic_view = SystemTopicTableView(topic, name, model)
        self.store_view = MetadataStoreTableView(self.client, name, model)
        self.stats = SyncerStats()
        self.unsynced: set[str] = set()
        # writes the syncer made, (key, value) -> count, whose echo must not be mirrored back
        self._topic_echoes: Counter[tuple[str, ServiceUnitStateData | None]] = Counter()
        self._store_echoes: Counter[tuple[str, ServiceUnitStateData | None]] = Counter()
        self.started_at: int | None = None
        self.active = False
        self._saved_threshold = COMPACTION_THRESHOLD

    # -- life cycle ----------------------------------------------------------------------------
    def start(self) -> None:
        """Copy existing items to the destination, disable compaction, start mirroring."""
        self.started_at = self.clock.now_ms()
        source_topic = self.mode is SyncerMode.SystemTopicToMetadataStore
        # temporary views with no-op listeners: the state at the start
        snapshot_topic = SystemTopicTableView(self.topic, f"{self.client.name}/initial")
        snapshot_topic.start()
        snapshot_store = MetadataStoreTableView(self.client, f"{self.client.name}/initial", self.model)
        snapshot_store.start()
        if source_topic:
            for key in list(snapshot_store.snapshot()):
                self.client.delete(path_of(key))
            for key, value in snapshot_topic.items():
                # written straight to the store: the resolver would refuse versions other than 1
                self.client.put(path_of(key), value.to_json().encode(), None)
        else:
            for key in list(snapshot_topic.snapshot()):
                self.topic.publish(key, None, producer=self.client.name)
            for key, value in snapshot_store.items():
                self.topic.publish(key, value, producer=self.client.name)
        snapshot_topic.close()
        snapshot_store.close()
        self._saved_threshold = self.topic.compaction_threshold
        self.topic.compaction_threshold = 0
        self.client.deliver_all()  # our own copy's notifications are not news
        self.topic_view.start(tail=self._from_topic, record=self._on_topic_record)
        self.store_view.start(tail=self._from_store)
        self.active = True

    def attach(self) -> None:
        """Listen as :meth:`start` does, without copying or loading (a restored syncer's views
        already hold their items)."""
        self.topic_view.attach(tail=self._from_topic, record=self._on_topic_record)
        self.store_view.attach(tail=self._from_store)

    def close(self) -> None:
        """Restore the compaction threshold and close both views."""
        self.topic.compaction_threshold = self._saved_threshold
        self.topic_view.close()
        self.store_view.close()
        self.client.close()
        self.active = False

    # -- mirroring -----------------------------------------------------------------------------
    # Each side's own echo of a write the syncer made is not news: forwarding it back would make
    # the two views chase each other (a livelock once deletions are forwarded as deletes).
    def _from_topic(self, key: str, value: ServiceUnitStateData | None) -> None:
        if self._topic_echoes[(key, value)]:
            self._topic_echoes[(key, value)] -= 1
            return
        self.stats.forwarded += 1
        if value is None and self.forward_tombstones_as_put_null:
            try:
                self.store_view.put(key, value)  # type: ignore[arg-type]
            except ValueError:
                self.stats.dropped += 1  # #25946: the NullPointerException is swallowed
            return
        self._store_echoes[(key, value)] += 1
        result = self.store_view.delete(key) if value is None else self.store_view.put(key, value)
        if self._store_echoes[(key, value)]:  # the store view did not take it: nothing echoed
            self._store_echoes[(key, value)] -= 1
        if result.applied is False and self.store_view.get(key) != value:
            self.stats.refused += 1
            if not self.drop_refused_forwards:
                self.unsynced.add(key)

    def _from_store(self, key: str, value: ServiceUnitStateData | None) -> None:
        if self._store_echoes[(key, value)]:
            self._store_echoes[(key, value)] -= 1
            return
        self.stats.forwarded += 1
        self._publish(key, value)

    def _publish(self, key: str, value: ServiceUnitStateData | None) -> None:
        self._topic_echoes[(key, value)] += 1
        self.topic.publish(key, value, producer=self.client.name)

    def _on_topic_record(self, message: Message, verdict: Verdict) -> None:
        """A message of ours the topic view refused will never echo: forget its echo."""
        if message.producer == self.client.name and verdict.rejected:
            try:
                value = message.value()
            except MalformedValueError:
                return
            if self._topic_echoes[(message.key, value)]:
                self._topic_echoes[(message.key, value)] -= 1

    def step_topic(self) -> bool:
        """Let the syncer's topic view read one message; false when it is at the end."""
        return self.topic_view.advance() == 1

    def step_store(self) -> bool:
        """Deliver one queued store notification to the syncer; false when none is queued."""
        return self.client.deliver_next() is not None

    def drain(self, limit: int = 1_000_000) -> int:
        """Step both sides until neither has anything left; returns the number of steps."""
        steps = 0
        while steps < limit and (self.step_topic() or self.step_store()):
            steps += 1
        if steps >= limit:
            raise RuntimeError(f"syncer did not drain within {limit} steps (a forwarding loop?)")
        return steps

    # -- repair ------------------------------------------------------------------------------
    def differences(self) -> dict[str, tuple[ServiceUnitStateData | None, ServiceUnitStateData | None]]:
        """Keys whose values differ: key -> (topic view's value, store view's value)."""
        topic, store = self.topic_view.snapshot(), self.store_view.snapshot()
        return {
            key: (topic.get(key), store.get(key))
            for key in sorted(set(topic) | set(store))
            if topic.get(key) != store.get(key)
        }

    def reconcile(self) -> ReconcileReport:
        """Make the destination equal to the source; destination-only keys written after the
        syncer started are copied back to the source instead of being deleted."""
        report = ReconcileReport()
        self.drain()
        started = self.started_at or 0
        source_is_topic = self.mode is SyncerMode.SystemTopicToMetadataStore
        for key, (on_topic, on_store) in self.differences().items():
            source, destination = (on_topic, on_store) if source_is_topic else (on_store, on_topic)
            if source is None and destination is not None and destination.timestamp >= started:
                self._write(key, destination, to_topic=source_is_topic)
                report.copied_back.append(key)
            elif source is None:
                self._write(key, None, to_topic=not source_is_topic)
                report.deleted.append(key)
            else:
                self._write(key, source, to_topic=not source_is_topic)
                report.copied.append(key)
        self.drain()
        self.unsynced.clear()
        return report

    def _write(self, key: str, value: ServiceUnitStateData | None, to_topic: bool) -> None:
        """Force ``value`` onto one side, past the resolver (as the initial copy does)."""
        if to_topic:
            # a tombstone first, so every reader takes the value whatever it held
            self._publish(key, None)
            if value is not None:
                self._publish(key, value)
            return
        if value is None:
            if self.client.get(path_of(key)) is not None:
                self.client.delete(path_of(key))
        else:
            self.client.put(path_of(key), value.to_json().encode(), None)
        self._store_echoes[(key, value)] += 1
        self.store_view._refresh(key)
        if self._store_echoes[(key, value)]:
            self._store_echoes[(key, value)] -= 1

    def _sides(self) -> tuple[Mapping[str, ServiceUnitStateData], Mapping[str, ServiceUnitStateData]]:
        """The source's and the destination's views (their maps, not copies)."""
        if self.mode is SyncerMode.SystemTopicToMetadataStore:
            return self.topic_view.data(), self.store_view.data()
        return self.store_view.data(), self.topic_view.data()

    def _reconcile_plan(self) -> tuple[list[tuple[str, ServiceUnitStateData]], list[str]]:
        """What master's periodic reconcile does now: the source's items the destination lacks,
        and the destination-only keys whose value is older than the syncer's start."""
        source, destination = self._sides()
        started = self.started_at or 0
        missing = [(key, value) for key, value in source.items() if key not in destination]
        stale = [key for key, value in destination.items() if key not in source and value.timestamp < started]
        return sorted(missing), sorted(stale)

    def reconcile_due(self) -> bool:
        """Whether :meth:`reconcile_periodic` would change anything now (asked at every step of a
        simulated migration: it stops at the first item it would repair)."""
        source, destination = self._sides()
        started = self.started_at or 0
        return any(key not in destination for key in source) or any(
            key not in source and value.timestamp < started for key, value in destination.items()
        )

    def reconcile_periodic(self) -> ReconcileReport:
        """Master's periodic reconcile (#25946): copy the items the destination is missing
        (straight to the store when the destination is the metadata store, past the resolver, as
        the initial copy does) and delete the destination-only items older than the syncer's
        start. A destination value that differs from the source's is not its business."""
        report = ReconcileReport()
        to_topic = self.mode is SyncerMode.MetadataStoreToSystemTopic
        missing, stale = self._reconcile_plan()
        for key, value in missing:
            if to_topic:
                self._publish(key, value)  # missing on the topic: no tombstone first, as upstream
            else:
                self._write(key, value, to_topic)
            report.copied.append(key)
        for key in stale:
            self._write(key, None, to_topic)
            report.deleted.append(key)
        self.unsynced.difference_update(report.copied + report.deleted)
        return report

    def in_sync(self) -> bool:
        return not self.differences()


def store_keys(store: Store) -> list[str]:
    """Every channel key in a store (for tests and captures)."""
    prefix = PATH_PREFIX + "/"
    return [path[len(prefix) :] for path in store.paths() if path.startswith(prefix)]
