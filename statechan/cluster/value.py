"""The cluster's state as one immutable, hashable, canonical value, and the cluster it stands for.

:func:`capture` reads everything that decides what a :class:`~statechan.cluster.sim.Cluster` can
do next into nested tuples of strings, numbers and ``None``: the topic and every reader's position,
the metadata store's nodes, sessions and queued notifications, every broker's view, tasks, pending
lookups, timers and incarnation, the leader's jobs, the syncer, the namespaces and the budgets the
run has spent. It leaves out what never changes behaviour (the history, the trace, statistics,
sequence numbers, transaction and session numbers) and writes every time as its age (capped past
the longest timeout, so a tick that changes nothing leads back to a state already seen).
:func:`restore` builds the cluster back from a value: stepping the restored cluster gives the same
next values as stepping the original (``tests/test_value.py``), which is what lets the model
checker keep states as values — copied for free, hashed by their text, renamed for symmetry —
while every engine steps the one protocol of :mod:`statechan.cluster.sim`.

Broker symmetry is a renaming applied while capturing (``names``): every broker id the state
holds, in views, paths, tasks, timers and payloads, is written as its new name, and every map
keyed by broker is put in the order of the new names.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter, deque
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from statechan.clock import ManualClock
from statechan.cluster.placement import BrokerLoad
from statechan.cluster.sim import Broker, ChannelState, Cluster, Task, _Picks, _Timer, node_value, timer_source
from statechan.keys import Bundle
from statechan.model import BrokerCheck
from statechan.resolver import Reason, Verdict, rules_for
from statechan.states import ServiceUnitState
from statechan.stores.metadata import (
    MetadataClient,
    MetadataStore,
    NodeEvent,
    Notification,
    SessionEvent,
    Stat,
    StoreClient,
    _Node,
)
from statechan.stores.syncer import SyncerStats, TableViewSyncer
from statechan.stores.tableview import (
    PATH_PREFIX,
    MetadataStoreTableView,
    PendingPut,
    PutResult,
    SystemTopicTableView,
    ViewStats,
    owned_by,
)
from statechan.stores.topic import _UNDECODED, MalformedValueError, Message, Reader, Topic
from statechan.values import ServiceUnitStateData

Value = tuple[Any, ...]
"""A captured state: nested tuples of ``str``, ``int``, ``float``, ``bool``, ``bytes`` and ``None``."""

TIME_FLOOR = 10**12
"""Integers at least this large are epoch milliseconds (the clock starts at 1.7e12)."""

_REGISTRY = "/loadbalance/brokers/"
_LEADER = "/loadbalance/leader"
_BROKER_ID = re.compile(r"broker-\d+:8080")
_STATES = {state.value: state for state in ServiceUnitState}
_CHANNELS = {channel.value: channel for channel in ChannelState}
_EVENTS = {event.value: event for event in NodeEvent}
_SESSION = {event.value: event for event in SessionEvent}
_REASONS = {reason.value: reason for reason in Reason}


class NotCapturableError(ValueError):
    """A cluster this module cannot capture (a store other than the in-process one)."""


# -- capture ---------------------------------------------------------------------------------------
K = TypeVar("K")
V = TypeVar("V")


def _remember(cache: dict[K, V], key: K, value: V, limit: int) -> V:
    """Keep ``value`` under ``key`` in one of this module's caches, emptied once it holds more
    than ``limit`` entries (a search meets the same few values again and again, a long one many)."""
    if len(cache) > limit:
        cache.clear()
    cache[key] = value
    return value


C = TypeVar("C")


def _caches(
    contexts: dict[C, tuple[dict[str, str], dict[Any, Any]]], context: C
) -> tuple[dict[str, str], dict[Any, Any]]:
    """The caches kept for one context (renamed strings, and forms by identity), made afresh when
    new or grown past 200,000 forms; at most 64 contexts are kept (a search meets few at a time)."""
    shared = contexts.get(context)
    if shared is None or len(shared[1]) > 200_000:
        if len(contexts) >= 64:
            contexts.clear()
        shared = contexts[context] = ({}, {})  # a fresh context: nothing in it is keyed yet
    return shared


_Context = tuple[int, int, tuple[tuple[str, str], ...], bool]
_SHARED: dict[_Context, tuple[dict[str, str], dict[object, tuple[object, Any]]]] = {}
"""What captures at one time, cap and renaming share: renamed strings, and the captured form of
immutable objects (values, messages) by identity, each kept alive beside its form so its identity
is never another object's. The successors of a state are captured at its time, mostly holding
its values and messages."""


_ENTRIES: dict[bytes, tuple[str, Any] | None] = {}


def _registry_entry(data: bytes) -> tuple[str, Any] | None:
    """A registry node's (broker, incarnation), decoded once per distinct bytes (None: not one)."""
    found = _ENTRIES.get(data, ())
    if found == ():
        try:
            entry = json.loads(data)
            found = (str(entry["broker"]), entry["incarnation"])
        except (ValueError, KeyError, TypeError):
            found = None
        _remember(_ENTRIES, data, found, 10_000)
    return found  # type: ignore[return-value]


def _renamed(names: Mapping[str, str], memo: dict[str, str], text: str) -> str:
    """``text`` with every broker id in it renamed by ``names`` (remembered in ``memo``)."""
    known = names.get(text)
    if known is not None:
        return known
    done = memo.get(text)
    if done is None:
        done = memo[text] = (
            _BROKER_ID.sub(lambda m: names.get(m.group(), m.group()), text) if "broker-" in text else text
        )
    return done


