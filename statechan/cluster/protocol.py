"""The channel protocol as pure functions over the cluster's state (:mod:`statechan.cluster.state`):
Pulsar's broker handlers, the leader's duties, placement, the syncer and the faults.

- :func:`init` is the cluster as it starts (every broker registered and its channel started);
- :func:`enabled` lists the actions that can happen in a state;
- :func:`step` takes one action and gives the next state with what the outside world sees
  (trace records, lookup answers, counters); placement's random choices come from the caller
  (``choose``), so the simulator draws them from its seeded generator and the model checker takes
  every branch (:func:`outcomes`).

Every engine steps these functions: the simulator (through its :class:`~statechan.cluster.sim.Cluster`),
the Hypothesis bench, replay, the balance lab and the model checker. A step never changes the state
it is given: it works on drafts of the records it touches (see the state module). Each handler
cites the Pulsar class and method it follows; docs/simulator.md lists what the model leaves out.
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

import immutables

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
    PlacementKind,
    SimConfig,
    StoreKind,
)
from statechan.cluster.placement import Load, Weights, near_best
from statechan.cluster.state import (
    LEADER_PATH,
    LOOKUP_CHANNELS,
    SYNCER,
    Broker,
    Bundles,
    ChannelState,
    Client,
    ClusterState,
    Cold,
    Elected,
    Event,
    LookupAnswer,
    MetadataState,
    Msg,
    Node,
    NodeData,
    Owner,
    Path,
    Put,
    PutResult,
    Raw,
    Rec,
    Registration,
    Store,
    Syncer,
    Task,
    TaskKind,
    Timer,
    TimerKind,
    Topic,
    View,
    broker_id,
    broker_name,
    name_order,
)
from statechan.keys import Bundle, namespace_bundles, parse_key, system_bundle_broker, system_bundle_keys
from statechan.model import ProtocolModel, StorageRules, load_model, model_file_bytes
from statechan.resolver import decide
from statechan.states import ServiceUnitState, StorageType
from statechan.stores.metadata import (
    BadVersionError,
    NodeEvent,
    NodeExistsError,
    NoNodeError,
    SessionEvent,
    SessionExpiredError,
    StoreError,
)
from statechan.stores.topic import compaction
from statechan.values import VERSION_ID_INIT, wrap_long

S = ServiceUnitState
LOAD_REPORT_INTERVAL_MS = 30_000
"""Brokers report load periodically; placement reads the last report."""
Choose = Callable[[int], int]
"""Placement's random choice: an index below the number of near-best candidates."""
Placer = Callable[[Sequence[str]], str | None]
"""A placement decided outside the channel (the balance lab's balancer): the broker it chose among
the candidates (by name), or None."""


def first_choice(width: int) -> int:
    return 0


class Setup:
    """What a configuration fixes, worked out once per configuration (:func:`setup`)."""

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.variant = config.variant
        self.channel = config.channel
        self.model: ProtocolModel = load_model(config.variant.model)
        self.model.rules(config.storage)  # fails early if the model has no table for the store
        self.storage = config.storage
        self.on_store = config.store is StoreKind.metadata_store
        self.with_syncer = config.store is StoreKind.both
        self.topic_rules: StorageRules = self.model.rules(StorageType.SystemTopic) if not self.on_store else None  # type: ignore[assignment]
        self.store_rules: StorageRules = (
            self.model.rules(StorageType.MetadataStore) if self.on_store or self.with_syncer else None  # type: ignore[assignment]
        )
        self.brokers = config.brokers
        self.by_name = name_order(config.brokers)
        self.rank = {b: i for i, b in enumerate(self.by_name)}
        self.active = self.model.active
        self.in_flight = self.model.in_flight
        self.uniform = config.placement is PlacementKind.uniform
        self.weights = Weights()
        names = [broker_name(b) for b in range(config.brokers)]
        self.names = names
        self.per_broker: dict[type[Action], list[Action]] = {
            kind: [kind(name) for name in names]
            for kind in (Deliver, Notify, RunTask, Crash, Shutdown, LoseSession, Reconnect, Restart, Resign)
        }
        """Each broker's actions of each kind that name the broker alone (made once: an action is a value)."""
        self._keyed: dict[tuple[type[Action], int, str], Action] = {}
        self._transfers: dict[tuple[int, str, int], Transfer] = {}

    def keyed(self, kind: type[Lookup | Unload | Split], broker: int, key: str) -> Action:
        """The action of ``kind`` by ``broker`` on the bundle ``key`` (made once)."""
        found = self._keyed.get((kind, broker, key))
        if found is None:
            found = self._keyed[(kind, broker, key)] = kind(self.names[broker], key)
        return found

    def transfer(self, broker: int, key: str, destination: int) -> Transfer:
        found = self._transfers.get((broker, key, destination))
        if found is None:
            found = self._transfers[(broker, key, destination)] = Transfer(
                self.names[broker], key, self.names[destination]
            )
        return found


def setup(config: SimConfig) -> Setup:
    """What every step of a run under ``config`` reads (made once per configuration and model:
    a model file is told by its content, so one rewritten in place is read again)."""
    return _setup(config, model_file_bytes(config.variant.model))


@functools.lru_cache(maxsize=64)
def _setup(config: SimConfig, model_bytes: bytes | None) -> Setup:
    return Setup(config)


class Outcome:
    """A step's result: the next state and what the outside world saw of the step."""

    __slots__ = ("answers", "closed", "counters", "handled", "ops", "picks", "records", "state", "widths")

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self.records: list[dict[str, object]] = []
        """Trace records, in order (without their ``offset``, which the run's trace gives)."""
        self.answers: list[LookupAnswer] = []
        self.counters: dict[str, int] = {}
        self.closed: dict[tuple[int, str], int] = {}
        """Bundles a broker closed (its clients disconnected), by (broker, key)."""
        self.handled: dict[tuple[int, str], int] = {}
        """Records each broker's handler took, by broker and state (a view that accepts a record calls it)."""
        self.picks: list[int] = []
        """Placement's choices in this step (the index taken among each choice's candidates)."""
        self.widths: list[int] = []
        """How many candidates each choice had."""
        self.ops: list[tuple[str, Owner, Path | None, NodeData | None, int | None, str | None]] | None = None
        """The store operations, when asked for (``mirrored``)."""


