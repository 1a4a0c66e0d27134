"""The channel protocol on every broker, the leader's duties, and a deterministic cluster
simulator that runs them over either table view.

``Cluster`` is the one executable model the Hypothesis bench, the model checker and the trace
generator drive: ``enabled_actions()`` lists what may happen next, ``step(action)`` makes it
happen. Time, delivery order and randomness all come from the caller (the config's seed feeds
the only random generator), so a run replays exactly from its seed and its list of actions.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import heapq
import json
import random
from collections import Counter, deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from statechan.clock import Clock, ManualClock
from statechan.cluster.actions import (
    Action,
    Compact,
    Crash,
    Deliver,
    Lookup,
    LoseSession,
    Notify,
    Reconnect,
    Resign,
    Restart,
    RunTask,
    Shutdown,
    Split,
    SyncReconcile,
    SyncStore,
    SyncTopic,
    Tick,
    Transfer,
    Unload,
    Wait,
)
from statechan.cluster.config import (
    BUNDLE_SPLIT_RETRY_LIMIT,
    MAX_CLEAN_UP_DELAY_TIME_IN_SECS,
    OWNERSHIP_CLEAN_UP_MAX_WAIT_TIME_IN_MILLIS,
    OWNERSHIP_CLEAN_UP_WAIT_RETRY_DELAY_IN_MILLIS,
    SimConfig,
    StoreKind,
)
from statechan.cluster.placement import BrokerLoad, make_placement
from statechan.keys import Bundle, namespace_bundles, parse_key
from statechan.model import ProtocolModel, StorageRules, load_model
from statechan.observation import LookupAnswer, Observation
from statechan.resolver import Verdict
from statechan.states import ServiceUnitState, StorageType
from statechan.stores.metadata import (
    MetadataClient,
    MetadataStore,
    NodeEvent,
    Notification,
    SessionEvent,
    SessionExpiredError,
    Stat,
    Store,
    StoreError,
)
from statechan.stores.syncer import SyncerMode, TableViewSyncer
from statechan.stores.tableview import (
    PATH_PREFIX,
    Listener,
    MetadataStoreTableView,
    PendingPut,
    RecordListener,
    SystemTopicTableView,
    TableView,
    key_of,
    path_of,
)
from statechan.stores.topic import Message, Reader, Topic
from statechan.values import VERSION_ID_INIT, ServiceUnitStateData, is_blank, next_version

if TYPE_CHECKING:
    from _typeshed import SupportsLenAndGetItem

S = ServiceUnitState
T = TypeVar("T")
REGISTRY = "/loadbalance/brokers"
LEADER = "/loadbalance/leader"
SPLIT_METADATA = "/admin/local-policies"


@functools.cache
def registry_path(broker_id: str) -> str:
    """A broker's registry node (made once per id: the observation reads every broker's each step)."""
    return f"{REGISTRY}/{broker_id}"


class ChannelState(enum.Enum):
    """Pulsar's channel states (``Closed`` .. ``Disabled``)."""

    Closed = 0
    Constructed = 1
    Started = 3
    Disabled = 4


LOOKUP_CHANNELS = frozenset({ChannelState.Started, ChannelState.Disabled})
"""Channels that answer lookups: a started one, and on master a disabled one (#24770); a closed or
constructed channel refuses them first."""


class MetadataState(enum.Enum):
    """The leader's reading of its own metadata session, for clean-up delays."""

    Stable = "Stable"
    Jittery = "Jittery"
    Unstable = "Unstable"


def _children(key: str, data: ServiceUnitStateData) -> list[Bundle]:
    """A split's children: the two ranges its record names, else the parent's halves."""
    parent = parse_key(key)
    if len(data.split_children) == 2:
        return [parent.child(r) for r in data.split_children]
    return list(parent.split())


@dataclass(frozen=True)
class Task:
    """A follow-up a handler queued; the broker runs it as its own step (a crash point)."""

    kind: str
    key: str
    data: ServiceUnitStateData | None
    target: str | None = None
    pending: PendingPut | None = field(default=None, compare=False)
    """For ``commit``: a metadata-store write that has read the node and waits to compare-and-set."""
    waits: tuple[PendingPut, ...] = field(default=(), compare=False)
    """For ``split-bundles``: the children's metadata-store writes the split goes on after."""

    def describe(self) -> str:
        return f"{self.kind} {self.key}" + (f" -> {self.target}" if self.target else "")


ZK_EXPIRY = "zk:"
"""How a :class:`Tick` names ZooKeeper expiring a broker's session (``zk:`` and the broker's id)."""


@dataclass(order=True)
class _Timer:
    due: int
    seq: int
    kind: str = field(compare=False)
    broker: str = field(compare=False)
    incarnation: int = field(compare=False)
    key: str = field(compare=False, default="")
    cancelled: bool = field(compare=False, default=False)

    @property
    def source(self) -> str:
        return timer_source(self.kind, self.broker)


def timer_source(kind: str, broker: str) -> str:
    """Who runs a timer of ``kind`` for ``broker``: the broker (one executor, its timers in the
    order scheduled), or ZooKeeper for a crashed broker's session expiry (``zk:`` and the
    broker's id). Sources keep no common order among timers due together."""
    return ZK_EXPIRY + broker if kind == "session-expiry" else broker


