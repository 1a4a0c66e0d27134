"""The cluster's state as a value: typed, immutable records that :mod:`statechan.cluster.protocol`
maps, with an action, to the next state.

Everything that decides what can happen next is here: the channel topic (its log, compaction
horizon and each reader's position), the metadata store (nodes with versions and ephemeral
owners, each client's queued notifications and session), each broker (incarnation, liveness,
channel state, table view, tasks, deferred lookups, clean-up jobs, leader view, admin unloads),
the timers, the leader's records, the syncer and the loads placement reads. Broker ids are small
integers (``0`` is ``broker-1:8080``); names appear only at the edges (actions, traces, answers).

A record is never changed once a step has returned it. A step works on *drafts*: shallow copies
of the records it touches (``thaw``), which become the next state's records as they are (Clojure's
transients), so a step rebuilds only what it touched and shares the rest with the state it came
from. ``tests/test_state.py`` holds every step to that: the state it was given is unchanged.

The model checker's fingerprint of a state is the hash of its *canonical form*
(:meth:`ClusterState.canon`): times as ages before the state's clock, capped beyond the longest time
anything compares (so a tick that changes nothing leads back to a state already seen), broker ids
renamed by a permutation (symmetry), and what never changes behaviour left out (sequence numbers,
transaction ids, statistics). Each record keeps the hash of its own form for the last context it was
asked in, so a successor's fingerprint re-hashes only the records its step replaced.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Final, TypeVar

import immutables

from statechan.cluster.placement import Load
from statechan.keys import Bundle
from statechan.resolver import Verdict
from statechan.states import ServiceUnitState
from statechan.stores.metadata import NodeEvent, SessionEvent
from statechan.stores.topic import next_offset
from statechan.values import ServiceUnitStateData

S = ServiceUnitState
Form = tuple[Any, ...]
"""A record's canonical form: nested tuples of numbers, strings, booleans and ``None``."""

ZK_EXPIRY: Final = "zk:"
"""How a :class:`~statechan.cluster.actions.Tick` names ZooKeeper expiring a broker's session (``zk:``
and the broker's id)."""
SYNCER: Final = -1
"""The syncer's id where a broker's would be (a producer, an ephemeral owner)."""
LEADER_PATH: Final = "/loadbalance/leader"
REGISTRY_PATH: Final = "/loadbalance/brokers"
Path = str | int
"""A metadata-store node: a channel key (``str``), a broker's registry node (its id), or :data:`LEADER_PATH`."""


@functools.cache
def broker_name(broker: int) -> str:
    """The broker's id at the edges: ``broker-1:8080`` for ``0``."""
    return f"broker-{broker + 1}:8080"


@functools.lru_cache(maxsize=4096)
def broker_id(name: str) -> int:
    """The inverse of :func:`broker_name` (``ValueError`` for a name that is not a broker's)."""
    if name.startswith("broker-") and name.endswith(":8080") and name[7:-5].isdigit() and int(name[7:-5]) >= 1:
        return int(name[7:-5]) - 1
    raise ValueError(f"not a broker of the simulated cluster: {name!r} (expected broker-N:8080)")


def name_order(brokers: int) -> tuple[int, ...]:
    """The brokers in the order of their names (``broker-10`` before ``broker-2``), as Pulsar's
    registry lists them and placement sorts them."""
    return tuple(sorted(range(brokers), key=broker_name))


@dataclass(frozen=True)
class LookupAnswer:
    """What a broker answered a client: an owner, nobody (``owner`` None), or an error (names, as
    the client sees them)."""

    time: int
    broker: str
    bundle: str
    owner: str | None
    error: str | None
    owner_registered: bool
    deferred: bool
    redirect: bool = False
    """An in-flight bundle's destination, given at once without the active-owner check (Pulsar
    redirects clients early so the source never blocks); not an ownership answer."""
    unchecked: bool = False
    """Answered by a disabled channel (a broker shutting down gracefully, #24770): the stored owner
    with no liveness check, by design, so a client is sent on rather than refused while the
    broker's bundles move away; the exception lookup-answers-live-owner makes."""


# -- the canonical form's context --------------------------------------------------------------------
class Canon:
    """What a canonical form is taken relative to: the clock ages count from, the cap beyond which
    ages read alike, the renaming of broker ids (``perm[old] = new``, or None), and whether message
    producers count (only the syncer reads them). ``token`` identifies the context for the records'
    caches (one per distinct context, given by the fingerprinter)."""

    __slots__ = ("cap", "h", "now", "perm", "producers", "timers", "token", "v")

    def __init__(self, now: int, cap: int, perm: tuple[int, ...] | None, producers: bool, token: int) -> None:
        self.now, self.cap, self.perm, self.producers, self.token = now, cap, perm, producers, token
        self.timers: tuple[tuple[Timer, ...], tuple[Timer, ...], Form] | None = None
        """The last timers a state's form took in this context: the timers, in the form's order,
        and their forms (states that share their timers, as siblings do, work them out once)."""

        def h(record: _Cached) -> int:
            return record._ch if record._tok == token else record.ch(self)

        self.h: Callable[[_Cached], int] = h
        """A held record's hash in this context (what :meth:`_Cached.ch` substitutes)."""
        self.v: Callable[[_Cached], Form] = lambda record: record.canon(self)
        """A held record's form in this context (what :meth:`_Cached.canon` substitutes)."""

    def age(self, when: int | None) -> int | None:
        if when is None:
            return None
        age = self.now - when
        return age if age < self.cap else self.cap

    def b(self, broker: int | None) -> int | None:
        """A broker id renamed (the syncer and None stay)."""
        if broker is None or broker < 0 or self.perm is None:
            return broker
        return self.perm[broker]


_CACHES = frozenset({"_tok", "_ch", "_sig", "_dict", "_quiet", "_data", "_owned"})
"""The slots that hold what a record works out from itself (not pickled: a worker works it out again)."""


_UNSET: Final = object()