# -- the step's working state ---------------------------------------------------------------------------
class Tx:
    """One step's working state: drafts of what it touched (brokers, views, clients, the store, the
    topic, the timers, the syncer), the handlers, and what the step shows the world. :meth:`commit`
    makes the drafts the next state's records. Brokers are ids; a test may drive a handler directly
    (:func:`operate`), as Pulsar's channel tests call the channel's methods."""

    __slots__ = (
        "_clients",
        "_cold",
        "_drafts",
        "_store",
        "_syncer",
        "_syncer_parts",
        "_timers",
        "_topic",
        "_views",
        "brokers",
        "choose",
        "ops",
        "out",
        "p",
        "placer",
        "recording",
        "s",
        "trace",
        "variant",
    )

    def __init__(
        self, state: ClusterState, p: Setup, choose: Choose, trace: bool, placer: Placer | None = None
    ) -> None:
        self.p = p
        self.placer = placer
        self.ops: list[tuple[str, Owner, Path | None, NodeData | None, int | None, str | None]] | None = None
        """The store operations of the step, when a real store mirrors the model's (:mod:`statechan.cluster.mirror`)."""
        self.variant = p.variant
        self.s = state.thaw()
        self.brokers = list(state.brokers)
        self._drafts: set[int] = set()
        self._views: set[int] = set()
        self._clients: set[int] = set()
        self._store: Store | None = None
        self._topic: Topic | None = None
        self._syncer: Syncer | None = None
        self._syncer_parts = False
        self._timers: list[Timer] | None = None
        self._cold: Cold | None = None
        self.choose = choose
        self.trace = trace and p.config.trace_views
        self.recording = trace
        self.out = Outcome(state)

    # -- drafts ------------------------------------------------------------------------------------------
    def b(self, i: int) -> Broker:
        """Broker ``i``'s draft (made on first use)."""
        if i not in self._drafts:
            self.brokers[i] = self.brokers[i].thaw()
            self._drafts.add(i)
        return self.brokers[i]

    def view(self, i: int) -> View:
        broker = self.b(i)
        if i not in self._views:
            broker.view = broker.view.thaw()
            self._views.add(i)
        return broker.view

    def client(self, i: int) -> Client:
        broker = self.b(i)
        if i not in self._clients:
            broker.client = broker.client.thaw()
            self._clients.add(i)
        return broker.client

    def store(self) -> Store:
        if self._store is None:
            self._store = self.s.store = self.s.store.thaw()
        return self._store

    def topic(self) -> Topic:
        if self._topic is None:
            self._topic = self.s.topic = self.s.topic.thaw()
        return self._topic

    def syncer(self) -> Syncer:
        if self._syncer is None:
            assert self.s.syncer is not None
            self._syncer = self.s.syncer = self.s.syncer.thaw()
        return self._syncer

    def syncer_views(self) -> Syncer:
        syncer = self.syncer()
        if not self._syncer_parts:
            syncer.topic_view, syncer.store_view = syncer.topic_view.thaw(), syncer.store_view.thaw()
            syncer.client = syncer.client.thaw()
            self._syncer_parts = True
        return syncer

    def cold(self) -> Cold:
        """The draft of what the cluster changes rarely."""
        if self._cold is None:
            self._cold = self.s.cold = self.s.cold.thaw()
        return self._cold

    def timers(self) -> list[Timer]:
        if self._timers is None:
            self._timers = list(self.s.timers)
        return self._timers

    def commit(self) -> Outcome:
        s = self.s
        self.out.ops = self.ops
        s.brokers = tuple(self.brokers)
        if self._timers is not None:
            s.timers = tuple(self._timers)
        self.out.state = s
        return self.out

    @property
    def now(self) -> int:
        return self.s.now

    def count(self, name: str, n: int = 1) -> None:
        counters = self.out.counters
        counters[name] = counters.get(name, 0) + n

    def close_unit(self, i: int, key: str) -> None:
        """The broker closes the bundle (its clients disconnected): counted, not state."""
        closed = self.out.closed
        closed[(i, key)] = closed.get((i, key), 0) + 1

    def record(self, record: dict[str, object]) -> None:
        if self.recording:
            self.out.records.append(record)

    # -- the metadata store (ZooKeeper's semantics, as Pulsar's metadata layer exposes them) ---------------
    def _client_of(self, owner: Owner) -> Client:
        """The live client of a session owner (a broker's incarnation or the syncer)."""
        if owner[0] == SYNCER:
            return self.s.syncer.client  # type: ignore[union-attr]
        broker = self.brokers[owner[0]]
        if broker.incarnation == owner[1]:
            return broker.client
        return self.s.dead_clients[owner]

    def _live(self, owner: Owner) -> None:
        client = self._client_of(owner)
        if client.closed:
            raise SessionExpiredError(f"client {_client_name(owner)} is closed")
        if not client.connected:
            raise SessionExpiredError(f"client {_client_name(owner)}: session {client.session} is lost")

    def zk_get(self, owner: Owner, path: Path) -> Node | None:
        self._live(owner)
        return self.store().get(path) if self._store is not None else self.s.store.get(path)

    def op(self, kind: str, owner: Owner, path: Path | None = None, data: NodeData | None = None,
           expected: int | None = None, error: str | None = None) -> None:  # fmt: skip
        if self.ops is not None:
            self.ops.append((kind, owner, path, data, expected, error))

    def zk_create(self, owner: Owner, path: Path, data: NodeData, ephemeral: bool = False) -> None:
        kind = "create-ephemeral" if ephemeral else "create"
        try:
            self._create(owner, path, data, ephemeral)
        except StoreError as exc:
            self.op(kind, owner, path, data, None, type(exc).__name__)
            raise
        self.op(kind, owner, path, data)

    def zk_set(self, owner: Owner, path: Path, data: NodeData, expected: int | None = None) -> None:
        try:
            self._set(owner, path, data, expected)
        except StoreError as exc:
            self.op("set", owner, path, data, expected, type(exc).__name__)
            raise
        self.op("set", owner, path, data, expected)

    def zk_delete(self, owner: Owner, path: Path, expected: int | None = None) -> None:
        try:
            self._delete(owner, path, expected)
        except StoreError as exc:
            self.op("delete", owner, path, None, expected, type(exc).__name__)
            raise
        self.op("delete", owner, path, None, expected)

    def _create(self, owner: Owner, path: Path, data: NodeData, ephemeral: bool) -> None:
        self._live(owner)
        store = self.store()
        if store.get(path) is not None:
            raise NodeExistsError(str(path))
        store.zxid += 1
        self._write(store, path, Node(data, 0, owner if ephemeral else None, store.zxid, store.zxid, self.now))
        self._notify(NodeEvent.Created, path)

    def _existing(self, owner: Owner, path: Path, expected: int | None) -> tuple[Store, Node]:
        """The store and the node at ``path`` that a set or delete by ``owner`` changes: it must
        exist and, when ``expected`` is given, be at that version (ZooKeeper's compare-and-set)."""
        self._live(owner)
        store = self.store()
        node = store.get(path)
        if node is None:
            raise NoNodeError(str(path))
        if expected is not None and expected != node.version:
            raise BadVersionError(f"{path}: expected version {expected}, found {node.version}")
        return store, node

    def _set(self, owner: Owner, path: Path, data: NodeData, expected: int | None) -> None:
        store, node = self._existing(owner, path, expected)
        store.zxid += 1
        self._write(store, path, Node(data, node.version + 1, node.owner, node.created, store.zxid, self.now))
        self._notify(NodeEvent.Modified, path)

    def zk_put(self, owner: Owner, path: Path, data: NodeData, expected: int | None) -> None:
        """Pulsar's ``MetadataStore.put``: ``expected`` -1 = must not exist, None = any version."""
        self._live(owner)
        if expected == -1 or (expected is None and self.store().get(path) is None):
            self.zk_create(owner, path, data)
        else:
            self.zk_set(owner, path, data, expected)

    def _delete(self, owner: Owner, path: Path, expected: int | None) -> None:
        store, _ = self._existing(owner, path, expected)
        store.zxid += 1
        self._write(store, path, None)
        self._notify(NodeEvent.Deleted, path)

    def new_session(self) -> int:
        store = self.store()
        store.sessions += 1
        return store.sessions

    def _write(self, store: Store, path: Path, node: Node | None) -> None:
        if isinstance(path, int):
            registry = dict(store.registry)
            if node is None:
                del registry[path]
            else:
                registry[path] = node
            store.registry = registry
        elif path == LEADER_PATH:
            store.leader = node
        elif node is None:
            store.channel = store.channel.delete(path)
        else:
            store.channel = store.channel.set(path, node)

    def _notify(self, event: NodeEvent, path: Path) -> None:
        """A change applied: the trace's record of it, and a notification queued for every live client."""
        if isinstance(path, int) and event is not NodeEvent.Modified:
            self._unregistered(path, None if event is NodeEvent.Created else self.now)
        if self.recording:
            self._observe_store(event, path)
        notice: Event = (event, path)
        for i, broker in enumerate(self.brokers):
            if broker.client.live:
                client = self.client(i)
                client.queue = (*client.queue, notice)
        if self.s.dead_clients and any(c.live for c in self.s.dead_clients.values()):
            dead = dict(self.s.dead_clients)
            for owner, client in dead.items():
                if client.live:
                    dead[owner] = Client(client.session, client.connected, client.closed, (*client.queue, notice))
            self.s.dead_clients = dead
        if self.s.syncer is not None and self.s.syncer.client.live:
            client = self.syncer_views().client
            client.queue = (*client.queue, notice)

    def _observe_store(self, event: NodeEvent, path: Path) -> None:
        if isinstance(path, int):
            if event is not NodeEvent.Modified:
                what = "registered" if event is NodeEvent.Created else "unregistered"
                self.record({"kind": "registry", "time": self.now, "broker": broker_name(path), "event": what})
        elif path != LEADER_PATH and self.p.on_store:
            node = self.store().get(path)
            self.record(
                {
                    "kind": "channel",
                    "publish_time": self.now,
                    "key": path,
                    "value": None if event is NodeEvent.Deleted or node is None else _json(node.data),
                    "message_id": f"zxid:{self.store().zxid}",
                    "producer": None,
                }
            )

    def _unregistered(self, broker: int, at: int | None) -> None:
        known = self.s.cold.unregistered_at
        if (broker not in known) if at is None else known.get(broker) == at:
            return
        times = dict(known)
        if at is None:
            times.pop(broker, None)
        else:
            times[broker] = at
        self.cold().unregistered_at = times

    def _expire(self, owner: Owner) -> None:
        """The session ends: its ephemeral nodes go, in the order they were made."""
        store = self.store()
        for path in [path for path, holder in store.ephemeral() if holder == owner]:
            store.zxid += 1
            self._write(store, path, None)
            self._notify(NodeEvent.Deleted, path)

    def close_client(self, owner: Owner) -> None:
        """``MetadataClient.close``: ephemeral nodes go, nothing more is delivered."""
        client = self._client_of(owner)
        if client.closed:
            return
        self.op("close", owner)
        if client.connected:
            self._expire(owner)
        closed = Client(client.session, False, True, ())
        if owner[0] == SYNCER:
            self.syncer_views().client = closed
        elif self.brokers[owner[0]].incarnation == owner[1]:
            self.b(owner[0]).client = closed
            self._clients.add(owner[0])
        else:
            dead = dict(self.s.dead_clients)
            dead.pop(owner)
            self.s.dead_clients = dead

    # -- the topic -------------------------------------------------------------------------------------------
    def publish_message(self, key: str, value: Rec | None, producer: int | None) -> None:
        """Append to the channel topic (readers judge; the settled fold follows the log)."""
        topic = self.topic()
        offset = topic.end
        message = Msg(key, value, self.now, producer)
        topic.log = topic.log.append(message)
        held = topic.settled.get(key)
        if decide(self.p.topic_rules, held, value).accepted:
            if value is None:
                if held is not None:
                    topic.settled = topic.settled.delete(key)
                    topic.born = topic.born.delete(key)
                topic.deleted = topic.deleted - {key}
            else:
                topic.settled = topic.settled.set(key, value)
                if held is None:
                    topic.born = topic.born.set(key, offset)
                if value.state is S.Deleted:
                    topic.deleted = topic.deleted | {key}
        if self.recording:
            self.record(
                {
                    "kind": "channel",
                    "publish_time": self.now,
                    "key": key,
                    "value": None if value is None else value.json(),
                    "message_id": f"1:{offset}",
                    "producer": None if producer is None else "syncer" if producer == SYNCER else broker_name(producer),
                }
            )

    def compact(self) -> None:
        """Strategic compaction of the whole log (``Topic.compact``'s one implementation)."""
        topic = self.topic()
        log = topic.log
        kept_before = [(offset, log[offset].key, _value(log[offset])) for offset in topic.compacted]
        done = compaction(
            kept_before,
            (
                (offset, log[offset].key, _value(log[offset]))
                for offset in range(topic.horizon, topic.end)
                if not isinstance(log[offset].value, Raw)
            ),
            self.p.topic_rules,
            self.variant.compaction_keeps_tombstones,
        )
        topic.compacted = done.survivors
        topic.horizon = topic.end

    # -- table views -------------------------------------------------------------------------------------
    def view_set(self, view: View, owner: int, key: str, value: Rec | None) -> None:
        """The one place a view's map changes (keeps its owned set in step)."""
        if value is None:
            if key in view.items:
                view.items = view.items.delete(key)
            if key in view.owned:
                view.owned = view.owned.delete(key)
            return
        held = view.items.get(key)
        if held is None:
            view.items = view.items.set(key, (view.seq, value))
            view.seq += 1
        else:
            view.items = view.items.set(key, (held[0], value))
        state = value.state
        if (state is S.Owned and value.dst_broker == owner) or (state is S.Splitting and value.source_broker == owner):
            if key not in view.owned:
                view.owned = view.owned.set(key, True)
        elif key in view.owned:
            view.owned = view.owned.delete(key)

    def view_replace(self, view: View, owner: int, items: Sequence[tuple[str, Rec]]) -> None:
        view.items, view.owned, view.seq = immutables.Map(), immutables.Map(), 0
        for key, value in items:
            self.view_set(view, owner, key, value)

    def topic_next(self, view: View) -> Msg | None:
        """The message a read-compacted reader takes next (None at the end), moving its position."""
        topic = self.s.topic
        assert view.position is not None
        offset = topic.next_for(view.position)
        if offset is None:
            view.position = max(view.position, min(topic.horizon, topic.end))
            return None
        view.position = offset + 1
        return topic.log[offset]

    def reader_has_next(self, view: View) -> bool:
        return self.s.topic.next_for(view.position) is not None  # type: ignore[arg-type]

    def deliver(self, i: int, notify: bool = True) -> bool:
        """``SystemTopicTableView``: the broker's reader takes the next message and the resolver
        decides whether the view takes it; the tail listener (Pulsar's ``handleEvent``) hears of it."""
        view = self.view(i)
        message = self.topic_next(view)
        if message is None:
            return False
        value = message.value
        if isinstance(value, Raw):
            return True  # a malformed message: counted and skipped
        key = message.key
        verdict = decide(self.p.topic_rules, view.get(key), value)
        if verdict.accepted:
            self.view_set(view, i, key, value)
            if notify:
                self.handle_event(i, key, value)
        if self.trace:
            self._observe_view(i, key, value if verdict.accepted or value is None else None, verdict.accepted)
        return True

    def catch_up(self, i: int) -> None:
        """A producer flush and a table-view refresh: read to the end of the log (store views: nothing)."""
        view = self.brokers[i].view
        if view.position is None:
            return
        lag = self.s.topic.end - view.position
        read = 0
        while read < lag and self.deliver(i):
            read += 1

    def store_read(self, owner: Owner, key: str) -> Rec | None:
        node = self.zk_get(owner, key)
        return None if node is None or not isinstance(node.data, Rec) else node.data

    def store_refresh(self, i: int, key: str) -> None:
        """``ServiceUnitStateMetadataStoreTableViewImpl``: read the node again; an equal value changes
        nothing and calls nobody (``updateData``)."""
        try:
            value = self.store_read(self._owner(i), key)
        except SessionExpiredError:
            return
        view = self.brokers[i].view
        if view.get(key) == value:
            return
        self.view_set(self.view(i), i, key, value)
        if self.trace:
            self._observe_view(i, key, value, True)
        self.handle_event(i, key, value)

    def store_fill(self, i: int) -> None:
        """Load every channel node and tell the existing listener of each (start, session back)."""
        owner = self._owner(i)
        self._live(owner)
        store = self._store if self._store is not None else self.s.store
        loaded = sorted((key, node.data) for key, node in store.channel.items() if isinstance(node.data, Rec))
        self.view_replace(self.view(i), i, loaded)
        for key, value in self.brokers[i].view.entries():
            if self.trace:
                self._observe_view(i, key, value, True)
            self.handle_existing(i, key, value)

    def _observe_view(self, i: int, key: str, value: Rec | None, accepted: bool) -> None:
        broker = self.brokers[i]
        self.record(
            {
                "kind": "view",
                "time": self.now,
                "observer": broker_name(i),
                "incarnation": broker.incarnation,
                "key": key,
                "value": None if value is None else value.json(),
                "accepted": accepted,
            }
        )

    # -- a broker's life -----------------------------------------------------------------------------------
    def _owner(self, i: int) -> Owner:
        return (i, self.brokers[i].incarnation)

    def boot(self, i: int, incarnation: int, ready: bool = True) -> None:
        """A broker starts (``ExtensibleLoadManagerImpl.start``): it registers (``BrokerRegistryImpl.start``)
        and starts its leader election; its channel starts once the broker is ready for requests
        (``runWhenReadyForIncomingRequests`` → ``ServiceUnitStateChannelImpl.start``). At the
        cluster's start that is at once (``ready``); a restarted broker queues it as a task
        (:meth:`start_channel`), and until then it is registered but acts on nothing (#25715)."""
        old = self.brokers[i] if i < len(self.brokers) else None
        view = View(None)
        broker = Broker(i, incarnation, view, Client(self.new_session()))
        if old is None:
            self.brokers.append(broker)
        else:
            if old.client.live:  # a crashed incarnation's session lives on until ZooKeeper expires it
                dead = dict(self.s.dead_clients)
                dead[(i, old.incarnation)] = old.client
                self.s.dead_clients = dead
            self.brokers[i] = broker
        self._drafts.add(i)
        self._views.add(i)
        self._clients.add(i)
        self.op("connect", (i, incarnation))
        self.register(i)
        if ready:
            self.read_leader(i)
            self.start_channel(i)
            if broker.leader_view is None:
                self.try_lead(i)
            return
        self.read_leader(i)
        if self.brokers[i].leader_view is None:
            self.try_lead(i)  # the election starts with the registry; playing its role waits for the channel
        self.queue(i, Task(TaskKind.start, "", None))

    def start_channel(self, i: int) -> None:
        """``ServiceUnitStateChannelImpl.start``: the leader read, the table view started (the tail
        listener set up, the channel loaded, ``handleExisting`` for each item), the channel
        ``Started``; then the leader's role is played (``playLeader`` → the ownership monitor). On
        the metadata store without a session the view cannot load: the start fails and the broker
        stops (``failStarting``), as a crash."""
        broker = self.b(i)
        on_store = self.p.on_store
        if on_store and not broker.client.connected:
            self.count("start-failed")
            self.crash(i)
            return
        self.read_leader(i)
        view = self.view(i)
        if on_store:
            self.store_fill(i)
        else:
            view.position = 0
            while self.deliver(i, notify=False):
                pass
            for key, value in broker.view.entries():
                self.handle_existing(i, key, value)
        self.view(i).started = True
        broker.channel = ChannelState.Started
        if broker.leader_view == (i, False) and not broker.monitor_scheduled:
            broker.monitor_scheduled = True
            self.schedule(TimerKind.monitor, i, 0)

    def register(self, i: int) -> None:
        """``BrokerRegistryImpl.register``: the ephemeral registry node (#23298: a restarted broker
        overwrites its old session's node, without a version check)."""
        owner = self._owner(i)
        data = Registration(i, owner[1])
        try:
            if self.zk_get(owner, i) is None:
                self.zk_create(owner, i, data, ephemeral=True)
            else:
                self.zk_set(owner, i, data)
        except StoreError:
            self.count("register-failed")

    def is_registered(self, i: int, other: int | None) -> bool | None:
        """Whether ``other`` is in the registry, as broker ``i`` can tell: ``BrokerRegistry.lookupAsync``
        through the metadata cache, which without a session serves what it last loaded
        (``AbstractMetadataStore``: no reload while disconnected). None: the read fails (nothing
        cached)."""
        try:
            self._live(self._owner(i))
        except SessionExpiredError:
            stale = self.brokers[i].registry_stale
            return None if stale is None else other is not None and other in stale
        return other is not None and self.registered(other)

    def registered_brokers(self, i: int) -> list[int] | None:
        """``BrokerRegistry.getAvailableBrokersAsync``: the registry's children, by name. Without a
        session the metadata cache serves the list it last loaded (stale: it still names this
        broker and any broker gone since); None when nothing was cached: the read fails, and its
        caller writes nothing (``overrideOwnership``, ``monitorOwnerships``)."""
        try:
            self._live(self._owner(i))
        except SessionExpiredError:
            stale = self.brokers[i].registry_stale
            return None if stale is None else sorted(stale, key=self.p.rank.__getitem__)
        store = self._store if self._store is not None else self.s.store
        brokers = sorted(store.registry, key=self.p.rank.__getitem__)
        if self.variant.registry_read_without_wait:
            broker = self.b(i)
            broker.registry_cache = broker.registry_cache | frozenset(brokers)  # placement loads every entry
        return brokers

    def healthy(self, i: int) -> bool:
        """Pulsar's broker health check: the broker answers and its channel runs."""
        broker = self.brokers[i]
        return broker.alive and broker.channel is ChannelState.Started and self.registered(i)

    def registered(self, i: int) -> bool:
        store = self._store if self._store is not None else self.s.store
        return i in store.registry

    def schedule(
        self, kind: TimerKind, i: int, delay: int, key: str = "", target: int | None = None, attempt: int = 0,
        graceful: bool = False, incarnation: int | None = None,
    ) -> Timer:  # fmt: skip
        self.s.seq += 1
        broker = self.brokers[i]
        timer = Timer(
            self.now + max(0, delay),
            self.s.seq,
            kind,
            i,
            broker.incarnation if incarnation is None else incarnation,
            key,
            target,
            attempt,
            graceful,
        )
        timers = self.timers()
        at = len(timers)
        while at > 0 and (timers[at - 1].due, timers[at - 1].seq) > (timer.due, timer.seq):
            at -= 1
        timers.insert(at, timer)
        return timer

    def drop_timers(self, i: int) -> None:
        """A broker's timers die with its incarnation (ZooKeeper's session expiry is not the broker's),
        those this step scheduled too (a shutdown that closes at once drops its own wait's timer)."""
        timers = self.s.timers if self._timers is None else self._timers
        if any(t.broker == i and t.kind is not TimerKind.session_expiry for t in timers):
            self._timers = [t for t in self.timers() if t.broker != i or t.kind is TimerKind.session_expiry]

    def crash(self, i: int) -> None:
        """The process is gone; its session lives until the store times it out."""
        broker = self.b(i)
        broker.alive = False
        broker.channel = ChannelState.Closed
        broker.tasks = ()
        broker.lookups = {}
        broker.unloads = {}
        self.view(i).closed = True
        cold = self.cold()
        cold.crash_times = {**cold.crash_times, i: self.now}
        self.drop_timers(i)
        self.schedule(TimerKind.session_expiry, i, self.p.channel.session_timeout_ms)

    def shutdown(self, i: int) -> None:
        """``ExtensibleLoadManagerImpl.disableBroker``, first half: the channel disabled and the
        broker's own bundles handed over (``cleanOwnerships`` → ``doCleanup(brokerId, true)``),
        still registered. Once the clean-up's wait ends (``waitForCleanups``: at once when its view
        shows nothing of it ``Owned``, at the latest after ``OWNERSHIP_CLEAN_UP_MAX_WAIT_TIME_IN_MILLIS``)
        it leaves (:meth:`leave`); the process stops when that wait has run out."""
        broker = self.b(i)
        broker.channel = ChannelState.Disabled
        broker.shutting_down = True
        self.schedule(TimerKind.shutdown_complete, i, OWNERSHIP_CLEAN_UP_MAX_WAIT_TIME_IN_MILLIS)
        if self.do_cleanup(i, i, gracefully=True):
            self.leave(i)

    def leave(self, i: int) -> None:
        """``disableBroker``, second half: ``BrokerRegistry.unregister``, ``LeaderElectionService.close``
        (the election's node deleted if this broker leads), then, when ``getAvailableBrokersAsync``
        names nobody, the load manager closed at once (``close()``: the channel's table view closed,
        so nothing more is handled or written; the model ends the process with it, as nothing of
        the broker is observable between). A failed unregister (no session) ends ``disableBroker``
        there: the channel stays open until the process stops. Idempotent."""
        broker = self.brokers[i]
        if not broker.alive or broker.channel is ChannelState.Closed:
            return
        owner = self._owner(i)
        try:
            if self.zk_get(owner, i) is not None:
                self.zk_delete(owner, i)
        except StoreError:
            # disableBroker ends with the exception: still registered (selectable) until its session
            # closes, so not a complete departure either (departure-complete leaves it out)
            self.count("unregister-failed")
            cold = self.cold()
            cold.abandoned = cold.abandoned | {i}
            return
        with contextlib.suppress(StoreError):
            node = self.zk_get(owner, LEADER_PATH)
            if node is not None and node.data == (i, self.variant.leader_id_mismatch):
                self.zk_delete(owner, LEADER_PATH)  # LeaderElectionImpl.close: give the leadership up
        self.b(i).leader_view = None
        if self.registered_brokers(i) == []:
            self.count("closed-at-once")
            self.shutdown_complete(i)

    def shutdown_complete(self, i: int) -> None:
        """The broker's shutdown ends: the load manager, the channel and the metadata session closed."""
        broker = self.b(i)
        broker.alive = False
        broker.channel = ChannelState.Closed
        broker.tasks = ()
        broker.unloads = {}
        self.view(i).closed = True
        self.close_client(self._owner(i))
        self.drop_timers(i)
        cold = self.cold()
        if i not in cold.abandoned:  # a departure whose clean-up was skipped is not a complete one
            cold.departed = cold.departed | {i}

    # -- publishing ----------------------------------------------------------------------------------------
    def rec(
        self,
        state: S,
        dst: int | None,
        src: int | None,
        version: int,
        force: bool = False,
        split: tuple[tuple[str, int | None], ...] | None = None,
    ) -> Rec:
        if state is not S.Free and dst is None and src is None:
            raise ValueError(
                f"Empty broker: a {state.value} value needs dstBroker or sourceBroker (only Free may have neither)"
            )
        return Rec(state, dst, src, version, force, self.now, split)

    def publish(self, i: int, key: str, value: Rec | None) -> tuple[Put, PutResult | None] | None:
        """Write to the channel. On the metadata store a put is Pulsar's read-modify-CAS: the read
        and the resolver run now, the compare-and-set is the broker's next task, so another
        broker's write can come between them (the race of #24186). Returns that put and its result
        (a put the resolver refuses is done at once), or None: on the system topic, for a
        tombstone, or when the broker has no session."""
        if value is not None and value.dst_broker != i and value.dst_broker in self.s.cold.departed:
            # a registry read from before the departure named a broker that has left
            late = self.cold()
            late.named_late = late.named_late | {(key, value.dst_broker, value.version_id)}
        if not self.p.on_store:
            self.publish_message(key, value, i)
            return None
        owner = self._owner(i)
        if value is None:
            try:
                self.zk_delete(owner, key)
            except NoNodeError:
                pass
            except SessionExpiredError:
                return None
            self.store_refresh(i, key)
            return None
        try:
            node = self.zk_get(owner, key)
        except SessionExpiredError:
            return None
        prev = None if node is None or not isinstance(node.data, Rec) else node.data
        put = Put(key, value, None if node is None else node.version, decide(self.p.store_rules, prev, value))
        if put.verdict.rejected:
            return put, (False, False)  # counted as refused; nothing to write
        broker = self.b(i)
        tasks = broker.tasks
        first_other = 0
        while first_other < len(tasks) and tasks[first_other].kind is TaskKind.commit:
            first_other += 1
        broker.tasks = (*tasks[:first_other], Task(TaskKind.commit, key, value, put=put), *tasks[first_other:])
        return put, None

    def commit_put(self, i: int, put: Put) -> tuple[PutResult, str | None]:
        """The compare-and-set half of the write (``ServiceUnitStateMetadataStoreTableViewImpl.put``):
        a lost race completes without error but applies nothing (#24186 put back: retried at the new
        version without the resolver). Returns the result and the store's error, if any."""
        owner = self._owner(i)
        try:
            self.zk_put(owner, put.key, put.value, -1 if put.read_version is None else put.read_version)
        except (BadVersionError, NodeExistsError, NoNodeError) as exc:
            if not self.variant.store_retry_without_recheck:
                # MetadataStoreTableViewImpl.put: a ConflictException, completed as success by
                # ServiceUnitStateMetadataStoreTableViewImpl.put (nothing applied, no error)
                return (False, False), f"conflict: {type(exc).__name__}"
            self.zk_put(owner, put.key, put.value, None)
        except SessionExpiredError as exc:
            return (False, True), str(exc)
        self.store_refresh(i, put.key)
        return (True, False), None

    # -- the tail listener: ServiceUnitStateChannelImpl.handleEvent ------------------------------------
    def handle_event(self, i: int, key: str, data: Rec | None) -> None:
        broker = self.brokers[i]
        if not broker.alive:
            return
        if broker.channel is ChannelState.Disabled and (data is None or not data.force):
            self.finish_lookup(i, key, None, error="ServiceUnitNotReadyException: channel disabled")
            return
        state = S.Init if data is None else data.state
        handled = self.out.handled
        handled[(i, state.value)] = handled.get((i, state.value), 0) + 1
        if data is None or state is S.Init:
            self.finish_lookup(i, key, None)
        elif state is S.Assigning:
            if data.dst_broker == i:
                self.queue(i, Task(TaskKind.own, key, data))
        elif state is S.Owned:
            self.finish_lookup(i, key, data.dst_broker)
            if data.dst_broker != i and data.source_broker == i:
                transfer = data.dst_broker is not None and data.source_broker is not None
                if data.force or (transfer and self.p.channel.multi_phase_unload):
                    self.close_unit(i, key)
        elif state is S.Releasing:
            if data.source_broker == i:
                self.close_unit(i, key)
                self.queue(i, Task(TaskKind.release, key, data))
        elif state is S.Splitting:
            if self.variant.split_event_answers_lookups:
                self.finish_lookup(i, key, data.source_broker)  # fix 10: as getOwnerAsync answers a Splitting
            if data.source_broker == i:
                self.queue(i, Task(TaskKind.split, key, data))
        elif state is S.Free:
            self.finish_lookup(i, key, None)
            if data.source_broker == i and data.force:
                self.close_unit(i, key)
                if not self.variant.semi_terminal_waits_for_monitor:
                    self.queue(i, Task(TaskKind.tombstone, key, data))  # #22743: at once
        elif state is S.Deleted:
            self.finish_lookup(i, key, None, error=f"IllegalArgumentException: {key} is deleted.")
            # #22743: at once; fix 03/08: the split parent's Deleted stays for the monitor's tombstone delay
            if data.source_broker == i and not (
                self.variant.semi_terminal_waits_for_monitor or self.variant.keep_split_parent_deleted
            ):
                self.queue(i, Task(TaskKind.tombstone, key, data))
        if self.brokers[i].unloads:
            self.unload_event(i, key, data)

    def unload_event(self, i: int, key: str, data: Rec | None) -> None:
        """Pulsar's UnloadManager on this broker: an unload it issued is done on its bundle's Free,
        on an Owned with a source (a transfer's end, an override), or on the tombstone. Since
        #22379 an assignment's Owned or Assigning (no source) is not an unload's end; since #22859
        a forced Free waits for its tombstone, and the tombstone ends the unload."""
        if key not in self.brokers[i].unloads:
            return
        variant = self.variant
        if data is None or data.state is S.Init:
            done = not variant.forced_unload_never_done
        elif data.state is S.Free:
            done = not data.force or variant.unload_done_on_any_owned
        elif data.state is S.Owned:
            done = data.source_broker is not None or variant.unload_done_on_any_owned
        else:
            done = False
        if done:
            broker = self.b(i)
            unloads = dict(broker.unloads)
            del unloads[key]
            broker.unloads = unloads

    def handle_existing(self, i: int, key: str, data: Rec) -> None:
        """Items already in the view at start: Owned by us is loaded; since #25379 an Assigning
        to us is taken over as the event would have been. With fix 02 so is every record whose
        source we are and whose event the source acts on (a previous incarnation's, never
        delivered to this one): a Releasing or a Splitting is run, a Deleted or a forced Free
        tombstoned."""
        variant = self.variant
        if data.state is S.Assigning and data.dst_broker == i and not variant.ignore_existing_assigning:
            self.queue(i, Task(TaskKind.own, key, data))
        elif variant.act_on_existing_in_flight and data.source_broker == i:
            if data.state is S.Releasing:
                self.close_unit(i, key)
                self.queue(i, Task(TaskKind.release, key, data))
            elif data.state is S.Splitting:
                self.queue(i, Task(TaskKind.split, key, data))
            elif variant.semi_terminal_waits_for_monitor:
                return  # #22743 put back: the monitor tombstones it
            elif data.state is S.Free and data.force:
                self.close_unit(i, key)
                self.queue(i, Task(TaskKind.tombstone, key, data))
            elif data.state is S.Deleted and not variant.keep_split_parent_deleted:
                self.queue(i, Task(TaskKind.tombstone, key, data))

    def handle_invalidate(self, i: int, key: str, data: Rec) -> None:
        """Metadata session lost: close what this broker serves (clients disconnected)."""
        if data.dst_broker == i:
            self.close_unit(i, key)

    def queue(self, i: int, task: Task) -> None:
        broker = self.b(i)
        broker.tasks = (*broker.tasks, task)

    # -- tasks -----------------------------------------------------------------------------------------
    def run_task(self, i: int) -> bool:
        broker = self.b(i)
        if not broker.tasks:
            return False
        task, broker.tasks = broker.tasks[0], broker.tasks[1:]
        data = task.data
        kind = task.kind
        if broker.channel is not ChannelState.Started and kind in _WRITERS and not self.variant.assign_after_disable:
            self.count("late-write-refused")  # #26520: no writes after disable
            self.finish_lookup(i, task.key, None, error="ServiceUnitNotReadyException: channel disabled")
            return True
        if kind is TaskKind.start:
            self.start_channel(i)
            return True
        if kind is TaskKind.commit and task.put is not None:
            result: PutResult | None = None
            error = None
            with contextlib.suppress(StoreError):
                result, error = self.commit_put(i, task.put)
            if result is not None:
                self._settle_waits(i, task.put, result)
            failed = error is not None and not error.startswith("conflict")
            if failed and data is not None and data.state is S.Assigning and data.source_broker is None:
                # an assignment's put failed (no session): the lookup waiting on it fails with it
                self.finish_lookup(i, task.key, None, error=f"MetadataStoreException: {error}")
        elif kind is TaskKind.own and data is not None:
            self.publish(i, task.key, self.rec(S.Owned, data.dst_broker, data.source_broker, _next(data)))
        elif kind is TaskKind.release and data is not None:
            if data.dst_broker is None:
                # handleReleaseEvent: a Free that is not forced, whether the Releasing was or not
                self.publish(i, task.key, self.rec(S.Free, None, data.source_broker, _next(data)))
            else:
                self.publish(i, task.key, self.rec(S.Assigning, data.dst_broker, data.source_broker, _next(data)))
        elif kind is TaskKind.split and data is not None:
            # handleSplitEvent -> splitServiceUnit: the split runs on the event's record, unread again
            current = self.brokers[i].view.get(task.key) if self.variant.split_rereads_parent else None
            if current is not None and current.state is S.Splitting and current.source_broker != i:
                # safer than Pulsar: the parent's Splitting moved on (the leader handed it over); not ours now
                self.count("split-moved")
            elif self.variant.split_needs_registration and not self.registered_now(i):
                # fix 04: out of the registry the leader may be handing this split over; set it aside
                # (taken up again when this broker registers: resume_splits)
                self.count("split-set-aside")
            else:
                self.split(i, task.key, data)
        elif kind is TaskKind.split_bundles and data is not None:
            self.split_bundles(i, task.key, data, task.waits)
        elif kind is TaskKind.tombstone:
            if self.variant.conditional_tombstones and not self.tombstone_lands(i, task.key, data):
                self.count("tombstone-dropped")  # fix 09: a newer record took the key
            else:
                self.publish(i, task.key, None)
        elif kind is TaskKind.assign and task.target is not None:
            self.publish_assign(i, task.key, task.target)
        return True

    def _settle_waits(self, i: int, put: Put, result: PutResult) -> None:
        """A split waiting on this write learns its result."""
        broker = self.brokers[i]
        if not any(t.kind is TaskKind.split_bundles for t in broker.tasks):
            return
        self.b(i).tasks = tuple(
            Task(t.kind, t.key, t.data, t.target, t.put, tuple((p, result if p is put else r) for p, r in t.waits))
            if t.kind is TaskKind.split_bundles and any(p is put for p, _ in t.waits)
            else t
            for t in broker.tasks
        )

    def split(self, i: int, key: str, data: Rec) -> None:
        """Pulsar's ``ownChildBundles``: each child not yet in the view is written ``Owned`` by this
        broker; the namespace's bundles change only once those writes are done. On the metadata
        store each is a compare-and-set still to come, so the rest waits for them as a task."""
        waits: list[tuple[Put, PutResult | None]] = []
        for child in _children(key, data):
            if self.brokers[i].view.get(child.key) is None:
                put = self.publish(i, child.key, self.rec(S.Owned, i, None, VERSION_ID_INIT))
                if self.p.on_store:
                    if put is None:  # no session: the put fails at once, and the split with it
                        self.split_failed(key)
                        return
                    waits.append(put)
        if waits:
            self.queue(i, Task(TaskKind.split_bundles, key, data, waits=tuple(waits)))
        else:
            self.split_bundles(i, key, data)

    def split_bundles(self, i: int, key: str, data: Rec, waits: Sequence[tuple[Put, PutResult | None]] = ()) -> None:
        """The children are written: update the namespace's bundles, then delete the parent. A
        child's write that the resolver refuses or whose compare-and-set is lost completes as
        success (``MetadataStoreTableViewImpl.put`` raises ``ConflictException``, which
        ``ServiceUnitStateMetadataStoreTableViewImpl.put`` completes normally), so the split goes on;
        only a store error (no session) fails it."""
        if any(result is None or result[1] for _, result in waits):
            self.split_failed(key)
            return
        attempts = 0
        while attempts < BUNDLE_SPLIT_RETRY_LIMIT and self.s.cold.split_failures > 0:
            self.cold().split_failures -= 1  # BadVersionException on the bundle metadata; retried
            attempts += 1
        if attempts == BUNDLE_SPLIT_RETRY_LIMIT:
            self.split_failed(key)
            return
        self.replace_bundle(parse_key(key), _children(key, data))
        self.publish(i, key, self.rec(S.Deleted, None, i, _next(data)))

    def split_failed(self, key: str) -> None:
        """ServiceUnitNotReadyException: the parent stays Splitting until the leader overrides it."""
        self.count("split-failed")
        cold = self.cold()
        cold.failed_splits = cold.failed_splits | {key}

    def replace_bundle(self, parent: Bundle, children: list[Bundle]) -> None:
        cold = self.cold()
        cold.bundles = cold.bundles.replaced(parent, children)

    def registered_now(self, i: int) -> bool:
        """``BrokerRegistry.isRegistered``: this broker has a session and its registry node (also
        fix 04's condition for splitting)."""
        return self.brokers[i].client.connected and self.is_registered(i, i) is True

    def resume_splits(self, i: int) -> None:
        """Fix 04, on registering again (the view read to its end first): each Splitting whose
        source is this broker, and that no queued task will split, is split now."""
        if not self.registered_now(i):
            return
        queued = {task.key for task in self.brokers[i].tasks if task.kind is TaskKind.split}
        for key, data in self.brokers[i].view.entries():
            if data.state is S.Splitting and data.source_broker == i and key not in queued:
                self.queue(i, Task(TaskKind.split, key, data))

    def tombstone_lands(self, i: int, key: str, data: Rec | None) -> bool:
        """Fix 09: whether a tombstone answering ``data`` would take effect. On the metadata store it is
        a delete at the version of the node read: only while the node still holds ``data``. On the
        system topic, the resolver accepting a tombstone only over a record that is not active."""
        if self.p.on_store:
            try:
                node = self.zk_get(self._owner(i), key)
            except SessionExpiredError:
                return False
            return node is not None and node.data == data
        held = self.s.topic.settled.get(key)
        return held is None or held.state not in self.p.active

    # -- lookups: ServiceUnitStateChannelImpl.getOwnerAsync -----------------------------------------------
    def lookup(self, i: int, key: str) -> None:
        """Pulsar's getOwnerAsync; an unowned bundle is assigned (the answer waits while deferred)."""
        broker = self.brokers[i]
        data = broker.view.get(key)
        state = S.Init if data is None else data.state
        if broker.channel is ChannelState.Disabled:
            self.disabled_lookup(i, key, data)
            return
        if (
            data is not None
            and (state in (S.Owned, S.Splitting) or (state in (S.Assigning, S.Releasing) and data.dst_broker == i))
            and not self.variant.unregistered_lookup_checks_owner
            and not self.registered_now(i)
        ):
            # getActiveOwnerAsync: with this broker out of the registry (its metadata session
            # unstable) the stored owner is answered at once, without the active-owner check
            # (ServiceUnitStateChannelTest.testActiveGetOwner)
            owner = data.source_broker if state is S.Splitting else data.dst_broker
            self.answer(i, key, owner, None, unchecked=True)
            return
        if data is not None and state in (S.Owned, S.Splitting):
            owner = data.dst_broker if state is S.Owned else data.source_broker
            if self.variant.lookup_skips_owner_check:
                self.answer(i, key, owner, None)  # #21811 put back: no active-owner check
                return
            if self.variant.registry_read_without_wait and owner not in broker.registry_cache:
                # #22899 put back: the cache's first read of the owner is still loading, so the owner
                # looks inactive and the lookup defers (the load lands before the next read)
                draft = self.b(i)
                draft.registry_cache = draft.registry_cache | ({owner} if owner is not None else set())
                self.defer(i, key)
                return
            registered = self.is_registered(i, owner)
            if registered or (registered is None and self.answers_unchecked(i)):
                self.answer(i, key, owner, None)
            elif registered is None:
                self.answer(i, key, None, "MetadataStoreException: this broker is not registered")
            else:
                self.defer(i, key)
            return
        if data is not None and state in (S.Assigning, S.Releasing):
            if data.dst_broker == i:
                self.defer(i, key)
            else:
                self.answer(i, key, data.dst_broker, None, redirect=True)
            return
        if state is S.Deleted:
            self.answer(i, key, None, f"IllegalArgumentException: {key} is deleted.")
            return
        # Init or Free: the load manager picks a broker and assigns
        if key not in self.s.bundle_keys():
            self.answer(i, key, None, "bundle not in the namespace's bundles")
            return
        available = self.registered_brokers(i)
        if available is None:
            self.answer(i, key, None, "MetadataStoreException: the registry could not be read")
            return
        selected = self.place(available)
        if selected is None:
            self.answer(i, key, None, "no broker available")
            return
        self.queue(i, Task(TaskKind.assign, key, None, selected))
        if not self.variant.assign_defers_late:
            self.defer(i, key)  # #20677: deferred as the view is read, so the next event answers it

    def disabled_lookup(self, i: int, key: str, data: Rec | None) -> None:
        """Master's lookup on a disabled channel (#24770; a broker shutting down gracefully): the
        stored owner of an Owned or Splitting bundle with no liveness check; an in-flight bundle's
        destination, or a deferral when that is this broker; nothing for any other state (no
        assignment: a disabled channel publishes nothing)."""
        state = S.Init if data is None else data.state
        if data is not None and state in (S.Owned, S.Splitting):
            owner = data.dst_broker if state is S.Owned else data.source_broker
            self.answer(i, key, owner, None, unchecked=True)
        elif data is not None and state in (S.Assigning, S.Releasing):
            if data.dst_broker == i:
                self.defer(i, key)
            else:
                self.answer(i, key, data.dst_broker, None, redirect=True)
        else:
            self.answer(i, key, None, None)

    def publish_assign(self, i: int, key: str, selected: int) -> None:
        if key not in self.s.bundle_keys() and not self.variant.assign_without_namespace_check:
            # the bundle was split after the lookup chose a broker (see docs/findings.md, 3; master
            # has no such check: assign_without_namespace_check)
            self.finish_lookup(i, key, None, error=f"{key} no longer exists: it was split")
            return
        if not self.variant.assign_after_disable and not self.is_registered(i, selected):
            available = self.registered_brokers(i)
            replacement = None if available is None else self.place(available)
            if replacement is None:
                self.finish_lookup(i, key, None, error="no broker available")
                return
            selected = replacement
        held = self.brokers[i].view.get(key)
        if self.variant.assign_defers_late:
            # #20677 put back: the lookup defers now, whatever the view holds, and the Assigning is
            # published even over a newer state (the resolver refuses it; nothing answers the lookup)
            self.defer(i, key)
        elif held is not None and held.state is not S.Free:
            return  # someone else got there first: the pending lookup completes on their Owned
        put = self.publish(i, key, self.rec(S.Assigning, selected, None, _next(held)))
        if put is None and self.p.on_store:
            # the put failed (no session): so does the lookup's future (publishAssignEventAsync)
            self.finish_lookup(i, key, None, error="MetadataStoreException: the assignment could not be written")

    def defer(self, i: int, key: str) -> None:
        broker = self.brokers[i]
        if key not in broker.lookups:
            deadline = self.now + self.p.channel.in_flight_wait_ms
            draft = self.b(i)
            draft.lookups = {**broker.lookups, key: deadline}
            self.schedule(TimerKind.lookup_timeout, i, deadline - self.now, key)

    def answer(
        self,
        i: int,
        key: str,
        owner: int | None,
        error: str | None,
        deferred: bool = False,
        redirect: bool = False,
        unchecked: bool = False,
    ) -> None:
        self.out.answers.append(
            LookupAnswer(
                self.now,
                broker_name(i),
                key,
                None if owner is None else broker_name(owner),
                error,
                owner is not None and self.registered(owner),
                deferred,
                redirect,
                unchecked,
            )
        )

    def finish_lookup(self, i: int, key: str, owner: int | None, error: str | None = None) -> None:
        broker = self.brokers[i]
        if key not in broker.lookups:
            return
        draft = self.b(i)
        lookups = dict(broker.lookups)
        del lookups[key]
        draft.lookups = lookups
        if error is None and owner is not None and not self.variant.lookup_skips_owner_check:
            registered = self.is_registered(i, owner)
            if registered is False:
                error = f"IllegalStateException: The new owner {broker_name(owner)} is inactive."
                owner = None
            elif registered is None and not self.answers_unchecked(i):
                error = "MetadataStoreException: this broker is not registered"
                owner = None
        # getActiveOwnerAsync's lookupAsync without a session reads the metadata cache: a stale answer
        stale = owner is not None and not broker.client.connected
        self.answer(i, key, owner, error, deferred=True, unchecked=stale)

    def answers_unchecked(self, i: int) -> bool:
        """Whether, with no metadata session, this broker still answers from its view (#24478)."""
        return not self.p.on_store and self.variant.stale_after_session_loss

    def lookup_timed_out(self, i: int, key: str) -> None:
        broker = self.brokers[i]
        if key not in broker.lookups:
            return
        data = broker.view.get(key)
        state = S.Init if data is None else data.state
        if data is not None and state is S.Owned:
            self.finish_lookup(i, key, data.dst_broker)
        elif data is not None and state is S.Splitting:
            self.finish_lookup(i, key, data.source_broker)
        elif state in (S.Init, S.Free):
            self.finish_lookup(i, key, None)
        else:
            self.finish_lookup(i, key, None, error=f"IllegalStateException: lookup timed out in {state.value}")

    # -- placement: LeastResourceUsageWithWeight or uniform -----------------------------------------------
    def place(self, candidates: Sequence[int]) -> int | None:
        """Placement's choice among ``candidates`` (in name order). ``LeastResourceUsageWithWeight``:
        a random choice among the brokers within the difference threshold of the least loaded;
        or any broker, uniformly; or the balancer's own decision (``Placer``)."""
        self.current_loads()
        if self.placer is not None:
            chosen = self.placer([broker_name(b) for b in candidates])
            return None if chosen is None else broker_id(chosen)
        if not candidates:
            return None
        if self.p.uniform:
            return candidates[self.pick(len(candidates))]
        near, loads = near_best(candidates, self.s.cold.loads, self.p.weights)
        self.cold().loads = tuple(loads)
        return near[self.pick(len(near))]

    def pick(self, width: int) -> int:
        index = self.choose(width)
        self.out.widths.append(width)
        self.out.picks.append(index)
        return index

    def current_loads(self) -> None:
        cold = self.s.cold
        if cold.loads_at < 0 or self.now - cold.loads_at >= LOAD_REPORT_INTERVAL_MS:
            cold = self.cold()
            cold.loads = tuple(
                Load.of_bundles(len(b.serving()), load.history)
                for b, load in zip(self.brokers, cold.loads, strict=True)
            )
            cold.loads_at = self.now

    # -- metadata events ---------------------------------------------------------------------------------
    def notify(self, i: int) -> bool:
        """The broker's client delivers its oldest queued event: to the broker's handler first,
        then to its metadata-store view."""
        client = self.client(i)
        if not client.queue:
            return False
        event, client.queue = client.queue[0], client.queue[1:]
        self.delivered((i, self.brokers[i].incarnation), event)
        store_view = self.p.on_store
        reading = store_view and self.brokers[i].view.started and not self.brokers[i].view.closed
        if isinstance(event, SessionEvent):
            self.on_session_event(i, event)
            if reading:
                self.view_session_event(i, event)
        else:
            self.on_notification(i, event[1], event[0])
            path = event[1]
            if reading and isinstance(path, str) and path != LEADER_PATH:
                self.store_refresh(i, path)
        return True

    def delivered(self, owner: Owner, event: Event) -> None:
        if self.ops is not None:
            if isinstance(event, SessionEvent):
                self.op("deliver", owner, None, None, None, event.value)
            else:
                self.op("deliver", owner, event[1], None, None, event[0].value)

    def view_session_event(self, i: int, event: SessionEvent) -> None:
        if event is SessionEvent.SessionLost:
            view = self.brokers[i].view
            for key, value in view.entries():
                if self.trace:
                    self._observe_view(i, key, None, True)
                self.handle_invalidate(i, key, value)
            self.view_replace(self.view(i), i, ())
        else:
            with contextlib.suppress(SessionExpiredError):
                self.store_fill(i)

    def on_notification(self, i: int, path: Path, event: NodeEvent) -> None:
        broker = self.brokers[i]
        if not broker.alive:
            return
        if path == LEADER_PATH:
            self.read_leader(i)
            if self.brokers[i].leader_view is None:
                self.try_lead(i)
        elif isinstance(path, int):
            if (
                path == i
                and event is NodeEvent.Deleted
                and (not broker.shutting_down or self.variant.registry_not_sticky)
                and not self.variant.no_reregister_on_deletion
            ):
                fix = self.variant.split_needs_registration
                if fix:
                    self.catch_up(i)  # fix 04: learn what was overridden while out of the registry
                self.register(i)  # #23359: re-register when our own node goes
                if fix:
                    self.resume_splits(i)
            if self.brokers[i].is_leader and path != i:
                if event is NodeEvent.Deleted:
                    self.handle_broker_deletion(i, path)
                elif event is NodeEvent.Created and path in self.brokers[i].jobs:
                    # the broker is back: its clean-up job is dropped, and cancelled if it is healthy
                    broker = self.b(i)
                    jobs = dict(broker.jobs)
                    timer = jobs.pop(path)
                    broker.jobs = jobs
                    if self.healthy(path):
                        self._timers = [t for t in self.timers() if t is not timer]

    def on_session_event(self, i: int, event: SessionEvent) -> None:
        if not self.brokers[i].alive:
            return
        broker = self.b(i)
        if not (event is SessionEvent.SessionReestablished and self.variant.session_state_stale):
            broker.last_session_event = (event, self.now)  # #25132: seen by the monitor
        if event is SessionEvent.SessionLost:
            broker.leader_view = None  # the election's node went with the session
        elif event is SessionEvent.SessionReestablished:
            if broker.shutting_down:
                return  # the registry was closed by the shutdown: it does not register again
            variant = self.variant
            if not variant.stale_after_session_loss:
                self.catch_up(i)  # #24478: catch up before serving again
            if not variant.no_register_on_reconnect:
                self.register(i)  # #24932
                if variant.split_needs_registration:
                    self.resume_splits(i)  # fix 04: the view was read to its end above
            if not variant.no_election_on_reconnect:  # #23516: the election starts again
                self.read_leader(i)
                if self.brokers[i].leader_view is None:
                    self.try_lead(i)

    def read_leader(self, i: int) -> None:
        try:
            node = self.zk_get(self._owner(i), LEADER_PATH)
        except SessionExpiredError:
            return
        broker = self.b(i)
        previous = broker.leader_view
        broker.leader_view = None if node is None else node.data  # type: ignore[assignment]
        if (
            broker.leader_view == (i, False)
            and previous != (i, False)
            and not broker.monitor_scheduled
            and broker.channel is not ChannelState.Constructed  # playLeader waits for the channel's start
        ):
            broker.monitor_scheduled = True
            self.schedule(TimerKind.monitor, i, 0)

    def try_lead(self, i: int) -> None:
        broker = self.brokers[i]
        if not broker.alive or broker.shutting_down:
            return
        # #21894: the election's value once was the service URL, which matches no broker id
        elected: Elected = (i, self.variant.leader_id_mismatch)
        try:
            self.zk_create(self._owner(i), LEADER_PATH, elected, ephemeral=True)
        except StoreError:
            return
        self.record({"kind": "leader", "time": self.now, "broker": broker_name(i)})
        self.read_leader(i)

    # -- leader duties ---------------------------------------------------------------------------------------
    def metadata_state(self, i: int) -> MetadataState:
        return metadata_state(self.brokers[i], self.now)

    def handle_broker_deletion(self, i: int, target: int) -> None:
        broker = self.brokers[i]
        if broker.channel is not ChannelState.Started:
            return  # disabled or closed (channelDisabled), or not started: its registry listener is not set yet
        state = self.metadata_state(i)
        if state is MetadataState.Unstable:
            self.count("cleanup-ignored")
            return
        if target in broker.jobs:
            return
        delay = 0 if state is MetadataState.Stable else MAX_CLEAN_UP_DELAY_TIME_IN_SECS * 1000
        timer = self.schedule(TimerKind.cleanup, i, delay, target=target)
        draft = self.b(i)
        draft.jobs = {**draft.jobs, target: timer}

    def orphans_of(self, i: int, target: int) -> list[tuple[str, Rec]]:
        active, in_flight = self.p.active, self.p.in_flight
        by_source = self.variant.cleanup_by_source  # #23064 put back
        return [
            (key, data)
            for key, data in self.brokers[i].view.entries()
            if (data.dst_broker == target and data.state in active)
            or (data.source_broker == target and data.state in (active if by_source else in_flight))
        ]

    def do_cleanup(self, i: int, target: int, gracefully: bool, attempt: int = 0) -> bool:
        """``ServiceUnitStateChannelImpl.doCleanup``: override every bundle ``target`` owns or is the
        source of in flight. Returns, for a broker's own graceful clean-up, whether its wait is over
        (``waitForCleanups``: nothing of it left ``Owned`` in its view after the flush)."""
        if self.brokers[i].leader_view is None and not (gracefully and self.variant.graceful_cleanup_without_leader):
            # doCleanup: getChannelOwnerAsync is empty, so no clean-up, a graceful one included; the
            # departing broker's bundles are left to the next leader's monitor (docs/findings.md, 11)
            self.count("cleanup-skipped-no-leader")
            if gracefully:
                cold = self.cold()
                cold.abandoned = cold.abandoned | {i}
            return True
        if not gracefully and attempt == 0 and self.healthy(target):
            self.count("cleanup-skipped-healthy")
            return True
        self.catch_up(i)
        orphans = self.orphans_of(i, target)
        for key, data in orphans:
            self.override_ownership(i, key, data, target, gracefully)
        self.count("cleanup-overrides", len(orphans))
        if gracefully:
            # the flush after the overrides; waitForCleanups ends once nothing of this broker's is
            # left. Pulsar looks for its Owned bundles only; the model waits for every orphan, as a
            # disabled channel here refuses its own Releasing's follow-up (#26520) and the next
            # look overrides it
            self.catch_up(i)
            if not self.orphans_of(i, target):
                return True
        # #26520: an override can lose the race to the record it overrides; look again, from the
        # newest version, every OWNERSHIP_CLEAN_UP_WAIT_RETRY_DELAY_IN_MILLIS (master: a flush, then
        # 2.5 s) for up to OWNERSHIP_CLEAN_UP_MAX_WAIT_TIME_IN_MILLIS (a graceful clean-up polls for
        # the whole wait: its own view may not show a late write yet)
        if (
            (orphans or gracefully)
            and not self.variant.cleanup_without_retry
            and (attempt + 1) * OWNERSHIP_CLEAN_UP_WAIT_RETRY_DELAY_IN_MILLIS
            < OWNERSHIP_CLEAN_UP_MAX_WAIT_TIME_IN_MILLIS
        ):
            self.schedule(
                TimerKind.cleanup_recheck,
                i,
                OWNERSHIP_CLEAN_UP_WAIT_RETRY_DELAY_IN_MILLIS,
                target=target,
                attempt=attempt + 1,
                graceful=gracefully,
            )
        return False

    def override_ownership(self, i: int, key: str, orphan: Rec, inactive: int | None, gracefully: bool) -> None:
        available = self.registered_brokers(i)
        if available is None:
            self.count("override-read-failed")  # overrideOwnership: the read failed, nothing is written
            return
        candidates = [b for b in available if b != inactive]
        selected = self.place(candidates)
        version = _next(orphan)
        variant = self.variant
        if selected is None and variant.cleanup_keeps_unplaceable:
            self.count("orphan-left")  # #21811 put back: nobody can take it, so nothing is written
            return
        if selected is None and variant.free_override_needs_broker:
            self.count("override-refused")  # #23349 put back: a Free naming no broker is refused
            return
        if self.redirects_transfer(i, orphan, inactive, selected):
            # fix 05: the live source still releases (closes, then Assigning), towards the selected broker
            override = self.rec(S.Releasing, selected, orphan.source_broker, version, force=True)
        elif selected is None:
            src = orphan.dst_broker if orphan.state is S.Owned else orphan.source_broker
            override = self.rec(S.Free, None, src, version, force=True)
        elif orphan.state is S.Splitting and self.redrives_split(i, orphan, inactive):
            # fix 07: the first time-out re-drives the split on its registered source
            override = self.rec(S.Splitting, orphan.dst_broker, orphan.source_broker, version, True, orphan.split)
        elif orphan.state is S.Splitting:
            override = self.rec(S.Splitting, orphan.dst_broker, selected, version, True, orphan.split)
        elif orphan.state is S.Owned:
            src = None if selected == orphan.dst_broker else orphan.dst_broker
            state = S.Releasing if gracefully and src is not None else S.Owned
            override = self.rec(state, selected, src, version, force=True)
        else:
            src = None if selected == orphan.source_broker else orphan.source_broker
            override = self.rec(S.Owned, selected, src, version, force=True)
        self.publish(i, key, override)

    def redirects_transfer(self, i: int, orphan: Rec, inactive: int | None, selected: int | None) -> bool:
        """Fix 05: the orphan is a transfer to the departing broker from another broker that is
        registered, which has not released yet, and the bundle would go to a third broker (or to
        none: a plain unload)."""
        source = orphan.source_broker
        return (
            self.variant.cleanup_redirects_transfer
            and inactive is not None
            and orphan.state is S.Releasing
            and orphan.dst_broker == inactive
            and source is not None
            and source != inactive
            and selected != source
            and self.is_registered(i, source) is True
        )

    def redrives_split(self, i: int, orphan: Rec, inactive: int | None) -> bool:
        """Fix 07: a timed-out Splitting (the monitor's override), not already forced, whose source
        is registered, goes back to that source; a forced one that timed out again is handed over."""
        return (
            self.variant.monitor_redrives_split_on_source
            and inactive is None
            and not orphan.force
            and orphan.source_broker is not None
            and self.is_registered(i, orphan.source_broker) is True
        )

    def monitor(self, i: int) -> None:
        """The leader's ``monitorOwnerships``: tombstone what lingered past the delay, clean up after
        brokers the registry no longer names, override in-flight states that timed out."""
        if not self.brokers[i].is_leader or self.metadata_state(i) is not MetadataState.Stable:
            return
        available = self.registered_brokers(i)
        if not available:
            return  # monitorOwnerships: the registry could not be read (or names nobody); skip this run
        active = set(available)
        cfg = self.p.channel
        now = self.now
        inactive: set[int] = set()
        timed_out: list[tuple[int, str, Rec]] = []
        tombstones: list[tuple[int, str]] = []
        in_flight, active_states = self.p.in_flight, self.p.active
        tombstones_active = self.variant.monitor_tombstones_active
        tombstone_after = cfg.tombstone_delay_s * 1000
        # each item is judged alone, so the view is read in any order and only what is acted on is
        # put in the order the view took it (Pulsar iterates its map in that order)
        owned = S.Owned
        # an Owned record whose owner is registered can only be an old one to tombstone (#21721's
        # variant): most of the view, so it is judged first and alone
        owned_settled = owned not in in_flight and owned in active_states
        for key, (seq, data) in self.brokers[i].view.items.items():
            state = data.state
            if state is owned and owned_settled:
                dst = data.dst_broker
                if dst is not None and dst not in active:
                    inactive.add(dst)
                elif dst is not None and tombstones_active and now - data.timestamp > tombstone_after:
                    tombstones.append((seq, key))
                continue
            if state is S.Owned and (data.dst_broker is None or data.dst_broker not in active):
                if data.dst_broker is not None:
                    inactive.add(data.dst_broker)
            elif state in in_flight and data.source_broker is not None and data.source_broker not in active:
                inactive.add(data.source_broker)
            elif state in in_flight and data.dst_broker is not None and data.dst_broker not in active:
                inactive.add(data.dst_broker)
            elif state in in_flight and now - data.timestamp > cfg.in_flight_wait_ms:
                timed_out.append((seq, key, data))
            elif (state not in active_states or tombstones_active) and now - data.timestamp > tombstone_after:
                tombstones.append((seq, key))  # #21721 put back: an Owned record old enough is tombstoned too
        tombstones.sort()
        timed_out.sort(key=lambda item: item[0])
        for _, key in tombstones:
            self.publish(i, key, None)
        for broker in sorted(inactive, key=self.p.rank.__getitem__):
            self.handle_broker_deletion(i, broker)
        for _, key, data in timed_out:
            self.override_ownership(i, key, data, None, False)
        self.count("monitor-overrides", len(timed_out))
        self.count("monitor-tombstones", len(tombstones))
        self.catch_up(i)

    # -- timers ------------------------------------------------------------------------------------------
    def tick(self, source: str = "") -> None:
        timers = self.s.timers
        if not timers:
            raise ValueError("tick: no timer is pending")
        first = timers[0]
        if not self.tick_allowed(first):
            raise ValueError("tick: work has waited the timely-delivery bound; deliver it first")
        timer = first
        if source and first.source_name() != source:
            # another source's timer due at the same time fires first: this one's first timer
            timer = next((t for t in timers if t.source_name() == source), first)
            if timer.source_name() != source or timer.due != first.due:
                raise ValueError(f"tick({source}): no timer of {source} is due first")
        self._timers = [t for t in self.timers() if t is not timer]
        if timer.due > self.now:
            self.s.now = timer.due
        i = timer.broker
        kind = timer.kind
        if kind is TimerKind.session_expiry:
            owner = (i, timer.incarnation)
            if owner in self.s.dead_clients or self.brokers[i].incarnation == timer.incarnation:
                self.close_client(owner)
            return
        if kind is TimerKind.monitor:
            if self.brokers[i].is_leader:
                self.monitor(i)
                self.schedule(TimerKind.monitor, i, self.p.channel.monitor_interval_s * 1000)
            else:
                self.b(i).monitor_scheduled = False
        elif kind is TimerKind.cleanup:
            assert timer.target is not None
            broker = self.b(i)
            jobs = dict(broker.jobs)
            jobs.pop(timer.target, None)
            broker.jobs = jobs
            self.do_cleanup(i, timer.target, gracefully=False)
        elif kind is TimerKind.cleanup_recheck:
            assert timer.target is not None
            if timer.graceful:
                if self.do_cleanup(i, timer.target, gracefully=True, attempt=timer.attempt):
                    self.leave(i)
            elif self.brokers[i].is_leader and not self.healthy(timer.target):
                self.do_cleanup(i, timer.target, gracefully=False, attempt=timer.attempt)
        elif kind is TimerKind.lookup_timeout:
            self.lookup_timed_out(i, timer.key)
        elif kind is TimerKind.shutdown_complete:
            if self.registered(i):
                self.leave(i)  # the clean-up's wait ran out
            if self.brokers[i].alive:
                self.shutdown_complete(i)

    def tick_allowed(self, timer: Timer) -> bool:
        bound = self.p.config.timely_delivery_ms
        return bound is None or self.s.work_since is None or timer.due <= self.s.work_since + bound

    # -- the syncer (ServiceUnitStateTableViewSyncer, system topic to metadata store) --------------------
    def start_syncer(self) -> None:
        """Copy what the topic holds to the store (the store's own channel nodes deleted first),
        disable the topic's compaction, start mirroring. The cluster starts it before any write."""
        owner = (SYNCER, 0)
        topic = self.s.topic
        self.s.syncer = Syncer(View(0), View(None), Client(self.new_session()), self.now, topic.threshold)
        self.op("connect", owner)
        store = self._store if self._store is not None else self.s.store
        for key in sorted(store.channel):
            self.zk_delete(owner, key)
        snapshot = View(0)
        while (message := self.topic_next(snapshot)) is not None:
            if isinstance(message.value, Raw):
                continue
            if decide(self.p.topic_rules, snapshot.get(message.key), message.value).accepted:
                self.view_set(snapshot, SYNCER, message.key, message.value)
        for key, value in snapshot.entries():
            self.zk_put(owner, key, value, None)
        self.topic().threshold = 0
        syncer = self.syncer_views()
        syncer.client.queue = ()  # its own copy's notifications are not news
        self.op("drop", owner)
        while (message := self.topic_next(syncer.topic_view)) is not None:
            self.syncer_take(message, notify=False)
        for key, value in sorted(
            (key, node.data) for key, node in self.store().channel.items() if isinstance(node.data, Rec)
        ):
            self.view_set(syncer.store_view, SYNCER, key, value)
        syncer.topic_view.started = syncer.store_view.started = True

    def syncer_take(self, message: Msg, notify: bool = True) -> None:
        """The syncer's topic view reads one message; a value it takes is forwarded to the store."""
        syncer = self.syncer_views()
        value = message.value
        if isinstance(value, Raw):
            return
        verdict = decide(self.p.topic_rules, syncer.topic_view.get(message.key), value)
        if verdict.accepted:
            self.view_set(syncer.topic_view, SYNCER, message.key, value)
            if notify:
                self.from_topic(message.key, value)
        elif message.producer == SYNCER:
            self.echo(False, message.key, value, -1)  # a refused message of ours never echoes

    def echo(self, store: bool, key: str, value: Rec | None, change: int) -> bool:
        """Count one of the syncer's own writes to a side (``change`` 1), or its echo arriving (-1,
        True if it was one): each side's echo of the syncer's write is not news."""
        syncer = self.syncer_views()
        echoes = syncer.store_echoes if store else syncer.topic_echoes
        held = echoes.get((key, value), 0)
        if change < 0 and not held:
            return False
        counted = dict(echoes)
        if held + change:
            counted[(key, value)] = held + change
        else:
            del counted[(key, value)]
        if store:
            syncer.store_echoes = counted
        else:
            syncer.topic_echoes = counted
        return True

    def from_topic(self, key: str, value: Rec | None) -> None:
        if self.echo(False, key, value, -1):
            return
        if value is None and self.variant.syncer_drops_deletions:
            return  # #25946: put(key, null) throws, and the exception is swallowed
        self.echo(True, key, value, 1)
        applied = self.syncer_write(key, value)
        self.echo(True, key, value, -1)  # the store view did not take it: nothing echoed
        if not applied and self.syncer_views().store_view.get(key) != value and not self.variant.syncer_drops_deletions:
            syncer = self.syncer_views()
            syncer.unsynced = syncer.unsynced | {key}

    def syncer_write(self, key: str, value: Rec | None) -> bool:
        """The syncer's store view writes ``value`` (a resolver-checked compare-and-set, or a delete)."""
        owner = (SYNCER, 0)
        if value is None:
            with contextlib.suppress(NoNodeError):
                self.zk_delete(owner, key)
            self.syncer_refresh(key)
            return True
        node = self.zk_get(owner, key)
        prev = None if node is None or not isinstance(node.data, Rec) else node.data
        if decide(self.p.store_rules, prev, value).rejected:
            return False
        try:
            self.zk_put(owner, key, value, -1 if node is None else node.version)
        except (BadVersionError, NodeExistsError, NoNodeError):
            return False
        self.syncer_refresh(key)
        return True

    def syncer_refresh(self, key: str) -> None:
        value = self.store_read((SYNCER, 0), key)
        syncer = self.syncer_views()
        if syncer.store_view.get(key) == value:
            return
        self.view_set(syncer.store_view, SYNCER, key, value)
        if not self.echo(True, key, value, -1):
            self.publish_message(key, value, SYNCER)  # forwarded to the topic, its echo counted
            self.echo(False, key, value, 1)

    def sync_store(self) -> bool:
        syncer = self.syncer_views()
        if not syncer.client.queue:
            return False
        event, syncer.client.queue = syncer.client.queue[0], syncer.client.queue[1:]
        self.delivered((SYNCER, 0), event)
        if not isinstance(event, SessionEvent):
            path = event[1]
            if isinstance(path, str) and path != LEADER_PATH:
                self.syncer_refresh(path)
        return True

    def reconcile_periodic(self) -> None:
        """Master's periodic reconcile (#25946): copy the items the store lacks (straight to the
        store, past the resolver, as the initial copy does) and delete the store-only items older
        than the syncer's start."""
        syncer = self.syncer_views()
        missing, stale = reconcile_plan(syncer)
        for key, value in missing:
            self.syncer_force(key, value)
        for key in stale:
            self.syncer_force(key, None)
        syncer = self.syncer_views()
        syncer.unsynced = syncer.unsynced - {key for key, _ in missing} - set(stale)

    def syncer_force(self, key: str, value: Rec | None) -> None:
        owner = (SYNCER, 0)
        if value is None:
            if self.zk_get(owner, key) is not None:
                self.zk_delete(owner, key)
        else:
            self.zk_put(owner, key, value, None)
        self.echo(True, key, value, 1)
        self.syncer_refresh(key)
        self.echo(True, key, value, -1)