class _Capture:
    """One capture: the clock, the age cap and the renaming, with the small caches a capture reuses."""

    __slots__ = ("_renamed", "_values", "cap", "names", "now", "pendings", "producers")

    def __init__(self, now: int, cap: int, names: Mapping[str, str] | None, producers: bool = True) -> None:
        self.now = now
        self.cap = cap
        self.names: Mapping[str, str] = names or {}
        self.producers = producers
        """Whether a message's producer is part of the state: only the syncer reads it (to know
        its own echoes); without one, who wrote a record the readers fold alike is history."""
        context = (now, cap, tuple(sorted(self.names.items())) if names else (), producers)
        self._renamed, self._values = _caches(_SHARED, context)
        self.pendings: dict[int, int] = {}

    def age(self, when: int | None) -> int | tuple[str, int] | None:
        if when is None:
            return None
        if when < TIME_FLOOR:
            return ("at", when)
        age = self.now - when
        return age if age < self.cap else self.cap

    def name(self, text: str | None) -> str | None:
        """``text`` with every broker id in it renamed."""
        if text is None or not self.names:
            return text
        return _renamed(self.names, self._renamed, text)

    def value(self, data: ServiceUnitStateData | None) -> Value | None:
        if data is None:
            return None
        ident = id(data)
        cached = self._values.get(ident)
        if cached is None:
            split = data.split_service_unit_to_dest_broker
            out = (
                data.state._value_,  # the member's value without Enum's property (nor its hash)
                self.name(data.dst_broker),
                self.name(data.source_broker),
                data.version_id,
                data.force,
                self.age(data.timestamp),
                None if split is None else tuple((r, self.name(b)) for r, b in split),
            )
            self._values[ident] = (data, out)  # the value kept alive while its id is a key
            return out
        return cached[1]  # type: ignore[no-any-return]

    def message(self, message: Message) -> Value:
        cached = self._values.get(id(message))
        if cached is not None:
            return cached[1]  # type: ignore[no-any-return]
        try:
            decoded: object = message.value()
        except MalformedValueError:
            decoded = ("raw", message.payload)
        payload = decoded if isinstance(decoded, tuple) else self.value(decoded)  # type: ignore[arg-type]
        producer = self.name(message.producer) if self.producers else None
        out = (message.key, payload, self.age(message.publish_time), producer, message.ledger)
        self._values[id(message)] = (message, out)
        return out

    def node_data(self, path: str, data: bytes) -> object:
        """A node's data as the value it holds: a channel value, a registry entry, the leader."""
        if path.startswith(PATH_PREFIX + "/"):
            decoded = node_value(data)
            return ("raw", data) if decoded is None else ("v", self.value(decoded))
        if path == _LEADER:
            return ("leader", self.name(data.decode()))
        if path.startswith(_REGISTRY):
            entry = _registry_entry(data)
            return ("raw", data) if entry is None else ("broker", self.name(entry[0]), entry[1])
        return ("raw", data)

    def bundle(self, bundle: Bundle) -> Value:
        cached = self._values.get(id(bundle))
        if cached is None:
            self._values[id(bundle)] = cached = (bundle, (bundle.lower, bundle.upper))
        return cached[1]

    def verdict(self, verdict: Verdict | None) -> Value | None:
        if verdict is None:
            return None
        return (verdict.reason.value, None if verdict.check is None else verdict.check.value)

    def pending(self, put: PendingPut, owner: dict[int, str]) -> Value:
        result = put.result
        return (
            self.name(owner[id(put.view)]),
            put.key,
            self.value(put.value),
            put.read_version,
            self.verdict(put.verdict),
            None
            if result is None
            else (result.applied, self.verdict(result.verdict), result.message is not None, result.error is not None),
        )


def _client(cap: _Capture, client: MetadataClient) -> Value:
    queue = (
        tuple(
            (event._value_,)  # the member's value without Enum's property (nor its hash, for a dict)
            if isinstance(event, SessionEvent)
            else (event.event._value_, cap.name(event.path))
            for event in client._queue
        )
        if client._queue
        else ()
    )
    return (cap.name(client.name), client.connected, client.closed, queue)


def _store(cap: _Capture, store: MetadataStore, sessions: Mapping[int, str]) -> Value:
    nodes: list[Value] = []
    ranks: dict[int, int] = {}
    known = cap._values
    for path, node in store._nodes.items():
        data, stat = node.data, node.stat
        # a node's data and stat are replaced, never changed: its form is kept by their identities
        key = (id(data), id(stat), path)
        cached = known.get(key)
        if cached is None:
            form = (cap.name(path), cap.node_data(path, data), stat.version, cap.age(stat.modified_ms))
            cached = known[key] = (data, (stat, form))
        name, held, version, age = cached[1][1]
        session = stat.ephemeral_owner
        if session is None:
            nodes.append((name, held, version, None, age, 0))
        else:
            # a session's ephemeral nodes go in the order they were made (the order its expiry
            # deletes them and queues their events); other nodes' order reads nothing
            rank = ranks.get(session, 0)
            ranks[session] = rank + 1
            nodes.append((name, held, version, sessions.get(session, "?"), age, rank))
    nodes.sort()  # by path: no two nodes share one, so nothing after it is compared
    clients = sorted([_client(cap, c) for c in store._clients])
    return (tuple(nodes), tuple(clients))


def _topic(cap: _Capture, topic: Topic) -> Value:
    # one log (the same messages, which this context keeps alive) is one tuple: the successors of
    # a state mostly share its log, and a renaming of it is then looked up by that tuple
    ids = tuple(map(id, topic._log))
    found = cap._values.get(ids)
    if found is None:
        found = cap._values[ids] = (None, tuple(cap.message(m) for m in topic._log))
    return (
        found[1],
        tuple(topic._compacted_offsets),
        topic.horizon,
        topic.compaction_threshold,
        topic._bytes_since_horizon,
    )


def _view(cap: _Capture, view: Any, alive: bool = True) -> Value:
    """A view's items in the order it holds them (the leader iterates them), its reader's position.
    A dead broker's view is left out (empty, at the start): nothing reads it again (a restart
    builds a new broker reading the log from the start; invariants, loads and actions read running
    brokers), so states that differ only in how far a crashed broker had read are one state."""
    if not alive:
        return ((), 0 if isinstance(view, SystemTopicTableView) else None, view.started, view.closed)
    value = cap.value
    data = tuple([(key, value(held)) for key, held in view._data.items()])  # in order: it is iterated
    position = view.reader.position if isinstance(view, SystemTopicTableView) else None
    return (data, position, view.started, view.closed)


def _task(cap: _Capture, task: Task, owner: dict[int, str], pendings: list[PendingPut]) -> Value:
    def ref(put: PendingPut) -> int:
        index = cap.pendings.get(id(put))
        if index is None:
            index = cap.pendings[id(put)] = len(pendings)
            pendings.append(put)
        return index

    return (
        task.kind,
        task.key,
        cap.value(task.data),
        cap.name(task.target),
        None if task.pending is None else ref(task.pending),
        tuple(ref(put) for put in task.waits),
    )


def _timer(cap: _Capture, timer: _Timer) -> Value:
    if not cap.names:
        return (cap.age(timer.due), timer.kind, timer.broker, timer.incarnation, timer.key)
    return (cap.age(timer.due), timer.kind, cap.name(timer.broker), timer.incarnation, cap.name(timer.key))