class _Cached:
    """A record that keeps its form's hash for the last context it was asked in."""

    __slots__ = ("_ch", "_tok")

    def __init__(self) -> None:
        self._tok = -1
        self._ch = 0

    def _args(self) -> tuple[Any, ...]:
        """What the constructor takes to make a copy (the rest follows as the pickled state)."""
        raise NotImplementedError

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as its constructor's arguments and its fields (a compiled record cannot be made
        without its ``__init__``, as copyreg's default would)."""
        return (type(self), self._args(), self.__getstate__())

    def __getstate__(self) -> tuple[None, dict[str, Any]]:
        """Pickled without the cached hash: its context's token means nothing in another process.
        (A compiled record lists its fields in ``__mypyc_attrs__`` instead of ``__slots__``.)"""
        slots = {
            name: None if name in _CACHES else getattr(self, name)
            for klass in type(self).__mro__
            for name in getattr(klass, "__slots__", ()) or getattr(klass, "__mypyc_attrs__", ())
            if hasattr(self, name)
        }
        slots["_tok"], slots["_ch"] = -1, 0
        return None, slots

    def __setstate__(self, state: tuple[None, dict[str, Any]]) -> None:
        """The fields the constructor did not set (a compiled record's final fields cannot be set again)."""
        for name, value in state[1].items():
            if getattr(self, name, _UNSET) != value:
                setattr(self, name, value)

    def form(self, c: Canon, sub: Callable[[Any], Any]) -> Form:
        """The record's canonical form, with ``sub`` applied to the records it holds (their hash,
        or their own form): the one definition both :meth:`ch` and :meth:`canon` use."""
        raise NotImplementedError

    def ch(self, c: Canon) -> int:
        """The hash of the canonical form in ``c``."""
        if self._tok != c.token:
            self._ch = hash(self.form(c, c.h))
            self._tok = c.token
        return self._ch

    def canon(self, c: Canon) -> Form:
        """The canonical form itself (for verifying fingerprints and for people)."""
        return self.form(c, c.v)


# -- channel values -----------------------------------------------------------------------------------
class Rec(_Cached):
    """A channel record's value inside the model (Pulsar's ``ServiceUnitStateData``), its brokers as
    ids: the resolver and the catalogue read it as they read the library's value."""

    __slots__ = ("_data", "dst_broker", "force", "source_broker", "split", "state", "timestamp", "version_id")

    def __init__(
        self,
        state: S,
        dst: int | None,
        src: int | None,
        version: int,
        force: bool,
        timestamp: int,
        split: tuple[tuple[str, int | None], ...] | None = None,
    ) -> None:
        super().__init__()
        self.state: Final = state
        self.dst_broker: Final = dst
        self.source_broker: Final = src
        self.version_id: Final = version
        self.force: Final = force
        self.timestamp: Final = timestamp
        self.split: Final = split
        self._data: ServiceUnitStateData | None = None

    @property
    def tombstoned_by_source(self) -> bool:
        """A Deleted, or a forced Free: the record its source tombstones as soon as it reads it
        (``handleDeleteEvent``, ``handleFreeEvent`` since #22743)."""
        return self.state is S.Deleted or (self.state is S.Free and self.force)

    def _args(self) -> tuple[Any, ...]:
        return (
            self.state,
            self.dst_broker,
            self.source_broker,
            self.version_id,
            self.force,
            self.timestamp,
            self.split,
        )

    def __eq__(self, other: object) -> bool:
        return self is other or (
            isinstance(other, Rec)
            and self.version_id == other.version_id
            and self.state is other.state
            and self.dst_broker == other.dst_broker
            and self.source_broker == other.source_broker
            and self.force == other.force
            and self.timestamp == other.timestamp
            and self.split == other.split
        )

    def __hash__(self) -> int:
        return hash((self.state, self.dst_broker, self.source_broker, self.version_id, self.timestamp))

    def __repr__(self) -> str:
        return f"Rec({self.brief()} t={self.timestamp})"

    @property
    def split_children(self) -> tuple[str, ...]:
        return () if self.split is None else tuple(child for child, _ in self.split)

    @staticmethod
    def of(value: ServiceUnitStateData) -> Rec:
        """The model's value of a library value (whose brokers must be the cluster's, or blank)."""

        def broker(name: str | None) -> int | None:
            return None if name is None or not name.strip() else broker_id(name)

        split = value.split_service_unit_to_dest_broker
        return Rec(
            value.state,
            broker(value.dst_broker),
            broker(value.source_broker),
            value.version_id,
            value.force,
            value.timestamp,
            None if split is None else tuple((r, broker(b)) for r, b in split),
        )

    def form(self, c: Canon, sub: Callable[[Any], Any]) -> Form:
        split = self.split
        if split is not None and c.perm is not None:
            split = tuple((r, c.b(b)) for r, b in split)
        return (
            self.state._value_,
            c.b(self.dst_broker),
            c.b(self.source_broker),
            self.version_id,
            self.force,
            c.age(self.timestamp),
            split,
        )

    def data(self) -> ServiceUnitStateData:
        """The library's value (brokers by name), made once."""
        if self._data is None:
            self._data = ServiceUnitStateData.model_construct(
                state=self.state,
                dst_broker=None if self.dst_broker is None else broker_name(self.dst_broker),
                source_broker=None if self.source_broker is None else broker_name(self.source_broker),
                version_id=self.version_id,
                force=self.force,
                timestamp=self.timestamp,
                split_service_unit_to_dest_broker=None
                if self.split is None
                else tuple((r, None if b is None else broker_name(b)) for r, b in self.split),
            )
        return self._data

    def json(self) -> dict[str, object]:
        """The value as Pulsar writes it (``ServiceUnitStateData.model_dump(mode="json", by_alias=True)``)."""
        return {
            "state": self.state.value,
            "dstBroker": None if self.dst_broker is None else broker_name(self.dst_broker),
            "sourceBroker": None if self.source_broker is None else broker_name(self.source_broker),
            "splitServiceUnitToDestBroker": None
            if self.split is None
            else {r: None if b is None else broker_name(b) for r, b in self.split},
            "force": self.force,
            "timestamp": self.timestamp,
            "versionId": self.version_id,
        }

    def brief(self) -> str:
        """``Owned dst=broker-1:8080 src=broker-2:8080 force v3``, as :func:`statechan.values.brief`."""
        parts = [self.state.value]
        if self.dst_broker is not None:
            parts.append(f"dst={broker_name(self.dst_broker)}")
        if self.source_broker is not None:
            parts.append(f"src={broker_name(self.source_broker)}")
        if self.force:
            parts.append("force")
        parts.append(f"v{self.version_id}")
        return " ".join(parts)