_TICK = Tick()

_WRITERS = frozenset({TaskKind.own, TaskKind.release, TaskKind.split, TaskKind.split_bundles, TaskKind.assign})
"""Tasks that write (refused once the channel is disabled, #26520)."""


def _client_name(owner: Owner) -> str:
    return "syncer" if owner[0] == SYNCER else f"{broker_name(owner[0])}#{owner[1]}"


def _json(data: NodeData) -> object:
    """A channel node's value as the trace records it (the store's JSON, read back)."""
    if isinstance(data, Rec):
        return data.json()
    if isinstance(data, Raw):
        try:
            return json.loads(data.payload)
        except ValueError:
            return None
    return None


def _value(message: Msg) -> Rec | None:
    value = message.value
    return None if value is None or isinstance(value, Raw) else value


def _next(prev: Rec | None) -> int:
    """The version a publisher writes after ``prev`` (``getNextVersionId``): 1 for a new key."""
    return VERSION_ID_INIT if prev is None else wrap_long(prev.version_id + 1)


def _children(key: str, data: Rec) -> list[Bundle]:
    """A split's children: the two ranges its record names, else the parent's halves."""
    parent = parse_key(key)
    if data.split is not None and len(data.split) == 2:
        return [parent.child(r) for r, _ in data.split]
    return list(parent.split())