def _timer_order(form: tuple[Any, ...]) -> tuple[int, str, int]:
    """Timers in the order a value keeps them: by due time, then by source (the broker, renamed,
    or ZooKeeper expiring its session), each source's own in the order they were scheduled.
    Which of two sources' timers due together was scheduled first is not kept: either may fire
    first (:class:`~statechan.cluster.actions.Tick` names the source). ``form`` is a timer's form
    and its rank in the order it was scheduled."""
    timer = form[0]
    age = timer[0]
    return (-age if isinstance(age, int) else 0, timer_source(timer[1], timer[2]), form[1])


def _broker(cap: _Capture, broker: Broker, owner: dict[int, str], live: dict[int, int]) -> Value:
    pendings: list[PendingPut] = []
    tasks = tuple(_task(cap, t, owner, pendings) for t in broker.tasks) if broker.tasks else ()
    jobs = (
        tuple(
            sorted(
                (cap.name(target), live.get(id(job), -1), _timer(cap, job), job.cancelled)
                for target, job in broker.cleanup_jobs.items()
            )
        )
        if broker.cleanup_jobs
        else ()
    )
    lookups = broker.pending_lookups
    event, when = broker.last_session_event
    return (
        cap.name(broker.id),
        broker.incarnation,
        broker.alive,
        broker.channel._value_,
        _view(cap, broker.view, broker.alive),
        cap.name(broker.client.name),
        broker.monitor_scheduled,
        tasks,
        tuple(cap.pending(put, owner) for put in pendings) if pendings else (),
        tuple(sorted((key, cap.age(at)) for key, at in lookups.items())) if lookups else (),
        cap.name(broker.leader_view),
        (event._value_, cap.age(when)),
        jobs,
        broker.shutting_down,
        tuple(sorted((key, cap.name(src), cap.name(dst)) for key, (src, dst) in broker.unloads.items()))
        if broker.unloads
        else (),
        tuple(sorted(cap.name(b) or b for b in broker.registry_cache)) if broker.registry_cache else (),
    )


def _syncer(cap: _Capture, syncer: TableViewSyncer | None) -> Value | None:
    if syncer is None:
        return None

    def echoes(counter: Counter[tuple[str, ServiceUnitStateData | None]]) -> Value:
        return tuple(sorted((((k, cap.value(v)), n) for (k, v), n in counter.items() if n), key=repr))

    return (
        _view(cap, syncer.topic_view),
        _view(cap, syncer.store_view),
        tuple(sorted(syncer.unsynced)),
        echoes(syncer._topic_echoes),
        echoes(syncer._store_echoes),
        # an age, capped: enough while the cluster starts its syncer before any write (every value is
        # newer than the start, which is all the periodic reconcile asks of it)
        cap.age(syncer.started_at),
        syncer.active,
        syncer._saved_threshold,
    )


def capture(cluster: Cluster, cap: int, names: Mapping[str, str] | None = None) -> Value:
    """The cluster's state as a value, with times as ages capped at ``cap`` and broker ids renamed
    by ``names`` (missing ids keep their name)."""
    store = cluster.store
    if not isinstance(store, MetadataStore):
        raise NotCapturableError(f"only the in-process metadata store can be captured, not {type(store).__name__}")
    c = _Capture(cluster.clock.now_ms(), cap, names, cluster.syncer is not None)
    renames = bool(c.names)
    sessions = (
        {client.session_id: c.name(client.name) or client.name for client in store._clients}
        if renames
        else {client.session_id: client.name for client in store._clients}
    )
    every = cluster.brokers.values()
    # who made a write (read by tasks' writes) and the timers' places (read by clean-up jobs): worked
    # out only for the few states whose brokers hold either
    tasks = jobs = False
    for b in every:
        tasks = tasks or bool(b.tasks)
        jobs = jobs or bool(b.cleanup_jobs)
    owner: dict[int, str] = {}
    if tasks:
        owner = {id(b.view): b.id for b in every}
        if cluster.syncer is not None:
            owner[id(cluster.syncer.store_view)] = "syncer"
    forms = [(_timer(c, t), t.seq, t) for t in cluster.live_timers(ordered=False)]
    if len(forms) > 1:
        forms.sort(key=_timer_order)
    live = {id(t): i for i, (_form, _seq, t) in enumerate(forms)} if jobs else {}
    brokers = sorted([_broker(c, b, owner, live) for b in every])
    return (
        _topic(c, cluster.topic),
        _store(c, store, sessions),
        tuple(brokers),
        tuple([form for form, _seq, _t in forms]),
        tuple(sorted((c.name(b), n) for b, n in cluster.incarnations.items()))
        if renames
        else tuple(sorted(cluster.incarnations.items())),
        tuple(
            sorted(
                [
                    (
                        c.name(b) if renames else b,
                        ld.cpu,
                        ld.memory,
                        ld.direct_memory,
                        ld.bandwidth_in,
                        ld.bandwidth_out,
                        ld.history,
                    )
                    for b, ld in cluster.loads.items()  # a load is changed in place: not kept by identity
                ]
            )
        ),
        tuple([(ns, tuple([c.bundle(b) for b in bundles])) for ns, bundles in cluster.namespaces.items()]),
        tuple(sorted((c.name(b), inc, c.name(client.name)) for (b, inc), client in cluster._dead_clients.items()))
        if cluster._dead_clients
        else (),
        cluster.split_failures,
        tuple(sorted((c.name(b), c.age(t)) for b, t in cluster.crash_times.items())) if cluster.crash_times else (),
        tuple(sorted((c.name(b), c.age(t)) for b, t in cluster.unregistered_at.items()))
        if cluster.unregistered_at
        else (),
        c.age(cluster.leader_since),
        c.age(cluster._work_since),
        c.age(cluster._loads_at),
        tuple(sorted(cluster.failed_splits)) if cluster.failed_splits else (),
        tuple(sorted(c.name(b) or b for b in cluster.departed)) if cluster.departed else (),
        _syncer(c, cluster.syncer),
    )


# -- renaming a captured value ---------------------------------------------------------------------
_RENAMES: dict[tuple[tuple[str, str], ...], tuple[dict[str, str], dict[int, tuple[Value, Value]]]] = {}
"""Per renaming: renamed strings, and renamed parts of values (messages, channel values) by the
identity of the part renamed, each kept alive beside its renamed form."""