class Raw:
    """A channel node or message that is not a value (malformed bytes): every reader skips it."""

    __slots__ = ("payload",)

    def __init__(self, payload: bytes) -> None:
        self.payload: Final = payload

    def __reduce__(self) -> tuple[Any, ...]:
        return (Raw, (self.payload,))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Raw) and other.payload == self.payload

    def __hash__(self) -> int:
        return hash(self.payload)


class Msg(_Cached):
    """A message of the channel topic: its key, its value (None: a tombstone), when it was
    published and by whom (a broker's id, the syncer, or None: written from outside)."""

    __slots__ = ("key", "producer", "publish_time", "value")

    def __init__(self, key: str, value: Rec | Raw | None, publish_time: int, producer: int | None) -> None:
        super().__init__()
        self.key: Final = key
        self.value: Final = value
        self.publish_time: Final = publish_time
        self.producer: Final = producer

    def _args(self) -> tuple[Any, ...]:
        return (self.key, self.value, self.publish_time, self.producer)

    def form(self, c: Canon, sub: Callable[[Any], Any]) -> Form:
        value = self.value
        payload = None if value is None else ("raw", value.payload) if isinstance(value, Raw) else sub(value)
        return (self.key, payload, c.age(self.publish_time), c.b(self.producer) if c.producers else None)


M = TypeVar("M")


class Log(_Cached):
    """An append-only sequence shared between states: full chunks of 32 and a tail, so appending
    copies at most a chunk and a state's log costs nothing to keep (a simulated day has hundreds of
    thousands of messages)."""

    __slots__ = ("_chunks", "_len", "_tail")
    CHUNK: ClassVar[int] = 32

    def __init__(self, chunks: tuple[tuple[Msg, ...], ...] = (), tail: tuple[Msg, ...] = ()) -> None:
        super().__init__()
        self._chunks = chunks
        self._tail = tail
        self._len = len(chunks) * self.CHUNK + len(tail)

    def _args(self) -> tuple[Any, ...]:
        return (self._chunks, self._tail)

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, offset: int) -> Msg:
        chunk = offset >> 5
        if chunk < len(self._chunks):
            return self._chunks[chunk][offset & 31]
        return self._tail[offset - len(self._chunks) * self.CHUNK]

    def __iter__(self) -> Iterator[Msg]:
        for chunk in self._chunks:
            yield from chunk
        yield from self._tail

    def append(self, message: Msg) -> Log:
        if len(self._tail) < self.CHUNK:
            return Log(self._chunks, (*self._tail, message))
        return Log((*self._chunks, self._tail), (message,))

    def form(self, c: Canon, sub: Callable[[Any], Any]) -> Form:
        return tuple([sub(m) for m in self])


# -- the metadata store -------------------------------------------------------------------------------
class Registration:
    """A registry node's data (the broker and its incarnation, as Pulsar's BrokerLookupData names it)."""

    __slots__ = ("broker", "incarnation")

    def __init__(self, broker: int, incarnation: int) -> None:
        self.broker: Final = broker
        self.incarnation: Final = incarnation

    def __reduce__(self) -> tuple[Any, ...]:
        return (Registration, (self.broker, self.incarnation))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Registration) and (other.broker, other.incarnation) == (self.broker, self.incarnation)

    def __hash__(self) -> int:
        return hash((self.broker, self.incarnation))

    def json(self) -> bytes:
        return f'{{"broker": "{broker_name(self.broker)}", "incarnation": {self.incarnation}}}'.encode()


Elected = tuple[int, bool]
"""The leader election's value: a broker's id and whether it was written as its service URL
(#21894 put back: ``http://`` and the id, which matches no broker)."""
NodeData = Rec | Raw | Registration | Elected
Owner = tuple[int, int]
"""A session's owner: (broker, incarnation), or (:data:`SYNCER`, 0)."""


class Node(_Cached):
    """A metadata-store node: its data, version (0 when created), ephemeral owner, and the
    transaction ids and time of its creation and last write (history, not in the canonical form
    but for the write time and the order an owner's ephemeral nodes were made in)."""

    __slots__ = ("created", "data", "modified", "modified_ms", "owner", "version")

    def __init__(
        self, data: NodeData, version: int, owner: Owner | None, created: int, modified: int, modified_ms: int
    ) -> None:
        super().__init__()
        self.data: Final = data
        self.version: Final = version
        self.owner: Final = owner
        self.created: Final = created
        self.modified: Final = modified
        self.modified_ms: Final = modified_ms

    def _args(self) -> tuple[Any, ...]:
        return (self.data, self.version, self.owner, self.created, self.modified, self.modified_ms)

    def form(self, c: Canon, sub: Callable[[Any], Any]) -> Form:
        data = self.data
        if isinstance(data, Rec):
            held: object = sub(data)
        elif isinstance(data, Raw):
            held = ("raw", data.payload)
        elif isinstance(data, Registration):
            held = ("broker", c.b(data.broker), data.incarnation)
        else:
            held = ("leader", c.b(data[0]), data[1])
        owner = None if self.owner is None else (c.b(self.owner[0]), self.owner[1])
        return (held, self.version, owner, c.age(self.modified_ms))


Event = SessionEvent | tuple[NodeEvent, Path]
"""What a client's queue holds: a session event, or a node's change (the listener reads the node again)."""


class Client(_Cached):
    """A metadata-store client: whether its session is connected, whether it was closed, and the
    events queued for it and not yet delivered."""

    __slots__ = ("closed", "connected", "queue", "session")

    def __init__(
        self, session: int, connected: bool = True, closed: bool = False, queue: tuple[Event, ...] = ()
    ) -> None:
        super().__init__()
        self.session = session
        """The session's number (history: only error messages name it)."""
        self.connected = connected
        self.closed = closed
        self.queue = queue

    def thaw(self) -> Client:
        """A draft of the record: a shallow copy a step may change (its caches empty)."""
        return Client(self.session, self.connected, self.closed, self.queue)

    def _args(self) -> tuple[Any, ...]:
        return (self.session, self.connected, self.closed, self.queue)

    @property
    def live(self) -> bool:
        """Whether it gets notifications (connected and not closed)."""
        return self.connected and not self.closed

    def form(self, c: Canon, sub: Callable[[Any], Any]) -> Form:
        queue = tuple(
            (event._value_,) if isinstance(event, SessionEvent) else (event[0]._value_, path_form(c, event[1]))
            for event in self.queue
        )
        return (self.connected, self.closed, queue)