class Broker:
    """One broker: its channel (handlers, lookups, tasks) and, when it leads, the leader's duties."""

    def __init__(self, cluster: Cluster, broker_id: str, incarnation: int) -> None:
        self.cluster = cluster
        self.id = broker_id
        self.incarnation = incarnation
        self.alive = True
        self.channel = ChannelState.Constructed
        self.client: MetadataClient = cluster.store.connect(f"{broker_id}#{incarnation}")
        self.view: TableView
        self.reader: Reader | None = None
        self.monitor_scheduled = False
        self.tasks: deque[Task] = deque()
        self.pending_lookups: dict[str, int] = {}
        self.leader_view: str | None = None
        self.last_session_event = (SessionEvent.SessionReestablished, 0)
        self.cleanup_jobs: dict[str, _Timer] = {}
        self.unloads: dict[str, tuple[str | None, str | None]] = {}
        """Admin unloads issued here and not seen complete (Pulsar's UnloadManager): key -> (source, destination)."""
        self.registry_cache: set[str] = set()
        """Brokers whose registry entry this broker has loaded (kept only with #22899 put back)."""
        self.closed_units: Counter[str] = Counter()
        self.shutting_down = False
        self.handled: Counter[str] = Counter()
        self.client.add_listener(self._on_notification)
        self.client.add_session_listener(self._on_session_event)

    def __repr__(self) -> str:
        life = "alive" if self.alive else "dead"
        return f"Broker({self.id!r} #{self.incarnation}, {life}, {self.channel.name})"

    # -- start -------------------------------------------------------------------------------------
    def start(self) -> None:
        cluster = self.cluster
        self.register()
        self._read_leader()
        if cluster.config.store is StoreKind.metadata_store:
            self.view = MetadataStoreTableView(
                self.client,
                self.id,
                cluster.model,
                retry_bad_version_without_recheck=cluster.config.variant.store_retry_without_recheck,
            )
        else:
            topic_view = SystemTopicTableView(cluster.topic, self.id, cluster.model)
            self.view = topic_view
            self.reader = topic_view.reader
        self.view.start(*self.view_listeners())
        self.channel = ChannelState.Started
        if self.leader_view is None:
            self.try_lead()

    def view_listeners(self) -> tuple[Listener, Listener, Listener, RecordListener | None]:
        """What the view calls: on a change at its tail, for each item it loads, for each item it
        drops, and (traced topic views) for every record it reads."""
        if not self.cluster.config.trace_views:
            return self.handle_event, self.handle_existing, self.handle_invalidate, None
        if isinstance(self.view, MetadataStoreTableView):
            # a store view changes by watch events, by dropping everything when its session is lost,
            # and by loading every node when it starts or its session comes back: each is traced
            return self._traced_event, self._traced_existing, self._traced_invalidate, None
        return self.handle_event, self.handle_existing, self.handle_invalidate, self._observe_record

    def register(self) -> None:
        data = json.dumps({"broker": self.id, "incarnation": self.incarnation}).encode()
        path = registry_path(self.id)
        try:
            if self.client.get(path) is None:
                self.client.create(path, data, ephemeral=True)
            else:  # #23298: register without a version check over the old session's node
                self.client.set(path, data)
        except StoreError:
            self.cluster.counters["register-failed"] += 1

    # -- views and registry ------------------------------------------------------------------------
    def value(self, key: str) -> ServiceUnitStateData | None:
        return self.view.get(key)

    def is_registered(self, broker_id: str) -> bool | None:
        """Whether ``broker_id`` is in the registry, as this broker can tell (None: it cannot)."""
        try:
            return self.client.get(registry_path(broker_id)) is not None
        except SessionExpiredError:
            return None

    def registered_brokers(self) -> list[str]:
        try:
            brokers = sorted(self.client.children(REGISTRY))
        except SessionExpiredError:
            return []
        if self.cluster.config.variant.registry_read_without_wait:
            self.registry_cache.update(brokers)  # placement loads every broker's entry
        return brokers

    @property
    def is_leader(self) -> bool:
        return self.alive and self.leader_view == self.id

    def serving(self) -> set[str]:
        """Bundles this broker believes it owns (its own view's owned set), if it is running."""
        if not self.alive or self.channel not in (ChannelState.Started, ChannelState.Disabled):
            return set()
        return self.view.owned_service_units()

    # -- publishing --------------------------------------------------------------------------------
    def _data(
        self,
        state: S,
        dst: str | None,
        src: str | None,
        version: int,
        force: bool = False,
        split: dict[str, str | None] | None = None,
    ) -> ServiceUnitStateData:
        return ServiceUnitStateData(
            state=state,
            dst_broker=dst,
            source_broker=src,
            version_id=version,
            force=force,
            timestamp=self.cluster.clock.now_ms(),
            split_service_unit_to_dest_broker=split,
        )

    def publish(self, key: str, value: ServiceUnitStateData | None) -> PendingPut | None:
        """Write to the channel. On the metadata store a put is Pulsar's read-modify-CAS: the read
        and the resolver run now, the compare-and-set is the broker's next task, so another
        broker's write can come between them (the race of #24186). Returns that put (its
        ``result`` is set when it commits; a put the resolver refuses is committed at once), or
        None: on the system topic, for a tombstone, or when the broker has no session."""
        if value is None:
            self.view.delete(key)
        elif isinstance(self.view, MetadataStoreTableView):
            try:
                pending = self.view.prepare_put(key, value)
            except SessionExpiredError:
                return None
            if pending.verdict.rejected:
                pending.commit()  # counted as refused; nothing to write
                return pending
            first_other = 0
            while first_other < len(self.tasks) and self.tasks[first_other].kind == "commit":
                first_other += 1
            self.tasks.insert(first_other, Task("commit", key, value, pending=pending))
            return pending
        else:
            self.view.put(key, value)
        return None

    # -- the tail listener: Pulsar's handleEvent ---------------------------------------------------
    def handle_event(self, key: str, data: ServiceUnitStateData | None) -> None:
        if not self.alive:
            return
        if self.channel is ChannelState.Disabled and (data is None or not data.force):
            self._finish_lookup(key, None, error="ServiceUnitNotReadyException: channel disabled")
            return
        state = S.Init if data is None else data.state
        self.handled[state.value] += 1
        if data is None or state is S.Init:
            self._finish_lookup(key, None)
        elif state is S.Assigning:
            if data.dst_broker == self.id:
                self.tasks.append(Task("own", key, data))
        elif state is S.Owned:
            self._finish_lookup(key, data.dst_broker)
            if data.dst_broker != self.id and data.source_broker == self.id:
                transfer = not is_blank(data.dst_broker) and not is_blank(data.source_broker)
                if data.force or (transfer and self.cluster.config.channel.multi_phase_unload):
                    self.closed_units[key] += 1
        elif state is S.Releasing:
            if data.source_broker == self.id:
                self.closed_units[key] += 1
                self.tasks.append(Task("release", key, data))
        elif state is S.Splitting:
            if self.cluster.config.variant.split_event_answers_lookups:
                self._finish_lookup(key, data.source_broker)  # fix 10: as getOwnerAsync answers a Splitting
            if data.source_broker == self.id:
                self.tasks.append(Task("split", key, data))
        elif state is S.Free:
            self._finish_lookup(key, None)
            if data.source_broker == self.id and data.force:
                self.closed_units[key] += 1
                if not self.cluster.config.variant.semi_terminal_waits_for_monitor:
                    self.tasks.append(Task("tombstone", key, data))  # #22743: at once
        elif state is S.Deleted:
            self._finish_lookup(key, None, error=f"IllegalArgumentException: {key} is deleted.")
            variant = self.cluster.config.variant
            # #22743: at once; fix 03/08: the split parent's Deleted stays for the monitor's tombstone delay
            if data.source_broker == self.id and not (
                variant.semi_terminal_waits_for_monitor or variant.keep_split_parent_deleted
            ):
                self.tasks.append(Task("tombstone", key, data))
        if self.unloads:
            self._unload_event(key, data)

    def _unload_event(self, key: str, data: ServiceUnitStateData | None) -> None:
        """Pulsar's UnloadManager on this broker: an unload it issued is done on its bundle's Free,
        on an Owned with a source (a transfer's end, an override), or on the tombstone. Since
        #22379 an assignment's Owned or Assigning (no source) is not an unload's end; since #22859
        a forced Free waits for its tombstone, and the tombstone ends the unload."""
        if key not in self.unloads:
            return
        variant = self.cluster.config.variant
        if data is None or data.state is S.Init:
            done = not variant.forced_unload_never_done
        elif data.state is S.Free:
            done = not data.force or variant.unload_done_on_any_owned
        elif data.state is S.Owned:
            done = not is_blank(data.source_broker) or variant.unload_done_on_any_owned
        else:
            done = False
        if done:
            del self.unloads[key]

    def handle_existing(self, key: str, data: ServiceUnitStateData | None) -> None:
        """Items already in the view at start: Owned by us is loaded; since #25379 an Assigning
        to us is taken over as the event would have been. With fix 02 so is every record whose
        source we are and whose event the source acts on (a previous incarnation's, never
        delivered to this one): a Releasing or a Splitting is run, a Deleted or a forced Free
        tombstoned."""
        if data is None:
            return
        variant = self.cluster.config.variant
        if data.state is S.Assigning and data.dst_broker == self.id and not variant.ignore_existing_assigning:
            self.tasks.append(Task("own", key, data))
        elif variant.act_on_existing_in_flight and data.source_broker == self.id:
            if data.state is S.Releasing:
                self.closed_units[key] += 1
                self.tasks.append(Task("release", key, data))
            elif data.state is S.Splitting:
                self.tasks.append(Task("split", key, data))
            elif variant.semi_terminal_waits_for_monitor:
                return  # #22743 put back: the monitor tombstones it
            elif data.state is S.Free and data.force:
                self.closed_units[key] += 1
                self.tasks.append(Task("tombstone", key, data))
            elif data.state is S.Deleted and not variant.keep_split_parent_deleted:
                self.tasks.append(Task("tombstone", key, data))

    def handle_invalidate(self, key: str, data: ServiceUnitStateData | None) -> None:
        """Metadata session lost: close what this broker serves (clients disconnected)."""
        if data is not None and data.dst_broker == self.id:
            self.closed_units[key] += 1

    # -- tasks -------------------------------------------------------------------------------------
    def run_task(self) -> Task | None:
        if not self.tasks:
            return None
        task = self.tasks.popleft()
        data = task.data
        if (
            self.channel is not ChannelState.Started
            and task.kind in ("own", "release", "split", "split-bundles", "assign")
            and not self.cluster.config.variant.assign_after_disable
        ):
            self.cluster.counters["late-write-refused"] += 1  # #26520: no writes after disable
            self._finish_lookup(task.key, None, error="ServiceUnitNotReadyException: channel disabled")
            return task
        if task.kind == "commit" and task.pending is not None:
            result = None
            with contextlib.suppress(StoreError):
                result = task.pending.commit()
            failed = result is not None and result.error is not None and not result.error.startswith("conflict")
            if failed and data is not None and data.state is S.Assigning and is_blank(data.source_broker):
                # an assignment's put failed (no session): the lookup waiting on it fails with it
                self._finish_lookup(task.key, None, error=f"MetadataStoreException: {result.error}")  # type: ignore[union-attr]
        elif task.kind == "own" and data is not None:
            self.publish(task.key, self._data(S.Owned, data.dst_broker, data.source_broker, next_version(data)))
        elif task.kind == "release" and data is not None:
            if is_blank(data.dst_broker):
                self.publish(task.key, self._data(S.Free, None, data.source_broker, next_version(data)))
            else:
                self.publish(task.key, self._data(S.Assigning, data.dst_broker, data.source_broker, next_version(data)))
        elif task.kind == "split" and data is not None:
            current = self.value(task.key)
            if current is not None and current.state is S.Splitting and current.source_broker != self.id:
                # #19988: the parent's Splitting moved on (the leader handed it over); not ours now
                self.cluster.counters["split-moved"] += 1
            elif self.cluster.config.variant.split_needs_registration and not self._registered_now():
                # fix 04: out of the registry the leader may be handing this split over; set it aside
                # (taken up again when this broker registers: _resume_splits)
                self.cluster.counters["split-set-aside"] += 1
            else:
                self._split(task.key, data)
        elif task.kind == "split-bundles" and data is not None:
            self._split_bundles(task.key, data, task.waits)
        elif task.kind == "tombstone":
            if self.cluster.config.variant.conditional_tombstones and not self._tombstone_lands(task.key, data):
                self.cluster.counters["tombstone-dropped"] += 1  # fix 09: a newer record took the key
            else:
                self.publish(task.key, None)
        elif task.kind == "assign" and task.target is not None:
            self._publish_assign(task.key, task.target)
        return task

    def _split(self, key: str, data: ServiceUnitStateData) -> None:
        """Pulsar's ``ownChildBundles``: each child not yet in the view is written ``Owned`` by this
        broker; the namespace's bundles change only once those writes are done. On the metadata
        store each is a compare-and-set still to come, so the rest waits for them as a task."""
        on_store = isinstance(self.view, MetadataStoreTableView)
        waits: list[PendingPut] = []
        for child in _children(key, data):
            if self.value(child.key) is None:
                put = self.publish(child.key, self._data(S.Owned, self.id, None, VERSION_ID_INIT))
                if on_store:
                    if put is None:  # no session: the put fails at once, and the split with it
                        self._split_failed(key)
                        return
                    waits.append(put)
        if waits:
            self.tasks.append(Task("split-bundles", key, data, waits=tuple(waits)))
        else:
            self._split_bundles(key, data)

    def _split_bundles(self, key: str, data: ServiceUnitStateData, waits: Sequence[PendingPut] = ()) -> None:
        """The children are written: update the namespace's bundles, then delete the parent. A
        child's write refused or lost fails the split (Pulsar's put turns a lost compare-and-set
        into a ``ConflictException``, which the split does not retry)."""
        if any(put.result is None or not put.result.applied for put in waits):
            self._split_failed(key)
            return
        cluster = self.cluster
        attempts = 0
        while attempts < BUNDLE_SPLIT_RETRY_LIMIT and cluster.split_failures > 0:
            cluster.split_failures -= 1  # BadVersionException on the bundle metadata; retried
            attempts += 1
        if attempts == BUNDLE_SPLIT_RETRY_LIMIT:
            self._split_failed(key)
            return
        cluster.replace_bundle(parse_key(key), _children(key, data))
        self.publish(key, self._data(S.Deleted, None, self.id, next_version(data)))

    def _split_failed(self, key: str) -> None:
        """ServiceUnitNotReadyException: the parent stays Splitting until the leader overrides it."""
        self.cluster.counters["split-failed"] += 1
        self.cluster.failed_splits.add(key)

    def _registered_now(self) -> bool:
        """This broker has a session and its registry node (fix 04's condition for splitting)."""
        return self.client.connected and self.is_registered(self.id) is True

    def _resume_splits(self) -> None:
        """Fix 04, on registering again (the view read to its end first): each Splitting whose
        source is this broker, and that no queued task will split, is split now. A split set aside
        while out of the registry is one; one the leader handed over meanwhile is no longer ours."""
        if not self._registered_now():
            return
        queued = {task.key for task in self.tasks if task.kind == "split"}
        for key, data in self.view.items():
            if data.state is S.Splitting and data.source_broker == self.id and key not in queued:
                self.tasks.append(Task("split", key, data))

    def _tombstone_lands(self, key: str, data: ServiceUnitStateData | None) -> bool:
        """Fix 09: whether a tombstone answering ``data`` would take effect. On the metadata store it is
        a delete at the version of the node read: only while the node still holds ``data``. On the
        system topic, the resolver accepting a tombstone only over a record that is not active: every
        reader reads the tombstone after what the log holds now, so when the key's value in the log is
        active, every reader (and the compactor) would refuse it, and it is not published."""
        if isinstance(self.view, MetadataStoreTableView):
            try:
                node = self.client.get(path_of(key))
            except SessionExpiredError:
                return False
            return node is not None and node_value(node[0]) == data
        held = self.cluster._settled_channel().values.get(key)
        return held is None or held.state not in self.cluster.model.active

    # -- lookups -----------------------------------------------------------------------------------
    def lookup(self, key: str) -> LookupAnswer | None:
        """Pulsar's getOwnerAsync; an unowned bundle is assigned (returns None while deferred)."""
        data = self.value(key)
        state = S.Init if data is None else data.state
        if self.channel is ChannelState.Disabled:
            return self._disabled_lookup(key, data)
        if state in (S.Owned, S.Splitting):
            owner = data.dst_broker if state is S.Owned else data.source_broker  # type: ignore[union-attr]
            if self.cluster.config.variant.lookup_skips_owner_check:
                return self._answer(key, owner, None)  # #21811 put back: no active-owner check
            if self.cluster.config.variant.registry_read_without_wait and (owner or "") not in self.registry_cache:
                # #22899 put back: the cache's first read of the owner is still loading, so the owner
                # looks inactive and the lookup defers (the load lands before the next read)
                self.registry_cache.add(owner or "")
                self._defer(key)
                return None
            registered = self.is_registered(owner or "")
            if registered or (registered is None and self._answers_unchecked()):
                return self._answer(key, owner, None)
            if registered is None:
                return self._answer(key, None, "MetadataStoreException: this broker is not registered")
            self._defer(key)
            return None
        if state in (S.Assigning, S.Releasing):
            assert data is not None
            if data.dst_broker == self.id:
                self._defer(key)
                return None
            return self._answer(key, data.dst_broker, None, redirect=True)
        if state is S.Deleted:
            return self._answer(key, None, f"IllegalArgumentException: {key} is deleted.")
        # Init or Free: the load manager picks a broker and assigns
        if key not in self.cluster.live_bundle_keys():
            return self._answer(key, None, "bundle not in the namespace's bundles")
        candidates = self.registered_brokers()
        selected = self.cluster.place(candidates)
        if selected is None:
            return self._answer(key, None, "no broker available")
        self.tasks.append(Task("assign", key, None, selected))
        if not self.cluster.config.variant.assign_defers_late:
            self._defer(key)  # #20677: deferred as the view is read, so the next event answers it
        return None

    def _disabled_lookup(self, key: str, data: ServiceUnitStateData | None) -> LookupAnswer | None:
        """Master's lookup on a disabled channel (#24770; a broker shutting down gracefully): the
        stored owner of an Owned or Splitting bundle with no liveness check; an in-flight bundle's
        destination, or a deferral when that is this broker; nothing for any other state (no
        assignment: a disabled channel publishes nothing)."""
        state = S.Init if data is None else data.state
        if data is not None and state in (S.Owned, S.Splitting):
            owner = data.dst_broker if state is S.Owned else data.source_broker
            return self._answer(key, owner, None, unchecked=True)
        if data is not None and state in (S.Assigning, S.Releasing):
            if data.dst_broker == self.id:
                self._defer(key)
                return None
            return self._answer(key, data.dst_broker, None, redirect=True)
        return self._answer(key, None, None)

    def _publish_assign(self, key: str, selected: str) -> None:
        if (
            key not in self.cluster.live_bundle_keys()
            and not self.cluster.config.variant.assign_without_namespace_check
        ):
            # the bundle was split after the lookup chose a broker (see docs/findings.md, 3; master
            # has no such check: assign_without_namespace_check)
            self._finish_lookup(key, None, error=f"{key} no longer exists: it was split")
            return
        if not self.cluster.config.variant.assign_after_disable and not self.is_registered(selected):
            candidates = self.registered_brokers()
            replacement = self.cluster.place(candidates)
            if replacement is None:
                self._finish_lookup(key, None, error="no broker available")
                return
            selected = replacement
        held = self.value(key)
        if self.cluster.config.variant.assign_defers_late:
            # #20677 put back: the lookup defers now, whatever the view holds, and the Assigning is
            # published even over a newer state (the resolver refuses it; nothing answers the lookup)
            self._defer(key)
        elif held is not None and held.state not in (S.Free,):
            return  # someone else got there first: the pending lookup completes on their Owned
        put = self.publish(key, self._data(S.Assigning, selected, None, next_version(held)))
        if put is None and isinstance(self.view, MetadataStoreTableView):
            # the put failed (no session): so does the lookup's future (publishAssignEventAsync)
            self._finish_lookup(key, None, error="MetadataStoreException: the assignment could not be written")

    def _defer(self, key: str) -> None:
        if key not in self.pending_lookups:
            deadline = self.cluster.clock.now_ms() + self.cluster.config.channel.in_flight_wait_ms
            self.pending_lookups[key] = deadline
            self.cluster.schedule("lookup-timeout", self, deadline - self.cluster.clock.now_ms(), key)

    def _answer(
        self,
        key: str,
        owner: str | None,
        error: str | None,
        deferred: bool = False,
        redirect: bool = False,
        unchecked: bool = False,
    ) -> LookupAnswer:
        answer = LookupAnswer(
            self.cluster.clock.now_ms(),
            self.id,
            key,
            owner,
            error,
            owner is not None and self.cluster.registered(owner),
            deferred,
            redirect,
            unchecked,
        )
        self.cluster.answers.append(answer)
        return answer

    def _finish_lookup(self, key: str, owner: str | None, error: str | None = None) -> None:
        if self.pending_lookups.pop(key, None) is None:
            return
        if error is None and owner is not None and not self.cluster.config.variant.lookup_skips_owner_check:
            registered = self.is_registered(owner)
            if registered is False:
                error = f"IllegalStateException: The new owner {owner} is inactive."
                owner = None
            elif registered is None and not self._answers_unchecked():
                error = "MetadataStoreException: this broker is not registered"
                owner = None
        self._answer(key, owner, error, deferred=True)

    def _answers_unchecked(self) -> bool:
        """Whether, with no metadata session, this broker still answers from its view (#24478)."""
        return not self.view.is_metadata_store_based and self.cluster.config.variant.stale_after_session_loss

    def lookup_timed_out(self, key: str) -> None:
        if key not in self.pending_lookups:
            return
        data = self.value(key)
        state = S.Init if data is None else data.state
        if state is S.Owned:
            self._finish_lookup(key, data.dst_broker)  # type: ignore[union-attr]
        elif state is S.Splitting:
            self._finish_lookup(key, data.source_broker)  # type: ignore[union-attr]
        elif state in (S.Init, S.Free):
            self._finish_lookup(key, None)
        else:
            self._finish_lookup(key, None, error=f"IllegalStateException: lookup timed out in {state.value}")

    # -- metadata events ---------------------------------------------------------------------------
    def _on_notification(self, notification: Notification) -> None:
        if not self.alive:
            return
        path = notification.path
        if path == LEADER:
            self._read_leader()
            if self.leader_view is None:
                self.try_lead()
        elif path.startswith(REGISTRY + "/"):
            broker_id = path[len(REGISTRY) + 1 :]
            if (
                broker_id == self.id
                and notification.event is NodeEvent.Deleted
                and not self.shutting_down
                and not self.cluster.config.variant.no_reregister_on_deletion
            ):
                fix = self.cluster.config.variant.split_needs_registration
                if fix:
                    self.view.flush()  # fix 04: learn what was overridden while out of the registry
                self.register()  # #23359: re-register when our own node goes
                if fix:
                    self._resume_splits()
            if self.is_leader and broker_id != self.id:
                if notification.event is NodeEvent.Deleted:
                    self.handle_broker_deletion(broker_id)
                elif notification.event is NodeEvent.Created:
                    job = self.cleanup_jobs.pop(broker_id, None)
                    if job is not None and self.cluster.healthy(broker_id):
                        job.cancelled = True

    def _on_session_event(self, event: SessionEvent) -> None:
        if not self.alive:
            return
        if not (event is SessionEvent.SessionReestablished and self.cluster.config.variant.session_state_stale):
            self.last_session_event = (event, self.cluster.clock.now_ms())  # #25132: seen by the monitor
        if event is SessionEvent.SessionLost:
            self.leader_view = None  # the election's node went with the session
        elif event is SessionEvent.SessionReestablished:
            if self.shutting_down:
                return  # the registry was closed by the shutdown: it does not register again
            variant = self.cluster.config.variant
            if not variant.stale_after_session_loss:
                self.view.flush()  # #24478: catch up before serving again
            if not variant.no_register_on_reconnect:
                self.register()  # #24932
                if variant.split_needs_registration:
                    self._resume_splits()  # fix 04: the view was flushed above
            if not variant.no_election_on_reconnect:  # #23516: the election starts again
                self._read_leader()
                if self.leader_view is None:
                    self.try_lead()

    def _read_leader(self) -> None:
        try:
            node = self.client.get(LEADER)
        except SessionExpiredError:
            return
        previous = self.leader_view
        self.leader_view = None if node is None else node[0].decode()
        if self.leader_view == self.id and previous != self.id and not self.monitor_scheduled:
            self.monitor_scheduled = True
            self.cluster.schedule("monitor", self, 0)

    def try_lead(self) -> None:
        if not self.alive or self.shutting_down:
            return
        # #21894: the election's value once was the service URL, which matches no broker id
        value = f"http://{self.id}" if self.cluster.config.variant.leader_id_mismatch else self.id
        try:
            self.client.create(LEADER, value.encode(), ephemeral=True)
        except StoreError:
            return
        self.cluster.record({"kind": "leader", "time": self.cluster.clock.now_ms(), "broker": self.id})
        self._read_leader()

    # -- leader duties -----------------------------------------------------------------------------
    def metadata_state(self) -> MetadataState:
        event, when = self.last_session_event
        if event is SessionEvent.SessionLost:
            return MetadataState.Unstable
        if self.cluster.clock.now_ms() - when > MAX_CLEAN_UP_DELAY_TIME_IN_SECS * 1000:
            return MetadataState.Stable
        return MetadataState.Jittery

    def handle_broker_deletion(self, broker_id: str) -> None:
        if self.channel in (ChannelState.Disabled, ChannelState.Closed):
            return
        state = self.metadata_state()
        if state is MetadataState.Unstable:
            self.cluster.counters["cleanup-ignored"] += 1
            return
        if broker_id in self.cleanup_jobs and not self.cleanup_jobs[broker_id].cancelled:
            return
        delay = 0 if state is MetadataState.Stable else MAX_CLEAN_UP_DELAY_TIME_IN_SECS * 1000
        self.cleanup_jobs[broker_id] = self.cluster.schedule("cleanup", self, delay, broker_id)

    def orphans_of(self, broker_id: str) -> list[tuple[str, ServiceUnitStateData]]:
        chosen = []
        active, in_flight = self.cluster.model.active, self.cluster.model.in_flight
        by_source = self.cluster.config.variant.cleanup_by_source  # #23064 put back
        for key, data in self.view.items():
            if (data.dst_broker == broker_id and data.state in active) or (
                data.source_broker == broker_id and data.state in (active if by_source else in_flight)
            ):
                chosen.append((key, data))
        return chosen

    def do_cleanup(self, broker_id: str, gracefully: bool, attempt: int = 0) -> None:
        if self.leader_view is None and not gracefully:
            return  # a leader's duty; the graceful clean-up at shutdown is the broker's own
        if not gracefully and attempt == 0 and self.cluster.healthy(broker_id):
            self.cluster.counters["cleanup-skipped-healthy"] += 1
            return
        self.view.flush()
        orphans = self.orphans_of(broker_id)
        for key, data in orphans:
            self.override_ownership(key, data, broker_id, gracefully)
        self.cluster.counters["cleanup-overrides"] += len(orphans)
        # #26520: an override can lose the race to the record it overrides; look again, from the
        # newest version, every OWNERSHIP_CLEAN_UP_WAIT_RETRY_DELAY_IN_MILLIS (master: a flush, then
        # 2.5 s) for up to OWNERSHIP_CLEAN_UP_MAX_WAIT_TIME_IN_MILLIS (a graceful clean-up polls for
        # the whole wait: its own view may not show a late write yet)
        if (
            (orphans or gracefully)
            and not self.cluster.config.variant.cleanup_without_retry
            and (attempt + 1) * OWNERSHIP_CLEAN_UP_WAIT_RETRY_DELAY_IN_MILLIS
            < OWNERSHIP_CLEAN_UP_MAX_WAIT_TIME_IN_MILLIS
        ):
            mark = "+" if gracefully else ""
            delay = OWNERSHIP_CLEAN_UP_WAIT_RETRY_DELAY_IN_MILLIS
            self.cluster.schedule("cleanup-recheck", self, delay, f"{mark}{attempt + 1}|{broker_id}")

    def override_ownership(
        self, key: str, orphan: ServiceUnitStateData, inactive: str | None, gracefully: bool
    ) -> None:
        exclude = {inactive} if inactive else set()
        candidates = [b for b in self.registered_brokers() if b not in exclude]
        selected = self.cluster.place(candidates)
        version = next_version(orphan)
        variant = self.cluster.config.variant
        if selected is None and variant.cleanup_keeps_unplaceable:
            self.cluster.counters["orphan-left"] += 1  # #21811 put back: nobody can take it, so nothing is written
            return
        if selected is None and variant.free_override_needs_broker:
            self.cluster.counters["override-refused"] += 1  # #23349 put back: a Free naming no broker is refused
            return
        if self._redirects_transfer(orphan, inactive, selected):
            # fix 05: the live source still releases (closes, then Assigning), towards the selected broker
            override = self._data(S.Releasing, selected, orphan.source_broker, version, force=True)
        elif selected is None:
            src = orphan.dst_broker if orphan.state is S.Owned else orphan.source_broker
            override = self._data(S.Free, None, src, version, force=True)
        elif orphan.state is S.Splitting and self._redrives_split(orphan, inactive):
            # fix 07: the first time-out re-drives the split on its registered source
            split = dict(orphan.split_service_unit_to_dest_broker or ())
            override = self._data(S.Splitting, orphan.dst_broker, orphan.source_broker, version, True, split or None)
        elif orphan.state is S.Splitting:
            split = dict(orphan.split_service_unit_to_dest_broker or ())
            override = self._data(S.Splitting, orphan.dst_broker, selected, version, True, split or None)
        elif orphan.state is S.Owned:
            src = None if selected == orphan.dst_broker else orphan.dst_broker
            state = S.Releasing if gracefully and src is not None else S.Owned
            override = self._data(state, selected, src, version, force=True)
        else:
            src = None if selected == orphan.source_broker else orphan.source_broker
            override = self._data(S.Owned, selected, src, version, force=True)
        self.publish(key, override)

    def _redirects_transfer(self, orphan: ServiceUnitStateData, inactive: str | None, selected: str | None) -> bool:
        """Fix 05: the orphan is a transfer to the departing broker from another broker that is
        registered, which has not released yet, and the bundle would go to a third broker (or to
        none: a plain unload)."""
        source = orphan.source_broker
        return (
            self.cluster.config.variant.cleanup_redirects_transfer
            and inactive is not None
            and orphan.state is S.Releasing
            and orphan.dst_broker == inactive
            and not is_blank(source)
            and source != inactive
            and selected != source
            and self.is_registered(source or "") is True
        )

    def _redrives_split(self, orphan: ServiceUnitStateData, inactive: str | None) -> bool:
        """Fix 07: a timed-out Splitting (the monitor's override), not already forced, whose source
        is registered, goes back to that source; a forced one that timed out again is handed over."""
        return (
            self.cluster.config.variant.monitor_redrives_split_on_source
            and inactive is None
            and not orphan.force
            and not is_blank(orphan.source_broker)
            and self.is_registered(orphan.source_broker or "") is True
        )

    def monitor(self) -> None:
        if not self.is_leader or self.metadata_state() is not MetadataState.Stable:
            return
        active = set(self.registered_brokers())
        if not active:
            return
        cfg = self.cluster.config.channel
        now = self.cluster.clock.now_ms()
        inactive: set[str] = set()
        timed_out: list[tuple[str, ServiceUnitStateData]] = []
        tombstones: list[str] = []
        in_flight, active_states = self.cluster.model.in_flight, self.cluster.model.active
        tombstones_active = self.cluster.config.variant.monitor_tombstones_active
        tombstone_after = cfg.tombstone_delay_s * 1000
        for key, data in self.view.items():
            state = data.state
            if state is S.Owned and (is_blank(data.dst_broker) or data.dst_broker not in active):
                inactive.add(data.dst_broker or "")
            elif state in in_flight and not is_blank(data.source_broker) and data.source_broker not in active:
                inactive.add(data.source_broker or "")
            elif state in in_flight and not is_blank(data.dst_broker) and data.dst_broker not in active:
                inactive.add(data.dst_broker or "")
            elif state in in_flight and now - data.timestamp > cfg.in_flight_wait_ms:
                timed_out.append((key, data))
            elif (state not in active_states or tombstones_active) and now - data.timestamp > tombstone_after:
                tombstones.append(key)  # #21721 put back: an Owned record old enough is tombstoned too
        for key in tombstones:
            self.publish(key, None)
        for broker_id in sorted(b for b in inactive if b):
            self.handle_broker_deletion(broker_id)
        for key, data in timed_out:
            self.override_ownership(key, data, None, False)
        self.cluster.counters["monitor-overrides"] += len(timed_out)
        self.cluster.counters["monitor-tombstones"] += len(tombstones)
        self.view.flush()

    # -- tracing -----------------------------------------------------------------------------------
    def _observe_record(self, message: Message, verdict: Verdict) -> None:
        value = message.value() if verdict.accepted or message.payload is None else None
        self.cluster.record(
            {
                "kind": "view",
                "time": self.cluster.clock.now_ms(),
                "observer": self.id,
                "incarnation": self.incarnation,
                "key": message.key,
                "value": None if value is None else value.model_dump(mode="json", by_alias=True),
                "accepted": verdict.accepted,
            }
        )

    def _traced_event(self, key: str, value: ServiceUnitStateData | None) -> None:
        self._observe_tail(key, value)
        self.handle_event(key, value)

    def _traced_existing(self, key: str, value: ServiceUnitStateData | None) -> None:
        self._observe_tail(key, value)
        self.handle_existing(key, value)

    def _traced_invalidate(self, key: str, value: ServiceUnitStateData | None) -> None:
        self._observe_tail(key, None)  # the session is lost: the view drops its cached entry
        self.handle_invalidate(key, value)

    def _observe_tail(self, key: str, value: ServiceUnitStateData | None) -> None:
        self.cluster.record(
            {
                "kind": "view",
                "time": self.cluster.clock.now_ms(),
                "observer": self.id,
                "incarnation": self.incarnation,
                "key": key,
                "value": None if value is None else value.model_dump(mode="json", by_alias=True),
                "accepted": True,
            }
        )