class _Rename:
    """One renaming of a captured value's broker ids, with the caches its renamings share."""

    __slots__ = ("_parts", "_strings", "names", "timer_index")

    def __init__(self, names: Mapping[str, str]) -> None:
        self.names = names
        self.timer_index: Callable[[int], int] = int
        """A timer's index in the renamed value, by its index in the value renamed."""
        self._strings, self._parts = _caches(_RENAMES, tuple(sorted(names.items())))

    def name(self, text: Any) -> Any:
        return None if text is None else _renamed(self.names, self._strings, text)

    def value(self, value: Value | None) -> Value | None:
        if value is None:
            return None
        found = self._parts.get(id(value))
        if found is None:
            state, dst, src, version, force, age, split = value
            out = (
                state,
                self.name(dst),
                self.name(src),
                version,
                force,
                age,
                None if split is None else tuple((r, self.name(b)) for r, b in split),
            )
            found = self._parts[id(value)] = (value, out)
        return found[1]

    def message(self, message: Value) -> Value:
        found = self._parts.get(id(message))
        if found is None:
            key, payload, age, producer, ledger = message
            if payload is not None and payload[0] != "raw":
                payload = self.value(payload)
            found = self._parts[id(message)] = (message, (key, payload, age, self.name(producer), ledger))
        return found[1]

    def log(self, log: Value) -> Value:
        found = self._parts.get(id(log))
        if found is None:
            found = self._parts[id(log)] = (log, tuple(self.message(m) for m in log))
        return found[1]

    def node_data(self, data: Value) -> Value:
        kind = data[0]
        if kind == "v":
            return ("v", self.value(data[1]))
        if kind == "leader":
            return ("leader", self.name(data[1]))
        if kind == "broker":
            return ("broker", self.name(data[1]), data[2])
        return data

    def timer(self, timer: Value) -> Value:
        due, kind, broker, incarnation, key = timer
        return (due, kind, self.name(broker), incarnation, self.name(key))

    def view(self, view: Value) -> Value:
        items, position, started, closed = view
        return (tuple((key, self.value(v)) for key, v in items), position, started, closed)

    def broker(self, record: Value) -> Value:
        (
            broker_id,
            incarnation,
            alive,
            channel,
            view,
            client,
            monitor_scheduled,
            tasks,
            pendings,
            lookups,
            leader_view,
            event,
            jobs,
            shutting_down,
            unloads,
            registry_cache,
        ) = record
        return (
            self.name(broker_id),
            incarnation,
            alive,
            channel,
            self.view(view),
            self.name(client),
            monitor_scheduled,
            tuple(
                (kind, key, self.value(v), self.name(target), pending, waits)
                for kind, key, v, target, pending, waits in tasks
            )
            if tasks
            else (),
            tuple((self.name(owner), key, self.value(v), *rest) for owner, key, v, *rest in pendings)
            if pendings
            else (),
            lookups,
            self.name(leader_view),
            event,
            tuple(
                sorted(
                    (self.name(target), self.timer_index(index) if index >= 0 else index, self.timer(timer), cancelled)
                    for target, index, timer, cancelled in jobs
                )
            )
            if jobs
            else (),
            shutting_down,
            tuple(sorted((key, self.name(src), self.name(dst)) for key, src, dst in unloads)) if unloads else (),
            tuple(sorted(self.name(b) for b in registry_cache)) if registry_cache else (),
        )


def rename(value: Value, names: Mapping[str, str] | None) -> Value:
    """``value`` (a :func:`capture` without renaming) with its broker ids renamed by ``names``:
    exactly what :func:`capture` with ``names`` gives of the same cluster, at the cost of a walk
    over the value instead of over the cluster (the model checker captures a state once and
    renames it for each candidate of its symmetry reduction)."""
    if not names:
        return value
    r = _Rename(names)
    name = r.name
    (
        (log, compacted, horizon, threshold, since),
        (nodes, clients),
        brokers,
        timers,
        incarnations,
        loads,
        namespaces,
        dead,
        split_failures,
        crashes,
        unregistered,
        leader_since,
        work_since,
        loads_at,
        failed,
        departed,
        syncer,
    ) = value
    renamed_nodes = sorted(
        (
            (name(path), r.node_data(data), version, name(owner), age, rank)
            for path, data, version, owner, age, rank in nodes
        ),
        key=lambda n: n[0],
    )
    renamed_clients = sorted(
        (name(client), connected, closed, tuple(item if len(item) == 1 else (item[0], name(item[1])) for item in queue))
        for client, connected, closed, queue in clients
    )
    ordered = sorted(((r.timer(timer), i) for i, timer in enumerate(timers)), key=_timer_order)
    if any(i != j for j, (_form, i) in enumerate(ordered)):
        # brokers' timers due together changed places: the clean-up jobs' indexes follow them
        moved = {i: j for j, (_form, i) in enumerate(ordered)}
        r.timer_index = moved.__getitem__
    return (
        (r.log(log), compacted, horizon, threshold, since),
        (tuple(renamed_nodes), tuple(renamed_clients)),
        tuple(sorted(r.broker(record) for record in brokers)),
        tuple(form for form, _i in ordered),
        tuple(sorted((name(b), n) for b, n in incarnations)),
        tuple(sorted((name(b), *rest) for b, *rest in loads)),
        namespaces,
        tuple(sorted((name(b), inc, name(client)) for b, inc, client in dead)) if dead else (),
        split_failures,
        tuple(sorted((name(b), age) for b, age in crashes)) if crashes else (),
        tuple(sorted((name(b), age) for b, age in unregistered)) if unregistered else (),
        leader_since,
        work_since,
        loads_at,
        failed,
        tuple(sorted(name(b) for b in departed)) if departed else (),
        None if syncer is None else _renamed_syncer(r, syncer),
    )


def _renamed_syncer(r: _Rename, syncer: Value) -> Value:
    topic_view, store_view, unsynced, topic_echoes, store_echoes, started_at, active, saved = syncer

    def echoes(counted: Value) -> Value:
        return tuple(sorted((((k, r.value(v)), n) for (k, v), n in counted), key=repr))

    return (
        r.view(topic_view),
        r.view(store_view),
        unsynced,
        echoes(topic_echoes),
        echoes(store_echoes),
        started_at,
        active,
        saved,
    )


def quick_signature(broker: Broker) -> tuple[Any, ...]:
    """The part of a broker's :func:`signature` read without walking its view or the store: it
    tells most brokers apart (the leader from the others) at a fraction of the cost."""
    leader = broker.leader_view
    return (
        broker.alive,
        broker.incarnation,
        broker.channel._value_,
        leader is not None and leader == broker.id,
        leader is None,
        len(broker.tasks),
        len(broker.pending_lookups),
        len(broker.cleanup_jobs),
        len(broker.view._data) if broker.alive else 0,  # type: ignore[attr-defined]
    )