def path_form(c: Canon, path: Path) -> object:
    return ("broker", c.b(path)) if isinstance(path, int) else path


class Store(_Cached):
    """The metadata store's nodes: the channel's (by key), the registry (by broker), the leader's;
    and the last transaction id (history)."""

    __slots__ = ("channel", "leader", "registry", "sessions", "zxid")

    def __init__(
        self,
        channel: immutables.Map[str, Node] | None = None,
        registry: Mapping[int, Node] | None = None,
        leader: Node | None = None,
        zxid: int = 0,
        sessions: int = 0,
    ) -> None:
        super().__init__()
        self.channel = channel if channel is not None else immutables.Map()
        self.registry: Mapping[int, Node] = registry if registry is not None else {}
        self.leader = leader
        self.zxid = zxid
        self.sessions = sessions
        """The last session number given (history)."""

    def thaw(self) -> Store:
        """A draft of the record: a shallow copy a step may change (its caches empty)."""
        return Store(self.channel, self.registry, self.leader, self.zxid, self.sessions)

    def _args(self) -> tuple[Any, ...]:
        return (self.channel, self.registry, self.leader, self.zxid, self.sessions)

    def ephemeral(self) -> list[tuple[Path, Owner]]:
        """The ephemeral nodes and their owners, in the order they were made."""
        made: list[tuple[int, Path, Owner]] = []
        for broker, node in self.registry.items():
            if node.owner is not None:
                made.append((node.created, broker, node.owner))
        if self.leader is not None and self.leader.owner is not None:
            made.append((self.leader.created, LEADER_PATH, self.leader.owner))
        made.sort(key=lambda entry: entry[0])
        return [(path, owner) for _, path, owner in made]

    def get(self, path: Path) -> Node | None:
        if isinstance(path, int):
            return self.registry.get(path)
        if path == LEADER_PATH:
            return self.leader
        return self.channel.get(path)

    def form(self, c: Canon, sub: Callable[[Any], Any]) -> Form:
        # an owner's ephemeral nodes in the order they were made (the order its expiry deletes them)
        rank: dict[Path, int] = {}
        made: dict[Owner, int] = {}
        for path, owner in self.ephemeral():
            rank[path] = made.get(owner, 0)
            made[owner] = rank[path] + 1
        registry = sorted((c.b(b), sub(node), rank.get(b, 0)) for b, node in self.registry.items())
        leader = None if self.leader is None else (sub(self.leader), rank.get(LEADER_PATH, 0))
        channel = tuple(sorted((key, sub(node)) for key, node in self.channel.items()))
        return (channel, tuple(registry), leader)


# -- brokers ------------------------------------------------------------------------------------------
class View(_Cached):
    """A broker's table view: its items in the order it took them (the leader iterates them), the
    keys its broker owns (Pulsar's owned set), its topic reader's position (None on the store), and
    whether it started or was closed."""

    __slots__ = ("_dict", "_owned", "_sig", "closed", "items", "owned", "position", "seq", "started")

    def __init__(
        self,
        position: int | None,
        items: immutables.Map[str, tuple[int, Rec]] | None = None,
        owned: immutables.Map[str, bool] | None = None,
        seq: int = 0,
        started: bool = False,
        closed: bool = False,
    ) -> None:
        super().__init__()
        self.items = items if items is not None else immutables.Map()
        self.owned = owned if owned is not None else immutables.Map()
        self.seq = seq
        self.position = position
        self.started = started
        self.closed = closed
        # what is worked out from the maps, each with the map it came from: a step's draft changes
        # its maps, so a cache is good only while its map is the same object
        self._dict: tuple[immutables.Map[str, tuple[int, Rec]], dict[str, Rec]] | None = None
        self._owned: tuple[immutables.Map[str, bool], frozenset[str]] | None = None
        self._sig: tuple[immutables.Map[str, tuple[int, Rec]], int, tuple[Any, ...]] | None = None

    def thaw(self) -> View:
        """A draft of the record: a shallow copy a step may change (its caches empty)."""
        return View(self.position, self.items, self.owned, self.seq, self.started, self.closed)

    def _args(self) -> tuple[Any, ...]:
        return (self.position, self.items, self.owned, self.seq, self.started, self.closed)

    def get(self, key: str) -> Rec | None:
        held = self.items.get(key)
        return None if held is None else held[1]

    def __len__(self) -> int:
        return len(self.items)

    def entries(self) -> list[tuple[str, Rec]]:
        """The items in the order the view took them (a Python dict's order, as in Pulsar's map)."""
        if len(self.items) <= 1:
            return [(key, held[1]) for key, held in self.items.items()]
        return [(key, rec) for key, (_, rec) in sorted(self.items.items(), key=lambda item: item[1][0])]

    def data(self) -> Mapping[str, Rec]:
        """The items as a dict in the view's order (made once per items map)."""
        known = self._dict
        if known is None or known[0] is not self.items:
            known = self._dict = (self.items, dict(self.entries()))
        return known[1]

    def form(self, c: Canon, sub: Callable[[Any], Any]) -> Form:
        return (tuple([(key, sub(rec)) for key, rec in self.data().items()]), self.position, self.started, self.closed)

    def owned_keys(self) -> frozenset[str]:
        """The keys of the owned set (made once per owned map)."""
        known = self._owned
        if known is None or known[0] is not self.owned:
            known = self._owned = (self.owned, frozenset(self.owned.keys()))
        return known[1]

    def signature(self, me: int) -> tuple[Any, ...]:
        """The items as a broker's signature (:meth:`Broker.signature`) holds them for broker ``me``:
        each value's broker ids left out, but for whether they name ``me`` (made once per broker and
        items map)."""
        known = self._sig
        if known is not None and known[0] is self.items and known[1] == me:
            return known[2]
        signature = tuple(
            (key, v.state._value_, v.version_id, v.dst_broker == me, v.source_broker == me)
            for key, v in self.data().items()
        )
        self._sig = (self.items, me, signature)
        return signature