def reconcile_plan(syncer: Syncer) -> tuple[list[tuple[str, Rec]], list[str]]:
    """What master's periodic reconcile does now: the topic's items the store lacks, and the
    store-only keys whose value is older than the syncer's start."""
    source, destination = syncer.topic_view, syncer.store_view
    missing = [(key, value) for key, value in source.entries() if key not in destination.items]
    stale = [
        key for key, value in destination.entries() if key not in source.items and value.timestamp < syncer.started_at
    ]
    return sorted(missing, key=lambda kv: kv[0]), sorted(stale)


def reconcile_due(state: ClusterState, p: Setup) -> bool:
    """Whether the syncer's periodic reconcile has something to do. It runs once the syncer has
    read what is waiting (the model leaves out its races with the syncer's own reads), as work the
    timely-delivery bound covers: Pulsar runs it every 5 s, the bound is 1 s."""
    syncer = state.syncer
    if syncer is None or not syncer.active or p.variant.syncer_drops_deletions:  # before #25946: no reconcile
        return False
    if _reader_has_next(state, syncer.topic_view) or syncer.client.queue:
        return False
    missing, stale = reconcile_plan(syncer)
    return bool(missing or stale)


def _reader_has_next(state: ClusterState, view: View) -> bool:
    return state.topic.next_for(view.position) is not None  # type: ignore[arg-type]