def signature(cluster: Cluster, broker_id: str) -> tuple[Any, ...]:
    """What no renaming changes about a broker: its record with every broker id left out, but for
    whether it names the broker itself (the model checker orders brokers by it before trying
    renamings; brokers with equal signatures are tried in every order)."""
    broker = cluster.brokers[broker_id]
    view = broker.view
    client = broker.client
    return (
        broker.alive,
        broker.incarnation,
        broker.channel._value_,
        broker.monitor_scheduled,
        broker.shutting_down,
        tuple(task.kind for task in broker.tasks),
        len(broker.pending_lookups),
        broker.leader_view is None,
        broker.leader_view == broker_id,
        tuple(
            (key, v.state._value_, v.version_id, v.dst_broker == broker_id, v.source_broker == broker_id)
            for key, v in view._data.items()  # type: ignore[attr-defined]
        )
        if broker.alive
        else (),
        client.connected,
        client.closed,
        len(client._queue),
        view.reader.position if isinstance(view, SystemTopicTableView) and broker.alive else -1,
        cluster.store.get(_REGISTRY + broker_id) is not None,
        len(broker.cleanup_jobs),
        len(broker.unloads),
        len(broker.registry_cache),
    )


# -- restore ---------------------------------------------------------------------------------------
_RESTORED: dict[tuple[Any, ...], tuple[ServiceUnitStateData, bytes]] = {}
"""Values rebuilt before, by their fields with absolute times: rebuilding a pydantic value and its
JSON is the slow part of a restore, and a search meets the same few values again and again."""


_MESSAGES: dict[tuple[int, Value, Any], Message] = {}
"""Messages built before, by offset, value and absolute publish time."""


_STATS: dict[tuple[int, int | None, int], Stat] = {}
_TASKS: dict[tuple[Value, int], Task] = {}
"""Tasks that wait on no write, by their value and the time (a task is frozen)."""
"""Node stats built before (a stat never changes: a write replaces it)."""
_CHILDREN: dict[tuple[str, ...], dict[str, frozenset[str]]] = {}
_BUNDLES: dict[Value, dict[str, tuple[Bundle, ...]]] = {}


def _children(paths: tuple[str, ...]) -> dict[str, frozenset[str]]:
    """The store's index of each path's children, for these nodes (implicit parents included)."""
    found = _CHILDREN.get(paths)
    if found is None:
        index: dict[str, set[str]] = {}
        for path in paths:
            child = path
            while child != "/":
                parent, name = child.rsplit("/", 1)
                parent = parent or "/"
                index.setdefault(parent, set()).add(name)
                child = parent
        found = _remember(_CHILDREN, paths, {parent: frozenset(names) for parent, names in index.items()}, 10_000)
    return found


def _bundles(namespaces_v: Value) -> dict[str, tuple[Bundle, ...]]:
    found = _BUNDLES.get(namespaces_v)
    if found is None:
        bundles = {ns: tuple(Bundle(ns, lo, up) for lo, up in ranges) for ns, ranges in namespaces_v}
        found = _remember(_BUNDLES, namespaces_v, bundles, 10_000)
    return found


_LAST_LOG: list[Any] = [None, 0, ()]
"""The last topic log restored: (its value, the time, its messages)."""


class _Restore:
    __slots__ = ("now",)

    def __init__(self, now: int) -> None:
        self.now = now

    def time(self, age: Any) -> Any:
        if age is None:
            return None
        if isinstance(age, tuple):
            return age[1]
        return self.now - age

    def data(self, value: Value | None) -> ServiceUnitStateData | None:
        return None if value is None else self.data_and_json(value)[0]

    def data_and_json(self, value: Value) -> tuple[ServiceUnitStateData, bytes]:
        state, dst, src, version, force, age, split = value
        key = (state, dst, src, version, force, self.time(age), split)
        found = _RESTORED.get(key)
        if found is None:
            data = ServiceUnitStateData(
                state=_STATES[state],
                dst_broker=dst,
                source_broker=src,
                version_id=version,
                force=force,
                timestamp=key[5],
                split_service_unit_to_dest_broker=None if split is None else dict(split),
            )
            found = _remember(_RESTORED, key, (data, data.to_json().encode()), 200_000)
        return found

    def message(self, offset: int, message_v: Value) -> Message:
        """The message at ``offset``; one already built is shared (a message never changes once
        published, but for caching its decoded value)."""
        key, payload, age, producer, ledger = message_v
        at = self.time(age)
        cache_key = (offset, message_v, at)
        message = _MESSAGES.get(cache_key)
        if message is None:
            if payload is None:
                message = Message(offset, key, None, at, producer, ledger, None)
            elif payload[0] == "raw":
                message = Message(offset, key, payload[1], at, producer, ledger, _UNDECODED)
            else:
                data, raw = self.data_and_json(payload)
                message = Message(offset, key, raw, at, producer, ledger, data)
            _remember(_MESSAGES, cache_key, message, 200_000)
        return message

    def task(self, task_v: Value) -> Task:
        """A task that waits on no write: shared, as it never changes (built once per time)."""
        kind, key, data_v, target, _, _ = task_v
        cache_key = (task_v, self.now)
        found = _TASKS.get(cache_key)
        if found is None:
            found = _remember(_TASKS, cache_key, Task(kind, key, self.data(data_v), target), 100_000)
        return found

    def verdict(self, value: Value | None) -> Verdict | None:
        if value is None:
            return None
        reason, check = value
        return Verdict(_REASONS[reason], None if check is None else BrokerCheck(check))


def _counter(items: Value = ()) -> Counter[Any]:
    """A Counter holding ``items`` without ``Counter.__init__`` (a Python-level update, and a restore
    makes ten of them)."""
    counter: Counter[Any] = Counter.__new__(Counter)
    dict.update(counter, items)
    return counter


def _view_stats() -> ViewStats:
    stats: ViewStats = _new(
        ViewStats,
        accepted=_counter(),
        rejected=_counter(),
        malformed=0,
        errors=[],
        equal_updates_skipped=0,
        puts_refused=0,
        put_conflicts=0,
    )
    return stats


def _picks(cluster: Cluster) -> _Picks:
    """Placement's tape without seeding a generator it never draws from (``Random(0)`` costs 4 µs)."""
    picks: _Picks = random.Random.__new__(_Picks)
    picks.cluster = cluster
    picks.gauss_next = None  # type: ignore[attr-defined]
    return picks