class TaskKind(enum.Enum):
    """A follow-up a handler queued; the broker runs it as its own step (a crash point)."""

    own = "own"
    release = "release"
    split = "split"
    split_bundles = "split-bundles"
    tombstone = "tombstone"
    assign = "assign"
    commit = "commit"
    start = "start"
    """The channel's start, once a restarted broker is ready for requests."""

    __hash__ = object.__hash__


class Put:
    """A metadata-store write between its read and its compare-and-set (Pulsar's
    ``readModifyUpdateOrCreate``): so another broker's write can come between them (#24186)."""

    __slots__ = ("key", "read_version", "value", "verdict")

    def __init__(self, key: str, value: Rec, read_version: int | None, verdict: Verdict) -> None:
        self.key: Final = key
        self.value: Final = value
        self.read_version: Final = read_version
        self.verdict: Final = verdict

    def __reduce__(self) -> tuple[Any, ...]:
        return (Put, (self.key, self.value, self.read_version, self.verdict))


PutResult = tuple[bool, bool]
"""What a compare-and-set did: (applied, failed with a store error other than a lost race)."""


class Task:
    """A queued follow-up: its kind, bundle, the value it answers, a target broker (an assignment's),
    the write it commits (``commit``) or the children's writes and their results it waits on
    (``split-bundles``)."""

    __slots__ = ("data", "key", "kind", "put", "target", "waits")

    def __init__(
        self,
        kind: TaskKind,
        key: str,
        data: Rec | None,
        target: int | None = None,
        put: Put | None = None,
        waits: tuple[tuple[Put, PutResult | None], ...] = (),
    ) -> None:
        self.kind: Final = kind
        self.key: Final = key
        self.data: Final = data
        self.target: Final = target
        self.put: Final = put
        self.waits: Final = waits

    def __reduce__(self) -> tuple[Any, ...]:
        return (Task, (self.kind, self.key, self.data, self.target, self.put, self.waits))

    def describe(self) -> str:
        return f"{self.kind.value} {self.key}" + (f" -> {broker_name(self.target)}" if self.target is not None else "")


class TimerKind(enum.Enum):
    monitor = "monitor"
    cleanup = "cleanup"
    cleanup_recheck = "cleanup-recheck"
    lookup_timeout = "lookup-timeout"
    shutdown_complete = "shutdown-complete"
    session_expiry = "session-expiry"

    __hash__ = object.__hash__


class Timer:
    """A timer: when it falls due, its order among its source's timers (``seq``), what it does,
    whose it is (a broker's incarnation; ZooKeeper's for a crashed broker's session expiry), and
    its subject: a bundle (``key``) or a broker (``target``), and a clean-up's look count."""

    __slots__ = ("attempt", "broker", "due", "graceful", "incarnation", "key", "kind", "seq", "target")

    def __init__(
        self,
        due: int,
        seq: int,
        kind: TimerKind,
        broker: int,
        incarnation: int,
        key: str = "",
        target: int | None = None,
        attempt: int = 0,
        graceful: bool = False,
    ) -> None:
        self.due: Final = due
        self.seq: Final = seq
        self.kind: Final = kind
        self.broker: Final = broker
        self.incarnation: Final = incarnation
        self.key: Final = key
        self.target: Final = target
        self.attempt: Final = attempt
        self.graceful: Final = graceful

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            Timer,
            (
                self.due,
                self.seq,
                self.kind,
                self.broker,
                self.incarnation,
                self.key,
                self.target,
                self.attempt,
                self.graceful,
            ),
        )

    @property
    def source(self) -> tuple[bool, int]:
        """Who runs it: the broker (one executor: its timers in the order scheduled), or ZooKeeper
        for a crashed broker's session expiry. Sources keep no common order among timers due together."""
        return (self.kind is TimerKind.session_expiry, self.broker)

    def source_name(self) -> str:
        """The source as a :class:`~statechan.cluster.actions.Tick` names it."""
        return (ZK_EXPIRY if self.source[0] else "") + broker_name(self.broker)

    def form(self, c: Canon) -> Form:
        return (c.age(self.due), self.kind._value_, c.b(self.broker), self.incarnation, self.key,
                c.b(self.target), self.attempt, self.graceful)  # fmt: skip