# -- the protocol's functions --------------------------------------------------------------------------
def init(p: Setup, trace: bool = True, mirrored: bool = False) -> Outcome:
    """The cluster as it starts: the namespaces' bundles, every broker booted in order (registered,
    its view loaded, its channel started, the first one elected), the syncer started when both
    stores run, and the metadata events of the start-up delivered."""
    config = p.config
    namespaces = tuple(
        (f"tenant/ns-{n}", tuple(namespace_bundles(f"tenant/ns-{n}", config.bundles_per_namespace)))
        for n in range(config.namespaces)
    )
    empty = ClusterState(config.start_ms, Topic(config.channel_compaction_threshold), Bundles(namespaces))
    tx = Tx(empty, p, first_choice, trace)
    if mirrored:
        tx.ops = []
    tx.cold().loads = tuple(Load() for _ in range(config.brokers))
    for i in range(config.brokers):
        tx.boot(i, 1)
    if p.with_syncer:
        tx.start_syncer()
    progress = True
    while progress:  # deliver every queued metadata event (start-up, before the run begins)
        progress = False
        for i, broker in enumerate(tx.brokers):
            if broker.alive and broker.client.queue:
                while tx.notify(i):
                    pass
                progress = True
    _track(tx)
    return tx.commit()


def step(
    state: ClusterState,
    action: Action,
    p: Setup,
    choose: Choose = first_choice,
    trace: bool = True,
    placer: Placer | None = None,
    mirrored: bool = False,
) -> Outcome:
    """Take one ``action`` in ``state`` (``ValueError`` if it cannot happen there); ``choose`` makes
    placement's random choices (or ``placer`` decides placement whole); ``trace`` records what the
    step wrote (the model checker needs no trace); ``mirrored`` records its store operations
    (``Outcome.ops``) for a real store to make too."""
    tx = Tx(state, p, choose, trace, placer)
    if mirrored:
        tx.ops = []
    _apply(tx, action)
    _track(tx)
    return tx.commit()