class _Picks(random.Random):
    """Placement's random choice, taken from the cluster's plan of picks instead."""

    def __init__(self, cluster: Cluster) -> None:
        super().__init__(0)
        self.cluster = cluster

    def __reduce__(self) -> tuple[type[_Picks], tuple[Cluster]]:
        return (_Picks, (self.cluster,))

    def choice(self, seq: SupportsLenAndGetItem[T]) -> T:
        cluster = self.cluster
        wanted = cluster.plan.popleft() if cluster.plan else 0
        cluster.widths.append(len(seq))
        pick = wanted if wanted < len(seq) else 0
        assert cluster.picks is not None
        cluster.picks.append(pick)
        return seq[pick]


@dataclass(frozen=True)
class _Settled:
    """What :meth:`Cluster.observe` reports of the channel itself; immutable, so clusters share it."""

    values: Mapping[str, ServiceUnitStateData]
    born: Mapping[str, int]
    deleted: frozenset[str]


_NOTHING_SETTLED = _Settled({}, {}, frozenset())
_FOLDS: dict[tuple[int, tuple[int, ...]], tuple[ProtocolModel, tuple[Message, ...], _Settled]] = {}
"""Folds of whole logs by the model folded with and their messages' identities (the model and the
messages kept alive beside the fold, so an identity is never another's): a model checker's states
share their logs' messages, and the successors of a state its log or a log one or two messages
longer. The model is part of the key: two models' searches in one process (a bug variant's
resolver, ``statechan mutate``) share messages, and one model's fold is not another's."""