def _new(cls: type, **attributes: object) -> Any:
    obj: Any = object.__new__(cls)
    obj.__dict__.update(attributes)
    return obj


def restore(value: Value, now: int, like: Cluster, picks: bool = True) -> Cluster:
    """A cluster whose captured value (at ``now``) is ``value``, sharing ``like``'s configuration,
    protocol model and placement. Statistics start from nothing; sessions and sequence numbers are
    numbered afresh (nothing reads them but the trace)."""
    topic_v, store_v, brokers_v, timers_v, *_, syncer_v = value
    dead_v = value[7]
    r = _Restore(now)
    clock = ManualClock(now)
    cluster: Cluster = object.__new__(Cluster)
    config = like.config
    cluster.config = config
    cluster.clock = clock
    cluster.picks = [] if picks else None
    cluster.plan = deque()
    cluster.widths = []
    cluster.rng = _picks(cluster) if picks else like.rng
    cluster.model = like.model
    cluster.storage = like.storage
    cluster.placement = like.placement

    # the topic
    topic = Topic(name=like.topic.name, clock=clock)
    topic.compactions = 0
    topic.observers = [cluster._on_topic_message]
    _fill_topic(r, topic, topic_v)
    cluster.topic = topic

    # the store and its clients
    nodes_v, clients_v = store_v
    store = MetadataStore(clock)
    clients: dict[str, StoreClient] = {}
    for name, connected, closed, queue_v in clients_v:
        client = _client_of(store, name, connected, closed, queue_v)
        clients[name] = client
        store._clients.append(client)
    _fill_nodes(r, store, nodes_v, clients)
    store.observers = [cluster._on_store_change]
    cluster.store = store

    _fill_timers(r, cluster, timers_v)

    # brokers
    cluster.brokers = {}
    views: dict[str, SystemTopicTableView | MetadataStoreTableView] = {}
    for record in brokers_v:
        broker = _broker_of(record, cluster, clients, cluster._timers, r, views)
        cluster.brokers[broker.id] = broker
    cluster.counters = _counter()
    cluster._dead_clients = {(b, inc): clients[name] for b, inc, name in dead_v}
    _fill_rest(r, cluster, value)
    cluster.syncer = None if syncer_v is None else _syncer_of(syncer_v, cluster, clients, r, like)
    if not _FIELDS:
        _FIELDS.append(frozenset(cluster.__dict__))
    return cluster


_FIELDS: list[frozenset[str]] = []
"""The attributes :func:`restore` gives a cluster (learnt from the first one it builds; a cluster
is rewound only after a restore, as the search's first state is restored from its value)."""


def _fill_topic(r: _Restore, topic: Topic, topic_v: Value) -> None:
    """Make ``topic`` hold ``topic_v``: its log, the compacted snapshot and the compaction's marks."""
    log_v, compacted_v, horizon, threshold, since = topic_v
    last_log, last_now, last_messages = _LAST_LOG
    if log_v is last_log and r.now == last_now:
        log = list(last_messages)  # the same state restored again: each successor starts from it
    else:
        log = [r.message(offset, message_v) for offset, message_v in enumerate(log_v)]
        _LAST_LOG[:] = [log_v, r.now, tuple(log)]
    topic._log = log
    topic._compacted_offsets = list(compacted_v)
    topic._compacted = [log[i] for i in compacted_v]
    topic.horizon = horizon
    topic.compaction_threshold = threshold
    topic._bytes_since_horizon = since


def _fill_nodes(r: _Restore, store: MetadataStore, nodes_v: Value, clients: Mapping[str, MetadataClient]) -> None:
    """Make ``store`` hold the nodes ``nodes_v``, each ephemeral one owned by its client's session."""
    nodes: dict[str, _Node] = {}
    # ephemeral nodes after the others, each session's in the order they were made
    for path, data_v, version, owner, age, _ in sorted(nodes_v, key=lambda n: (n[3] is not None, n[3] or "", n[5])):
        owner_session = None if owner is None else clients[owner].session_id
        stat_key = (version, owner_session, r.time(age))
        stat = _STATS.get(stat_key)
        if stat is None:
            stat = _remember(_STATS, stat_key, Stat(version, owner_session, 0, 0, stat_key[2]), 100_000)
        nodes[path] = _Node(_node_bytes(r, data_v), stat)
    store._nodes = nodes
    store._children = {parent: set(names) for parent, names in _children(tuple(nodes)).items()}


def _fill_timers(r: _Restore, cluster: Cluster, timers_v: Value) -> None:
    """The live timers, numbered in the value's order (by due time, source and order scheduled:
    sorted by due time, so already a heap)."""
    cluster._timers = [
        _Timer(r.time(age), seq, kind, broker_id, incarnation, key)
        for seq, (age, kind, broker_id, incarnation, key) in enumerate(timers_v, 1)
    ]
    cluster._seq = len(timers_v)


def _fill_rest(r: _Restore, cluster: Cluster, value: Value, stepped: Value | None = None) -> None:
    """The cluster's own records (after its store, brokers and timers), and what it derives from
    them afresh: the bundle-key caches, the leader it tracks, an empty history and trace. With
    ``stepped`` (the value the cluster holds now), only the records that differ from it."""
    cluster.picks = [] if cluster.picks is not None else None
    cluster.plan = deque()
    cluster.widths = []
    cluster.history = []
    cluster.trace = []
    cluster.answers = []
    cluster._step_answers = 0
    # most steps change none of these records: one comparison of them all tells
    for index in () if stepped is not None and value[4:16] == stepped[4:16] else range(4, 16):
        if stepped is not None and value[index] == stepped[index]:
            continue
        field = value[index]
        if index == 4:
            cluster.incarnations = _counter(field)
        elif index == 5:
            cluster.loads = {b: BrokerLoad(cpu, mem, dm, bi, bo, hist) for b, cpu, mem, dm, bi, bo, hist in field}
        elif index == 6:
            cluster.namespaces = {ns: list(held) for ns, held in _bundles(field).items()}
            cluster._live_keys = None
            cluster._sorted_keys = []
        elif index == 8:
            cluster.split_failures = field
        elif index == 9:
            cluster.crash_times = {b: r.time(a) for b, a in field}
        elif index == 10:
            cluster.unregistered_at = {b: r.time(a) for b, a in field}
        elif index == 11:
            cluster.leader_since = r.time(field)
        elif index == 12:
            cluster._work_since = r.time(field)
        elif index == 13:
            cluster._loads_at = r.time(field)
        elif index == 14:
            cluster.failed_splits = set(field)
        elif index == 15:
            cluster.departed = set(field)
    leader = cluster.leader()
    cluster._leader_for = leader if cluster.leader_since is not None else None