def outcomes(state: ClusterState, action: Action, p: Setup) -> list[Outcome]:
    """Every outcome of ``action`` in ``state`` (:func:`each_outcome`, all of them)."""
    return list(each_outcome(state, action, p))


def each_outcome(state: ClusterState, action: Action, p: Setup) -> Iterator[Outcome]:
    """Every outcome of ``action`` in ``state``, one at a time: one per sequence of placement
    choices, in lexicographic order (a clean-up may place several orphans, each choice a branch).
    A plan fixes a prefix of the choices, the choices after it take candidate 0, and each of
    those choices' other candidates is a plan of its own. Lazy, so that a search may stop early."""
    plans: list[list[int]] = [[]]
    while plans:
        plan = plans.pop()
        tape = iter(plan)

        def choose(width: int, tape: Iterator[int] = tape) -> int:
            wanted = next(tape, 0)
            return wanted if wanted < width else 0

        outcome = step(state, action, p, choose, trace=False)
        made = outcome.picks
        for position in range(len(plan), len(made)):
            plans.extend([*made[:position], v] for v in range(outcome.widths[position] - 1, 0, -1))
        yield outcome


def _index(tx: Tx, name: str) -> int:
    """The broker of the cluster named ``name``; a ValueError names the cluster's brokers."""
    try:
        i = broker_id(name)
    except ValueError:
        i = -1
    if not 0 <= i < len(tx.brokers):
        raise ValueError(f"no broker {name!r}; brokers: {', '.join(broker_name(b) for b in tx.p.by_name)}")
    return i