class Broker(_Cached):
    """One broker: its channel, table view, metadata client, queued tasks, deferred lookups (key ->
    deadline), the leader it knows, clean-up jobs it runs as leader (broker -> timer),
    admin unloads it waits for (key -> (owner unloaded, destination)), the registry entries it
    has loaded (kept only with #22899 put back), and, while its session is lost, the registry's
    children as its metadata cache last loaded them (``registry_stale``)."""

    __slots__ = (
        "_sig",
        "alive",
        "channel",
        "client",
        "id",
        "incarnation",
        "jobs",
        "last_session_event",
        "leader_view",
        "lookups",
        "monitor_scheduled",
        "registry_cache",
        "registry_stale",
        "shutting_down",
        "tasks",
        "unloads",
        "view",
    )

    def __init__(self, broker: int, incarnation: int, view: View, client: Client) -> None:
        super().__init__()
        self.id = broker
        self.incarnation = incarnation
        self.alive = True
        self.channel = ChannelState.Constructed
        self.view = view
        self.client = client
        self.monitor_scheduled = False
        self.tasks: tuple[Task, ...] = ()
        self.lookups: Mapping[str, int] = {}
        self.leader_view: Elected | None = None
        self.last_session_event: tuple[SessionEvent, int] = (SessionEvent.SessionReestablished, 0)
        self.jobs: Mapping[int, Timer] = {}
        self.unloads: Mapping[str, tuple[int | None, int | None]] = {}
        self.registry_cache: frozenset[int] = frozenset()
        self.registry_stale: frozenset[int] | None = None
        self.shutting_down = False
        self._sig: tuple[bool, tuple[Any, ...]] | None = None

    def thaw(self) -> Broker:
        """A draft of the record: a shallow copy a step may change (its caches empty)."""
        copy = Broker(self.id, self.incarnation, self.view, self.client)
        copy.alive = self.alive
        copy.channel = self.channel
        copy.jobs = self.jobs
        copy.last_session_event = self.last_session_event
        copy.leader_view = self.leader_view
        copy.lookups = self.lookups
        copy.monitor_scheduled = self.monitor_scheduled
        copy.registry_cache = self.registry_cache
        copy.registry_stale = self.registry_stale
        copy.shutting_down = self.shutting_down
        copy.tasks = self.tasks
        copy.unloads = self.unloads
        return copy

    def _args(self) -> tuple[Any, ...]:
        return (self.id, self.incarnation, self.view, self.client)

    @property
    def is_leader(self) -> bool:
        return self.alive and self.leader_view == (self.id, False)

    def serving(self) -> frozenset[str]:
        """The bundles it believes it owns (its view's owned set), if it runs."""
        if not self.alive or self.channel not in LOOKUP_CHANNELS:
            return frozenset()
        return self.view.owned_keys()

    def form(self, c: Canon, sub: Callable[[Any], Any]) -> Form:
        b = c.b
        tasks: Form = ()
        writes: Form = ()
        if self.tasks:
            puts: list[Put] = []

            def ref(put: Put) -> int:
                for index, known in enumerate(puts):
                    if known is put:
                        return index
                puts.append(put)
                return len(puts) - 1

            tasks = tuple(
                (
                    task.kind._value_,
                    task.key,
                    None if task.data is None else sub(task.data),
                    b(task.target),
                    None if task.put is None else ref(task.put),
                    tuple((ref(put), result) for put, result in task.waits) if task.waits else (),
                )
                for task in self.tasks
            )
            writes = tuple((put.key, sub(put.value), put.read_version, _verdict(put.verdict)) for put in puts)
        leader = self.leader_view
        event, when = self.last_session_event
        if self.alive:
            view = sub(self.view)
        else:
            view = _DEAD_VIEW[self.view.position is not None] + (self.view.started, self.view.closed)
        return (
            self.incarnation,
            self.alive,
            self.channel._value_,
            view,
            sub(self.client),
            self.monitor_scheduled,
            tasks,
            writes,
            tuple(sorted((key, c.age(at)) for key, at in self.lookups.items())) if self.lookups else (),
            None if leader is None else (b(leader[0]), leader[1]),
            event._value_,
            c.age(when),
            tuple(sorted((b(t), timer.form(c)) for t, timer in self.jobs.items())) if self.jobs else (),
            self.shutting_down,
            tuple(sorted((key, b(src), b(dst)) for key, (src, dst) in self.unloads.items())) if self.unloads else (),
            tuple(sorted(b(x) for x in self.registry_cache)) if self.registry_cache else (),
            None if self.registry_stale is None else tuple(sorted(b(x) for x in self.registry_stale)),
        )

    def signature(self, registered: bool) -> tuple[Any, ...]:
        """What no renaming changes about the broker: its record with every broker id left out, but
        for whether it names itself (the checker orders brokers by it before renaming them)."""
        known = self._sig
        if known is not None and known[0] is registered:
            return known[1]
        me = self.id
        view = self.view
        signature = (
            self.alive,
            self.incarnation,
            self.channel._value_,
            self.monitor_scheduled,
            self.shutting_down,
            tuple(task.kind._value_ for task in self.tasks),
            len(self.lookups),
            self.leader_view is None,
            self.leader_view == (me, False),
            view.signature(me) if self.alive else (),
            self.client.connected,
            self.client.closed,
            len(self.client.queue),
            view.position if view.position is not None and self.alive else -1,
            registered,
            len(self.jobs),
            len(self.unloads),
            len(self.registry_cache),
            -1 if self.registry_stale is None else len(self.registry_stale),
        )
        self._sig = (registered, signature)
        return signature


_DEAD_VIEW = {True: ((), 0), False: ((), None)}
"""A dead broker's view (empty, at the start): nothing reads it again (a restart makes a new one)."""


def _verdict(verdict: Verdict) -> tuple[str, str | None]:
    return (verdict.reason._value_, None if verdict.check is None else verdict.check._value_)


class ChannelState(enum.Enum):
    """Pulsar's channel states (``Closed`` .. ``Disabled``)."""

    Closed = 0
    Constructed = 1
    Started = 3
    Disabled = 4

    __hash__ = object.__hash__


LOOKUP_CHANNELS = frozenset({ChannelState.Started, ChannelState.Disabled})
"""Channels that answer lookups: a started one, and on master a disabled one (#24770)."""


class MetadataState(enum.Enum):
    """The leader's reading of its own metadata session, for clean-up delays."""

    Stable = "Stable"
    Jittery = "Jittery"
    Unstable = "Unstable"


# -- the syncer ---------------------------------------------------------------------------------------
Echoes = Mapping[tuple[str, Rec | None], int]


class Syncer(_Cached):
    """The PIP-378 syncer (``ServiceUnitStateTableViewSyncer``, system topic to metadata store): its
    two views and client, the keys a refused forward left unsynced, its own writes whose echo it
    must not forward back, when it started and the compaction threshold it set aside."""

    __slots__ = (
        "active",
        "client",
        "saved_threshold",
        "started_at",
        "store_echoes",
        "store_view",
        "topic_echoes",
        "topic_view",
        "unsynced",
    )

    def __init__(self, topic_view: View, store_view: View, client: Client, started_at: int, saved: int) -> None:
        super().__init__()
        self.topic_view = topic_view
        self.store_view = store_view
        self.client = client
        self.unsynced: frozenset[str] = frozenset()
        self.topic_echoes: Echoes = {}
        self.store_echoes: Echoes = {}
        self.started_at = started_at
        self.active = True
        self.saved_threshold = saved

    def thaw(self) -> Syncer:
        """A draft of the record: a shallow copy a step may change (its caches empty)."""
        copy = Syncer(self.topic_view, self.store_view, self.client, self.started_at, self.saved_threshold)
        copy.active = self.active
        copy.store_echoes = self.store_echoes
        copy.topic_echoes = self.topic_echoes
        copy.unsynced = self.unsynced
        return copy

    def _args(self) -> tuple[Any, ...]:
        return (self.topic_view, self.store_view, self.client, self.started_at, self.saved_threshold)

    def form(self, c: Canon, sub: Callable[[Any], Any]) -> Form:
        def echoes(counted: Echoes) -> Form:
            return tuple(sorted(((k, None if v is None else sub(v)), n) for (k, v), n in counted.items() if n))

        return (
            sub(self.topic_view),
            sub(self.store_view),
            sub(self.client),
            tuple(sorted(self.unsynced)),
            echoes(self.topic_echoes),
            echoes(self.store_echoes),
            c.age(self.started_at),
            self.active,
            self.saved_threshold,
        )