def rewindable(cluster: Cluster, value: Value, now: int, stepped: Value) -> bool:
    """Whether :func:`rewind` can take ``cluster`` back from ``stepped`` to ``value``: not where
    the step moved the clock (equal ages are then different times), started, stopped, crashed or
    replaced a broker, opened or closed a client, or touched clean-up jobs or the syncer."""
    if cluster.syncer is not None or not isinstance(cluster.store, MetadataStore) or value[7] != stepped[7]:
        return False
    if cluster.clock.now_ms() != now:
        return False
    if value[1][1] != stepped[1][1] and [c[0] for c in value[1][1]] != [c[0] for c in stepped[1][1]]:
        return False  # the store's clients (by name, in name order) are not the same ones
    before, after = value[2], stepped[2]
    if len(before) != len(after):
        return False
    for old, new in zip(before, after, strict=True):
        if old[12] or new[12]:
            return False  # clean-up jobs hold timers by identity
        # id, incarnation, alive, channel; its client; whether its view started or closed
        if old != new and (old[:4] != new[:4] or old[5] != new[5] or old[4][2:] != new[4][2:]):
            return False
    return True


def rewind(cluster: Cluster, value: Value, now: int, stepped: Value) -> bool:
    """Make ``cluster`` hold ``value`` (at ``now``) again after one step took it to ``stepped``
    (its value then), rebuilding in place only the parts of it the step changed: most steps
    change one broker, the topic or the store, and rebuilding those costs a fraction of a
    :func:`restore`. False, leaving the cluster as it is, where it is not :func:`rewindable`:
    the caller restores instead."""
    if not rewindable(cluster, value, now, stepped):
        return False
    store = cluster.store
    assert isinstance(store, MetadataStore)
    changed = [old for old, new in zip(value[2], stepped[2], strict=True) if old != new]
    r = _Restore(now)
    if value[1] != stepped[1]:
        nodes_v, clients_v = value[1]
        clients = {client.name: client for client in store._clients}
        for name, connected, closed, queue_v in clients_v:
            client = clients[name]
            client.connected = connected
            client.closed = closed
            client._queue = _queue_of(queue_v)
        _fill_nodes(r, store, nodes_v, clients)
    if value[0] != stepped[0]:
        _fill_topic(r, cluster.topic, value[0])
    if value[3] != stepped[3]:
        _fill_timers(r, cluster, value[3])
    for record in changed:
        broker = cluster.brokers[record[0]]
        _fill_view(broker.view, record[0], record[4], r)
        _fill_broker(broker, record, r, cluster._timers)
    _fill_rest(r, cluster, value, stepped)
    # what a cluster works out and keeps as it runs (the observation's fold of the channel) is
    # not in its value: a restored cluster starts without it, and so does a rewound one
    for name in cluster.__dict__.keys() - _FIELDS[0]:
        del cluster.__dict__[name]
    return True


def _client_of(store: MetadataStore, name: str, connected: bool, closed: bool, queue_v: Value) -> StoreClient:
    client = StoreClient(store, name, store._new_session())
    client.connected = connected
    client.closed = closed
    client._queue = _queue_of(queue_v)
    return client


def _queue_of(queue_v: Value) -> deque[Notification | SessionEvent]:
    if not queue_v:
        return deque()
    queued = _QUEUES.get(queue_v)
    if queued is None:
        queued = tuple(
            _SESSION[item[0]] if len(item) == 1 else Notification(_EVENTS[item[0]], item[1], 0) for item in queue_v
        )
        _remember(_QUEUES, queue_v, queued, 10_000)
    return deque(queued)


_QUEUES: dict[Value, tuple[Notification | SessionEvent, ...]] = {}
"""A client's queued events by their value (an event is never changed)."""
_VIEWS: dict[tuple[Value, int, str], tuple[dict[str, ServiceUnitStateData | None], set[str]]] = {}
"""A view's items and the keys its broker owns, by the items' value, the time and the broker."""


_REGISTERED: dict[Value, bytes] = {}
"""Registry entries' bytes by their value (the registry holds a few)."""


def _node_bytes(r: _Restore, data_v: Value) -> bytes:
    kind = data_v[0]
    if kind == "v":
        return r.data_and_json(data_v[1])[1]
    if kind == "leader":
        return str(data_v[1]).encode()
    if kind == "broker":
        found = _REGISTERED.get(data_v)
        if found is None:
            found = _REGISTERED[data_v] = json.dumps({"broker": data_v[1], "incarnation": data_v[2]}).encode()
        return found
    return bytes(data_v[1])


def _view_of(kind: type, cluster: Cluster, name: str, view_v: Value, r: _Restore, **own: object) -> Any:
    """A view of ``kind`` holding ``view_v``'s items, with no listeners yet."""
    view = _new(
        kind,
        broker=name,
        check_brokers=True,
        _rules=_rules(cluster, kind),
        _tail=[],
        _existing=[],
        _outdated=[],
        stats=_view_stats(),
        **own,
    )
    _fill_view(view, name, view_v, r)
    return view


def _fill_view(view: Any, name: str, view_v: Value, r: _Restore) -> None:
    """Make ``view`` (``name``'s) hold ``view_v``: its items, its reader's position, started or closed."""
    data_v, position, view.started, view.closed = view_v
    cache_key = (data_v, r.now, name)
    found = _VIEWS.get(cache_key)
    if found is None:
        data = {key: r.data(v) for key, v in data_v}
        owned = {key for key, v in data.items() if v is not None and owned_by(v, name)}
        found = _remember(_VIEWS, cache_key, (data, owned), 10_000)
    view._data = dict(found[0])
    view._owned = set(found[1])
    if position is not None:
        view.reader.position = position


def _topic_view(cluster: Cluster, name: str, view_v: Value, r: _Restore) -> SystemTopicTableView:
    reader = Reader(cluster.topic, f"{name}/tableview", True)
    view: SystemTopicTableView = _view_of(
        SystemTopicTableView, cluster, name, view_v, r, topic=cluster.topic, reader=reader, _records=[]
    )
    return view


def _store_view(
    cluster: Cluster, name: str, client: MetadataClient, view_v: Value, r: _Restore, retry: bool
) -> MetadataStoreTableView:
    view: MetadataStoreTableView = _view_of(
        MetadataStoreTableView, cluster, name, view_v, r, client=client, retry_bad_version_without_recheck=retry
    )
    return view