def _broker(tx: Tx, name: str, alive: bool = True) -> int:
    i = _index(tx, name)
    if tx.brokers[i].alive is not alive:
        raise ValueError(f"{name} is {'not ' if alive else ''}running")
    return i


def _started(tx: Tx, name: str) -> int:
    i = _broker(tx, name)
    channel = tx.brokers[i].channel
    if channel is not ChannelState.Started:
        raise ValueError(f"{name}: channel is {channel.name}, not Started")
    return i


def _apply(tx: Tx, action: Action) -> None:
    take = _TAKE.get(type(action))
    if take is None:
        raise ValueError(f"unknown action {action!r}")
    take(tx, action)


def _deliver(tx: Tx, action: Deliver) -> None:
    i = _broker(tx, action.broker)
    if tx.brokers[i].view.position is None or not tx.deliver(i):
        raise ValueError(f"{action.describe()}: nothing to deliver")


def _notify(tx: Tx, action: Notify) -> None:
    if not tx.notify(_broker(tx, action.broker)):
        raise ValueError(f"{action.describe()}: no notification queued")


def _run_task(tx: Tx, action: RunTask) -> None:
    if not tx.run_task(_broker(tx, action.broker)):
        raise ValueError(f"{action.describe()}: no task queued")


def _lookup(tx: Tx, action: Lookup) -> None:
    i = _broker(tx, action.broker)
    channel = tx.brokers[i].channel
    if channel in LOOKUP_CHANNELS or channel is ChannelState.Constructed:
        system = system_bundle_broker(action.bundle)
        if system is not None and _system_lookup(tx, i, action, *system):
            return
    if channel is ChannelState.Constructed:
        # #25715: the broker serves requests before its channel has started; getOwnerAsync fails
        tx.answer(i, action.bundle, None, "IllegalStateException: Invalid channel state:Constructed")
        return
    if channel not in LOOKUP_CHANNELS:
        raise ValueError(f"{action.describe()}: channel is {channel.name}: lookups are refused")
    tx.lookup(i, action.bundle)


def _system_lookup(tx: Tx, i: int, action: Lookup, name: str, sla: bool) -> bool:
    """``ExtensibleLoadManagerImpl.assign`` on a heartbeat or SLA-monitor bundle: the broker its
    namespace names, without the channel (no record is written, whatever the channel's state). A
    heartbeat bundle's broker is answered as it is; an SLA-monitor bundle's only when this broker's
    registry read finds it (``getHeartbeatOrSLAMonitorBrokerId``), else the lookup goes on as any
    other (here: to the channel, which has no such bundle). False when the lookup goes on."""
    owner = _index(tx, name)
    if sla and not tx.is_registered(i, owner):
        return False
    tx.answer(i, action.bundle, owner, None, unchecked=True)
    return True


def owned_service_units(state: ClusterState, p: Setup, i: int) -> frozenset[str]:
    """Broker ``i``'s owned set as Pulsar's ``getOwnedServiceUnits`` returns it: its view's owned
    bundles and, from its channel's start, its heartbeat and SLA-monitor bundles
    (``ServiceUnitStateTableViewBase.init``; two heartbeat namespaces before #25304:
    ``two_heartbeat_namespaces``). Empty while it does not run or its channel is not started."""
    broker = state.brokers[i]
    serving = broker.serving()
    if not broker.alive or broker.channel not in LOOKUP_CHANNELS:
        return serving
    return serving | frozenset(system_bundle_keys(broker_name(i), p.variant.two_heartbeat_namespaces))


def _unload(tx: Tx, action: Unload | Transfer) -> None:
    """An admin unload (``Releasing`` with no destination) or transfer (PIP-307) through a broker
    that sees the bundle Owned; the broker waits for it as Pulsar's UnloadManager does."""
    i = _started(tx, action.broker)
    data = tx.brokers[i].view.get(action.bundle)
    if data is None or data.state is not S.Owned:
        raise ValueError(f"{action.describe()}: {action.broker} does not see the bundle Owned")
    dest = None
    if isinstance(action, Transfer):
        try:
            dest = broker_id(action.destination)
        except ValueError:
            dest = -1
        if not 0 <= dest < len(tx.brokers) or not tx.is_registered(i, dest):
            raise ValueError(
                f"{action.describe()}: {action.destination} is not registered as {action.broker} reads the "
                "registry (Pulsar's admin refuses a transfer to an inactive destination broker)"
            )
    force = isinstance(action, Unload) and action.force
    put = tx.publish(i, action.bundle, tx.rec(S.Releasing, dest, data.dst_broker, _next(data), force=force))
    if put is None or not put[0].verdict.rejected:  # a refused put fails the admin call at once
        broker = tx.b(i)
        if action.bundle not in broker.unloads:
            broker.unloads = {**broker.unloads, action.bundle: (data.dst_broker, dest)}


def _split(tx: Tx, action: Split) -> None:
    """The owner splits the bundle at the middle of its range (``Splitting``, its children named)."""
    i = _started(tx, action.broker)
    data = tx.brokers[i].view.get(action.bundle)
    if data is None or data.state is not S.Owned or data.dst_broker != i:
        raise ValueError(f"{action.describe()}: {action.broker} does not own the bundle")
    if tx.variant.split_needs_registration and not tx.registered_now(i):
        tx.count("split-refused")  # fix 04: the admin call fails on an unregistered broker
        return
    children = parse_key(action.bundle).split()
    split = tuple(sorted((c.range_name, None) for c in children))
    tx.publish(i, action.bundle, tx.rec(S.Splitting, None, i, _next(data), split=split))


def _tick(tx: Tx, action: Tick) -> None:
    tx.tick(action.broker)


def _wait(tx: Tx, action: Wait) -> None:
    if action.ms < 0:
        raise ValueError(f"{action.describe()}: time only moves forward")
    tx.s.now += action.ms


def _compact(tx: Tx, action: Compact) -> None:
    if tx.p.storage is not StorageType.SystemTopic or tx.s.topic.threshold <= 0:
        raise ValueError(f"{action.describe()}: the channel topic does not compact (its threshold is 0)")
    tx.compact()


def _crash(tx: Tx, action: Crash) -> None:
    tx.crash(_broker(tx, action.broker))