# -- the topic ------------------------------------------------------------------------------------------
class Topic(_Cached):
    """The channel topic: its log, the compaction horizon and snapshot (the offsets kept), the
    compaction threshold, and what a reader of the whole log holds (per key: its value, the offset
    its lifetime began at, whether a Deleted came in it): derived from the log, kept as it grows."""

    __slots__ = ("born", "compacted", "deleted", "horizon", "log", "settled", "threshold")

    def __init__(self, threshold: int) -> None:
        super().__init__()
        self.log = Log()
        self.horizon = 0
        self.compacted: tuple[int, ...] = ()
        self.threshold = threshold
        self.settled: immutables.Map[str, Rec] = immutables.Map()
        self.born: immutables.Map[str, int] = immutables.Map()
        self.deleted: frozenset[str] = frozenset()

    def thaw(self) -> Topic:
        """A draft of the record: a shallow copy a step may change (its caches empty)."""
        copy = Topic(self.threshold)
        copy.born = self.born
        copy.compacted = self.compacted
        copy.deleted = self.deleted
        copy.horizon = self.horizon
        copy.log = self.log
        copy.settled = self.settled
        return copy

    def _args(self) -> tuple[Any, ...]:
        return (self.threshold,)

    @property
    def end(self) -> int:
        """The offset the next message gets (the log's length)."""
        return self.log._len

    def next_for(self, position: int) -> int | None:
        """The offset a read-compacted reader at ``position`` reads next (None: nothing left)."""
        if position >= self.horizon:
            return position if position < self.log._len else None
        return next_offset(position, self.horizon, self.compacted, self.log._len)

    def form(self, c: Canon, sub: Callable[[Any], Any]) -> Form:
        return (sub(self.log), self.compacted, self.horizon, self.threshold)


# -- the whole cluster -------------------------------------------------------------------------------
class Bundles:
    """The namespaces' bundles (splits replace parents), with their keys worked out once."""

    __slots__ = ("form", "keys", "namespaces", "sorted_keys")

    def __init__(self, namespaces: tuple[tuple[str, tuple[Bundle, ...]], ...]) -> None:
        self.namespaces: Final = namespaces
        self.keys: Final = frozenset(b.key for _, bundles in namespaces for b in bundles)
        self.sorted_keys: Final = tuple(sorted(self.keys))
        self.form: Final = tuple((ns, tuple((b.lower, b.upper) for b in bundles)) for ns, bundles in namespaces)

    def __reduce__(self) -> tuple[Any, ...]:
        return (Bundles, (self.namespaces,))

    def replaced(self, parent: Bundle, children: list[Bundle]) -> Bundles:
        """The bundles after ``parent`` was split into ``children`` (the same when it is gone already)."""
        namespaces = []
        for ns, bundles in self.namespaces:
            if ns == parent.namespace and parent in bundles:
                bundles = tuple(sorted([b for b in bundles if b != parent] + children))
            namespaces.append((ns, bundles))
        return Bundles(tuple(namespaces))


class Cold(_Cached):
    """What a cluster changes rarely, held apart so a step copies and a fingerprint hashes it only
    when it changes: the loads placement reads and when they were last reported, the namespaces'
    bundles, split failures to come (injected by tests), when brokers crashed or left the
    registry, the splits that failed, the brokers that shut down (``departed``), those whose
    graceful clean-up was skipped for want of a channel owner (``abandoned``, never ``departed``),
    the records another broker wrote naming a departed broker as destination after it left
    (``named_late``: key, destination, version), which its own shutdown could not hand over, and the
    semi-terminal records a restarted broker found from its previous incarnation (``inherited``:
    key, version), which its new channel reads as existing and does not act on."""

    __slots__ = (
        "abandoned",
        "bundles",
        "crash_times",
        "departed",
        "failed_splits",
        "inherited",
        "loads",
        "loads_at",
        "named_late",
        "split_failures",
        "unregistered_at",
    )

    def __init__(self, bundles: Bundles) -> None:
        super().__init__()
        self.loads: tuple[Load, ...] = ()
        self.loads_at = -1
        self.bundles = bundles
        self.split_failures = 0
        self.crash_times: Mapping[int, int] = {}
        self.unregistered_at: Mapping[int, int] = {}
        self.failed_splits: frozenset[str] = frozenset()
        self.departed: frozenset[int] = frozenset()
        self.abandoned: frozenset[int] = frozenset()
        self.named_late: frozenset[tuple[str, int, int]] = frozenset()
        self.inherited: frozenset[tuple[str, int]] = frozenset()

    def thaw(self) -> Cold:
        """A draft of the record: a shallow copy a step may change (its caches empty)."""
        copy = Cold(self.bundles)
        copy.abandoned = self.abandoned
        copy.crash_times = self.crash_times
        copy.departed = self.departed
        copy.failed_splits = self.failed_splits
        copy.inherited = self.inherited
        copy.loads = self.loads
        copy.loads_at = self.loads_at
        copy.named_late = self.named_late
        copy.split_failures = self.split_failures
        copy.unregistered_at = self.unregistered_at
        return copy

    def _args(self) -> tuple[Any, ...]:
        return (self.bundles,)

    def form(self, c: Canon, sub: Callable[[Any], Any]) -> Form:
        b, age, perm = c.b, c.age, c.perm
        loads: Form = self.loads
        if perm is not None:
            order = sorted(range(len(perm)), key=perm.__getitem__)
            loads = tuple([self.loads[broker] for broker in order])
        return (
            loads,
            self.bundles.form,
            self.split_failures,
            tuple(sorted((b(x), age(t)) for x, t in self.crash_times.items())) if self.crash_times else (),
            tuple(sorted((b(x), age(t)) for x, t in self.unregistered_at.items())) if self.unregistered_at else (),
            age(self.loads_at) if self.loads_at >= 0 else None,
            tuple(sorted(self.failed_splits)) if self.failed_splits else (),
            tuple(sorted(b(x) for x in self.departed)) if self.departed else (),
            tuple(sorted(b(x) for x in self.abandoned)) if self.abandoned else (),
            tuple(sorted((key, b(x), v) for key, x, v in self.named_late)) if self.named_late else (),
            tuple(sorted(self.inherited)) if self.inherited else (),
        )