_RULES: dict[tuple[int, type], Any] = {}


def _rules(cluster: Cluster, kind: type) -> Any:
    found = _RULES.get((id(cluster.model), kind))
    if found is None or found[0] is not cluster.model:
        found = _RULES[(id(cluster.model), kind)] = (cluster.model, rules_for(kind.storage, cluster.model))  # type: ignore[attr-defined]
    return found[1]


def _broker_of(
    record: Value,
    cluster: Cluster,
    clients: dict[str, StoreClient],
    timers: list[_Timer],
    r: _Restore,
    views: dict[str, Any],
) -> Broker:
    broker_id, incarnation, alive, channel, view_v, client_name, *_ = record
    client = clients.get(client_name)
    if client is None:  # closed: no longer among the store's clients
        client = _client_of(cluster.store, client_name, False, True, ())  # type: ignore[arg-type]
    broker: Broker = _new(
        Broker,
        cluster=cluster,
        id=broker_id,
        incarnation=incarnation,
        alive=alive,
        channel=_CHANNELS[channel],
        client=client,
        reader=None,
        closed_units=_counter(),
        handled=_counter(),
    )
    client.add_listener(broker._on_notification)
    client.add_session_listener(broker._on_session_event)
    view: SystemTopicTableView | MetadataStoreTableView
    if view_v[1] is not None:
        view = _topic_view(cluster, broker_id, view_v, r)
        broker.reader = view.reader
    else:
        retry = cluster.config.variant.store_retry_without_recheck
        view = _store_view(cluster, broker_id, client, view_v, r, retry)
    broker.view = view
    views[broker_id] = view
    closed, view.closed = view.closed, False  # a closed view kept the listeners it had
    view.attach(*broker.view_listeners())
    view.closed = closed
    _fill_broker(broker, record, r, timers)
    return broker


def _fill_broker(broker: Broker, record: Value, r: _Restore, timers: list[_Timer]) -> None:
    """Set on ``broker`` what its record says beyond who it is and its view's items: its flags,
    lookups, leader, tasks with the writes they wait on, and clean-up jobs."""
    (
        _id,
        _incarnation,
        _alive,
        _channel,
        _view,
        _client,
        broker.monitor_scheduled,
        tasks_v,
        pendings_v,
        lookups_v,
        broker.leader_view,
        (event, when),
        jobs_v,
        broker.shutting_down,
        unloads_v,
        cache_v,
    ) = record
    broker.registry_cache = set(cache_v)
    broker.unloads = {key: (src, dst) for key, src, dst in unloads_v} if unloads_v else {}
    broker.pending_lookups = {key: r.time(at) for key, at in lookups_v} if lookups_v else {}
    broker.last_session_event = (_SESSION[event], r.time(when))
    view = broker.view
    pendings: list[PendingPut] = []
    for _owner, key, value_v, read_version, verdict_v, result_v in pendings_v:
        put = PendingPut(view, key, r.data(value_v), read_version, r.verdict(verdict_v))  # type: ignore[arg-type]
        if result_v is not None:
            applied, result_verdict, _has_message, failed = result_v
            # nothing reads a failed write's message but people: it named a session number
            put.result = PutResult(applied, r.verdict(result_verdict), None, "failed" if failed else None)
        pendings.append(put)
    broker.tasks = deque(
        r.task(task_v)
        if task_v[4] is None and not task_v[5]
        else Task(
            task_v[0],
            task_v[1],
            r.data(task_v[2]),
            task_v[3],
            None if task_v[4] is None else pendings[task_v[4]],
            tuple(pendings[i] for i in task_v[5]),
        )
        for task_v in tasks_v
    )
    jobs: dict[str, _Timer] = {}
    for target, index, timer_v, cancelled in jobs_v:
        if index >= 0:
            job = timers[index]
        else:
            age, kind, owner_id, job_incarnation, key = timer_v
            job = _Timer(r.time(age), 0, kind, owner_id, job_incarnation, key)
        job.cancelled = cancelled
        jobs[target] = job
    broker.cleanup_jobs = jobs


def _syncer_of(
    syncer_v: Value, cluster: Cluster, clients: dict[str, StoreClient], r: _Restore, like: Cluster
) -> TableViewSyncer:
    topic_v, store_v, unsynced, topic_echoes, store_echoes, started_at, active, saved = syncer_v
    old = like.syncer
    assert old is not None
    client = clients.get(old.client.name) or _client_of(cluster.store, old.client.name, False, True, ())  # type: ignore[arg-type]
    syncer: TableViewSyncer = _new(
        TableViewSyncer,
        topic=cluster.topic,
        store=cluster.store,
        mode=old.mode,
        clock=cluster.clock,
        model=old.model,
        forward_tombstones_as_put_null=old.forward_tombstones_as_put_null,
        drop_refused_forwards=old.drop_refused_forwards,
        client=client,
        stats=SyncerStats(),
        unsynced=set(unsynced),
        _topic_echoes=Counter({(k, r.data(v)): n for (k, v), n in topic_echoes}),
        _store_echoes=Counter({(k, r.data(v)): n for (k, v), n in store_echoes}),
        started_at=r.time(started_at),
        active=active,
        _saved_threshold=saved,
    )
    syncer.topic_view = _topic_view(cluster, old.topic_view.broker, topic_v, r)
    syncer.store_view = _store_view(cluster, old.store_view.broker, client, store_v, r, False)
    closed = syncer.topic_view.closed, syncer.store_view.closed
    syncer.topic_view.closed = syncer.store_view.closed = False
    syncer.attach()
    syncer.topic_view.closed, syncer.store_view.closed = closed
    return syncer


Listener = Callable[..., None]


def dispose(cluster: Cluster) -> None:
    """Break the reference cycles of a cluster nothing will step again (brokers and views point back
    at it through listeners), so reference counting frees it at once: a search discards a cluster
    per known successor, and leaving them to the cycle collector costs a tenth of its time."""
    for broker in cluster.brokers.values():
        broker.view.__dict__.clear()
        broker.client.__dict__.clear()
        broker.__dict__.clear()
    if cluster.syncer is not None:
        cluster.syncer.topic_view.__dict__.clear()
        cluster.syncer.store_view.__dict__.clear()
        cluster.syncer.__dict__.clear()
    store = cluster.store
    if isinstance(store, MetadataStore):
        for client in store._clients:
            client.__dict__.clear()
    store.__dict__.clear()
    cluster.topic.__dict__.clear()
    cluster.rng.__dict__.clear()
    cluster.__dict__.clear()