def _restart(tx: Tx, action: Restart) -> None:
    i = _broker(tx, action.broker, alive=False)
    # what an earlier incarnation left semi-terminal is existing to the new channel (handleExisting
    # acts on its own Owned only): the leader's monitor tombstones it after the tombstone delay
    values = channel_values(tx.s, tx.p)
    left = {
        (key, data.version_id) for key, data in values.items() if data.source_broker == i and data.tombstoned_by_source
    }
    tx.boot(i, tx.brokers[i].incarnation + 1, ready=tx.variant.restart_in_one_step)
    cold = tx.cold()
    cold.crash_times = {broker: at for broker, at in cold.crash_times.items() if broker != i}
    cold.departed = cold.departed - {i}
    cold.abandoned = cold.abandoned - {i}
    if cold.named_late:
        cold.named_late = frozenset(entry for entry in cold.named_late if entry[1] != i)
    if left or cold.inherited:  # those still the key's value, and this incarnation's
        still = {
            (key, version)
            for key, version in cold.inherited
            if (data := values.get(key)) is not None and data.version_id == version
        }
        cold.inherited = frozenset(still | left)


def _shutdown(tx: Tx, action: Shutdown) -> None:
    tx.shutdown(_started(tx, action.broker))


def _lose(tx: Tx, action: LoseSession) -> None:
    _lose_session(tx, _broker(tx, action.broker))


def _reconnect(tx: Tx, action: Reconnect) -> None:
    """The broker's client gets a new session; ``SessionReestablished`` waits for delivery."""
    i = _broker(tx, action.broker)
    client = tx.brokers[i].client
    if client.closed:
        raise SessionExpiredError(f"client {_client_name(tx._owner(i))} is closed")
    if not client.connected:
        tx.op("reconnect", tx._owner(i))
        draft = tx.client(i)
        draft.session = tx.new_session()
        draft.connected = True
        draft.queue = (*draft.queue, SessionEvent.SessionReestablished)
        tx.b(i).registry_stale = None  # connected again: reads go to the store


def _resign(tx: Tx, action: Resign) -> None:
    i = _broker(tx, action.broker)
    if tx.s.leader != (i, False):
        raise ValueError(f"{action.describe()}: {action.broker} is not the leader")
    tx.zk_delete(tx._owner(i), LEADER_PATH)


def _sync_topic(tx: Tx, action: SyncTopic) -> None:
    if tx.s.syncer is None:
        raise ValueError("sync-topic: nothing to read")
    message = tx.topic_next(tx.syncer_views().topic_view)
    if message is None:
        raise ValueError("sync-topic: nothing to read")
    tx.syncer_take(message)


def _sync_store(tx: Tx, action: SyncStore) -> None:
    if tx.s.syncer is None or not tx.sync_store():
        raise ValueError("sync-store: nothing queued")


def _sync_reconcile(tx: Tx, action: SyncReconcile) -> None:
    if not reconcile_due(tx.s, tx.p):
        raise ValueError("sync-reconcile: nothing to reconcile")
    tx.reconcile_periodic()


_TAKE: dict[type[Action], Callable[[Tx, Any], None]] = {
    Deliver: _deliver,
    Notify: _notify,
    RunTask: _run_task,
    Lookup: _lookup,
    Unload: _unload,
    Transfer: _unload,
    Split: _split,
    Tick: _tick,
    Wait: _wait,
    Compact: _compact,
    Crash: _crash,
    Restart: _restart,
    Shutdown: _shutdown,
    LoseSession: _lose,
    Reconnect: _reconnect,
    Resign: _resign,
    SyncTopic: _sync_topic,
    SyncStore: _sync_store,
    SyncReconcile: _sync_reconcile,
}
"""How each action is taken: its kind's function."""


def _lose_session(tx: Tx, i: int) -> None:
    """The session is lost: its ephemeral nodes go, its queued node events are dropped, and a
    ``SessionLost`` event waits for delivery."""
    client = tx.brokers[i].client
    if client.closed or not client.connected:
        return
    tx.op("lose", tx._owner(i))
    # the metadata cache keeps the registry's children it last loaded (AbstractMetadataStore's
    # asyncReload returns the old value while disconnected); its own node's deletion is not seen
    tx.b(i).registry_stale = frozenset(tx.store().registry)
    draft = tx.client(i)
    draft.connected = False
    draft.queue = tuple(e for e in draft.queue if isinstance(e, SessionEvent))
    tx._expire(tx._owner(i))
    draft = tx.client(i)
    draft.queue = (*draft.queue, SessionEvent.SessionLost)


def _track(tx: Tx) -> None:
    """After every step: since when one running, connected broker has been elected and acting as
    leader (the liveness bounds count from there: nobody cleans up without a leader), and since
    when work has waited (the timely-delivery bound)."""
    s = tx.s
    if tx._timers is not None:
        s.timers = tuple(tx._timers)
    if tx._drafts or tx._store is not None:  # else neither the election nor any broker changed
        s.brokers = tuple(tx.brokers)
        elected = s.leader
        broker = s.brokers[elected[0]] if elected is not None and not elected[1] else None
        acting = (
            broker is not None
            and broker.alive
            and broker.channel is ChannelState.Started
            and broker.client.connected
            and broker.is_leader
        )
        if not acting:
            s.leader_since = None
            s.leader_for = None
        elif s.leader_for != elected[0]:  # type: ignore[index]
            s.leader_since = tx.now
            s.leader_for = elected[0]  # type: ignore[index]
    if tx.p.config.timely_delivery_ms is not None:
        if quiescent(s, tx.p):
            s.work_since = None
        elif s.work_since is None:
            s.work_since = tx.now


def quiescent(state: ClusterState, p: Setup) -> bool:
    """No delivery, notification, task or syncer step is waiting (timers may be)."""
    known = state._quiet
    if known is None:
        known = state._quiet = _quiescent(state, p)
    return known


def _quiescent(state: ClusterState, p: Setup) -> bool:
    topic = state.topic
    end = topic.end
    for broker in state.brokers:
        if broker.alive:
            if broker.tasks or broker.client.queue:
                return False
            position = broker.view.position
            if position is not None and position < end and topic.next_for(position) is not None:
                return False
    syncer = state.syncer
    return syncer is None or not (
        _reader_has_next(state, syncer.topic_view) or syncer.client.queue or reconcile_due(state, p)
    )


def work(state: ClusterState, p: Setup) -> Iterator[Action]:
    """The deliveries, notifications, tasks and syncer steps waiting, in broker order."""
    topic = state.topic
    made = p.per_broker
    for broker in state.brokers:
        if broker.alive:
            position = broker.view.position
            if position is not None and topic.next_for(position) is not None:
                yield made[Deliver][broker.id]
            if broker.client.queue:
                yield made[Notify][broker.id]
            if broker.tasks:
                yield made[RunTask][broker.id]
    syncer = state.syncer
    if syncer is not None:
        if _reader_has_next(state, syncer.topic_view):
            yield SyncTopic()
        if syncer.client.queue:
            yield SyncStore()
        if reconcile_due(state, p):
            yield SyncReconcile()


def tied_sources(state: ClusterState) -> list[str]:
    """The sources (brokers, or ZooKeeper expiring a broker's session) whose timers fall due first,
    at the same time, when there are several (a :class:`Tick` then names the one that fires)."""
    timers = state.timers
    if not timers:
        return []
    due = timers[0].due
    sources = {t.source_name() for t in timers if t.due == due}
    return sorted(sources) if len(sources) > 1 else []


def tick_allowed(state: ClusterState, p: Setup) -> bool:
    timers = state.timers
    if not timers:
        return False
    bound = p.config.timely_delivery_ms
    return bound is None or state.work_since is None or timers[0].due <= state.work_since + bound


def enabled(state: ClusterState, p: Setup, without: AbstractSet[type[Action]] = frozenset()) -> list[Action]:
    """Every action that can happen in ``state`` (for the model checker and Hypothesis), but for
    the kinds in ``without`` (the model checker's spent budgets: not worth listing to drop)."""
    actions: list[Action] = []
    keys = state.sorted_bundle_keys()
    lookups = Lookup not in without
    unloads = Unload not in without
    transfers = Transfer not in without
    splits = Split not in without
    topic = state.topic
    store = state.store
    leader = state.leader
    each = p.per_broker
    for i in p.by_name:
        broker = state.brokers[i]
        if broker.alive:
            view = broker.view
            client = broker.client
            position = view.position
            if position is not None and topic.next_for(position) is not None:
                actions.append(each[Deliver][i])
            if client.queue:
                actions.append(each[Notify][i])
            if broker.tasks:
                actions.append(each[RunTask][i])
            if lookups and broker.channel in LOOKUP_CHANNELS:
                actions.extend(p.keyed(Lookup, i, key) for key in keys)
            if broker.channel is ChannelState.Started:
                for key in keys if unloads or transfers or splits else ():
                    data = view.get(key)
                    if data is not None and data.state is S.Owned and data.dst_broker is not None:
                        if unloads:
                            actions.append(p.keyed(Unload, i, key))
                        if transfers and client.live:
                            actions.extend(
                                p.transfer(i, key, other)
                                for other in p.by_name
                                if other != data.dst_broker and other in store.registry
                            )
                        if splits and data.dst_broker == i:
                            actions.append(p.keyed(Split, i, key))
                if Crash not in without:
                    actions.append(each[Crash][i])
                if Shutdown not in without:
                    actions.append(each[Shutdown][i])
                if client.connected and LoseSession not in without:
                    actions.append(each[LoseSession][i])
                if Resign not in without and broker.is_leader and client.connected and leader == (i, False):
                    actions.append(each[Resign][i])
            if not client.connected and not client.closed:
                actions.append(each[Reconnect][i])
        elif Restart not in without:
            actions.append(each[Restart][i])
    if tick_allowed(state, p):
        tied = tied_sources(state)
        actions.extend([Tick(source) for source in tied] if tied else [_TICK])
    if (
        Compact not in without
        and p.storage is StorageType.SystemTopic
        and topic.end > topic.horizon
        and topic.threshold > 0
    ):
        actions.append(Compact())
    if state.syncer is not None:
        syncer = state.syncer
        if _reader_has_next(state, syncer.topic_view):
            actions.append(SyncTopic())
        if syncer.client.queue:
            actions.append(SyncStore())
        if reconcile_due(state, p):
            actions.append(SyncReconcile())
    return actions


def channel_values(state: ClusterState, p: Setup) -> Mapping[str, Rec]:
    """The channel's settled value per key: on the system topic what a reader of the whole log
    holds, on the metadata store the node's."""
    if p.on_store:
        return {key: node.data for key, node in state.store.channel.items() if isinstance(node.data, Rec)}
    return state.topic.settled


def syncer_differences(syncer: Syncer) -> int:
    """Keys whose values differ between the syncer's two views."""
    topic, store = syncer.topic_view.items, syncer.store_view.items
    return sum(
        1
        for key in set(topic.keys()) | set(store.keys())
        if (None if (t := topic.get(key)) is None else t[1]) != (None if (s := store.get(key)) is None else s[1])
    )


def inject(state: ClusterState, **changes: Any) -> ClusterState:
    """``state`` with fields replaced (tests put faults in: ``split_failures``), the rarely changed
    ones (:class:`~statechan.cluster.state.Cold`) included."""
    new = state.thaw()
    cold = new.cold.thaw()
    for name, value in changes.items():
        setattr(cold if hasattr(cold, name) else new, name, value)
    new.cold = cold
    return new


def publish_external(state: ClusterState, p: Setup, key: str, value: Rec | None) -> ClusterState:
    """``state`` after something that is not a broker wrote ``value`` to the channel topic."""
    tx = Tx(state, p, first_choice, trace=False)
    tx.publish_message(key, value, None)
    return tx.commit().state


def metadata_state(broker: Broker, now: int) -> MetadataState:
    """The leader's reading of its own metadata session, for clean-up delays: Unstable while it is
    lost, Jittery for the clean-up delay after it came back, then Stable."""
    event, when = broker.last_session_event
    if event is SessionEvent.SessionLost:
        return MetadataState.Unstable
    if now - when > MAX_CLEAN_UP_DELAY_TIME_IN_SECS * 1000:
        return MetadataState.Stable
    return MetadataState.Jittery


def operate(state: ClusterState, p: Setup, operation: Callable[[Tx], None], choose: Choose = first_choice) -> Outcome:
    """``operation`` done on the protocol's handlers as one step (a test drives a handler directly,
    as Pulsar's channel tests call the channel's methods)."""
    tx = Tx(state, p, choose, trace=True)
    operation(tx)
    _track(tx)
    return tx.commit()


def put_external(state: ClusterState, p: Setup, key: str, data: Rec | Raw) -> ClusterState:
    """``state`` after something that is not a broker put ``data`` on the bundle's store node."""
    tx = Tx(state, p, first_choice, trace=False)
    store = tx.store()
    node = store.get(key)
    store.zxid += 1
    if node is None:
        tx._write(store, key, Node(data, 0, None, store.zxid, store.zxid, tx.now))
        tx._notify(NodeEvent.Created, key)
    else:
        tx._write(store, key, Node(data, node.version + 1, node.owner, node.created, store.zxid, tx.now))
        tx._notify(NodeEvent.Modified, key)
    return tx.commit().state