def _settled_log(topic: Topic, model: ProtocolModel, start: tuple[int, _Settled] | None) -> _Settled:
    """A reader's fold of the whole log (from ``start``, a position and the fold up to it, when
    given) under ``model``'s rules: what it holds per key, the offset each lifetime began at, and
    the keys with a Deleted since their last tombstone. A short log folded from the start is looked
    up in :data:`_FOLDS` first, whole or but for its last few messages (no rules read then)."""
    end = topic.end
    ids: tuple[int, ...] = ()
    if start is None and end <= _FOLDED_LOG_LIMIT:
        messages = tuple(topic)
        ids = tuple(map(id, messages))
        ruled = id(model)
        known = _FOLDS.get((ruled, ids))
        if known is not None:
            return known[2]
        for cut in range(end - 1, max(-1, end - 4), -1):
            prefix = _FOLDS.get((ruled, ids[:cut]))
            if prefix is not None:
                start = (cut, prefix[2])
                break
    folded = _fold_log(topic, model.rules(StorageType.SystemTopic), start or (0, _NOTHING_SETTLED))
    if ids:
        if len(_FOLDS) >= 20_000:
            _FOLDS.clear()
        _FOLDS[(id(model), ids)] = (model, messages, folded)
    return folded


_FOLDED_LOG_LIMIT = 64
"""Longest log :data:`_FOLDS` keeps folds of (a simulated run's is folded as it grows instead)."""