class ClusterState(_Cached):
    """A whole cluster at one instant (see the module's docstring)."""

    __slots__ = (
        "_quiet",
        "brokers",
        "cold",
        "dead_clients",
        "leader_for",
        "leader_since",
        "now",
        "seq",
        "store",
        "syncer",
        "timers",
        "topic",
        "work_since",
    )

    def __init__(
        self, now: int, topic: Topic, bundles: Bundles, store: Store | None = None, cold: Cold | None = None
    ) -> None:
        super().__init__()
        self.now = now
        self.topic = topic
        self.store = Store() if store is None else store
        self.brokers: tuple[Broker, ...] = ()
        self.timers: tuple[Timer, ...] = ()
        """The live timers, in firing order (due time, then the order scheduled)."""
        self.seq = 0
        self.cold = Cold(bundles) if cold is None else cold
        self.dead_clients: Mapping[Owner, Client] = {}
        """Crashed incarnations' clients, whose sessions live until ZooKeeper expires them."""
        self.leader_since: int | None = None
        self.leader_for: int | None = None
        self.work_since: int | None = None
        self.syncer: Syncer | None = None
        self._quiet: bool | None = None
        """Whether nothing but timers waits (worked out once: :func:`~statechan.cluster.protocol.quiescent`)."""

    # -- reading --------------------------------------------------------------------------------------
    def thaw(self) -> ClusterState:
        """A draft of the record: a shallow copy a step may change (its caches empty)."""
        copy = ClusterState(self.now, self.topic, self.cold.bundles, self.store, self.cold)
        copy.brokers = self.brokers
        copy.dead_clients = self.dead_clients
        copy.leader_for = self.leader_for
        copy.leader_since = self.leader_since
        copy.seq = self.seq
        copy.syncer = self.syncer
        copy.timers = self.timers
        copy.work_since = self.work_since
        return copy

    def _args(self) -> tuple[Any, ...]:
        return (self.now, self.topic, self.cold.bundles)

    def registered(self, broker: int) -> bool:
        return broker in self.store.registry

    @property
    def leader(self) -> Elected | None:
        """The election's value (None: nobody is elected)."""
        node = self.store.leader
        return None if node is None else node.data  # type: ignore[return-value]

    @property
    def loads(self) -> tuple[Load, ...]:
        return self.cold.loads

    @property
    def loads_at(self) -> int:
        return self.cold.loads_at

    @property
    def split_failures(self) -> int:
        return self.cold.split_failures

    @property
    def crash_times(self) -> Mapping[int, int]:
        return self.cold.crash_times

    @property
    def unregistered_at(self) -> Mapping[int, int]:
        return self.cold.unregistered_at

    @property
    def failed_splits(self) -> frozenset[str]:
        return self.cold.failed_splits

    @property
    def departed(self) -> frozenset[int]:
        return self.cold.departed

    @property
    def named_late(self) -> frozenset[tuple[str, int, int]]:
        return self.cold.named_late

    @property
    def inherited(self) -> frozenset[tuple[str, int]]:
        return self.cold.inherited

    def bundle_keys(self) -> frozenset[str]:
        return self.cold.bundles.keys

    def sorted_bundle_keys(self) -> tuple[str, ...]:
        return self.cold.bundles.sorted_keys

    def live_timers(self) -> tuple[Timer, ...]:
        return self.timers

    def next_timer(self) -> Timer | None:
        return self.timers[0] if self.timers else None

    # -- the canonical form ------------------------------------------------------------------------------
    def form(self, c: Canon, sub: Callable[[Any], Any]) -> Form:
        perm = c.perm
        brokers = self.brokers
        if perm is not None:
            brokers = tuple(sorted(brokers, key=lambda broker: perm[broker.id]))
        timers: Form = ()
        jobs: Form = ()
        if self.timers:
            known = c.timers
            if known is not None and known[0] is self.timers:
                ordered, timers = known[1], known[2]
            else:
                ordered = self.timers
                if len(ordered) > 1:
                    ordered = tuple(sorted(ordered, key=lambda t: _timer_order(c, t)))
                timers = tuple([timer.form(c) for timer in ordered])
                c.timers = (self.timers, ordered, timers)
            if any(broker.jobs for broker in brokers):
                live = {id(timer): rank for rank, timer in enumerate(ordered)}
                jobs = tuple(
                    tuple(sorted((c.b(t), live.get(id(timer), -1)) for t, timer in broker.jobs.items()))
                    for broker in brokers
                )
        b, age = c.b, c.age
        return (
            sub(self.topic),
            sub(self.store),
            tuple([sub(broker) for broker in brokers]),
            jobs,
            timers,
            sub(self.cold),
            tuple(sorted(((b(x), inc), sub(client)) for (x, inc), client in self.dead_clients.items()))
            if self.dead_clients
            else (),
            age(self.leader_since),
            age(self.work_since),
            None if self.syncer is None else sub(self.syncer),
        )


def _timer_order(c: Canon, timer: Timer) -> tuple[int, bool, int, int]:
    """Timers as a canonical form keeps them: by due time, then by source (renamed), each source's
    own in the order scheduled. Which of two sources' timers due together came first is not kept:
    either may fire first (a :class:`~statechan.cluster.actions.Tick` names the source)."""
    return (timer.due, timer.kind is TimerKind.session_expiry, c.b(timer.broker), timer.seq)  # type: ignore[return-value]
