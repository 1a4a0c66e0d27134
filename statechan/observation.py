"""What the invariants see of a cluster at one step: its state (:mod:`statechan.cluster.state`) and
the lookup answers the step gave, read through the accessors the catalogue uses. Nothing is copied:
each accessor reads the state (immutable, so an engine can keep an observation and compare the next
one with it), worked out on first use and kept."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Generic, TypeVar, overload

from statechan.cluster.config import ChannelConfig, SimConfig
from statechan.cluster.protocol import Setup, channel_values, quiescent, setup, syncer_differences
from statechan.cluster.state import ChannelState, ClusterState, Elected, LookupAnswer, Rec
from statechan.kernel import interpreted
from statechan.states import StorageType

__all__ = ["LookupAnswer", "Observation"]

T = TypeVar("T")


@interpreted
class lazy(Generic[T]):
    """An accessor worked out on first use and kept in the instance (``functools.cached_property``
    without its lock: an observation is read by one thread, and the lock cost a tenth of a check)."""

    def __init__(self, compute: Callable[[Any], T]) -> None:
        self.compute = compute
        # (a compiled method is a callable without a name: __set_name__ names the accessor)
        self.name: str = getattr(compute, "__name__", "")
        self.__doc__ = getattr(compute, "__doc__", None)

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type) -> lazy[T]: ...
    @overload
    def __get__(self, obj: object, owner: type) -> T: ...
    def __get__(self, obj: object, owner: type) -> T | lazy[T]:
        if obj is None:
            return self
        value = self.compute(obj)
        obj.__dict__[self.name] = value
        return value


@interpreted
class Observation:
    """A cluster's state as the invariants see it at one step, with the answers of that step.
    Brokers are ids (``0`` is ``broker-1:8080``); views, serving sets and the like list the
    running brokers only."""

    def __init__(self, state: ClusterState, setup: Setup, answers: Iterable[LookupAnswer] = ()) -> None:
        self.state = state
        self.setup = setup
        self.answers: tuple[LookupAnswer, ...] = tuple(answers)
        """The lookup answers the step gave (every answer is in one step's observation)."""
        self.handmade = False
        """Some accessors answer values given, not read off the state (:meth:`of`, :meth:`replace`)."""

    @classmethod
    def of(cls, config: SimConfig, **fields: Any) -> Observation:
        """An observation made of the values given (a hand-made one, for testing an invariant):
        each accessor named in ``fields`` answers its value; the others need a state."""
        obs = cls(None, setup(config))  # type: ignore[arg-type]
        obs.__dict__.update(fields)
        obs.handmade = True
        return obs

    def replace(self, **fields: Any) -> Observation:
        """This observation with the accessors named in ``fields`` answering those values."""
        obs = Observation(self.state, self.setup, self.answers)
        obs.__dict__.update({k: v for k, v in self.__dict__.items() if k not in ("state", "setup")})
        obs.__dict__.update(fields)
        obs.handmade = True
        return obs

    def successor(self, state: ClusterState, answers: Iterable[LookupAnswer] = ()) -> Observation:
        """The observation of ``state``, which a step made from this one's state, with ``answers``:
        what this one worked out from records the step did not replace (the very objects) it
        takes as it is, instead of working it out again."""
        obs = Observation(state, self.setup, answers)
        if self.handmade:
            return obs
        known = self.__dict__
        if "channel" in known and self.setup.on_store and self.state.store.channel is state.store.channel:
            obs.__dict__["channel"] = known["channel"]
        return obs

    @property
    def config(self) -> SimConfig:
        return self.setup.config

    @property
    def channel_config(self) -> ChannelConfig:
        return self.setup.channel

    @property
    def storage(self) -> StorageType:
        return self.setup.storage

    @lazy
    def time(self) -> int:
        return self.state.now

    @lazy
    def running(self) -> tuple[int, ...]:
        return tuple(b.id for b in self.state.brokers if b.alive)

    @lazy
    def views(self) -> dict[int, Mapping[str, Rec]]:
        """Each running broker's view (its items in the order it took them)."""
        return {b.id: b.view.data() for b in self.state.brokers if b.alive}

    @lazy
    def serving(self) -> dict[int, frozenset[str]]:
        return {b.id: b.serving() for b in self.state.brokers if b.alive}

    @lazy
    def started(self) -> frozenset[int]:
        return frozenset(b.id for b in self.state.brokers if b.alive and b.channel is ChannelState.Started)

    @lazy
    def connected(self) -> frozenset[int]:
        return frozenset(b.id for b in self.state.brokers if b.alive and b.client.connected)

    @lazy
    def registered(self) -> frozenset[int]:
        return frozenset(self.state.store.registry)

    @lazy
    def unregistered_at(self) -> Mapping[int, int]:
        return self.state.unregistered_at

    @lazy
    def leader(self) -> Elected | None:
        """The election's value (a broker's id, and whether it was written as its service URL)."""
        return self.state.leader

    @lazy
    def leader_since(self) -> int | None:
        """Since when the elected leader has been running, connected and acting (None: no such leader)."""
        return self.state.leader_since

    @lazy
    def acting_leaders(self) -> frozenset[int]:
        return frozenset(b.id for b in self.state.brokers if b.alive and b.leader_view == (b.id, False))

    @lazy
    def bundles(self) -> frozenset[str]:
        return self.state.bundle_keys()

    @lazy
    def quiescent(self) -> bool:
        return quiescent(self.state, self.setup)

    @lazy
    def syncer_differences(self) -> int | None:
        syncer = self.state.syncer
        return None if syncer is None else syncer_differences(syncer)

    @lazy
    def timers_overdue(self) -> bool:
        """A timer's due time has passed without it firing (after a ``wait``): time bounds do not apply."""
        timers = self.state.timers
        return bool(timers) and timers[0].due < self.state.now

    @lazy
    def departed(self) -> frozenset[int]:
        """Brokers whose graceful shutdown completed (and that have not started again)."""
        return self.state.departed

    @lazy
    def named_late(self) -> frozenset[tuple[str, int, int]]:
        """Records (key, destination, version) another broker wrote naming a departed broker as
        destination after it left: a stale registry read, not the departure's to hand over."""
        return self.state.named_late

    @lazy
    def inherited(self) -> frozenset[tuple[str, int]]:
        """Semi-terminal records (key, version) a restarted broker found from its previous
        incarnation: existing to its new channel, which does not tombstone them (the monitor does)."""
        return self.state.inherited

    @lazy
    def failed_splits(self) -> frozenset[str]:
        """Parents whose split gave up after its retries (left Splitting for the leader, as in Pulsar)."""
        return self.state.failed_splits

    @lazy
    def channel(self) -> Mapping[str, Rec]:
        """The channel's settled value per key (a key it holds nothing for is absent): on the system
        topic what a reader of the whole log holds, on the metadata store the node. The truth the
        views follow, and what the step invariants compare from one observation to the next."""
        return channel_values(self.state, self.setup)

    @lazy
    def born(self) -> Mapping[str, int]:
        """Per key in ``channel``, where its current lifetime began (the offset of the first record
        after nothing on the topic, the node's creation zxid on the store): a history variable, so
        two observations tell whether the key was deleted between them."""
        if self.setup.on_store:
            return {key: node.created for key, node in self.state.store.channel.items() if isinstance(node.data, Rec)}
        return self.state.topic.born

    @lazy
    def deleted(self) -> frozenset[str]:
        """Keys with a Deleted settled in their current lifetime (on the topic, from the log; on the
        store, the node holds Deleted, its only way out being its removal)."""
        if self.setup.on_store:
            return frozenset(key for key, value in self.channel.items() if value.state.value == "Deleted")
        return self.state.topic.deleted

    @lazy
    def incarnations(self) -> dict[int, int]:
        """Each running broker's incarnation: a view restarted between two observations starts afresh."""
        return {b.id: b.incarnation for b in self.state.brokers if b.alive}

    @lazy
    def pending_lookups(self) -> dict[int, dict[str, int]]:
        """Per running broker, the lookups it has deferred and not answered yet: key -> when deferred."""
        wait = self.setup.channel.in_flight_wait_ms
        return {
            b.id: {key: deadline - wait for key, deadline in b.lookups.items()}
            for b in self.state.brokers
            if b.alive and b.lookups
        }

    @lazy
    def pending_unloads(self) -> dict[int, Mapping[str, tuple[int | None, int | None]]]:
        """Per running broker, the admin unloads it issued and has not seen complete: key -> (the
        owner it unloads, the destination of a transfer or None)."""
        return {b.id: b.unloads for b in self.state.brokers if b.alive and b.unloads}

    @lazy
    def positions(self) -> dict[int, int]:
        """Per running broker on the system topic, its reader's position (the next offset it reads)."""
        return {b.id: b.view.position for b in self.state.brokers if b.alive and b.view.position is not None}

    @lazy
    def registered_since(self) -> dict[int, int]:
        """Per registered broker, when its registry node was last written (created, or taken over by a
        restart): how long the registry has named it without a break."""
        return {b: node.modified_ms for b, node in self.state.store.registry.items()}