def _fold_log(topic: Topic, rules: StorageRules, start: tuple[int, _Settled]) -> _Settled:
    from statechan.resolver import decide

    position, settled = start
    values, born, deleted = dict(settled.values), dict(settled.born), set(settled.deleted)
    for offset in range(position, topic.end):
        message = topic.message(offset)
        try:
            value = message.value()
        except ValueError:
            continue  # a malformed message: every reader skips it
        key = message.key
        held = values.get(key)
        if not decide(rules, held, value).accepted:
            continue
        if value is None:
            values.pop(key, None)
            born.pop(key, None)
            deleted.discard(key)
            continue
        values[key] = value
        if held is None:
            born[key] = offset
        if value.state is S.Deleted:
            deleted.add(key)
    return _Settled(values, born, frozenset(deleted))


_NODE_VALUES: dict[bytes, ServiceUnitStateData | None] = {}
"""Channel nodes' values by their bytes: each distinct node decoded once (bounded)."""
_NODE_KEYS: dict[str, str | None] = {}
"""The channel key of each node path seen (None: not a channel node)."""


def node_value(data: bytes) -> ServiceUnitStateData | None:
    """A stored node's channel value (None if it holds none), decoded once per distinct bytes (and
    kept alive: the model checker's captures cache values by identity)."""
    if data in _NODE_VALUES:
        return _NODE_VALUES[data]
    try:
        value = ServiceUnitStateData.model_validate_json(data) if data[:1] == b"{" else None
    except ValueError:
        value = None
    if len(_NODE_VALUES) >= 100_000:
        _NODE_VALUES.clear()
    _NODE_VALUES[data] = value
    return value


def _settled_nodes(store: Store) -> _Settled:
    """The store's channel nodes: their values, creation zxids, and the keys holding Deleted."""
    values: dict[str, ServiceUnitStateData] = {}
    born: dict[str, int] = {}
    for path in store.paths():
        key = _NODE_KEYS.get(path, "")
        if key == "":
            key = _NODE_KEYS[path] = key_of(path) if path.startswith(PATH_PREFIX + "/") else None
        if key is None or (node := store.get(path)) is None:
            continue
        data, stat = node
        value = node_value(data)
        if value is not None:
            values[key] = value
            born[key] = stat.created_zxid
    deleted = frozenset(key for key, value in values.items() if value.state is S.Deleted)
    return _Settled(values, born, deleted)


def _settled_keys(store: Store, settled: _Settled, keys: set[str]) -> _Settled:
    """``settled`` with ``keys``' nodes read again."""
    values, born, deleted = dict(settled.values), dict(settled.born), set(settled.deleted)
    for key in keys:
        node = store.get(path_of(key))
        value = None if node is None else node_value(node[0])
        if node is None or value is None:
            values.pop(key, None)
            born.pop(key, None)
            deleted.discard(key)
            continue
        values[key] = value
        born[key] = node[1].created_zxid
        if value.state is S.Deleted:
            deleted.add(key)
        else:
            deleted.discard(key)
    return _Settled(values, born, frozenset(deleted))


class Cluster:
    """A whole cluster: brokers, one channel store (or both with the syncer), a clock, timers."""

    def __init__(
        self,
        config: SimConfig | None = None,
        make_store: Callable[[Clock], Store] | None = None,
        picks: Sequence[int] | None = None,
    ) -> None:
        """``make_store`` builds the metadata store on the cluster's clock (default: the
        in-process one; :class:`statechan.stores.zookeeper.ZooKeeperStore` runs on a real server).

        ``picks`` takes placement's choices from the caller instead of the seeded generator: the
        i-th choice of the run takes candidate ``picks[i]`` (0 once they run out). The model
        checker branches on them; a run it saves replays with them (``self.picks``)."""
        self.config = config if config is not None else SimConfig()
        cfg = self.config
        self.clock = ManualClock(cfg.start_ms)
        self.rng: random.Random = random.Random(cfg.seed)
        self.picks: list[int] | None = None
        """The placement choices made so far, when they come from the caller."""
        self.plan: deque[int] = deque()
        self.widths: list[int] = []
        """How many candidates each placement choice of the last step had (for the checker)."""
        if picks is not None:
            self.picks = []
            self.plan = deque(picks)
            self.rng = _Picks(self)
        self.model = load_model(cfg.variant.model)
        self.storage = cfg.storage
        self.model.rules(self.storage)  # fails early if the model has no table for the store
        self.topic = Topic(clock=self.clock)
        self.topic.compaction_threshold = cfg.channel_compaction_threshold
        self.store: Store = MetadataStore(self.clock) if make_store is None else make_store(self.clock)
        self.placement = make_placement(cfg.placement)
        self.loads: dict[str, BrokerLoad] = {}
        self.brokers: dict[str, Broker] = {}
        self.incarnations: Counter[str] = Counter()
        self.namespaces: dict[str, list[Bundle]] = {}
        self._live_keys: frozenset[str] | None = None
        self._sorted_keys: list[str] = []
        self._timers: list[_Timer] = []
        self._seq = 0
        self.history: list[Action] = []
        self.trace: list[dict[str, object]] = []
        self.answers: list[LookupAnswer] = []
        self._step_answers = 0
        self.counters: Counter[str] = Counter()
        self.split_failures = 0
        self._dead_clients: dict[tuple[str, int], MetadataClient] = {}
        self._loads_at = -1
        self.crash_times: dict[str, int] = {}
        self.unregistered_at: dict[str, int] = {}
        self.leader_since: int | None = None
        self._work_since: int | None = None
        self._leader_for: str | None = None
        self.failed_splits: set[str] = set()
        self.departed: set[str] = set()
        self.syncer: TableViewSyncer | None = None
        self.topic.observers.append(self._on_topic_message)
        self.store.observers.append(self._on_store_change)
        for n in range(cfg.namespaces):
            ns = f"tenant/ns-{n}"
            self.namespaces[ns] = namespace_bundles(ns, cfg.bundles_per_namespace)
        for broker_id in cfg.broker_ids():
            self._boot(broker_id)
        if cfg.store is StoreKind.both:
            self.syncer = TableViewSyncer(
                self.topic,
                self.store,
                SyncerMode.SystemTopicToMetadataStore,
                self.clock,
                self.model,
                forward_tombstones_as_put_null=cfg.variant.syncer_drops_deletions,
                drop_refused_forwards=cfg.variant.syncer_drops_deletions,
            )
            self.syncer.start()
        self.settle_metadata()
        self._track_leader()

    # -- bookkeeping ---------------------------------------------------------------------------------
    def _boot(self, broker_id: str) -> Broker:
        self.incarnations[broker_id] += 1
        broker = Broker(self, broker_id, self.incarnations[broker_id])
        self.brokers[broker_id] = broker
        self.loads.setdefault(broker_id, BrokerLoad())
        broker.start()
        return broker

    def settle_metadata(self) -> None:
        """Deliver every queued metadata event (used at start-up, before the run begins)."""
        progress = True
        while progress:
            progress = False
            for broker in self.brokers.values():
                if broker.alive and broker.client.pending:
                    broker.client.deliver_all()
                    progress = True

    def record(self, record: dict[str, object]) -> None:
        self.trace.append(
            {"kind": record["kind"], "offset": len(self.trace), **{k: v for k, v in record.items() if k != "kind"}}
        )

    def _on_topic_message(self, message: Message) -> None:
        try:
            value = message.value()
        except ValueError:
            value = None
        self.record(
            {
                "kind": "channel",
                "publish_time": message.publish_time,
                "key": message.key,
                "value": None if value is None else value.model_dump(mode="json", by_alias=True),
                "message_id": str(message.message_id),
                "producer": message.producer,
            }
        )

    def _on_store_change(self, event: NodeEvent, path: str, data: bytes | None, stat: Stat | None) -> None:
        now = self.clock.now_ms()
        if path.startswith(REGISTRY + "/"):
            broker_id = path[len(REGISTRY) + 1 :]
            if event is NodeEvent.Created:
                self.unregistered_at.pop(broker_id, None)
                self.record({"kind": "registry", "time": now, "broker": broker_id, "event": "registered"})
            elif event is NodeEvent.Deleted:
                self.unregistered_at[broker_id] = now
                self.record({"kind": "registry", "time": now, "broker": broker_id, "event": "unregistered"})
        elif self.config.store is StoreKind.metadata_store and path.startswith(PATH_PREFIX + "/"):
            key = key_of(path)
            if key is not None:
                value = None if event is NodeEvent.Deleted or data is None else json.loads(data)
                self.record(
                    {
                        "kind": "channel",
                        "publish_time": now,
                        "key": key,
                        "value": value,
                        "message_id": f"zxid:{self.store.zxid}",
                        "producer": None,
                    }
                )

    def schedule(self, kind: str, broker: Broker, delay_ms: int, key: str = "") -> _Timer:
        self._seq += 1
        timer = _Timer(self.clock.now_ms() + max(0, delay_ms), self._seq, kind, broker.id, broker.incarnation, key)
        heapq.heappush(self._timers, timer)
        return timer

    def next_timer(self) -> _Timer | None:
        while self._timers and (self._timers[0].cancelled or not self._timer_live(self._timers[0])):
            heapq.heappop(self._timers)
        return self._timers[0] if self._timers else None

    def live_timers(self, ordered: bool = True) -> list[_Timer]:
        """The timers that can still fire, in firing order (``ordered``; else in no particular
        order): what the heap means, without its layout or its cancelled and dead entries."""
        live = [t for t in self._timers if not t.cancelled and self._timer_live(t)]
        if ordered:
            live.sort()
        return live

    def tied_timer_brokers(self, first: _Timer | None = None) -> list[str]:
        """The sources (:attr:`_Timer.source`: brokers, or ZooKeeper expiring a broker's session)
        whose timers fall due first, at the same time, when there are several (a :class:`Tick`
        then names the one that fires); empty when one source's timer is next. ``first``: the
        :meth:`next_timer`, when the caller has it."""
        first = first or self.next_timer()
        if first is None:
            return []
        sources = {t.source for t in self._timers if t.due == first.due and not t.cancelled and self._timer_live(t)}
        return sorted(sources) if len(sources) > 1 else []

    def _timer_live(self, timer: _Timer) -> bool:
        if timer.kind == "session-expiry":
            return True
        broker = self.brokers.get(timer.broker)
        return broker is not None and broker.alive and broker.incarnation == timer.incarnation

    def registered(self, broker_id: str) -> bool:
        return self.store.get(registry_path(broker_id)) is not None

    def healthy(self, broker_id: str) -> bool:
        """Pulsar's broker health check: the broker answers and its channel runs."""
        broker = self.brokers.get(broker_id)
        return (
            broker is not None
            and broker.alive
            and broker.channel is ChannelState.Started
            and self.registered(broker_id)
        )

    def leader(self) -> str | None:
        node = self.store.get(LEADER)
        return None if node is None else node[0].decode()

    def live_bundle_keys(self) -> frozenset[str]:
        """The keys of every bundle the namespaces have now (splits replace parents)."""
        if self._live_keys is None:
            self._live_keys = frozenset(b.key for bundles in self.namespaces.values() for b in bundles)
            self._sorted_keys = sorted(self._live_keys)
        return self._live_keys

    def sorted_bundle_keys(self) -> list[str]:
        self.live_bundle_keys()
        return self._sorted_keys

    def replace_bundle(self, parent: Bundle, children: list[Bundle]) -> None:
        bundles = self.namespaces.get(parent.namespace, [])
        if parent in bundles:
            bundles.remove(parent)
            bundles.extend(children)
            bundles.sort()
            self._live_keys = None

    def inject_split_failures(self, count: int) -> None:
        """The next split's bundle-metadata updates fail ``count`` times (BadVersionException)."""
        self.split_failures = count

    LOAD_REPORT_INTERVAL_MS = 30_000
    """Brokers report load periodically; placement reads the last report."""

    def current_loads(self) -> dict[str, BrokerLoad]:
        if self._loads_at < 0 or self.clock.now_ms() - self._loads_at >= self.LOAD_REPORT_INTERVAL_MS:
            self.update_loads()
            self._loads_at = self.clock.now_ms()
        return self.loads

    def update_loads(self) -> None:
        owned: Counter[str] = Counter()
        for broker in self.brokers.values():
            owned[broker.id] = len(broker.serving())
        for broker_id, load in self.loads.items():
            load.apply_bundles(owned[broker_id])

    # -- actions -------------------------------------------------------------------------------------
    def enabled_actions(self, without: AbstractSet[type[Action]] = frozenset()) -> list[Action]:
        """Every action that can happen now (for the model checker and Hypothesis), but for the
        kinds in ``without`` (the model checker's spent budgets: not worth listing to drop)."""
        actions: list[Action] = []
        keys = self.sorted_bundle_keys()
        lookups = Lookup not in without
        unloads = Unload not in without
        transfers = Transfer not in without
        splits = Split not in without
        for broker_id, broker in sorted(self.brokers.items()):
            if broker.alive:
                if isinstance(broker.view, SystemTopicTableView) and broker.view.pending:
                    actions.append(Deliver(broker_id))
                if broker.client.pending:
                    actions.append(Notify(broker_id))
                if broker.tasks:
                    actions.append(RunTask(broker_id))
                if lookups and broker.channel in LOOKUP_CHANNELS:
                    actions.extend(Lookup(broker_id, key) for key in keys)
                if broker.channel is ChannelState.Started:
                    for key in keys if unloads or transfers or splits else ():
                        data = broker.value(key)
                        if data is not None and data.state is S.Owned and data.dst_broker:
                            if unloads:
                                actions.append(Unload(broker_id, key))
                            if transfers:
                                actions.extend(
                                    Transfer(broker_id, key, other)
                                    for other in sorted(self.brokers)
                                    if other != data.dst_broker and broker.is_registered(other)
                                )
                            if splits and data.dst_broker == broker_id:
                                actions.append(Split(broker_id, key))
                    if Crash not in without:
                        actions.append(Crash(broker_id))
                    if Shutdown not in without:
                        actions.append(Shutdown(broker_id))
                    if broker.client.connected and LoseSession not in without:
                        actions.append(LoseSession(broker_id))
                    if (
                        Resign not in without
                        and broker.is_leader
                        and broker.client.connected
                        and self.leader() == broker_id
                    ):
                        actions.append(Resign(broker_id))
                if not broker.client.connected and not broker.client.closed:
                    actions.append(Reconnect(broker_id))
            elif Restart not in without:
                actions.append(Restart(broker_id))
        first = self.next_timer()
        if first is not None and self._tick_allowed(first):
            tied = self.tied_timer_brokers(first)
            actions.extend([Tick(broker) for broker in tied] if tied else [Tick()])
        if (
            Compact not in without
            and self.storage is StorageType.SystemTopic
            and self.topic.end > self.topic.horizon
            and self.topic.compaction_enabled
        ):
            actions.append(Compact())
        if self.syncer is not None:
            if self.syncer.topic_view.pending:
                actions.append(SyncTopic())
            if self.syncer.client.pending:
                actions.append(SyncStore())
            if self._reconcile_due():
                actions.append(SyncReconcile())
        return actions

    def _reconcile_due(self) -> bool:
        """Whether the syncer's periodic reconcile has something to do. It runs once the syncer
        has read what is waiting (the model leaves out its races with the syncer's own reads), as
        work the timely-delivery bound covers: Pulsar runs it every 5 s, the bound is 1 s."""
        syncer = self.syncer
        return (
            syncer is not None
            and syncer.active
            and not self.config.variant.syncer_drops_deletions  # before #25946: no reconcile
            and not syncer.topic_view.pending
            and not syncer.client.pending
            and syncer.reconcile_due()
        )

    def place(self, candidates: Sequence[str]) -> str | None:
        """Placement's choice among ``candidates`` (the seeded generator's, or the caller's picks)."""
        return self.placement.select(candidates, self.current_loads(), self.rng)

    def step(self, action: Action) -> None:
        """Apply one action (it must be enabled; a disabled one raises ``ValueError``)."""
        self.widths = []
        self._step_answers = len(self.answers)
        self._apply(action)
        self.history.append(action)
        self.counters[action.kind] += 1
        self._track_leader()
        self._track_work()

    def _tick_allowed(self, first: _Timer | None = None) -> bool:
        timer = first or self.next_timer()
        if timer is None:
            return False
        bound = self.config.timely_delivery_ms
        return bound is None or self._work_since is None or timer.due <= self._work_since + bound

    def _track_work(self) -> None:
        if self.config.timely_delivery_ms is None:
            return
        if self.quiescent():
            self._work_since = None
        elif self._work_since is None:
            self._work_since = self.clock.now_ms()

    def _track_leader(self) -> None:
        """Note since when one running, connected broker has been elected and acting as leader
        (the liveness bounds count from there: nobody cleans up without a leader)."""
        elected = self.leader()
        broker = self.brokers.get(elected) if elected is not None else None
        acting = (
            broker is not None
            and broker.alive
            and broker.channel is ChannelState.Started
            and broker.client.connected
            and broker.is_leader
        )
        if not acting:
            self.leader_since = None
            self._leader_for = None
        elif self._leader_for != elected:
            self.leader_since = self.clock.now_ms()
            self._leader_for = elected

    def _broker(self, broker_id: str, alive: bool = True) -> Broker:
        broker = self.brokers.get(broker_id)
        if broker is None:
            raise ValueError(f"no broker {broker_id!r}; brokers: {', '.join(sorted(self.brokers))}")
        if broker.alive is not alive:
            raise ValueError(f"{broker_id} is {'not ' if alive else ''}running")
        return broker

    def _apply(self, action: Action) -> None:
        if isinstance(action, Deliver):
            broker = self._broker(action.broker)
            if not isinstance(broker.view, SystemTopicTableView) or not broker.view.advance():
                raise ValueError(f"{action.describe()}: nothing to deliver")
        elif isinstance(action, Notify):
            if self._broker(action.broker).client.deliver_next() is None:
                raise ValueError(f"{action.describe()}: no notification queued")
        elif isinstance(action, RunTask):
            if self._broker(action.broker).run_task() is None:
                raise ValueError(f"{action.describe()}: no task queued")
        elif isinstance(action, Lookup):
            broker = self._broker(action.broker)
            if broker.channel not in LOOKUP_CHANNELS:
                raise ValueError(f"{action.describe()}: channel is {broker.channel.name}: lookups are refused")
            broker.lookup(action.bundle)
        elif isinstance(action, Unload | Transfer):
            broker = self._started(action.broker)
            data = broker.value(action.bundle)
            if data is None or data.state is not S.Owned:
                raise ValueError(f"{action.describe()}: {action.broker} does not see the bundle Owned")
            dest = action.destination if isinstance(action, Transfer) else None
            if dest is not None and not broker.is_registered(dest):
                raise ValueError(
                    f"{action.describe()}: {dest} is not registered as {action.broker} reads the registry"
                    " (Pulsar's admin refuses a transfer to an inactive destination broker)"
                )
            put = broker.publish(action.bundle, broker._data(S.Releasing, dest, data.dst_broker, next_version(data)))
            if put is None or not put.verdict.rejected:  # a refused put fails the admin call at once
                broker.unloads.setdefault(action.bundle, (data.dst_broker, dest))
        elif isinstance(action, Split):
            broker = self._started(action.broker)
            data = broker.value(action.bundle)
            if data is None or data.state is not S.Owned or data.dst_broker != broker.id:
                raise ValueError(f"{action.describe()}: {action.broker} does not own the bundle")
            if self.config.variant.split_needs_registration and not broker._registered_now():
                self.counters["split-refused"] += 1  # fix 04: the admin call fails on an unregistered broker
                return
            children = parse_key(action.bundle).split()
            broker.publish(
                action.bundle,
                broker._data(
                    S.Splitting, None, broker.id, next_version(data), split={c.range_name: None for c in children}
                ),
            )
        elif isinstance(action, Tick):
            if self.next_timer() is not None and not self._tick_allowed():
                raise ValueError("tick: work has waited the timely-delivery bound; deliver it first")
            self._tick(action.broker)
        elif isinstance(action, Wait):
            if action.ms < 0:
                raise ValueError(f"{action.describe()}: time only moves forward")
            self.clock.advance(action.ms)
        elif isinstance(action, Compact):
            if self.storage is not StorageType.SystemTopic or not self.topic.compaction_enabled:
                raise ValueError(f"{action.describe()}: the channel topic does not compact (its threshold is 0)")
            self.topic.compact(model=self.model, keep_tombstones=self.config.variant.compaction_keeps_tombstones)
        elif isinstance(action, Crash):
            self._crash(self._broker(action.broker))
        elif isinstance(action, Restart):
            self._broker(action.broker, alive=False)
            old = self.brokers[action.broker]
            self._boot(action.broker)
            self.crash_times.pop(action.broker, None)
            self.departed.discard(action.broker)
            del old
        elif isinstance(action, Shutdown):
            self._shutdown(self._started(action.broker))
        elif isinstance(action, LoseSession):
            self._broker(action.broker).client.expire_session()
        elif isinstance(action, Reconnect):
            self._broker(action.broker).client.reconnect()
        elif isinstance(action, Resign):
            broker = self._broker(action.broker)
            if self.leader() != broker.id:
                raise ValueError(f"{action.describe()}: {action.broker} is not the leader")
            broker.client.delete(LEADER)
        elif isinstance(action, SyncTopic):
            if self.syncer is None or not self.syncer.step_topic():
                raise ValueError("sync-topic: nothing to read")
        elif isinstance(action, SyncStore):
            if self.syncer is None or not self.syncer.step_store():
                raise ValueError("sync-store: nothing queued")
        elif isinstance(action, SyncReconcile):
            if self.syncer is None or not self._reconcile_due():
                raise ValueError("sync-reconcile: nothing to reconcile")
            self.syncer.reconcile_periodic()
        else:
            raise ValueError(f"unknown action {action!r}")

    def _started(self, broker_id: str) -> Broker:
        broker = self._broker(broker_id)
        if broker.channel is not ChannelState.Started:
            raise ValueError(f"{broker_id}: channel is {broker.channel.name}, not Started")
        return broker

    def _crash(self, broker: Broker) -> None:
        broker.alive = False
        broker.channel = ChannelState.Closed
        broker.tasks.clear()
        broker.pending_lookups.clear()
        broker.unloads.clear()
        broker.view.close()
        self.crash_times[broker.id] = self.clock.now_ms()
        self._dead_clients[(broker.id, broker.incarnation)] = broker.client
        # the process is gone; its session lives until the store times it out
        self._seq += 1
        timer = _Timer(
            self.clock.now_ms() + self.config.channel.session_timeout_ms,
            self._seq,
            "session-expiry",
            broker.id,
            broker.incarnation,
        )
        heapq.heappush(self._timers, timer)

    def _shutdown(self, broker: Broker) -> None:
        broker.channel = ChannelState.Disabled
        broker.shutting_down = True
        with contextlib.suppress(StoreError):
            broker.client.delete(registry_path(broker.id))
        broker.do_cleanup(broker.id, gracefully=True)
        self.schedule("shutdown-complete", broker, OWNERSHIP_CLEAN_UP_MAX_WAIT_TIME_IN_MILLIS)

    def _tick(self, broker_id: str = "") -> None:
        timer = self.next_timer()
        if timer is None:
            raise ValueError("tick: no timer is pending")
        if broker_id and timer.source != broker_id:
            # another source's timer due at the same time fires first: this one's first timer
            first = timer
            timer = min(
                (t for t in self._timers if t.source == broker_id and not t.cancelled and self._timer_live(t)),
                default=first,
            )
            if timer.source != broker_id or timer.due != first.due:
                raise ValueError(f"tick({broker_id}): no timer of {broker_id} is due first")
            self._timers.remove(timer)
            heapq.heapify(self._timers)
        else:
            heapq.heappop(self._timers)
        if timer.due > self.clock.now_ms():
            self.clock.set(timer.due)
        if timer.kind == "session-expiry":
            client = self._dead_clients.pop((timer.broker, timer.incarnation), None)
            if client is not None:
                client.close()
            return
        broker = self.brokers[timer.broker]
        if timer.kind == "monitor":
            if broker.is_leader:
                broker.monitor()
                self.schedule("monitor", broker, self.config.channel.monitor_interval_s * 1000)
            else:
                broker.monitor_scheduled = False
        elif timer.kind == "cleanup":
            broker.cleanup_jobs.pop(timer.key, None)
            broker.do_cleanup(timer.key, gracefully=False)
        elif timer.kind == "cleanup-recheck":
            graceful = timer.key.startswith("+")
            attempt, target = timer.key.lstrip("+").split("|", 1)
            if graceful:
                broker.do_cleanup(target, gracefully=True, attempt=int(attempt))
            elif broker.is_leader and not self.healthy(target):
                broker.do_cleanup(target, gracefully=False, attempt=int(attempt))
        elif timer.kind == "lookup-timeout":
            broker.lookup_timed_out(timer.key)
        elif timer.kind == "shutdown-complete":
            broker.alive = False
            broker.channel = ChannelState.Closed
            broker.tasks.clear()
            broker.unloads.clear()
            broker.view.close()
            broker.client.close()
            self.departed.add(broker.id)

    # -- observation ---------------------------------------------------------------------------------
    def observe(self) -> Observation:
        """What invariants may look at now: a snapshot the cluster's later steps leave as it is
        (views copied), so the step invariants can compare it with the next one."""
        settled = self._settled_channel()
        views: dict[str, Mapping[str, ServiceUnitStateData]] = {}
        serving: dict[str, set[str]] = {}
        started: set[str] = set()
        connected: set[str] = set()
        acting: set[str] = set()
        incarnations: dict[str, int] = {}
        pending: dict[str, Mapping[str, int]] = {}
        unloads: dict[str, Mapping[str, tuple[str | None, str | None]]] = {}
        positions: dict[str, int] = {}
        wait = self.config.channel.in_flight_wait_ms
        for i, b in self.brokers.items():  # one pass over the running brokers, for every field
            if not b.alive:
                continue
            views[i] = b.view.snapshot()
            serving[i] = b.serving()
            if b.channel is ChannelState.Started:
                started.add(i)
            if b.client.connected:
                connected.add(i)
            if b.leader_view == i:
                acting.add(i)
            incarnations[i] = b.incarnation
            if b.pending_lookups:
                pending[i] = {key: deadline - wait for key, deadline in b.pending_lookups.items()}
            if b.unloads:
                unloads[i] = dict(b.unloads)
            if b.reader is not None:
                positions[i] = b.reader.position
        registered: set[str] = set()
        since: dict[str, int] = {}
        get = self.store.get
        for broker_id in self.brokers:
            node = get(registry_path(broker_id))
            if node is not None:
                registered.add(broker_id)
                since[broker_id] = node[1].modified_ms
        return Observation.from_dict(
            {
                "time": self.clock.now_ms(),
                "step": len(self.history),
                "views": views,
                "serving": serving,
                "started": started,
                "connected": connected,
                "registered": registered,
                "unregistered_at": dict(self.unregistered_at),
                "leader": self.leader(),
                "leader_since": self.leader_since,
                "acting_leaders": acting,
                "answers": tuple(self.answers[self._step_answers :]),
                "bundles": self.live_bundle_keys(),
                "quiescent": self.quiescent(),
                "config": self.config,
                "syncer_differences": None if self.syncer is None else len(self.syncer.differences()),
                "timers_overdue": (timer := self.next_timer()) is not None and timer.due < self.clock.now_ms(),
                "failed_splits": frozenset(self.failed_splits),
                "departed": frozenset(self.departed),
                "channel": settled.values,
                "born": settled.born,
                "deleted": settled.deleted,
                "incarnations": incarnations,
                "pending_lookups": pending,
                "pending_unloads": unloads,
                "positions": positions,
                "registered_since": since,
            }
        )

    def _settled_channel(self) -> _Settled:
        """The channel's settled values, where each key's lifetime began, and the keys Deleted in
        it (the observation's ``channel``, ``born``, ``deleted``), worked out again only past what
        the last call saw. A log the last call saw as it is now has that call's fold. Else a short
        log's fold is looked up by its messages (the model checker's states, restored or rewound in
        place, share them); a longer one goes on from the last call's position while the message
        before it is the same. The store's nodes are read again
        for the keys the trace's channel records name since the last call, or all of them when
        the trace cannot tell (a restored cluster, a trace cleared or replaced, a write it lacks)."""
        last = self.__dict__.get("_settled")
        if self.storage is StorageType.MetadataStore:
            store, trace, zxid = self.store, self.trace, self.store.zxid
            settled: _Settled | None = None
            if last is not None and last[0] is store and last[1] is trace and last[2] <= len(trace):
                if last[3] == zxid and last[2] == len(trace):
                    return last[4]  # type: ignore[no-any-return]
                # the trace goes on from the record the last call saw last (not emptied since)
                if last[2] and trace[last[2] - 1] is last[5]:
                    changed = {str(r["key"]) for r in trace[last[2] :] if r["kind"] == "channel"}
                    if changed or last[3] == zxid:
                        settled = _settled_keys(store, last[4], changed) if changed else last[4]
            if settled is None:
                settled = _settled_nodes(store)
            self.__dict__["_settled"] = (store, trace, len(trace), zxid, settled, trace[-1] if trace else None)
            return settled
        topic, end = self.topic, self.topic.end
        if not end:
            return _settled_log(topic, self.model, None)
        start = None
        if last is not None and last[0] is topic and last[1] <= end and topic.message(last[1] - 1) is last[2]:
            if last[1] == end:
                return last[3]  # type: ignore[no-any-return]
            if end > _FOLDED_LOG_LIMIT:
                start = (last[1], last[3])
        settled = _settled_log(topic, self.model, start)
        self.__dict__["_settled"] = (topic, end, topic.message(end - 1), settled)
        return settled

    def views(self) -> dict[str, dict[str, ServiceUnitStateData]]:
        """Each running broker's view."""
        return {b.id: b.view.snapshot() for b in self.brokers.values() if b.alive}

    def serving(self) -> dict[str, set[str]]:
        return {b.id: b.serving() for b in self.brokers.values() if b.alive}

    def quiescent(self) -> bool:
        """No delivery, notification, task or syncer step is waiting (timers may be). Every step
        asks: the first waiting step answers, without listing the rest (nor making its action)."""
        for broker in self.brokers.values():
            if broker.alive:
                reader = broker.reader
                if (reader is not None and reader.has_next()) or broker.client.pending or broker.tasks:
                    return False
        syncer = self.syncer
        return syncer is None or not (syncer.topic_view.pending or syncer.client.pending or self._reconcile_due())

    def _work_actions(self) -> list[Action]:
        return list(self._work())

    def _work(self) -> Iterator[Action]:
        """The deliveries, notifications, tasks and syncer steps waiting, in broker order."""
        for broker_id, broker in self.brokers.items():
            if broker.alive:
                reader = broker.reader
                if reader is not None and reader.has_next():
                    yield Deliver(broker_id)
                if broker.client.pending:
                    yield Notify(broker_id)
                if broker.tasks:
                    yield RunTask(broker_id)
        syncer = self.syncer
        if syncer is not None:
            if syncer.topic_view.pending:
                yield SyncTopic()
            if syncer.client.pending:
                yield SyncStore()
            if self._reconcile_due():
                yield SyncReconcile()

    def drain(self, limit: int = 1_000_000) -> int:
        """Take every waiting delivery, notification, task and syncer step (no time passes).

        Deliveries and notifications go before tasks, so every broker sees each record before
        anyone acts on it (prompt delivery); racing orders come from the caller's own choices.
        Each step is the first of :meth:`quiescent`'s work in broker order (deliveries and
        notifications, then the syncer's, then tasks). The scan for it starts where the last one
        found work, until the channel or the store changes (a new record or node event can give
        work to any broker): brokers before that point had none and can get none without such a
        change, so the order is the same as a scan from the first broker, at a cost that does not
        grow with the brokers times the records.
        """
        steps = 0
        brokers = list(self.brokers.values())
        cursor = 0
        # a real ZooKeeper's watches land on their own threads: there, scan from the first broker
        in_process = isinstance(self.store, MetadataStore)
        mark = (self.topic.end, self.store.zxid)
        while steps < limit:
            now = (self.topic.end, self.store.zxid)
            if now != mark or not in_process:
                cursor, mark = 0, now
            action: Action | None = None
            for index in range(cursor, len(brokers)):
                broker = brokers[index]
                if not broker.alive:
                    continue
                reader = broker.reader
                if reader is not None and reader.has_next():
                    action = Deliver(broker.id)
                elif broker.client.pending:
                    action = Notify(broker.id)
                else:
                    continue
                cursor = index
                break
            if action is None:
                cursor = len(brokers)
                syncer = self.syncer
                if syncer is not None and syncer.topic_view.pending:
                    action = SyncTopic()
                elif syncer is not None and syncer.client.pending:
                    action = SyncStore()
                elif self._reconcile_due():
                    action = SyncReconcile()
                else:
                    action = next((RunTask(b.id) for b in brokers if b.alive and b.tasks), None)
                    if action is None:
                        return steps
                    cursor = 0  # a task may publish, write or queue anything
            self.step(action)
            steps += 1
        raise RuntimeError(f"the cluster did not quiesce within {limit} steps")

    def advance(self, ms: int, limit: int = 1_000_000) -> int:
        """Let ``ms`` of time pass: fire due timers in order, draining work after each."""
        end = self.clock.now_ms() + ms
        steps = self.drain(limit)
        while (timer := self.next_timer()) is not None and timer.due <= end:
            self.step(Tick())
            steps += 1 + self.drain(limit)
        if end > self.clock.now_ms():
            self.step(Wait(end - self.clock.now_ms()))
        return steps
