"""The cluster simulator: one run of the channel protocol (:mod:`statechan.cluster.protocol`) from a
configuration's start, holding the current state and what the run has shown so far (its actions,
trace records, lookup answers and counters).

``Cluster`` is what the engines drive one run through: ``enabled_actions()`` lists what may happen
next, ``step(action)`` makes it happen. Placement's random choices come from the configuration's
seed, or from the caller's ``picks`` (the model checker's saved runs), so a run replays exactly
from its configuration and its list of actions.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING

from statechan.clock import Clock
from statechan.cluster import protocol
from statechan.cluster.actions import (
    Action,
    Deliver,
    Notify,
    RunTask,
    SyncReconcile,
    SyncStore,
    SyncTopic,
    Tick,
    Wait,
)
from statechan.cluster.config import SimConfig
from statechan.cluster.placement import Placer
from statechan.cluster.state import (
    LEADER_PATH,
    Broker,
    ChannelState,
    ClusterState,
    LookupAnswer,
    MetadataState,
    Raw,
    Rec,
    Task,
    Timer,
    Topic,
    broker_id,
    broker_name,
)
from statechan.model import ProtocolModel
from statechan.observation import Observation
from statechan.states import StorageType
from statechan.stores.metadata import Store
from statechan.values import ServiceUnitStateData

if TYPE_CHECKING:
    from statechan.cluster.mirror import StoreMirror

REGISTRY = "/loadbalance/brokers"
LEADER = LEADER_PATH


class _Clock:
    """The run's clock as the engines read it (the state holds the time)."""

    def __init__(self, cluster: Cluster) -> None:
        self._cluster = cluster

    def now_ms(self) -> int:
        return self._cluster.state.now


class BrokerView:
    """One broker of a run, read-only, by name: what tests and tools look at."""

    def __init__(self, cluster: Cluster, broker: int) -> None:
        self._cluster = cluster
        self.index = broker
        self.id = broker_name(broker)

    @property
    def _b(self) -> Broker:
        return self._cluster.state.brokers[self.index]

    def __repr__(self) -> str:
        b = self._b
        return f"Broker({self.id!r} #{b.incarnation}, {'alive' if b.alive else 'dead'}, {b.channel.name})"

    @property
    def alive(self) -> bool:
        return self._b.alive

    @property
    def incarnation(self) -> int:
        return self._b.incarnation

    @property
    def channel(self) -> ChannelState:
        return self._b.channel

    @property
    def shutting_down(self) -> bool:
        return self._b.shutting_down

    @property
    def is_leader(self) -> bool:
        return self._b.is_leader

    @property
    def connected(self) -> bool:
        return self._b.client.connected

    @property
    def closed(self) -> bool:
        """Its metadata client is closed (shut down, or a crashed incarnation's session expired)."""
        return self._b.client.closed

    @property
    def pending_notifications(self) -> int:
        return len(self._b.client.queue)

    def value(self, key: str) -> ServiceUnitStateData | None:
        """What its view holds for ``key`` (the library's value, brokers by name)."""
        rec = self._b.view.get(key)
        return None if rec is None else rec.data()

    def view(self) -> dict[str, ServiceUnitStateData]:
        """Its view's items, in the order it took them."""
        return {key: rec.data() for key, rec in self._b.view.entries()}

    @property
    def reader_pending(self) -> bool:
        """Its topic reader has a message to take."""
        b = self._b
        return b.view.position is not None and protocol._reader_has_next(self._cluster.state, b.view)

    @property
    def tasks(self) -> list[Task]:
        return list(self._b.tasks)

    @property
    def pending_lookups(self) -> dict[str, int]:
        return dict(self._b.lookups)

    @property
    def unloads(self) -> dict[str, tuple[str | None, str | None]]:
        return {
            key: (None if src is None else broker_name(src), None if dst is None else broker_name(dst))
            for key, (src, dst) in self._b.unloads.items()
        }

    def is_registered(self, broker: str) -> bool | None:
        """Whether ``broker`` is in the registry, as this broker can read it: without a session, in the
        list its metadata cache last loaded (None: nothing cached)."""
        client = self._b.client
        if not client.live:
            stale = self._b.registry_stale
            return None if stale is None else broker_id(broker) in stale
        return broker_id(broker) in self._cluster.state.store.registry

    def serving(self) -> set[str]:
        """Bundles it believes it owns (its own view's owned set), if it is running."""
        return set(self._b.serving())

    def owned_service_units(self) -> set[str]:
        """Pulsar's ``getOwnedServiceUnits``: what it serves and its own heartbeat and SLA-monitor
        bundles, which never reach the channel."""
        return set(protocol.owned_service_units(self._cluster.state, self._cluster.setup, self.index))

    @property
    def closed_units(self) -> Counter[str]:
        """How often it closed each bundle (its clients disconnected), so far in the run."""
        return self._cluster._closed[self.index]

    @property
    def handled(self) -> Counter[str]:
        """How many records of each state its handler took, so far in the run."""
        return self._cluster._handled[self.index]

    @property
    def cleanup_jobs(self) -> dict[str, Timer]:
        """The clean-up jobs it runs as leader, by the broker cleaned up after."""
        return {broker_name(target): timer for target, timer in self._b.jobs.items()}

    def metadata_state(self) -> MetadataState:
        """Its reading of its own metadata session (for clean-up delays)."""
        return protocol.metadata_state(self._b, self._cluster.state.now)


class Cluster:
    """One run: a configuration, its current :class:`ClusterState`, and what the run showed."""

    def __init__(
        self,
        config: SimConfig | None = None,
        make_store: Callable[[Clock], Store] | None = None,
        picks: Sequence[int] | None = None,
    ) -> None:
        """``make_store`` runs the metadata store's operations on a real store too (a
        :class:`statechan.stores.zookeeper.ZooKeeperStore`), which must agree with the model's at
        every step (:mod:`statechan.cluster.mirror`).

        ``picks`` takes placement's choices from the caller instead of the seeded generator: the
        i-th choice of the run takes candidate ``picks[i]`` (0 once they run out). A run the model
        checker saves replays with them (``self.picks``)."""
        self.config = config if config is not None else SimConfig()
        self.setup = protocol.setup(self.config)
        self.model: ProtocolModel = self.setup.model
        self.storage: StorageType = self.config.storage
        self.clock = _Clock(self)
        self.rng = random.Random(self.config.seed)
        self.picks: list[int] | None = None
        """The placement choices made so far, when they come from the caller."""
        self._plan: list[int] = []
        if picks is not None:
            self.picks = []
            self._plan = list(picks)[::-1]
        self.history: list[Action] = []
        self.trace: list[dict[str, object]] = []
        self.answers: list[LookupAnswer] = []
        self.counters: Counter[str] = Counter()
        self._closed: list[Counter[str]] = [Counter() for _ in range(self.config.brokers)]
        self._handled: list[Counter[str]] = [Counter() for _ in range(self.config.brokers)]
        self._step_answers: tuple[LookupAnswer, ...] = ()
        self.placement: Placer | None = None
        """A placement decided outside the channel (the balance lab's); None: the model's own."""
        self.mirror: StoreMirror | None = None
        self.store: Store | None = None
        """The real store the run's store operations are made on too, if any."""
        if make_store is not None:
            from statechan.cluster.mirror import StoreMirror

            self.store = make_store(self.clock)
            self.mirror = StoreMirror(self.store, self.config)
        outcome = protocol.init(self.setup, mirrored=self.mirror is not None)
        self.state: ClusterState = outcome.state
        self._take(outcome)
        if self.mirror is not None:
            self.mirror.follow(outcome.ops or [], "start")
        self.brokers: dict[str, BrokerView] = {broker_name(i): BrokerView(self, i) for i in range(self.config.brokers)}

    # -- stepping ------------------------------------------------------------------------------------------
    def _choose(self, width: int) -> int:
        if self.picks is None:
            return self.rng.choice(range(width))
        wanted = self._plan.pop() if self._plan else 0
        pick = wanted if wanted < width else 0
        self.picks.append(pick)
        return pick

    def _take(self, outcome: protocol.Outcome) -> None:
        for record in outcome.records:
            self.trace.append(
                {"kind": record["kind"], "offset": len(self.trace), **{k: v for k, v in record.items() if k != "kind"}}
            )
        self.answers.extend(outcome.answers)
        self._step_answers = tuple(outcome.answers)
        counters = self.counters
        for name, n in outcome.counters.items():  # a loop: Counter.update's mapping check costs more
            counters[name] += n
        for (broker, key), n in outcome.closed.items():
            self._closed[broker][key] += n
        for (broker, state), n in outcome.handled.items():
            self._handled[broker][state] += n

    def step(self, action: Action) -> None:
        """Apply one action (it must be enabled; a disabled one raises ``ValueError``)."""
        placement = self.placement
        placer = None if placement is None else lambda names: placement.select(names, None, self.rng)
        outcome = protocol.step(
            self.state, action, self.setup, self._choose, placer=placer, mirrored=self.mirror is not None
        )
        self.state = outcome.state
        self._take(outcome)
        self.history.append(action)
        self.counters[action.kind] += 1
        if self.mirror is not None:
            self.mirror.follow(outcome.ops or [], action.describe())

    def enabled_actions(self, without: AbstractSet[type[Action]] = frozenset()) -> list[Action]:
        """Every action that can happen now, but for the kinds in ``without``."""
        return protocol.enabled(self.state, self.setup, without)

    def observe(self) -> Observation:
        """What invariants may look at now (the state, and the answers of the last step)."""
        return Observation(self.state, self.setup, self._step_answers)

    # -- reading -----------------------------------------------------------------------------------------
    def leader(self) -> str | None:
        """The election's value: a broker's id, or (#21894 put back) its service URL."""
        elected = self.state.leader
        if elected is None:
            return None
        return ("http://" if elected[1] else "") + broker_name(elected[0])

    def registered(self, broker: str) -> bool:
        return broker_id(broker) in self.state.store.registry

    def healthy(self, broker: str) -> bool:
        """Pulsar's broker health check: the broker answers and its channel runs."""
        b = self.brokers[broker]
        return b.alive and b.channel is ChannelState.Started and self.registered(broker)

    def live_bundle_keys(self) -> frozenset[str]:
        """The keys of every bundle the namespaces have now (splits replace parents)."""
        return self.state.bundle_keys()

    def sorted_bundle_keys(self) -> Sequence[str]:
        """Every bundle's key, sorted (the state's own tuple: a lookup's draw reads it, copies nothing)."""
        return self.state.sorted_bundle_keys()

    def next_timer(self) -> Timer | None:
        return self.state.next_timer()

    def live_timers(self) -> list[Timer]:
        """The timers that can still fire, in firing order."""
        return list(self.state.timers)

    def views(self) -> dict[str, dict[str, ServiceUnitStateData]]:
        """Each running broker's view."""
        return {b.id: b.view() for b in self.brokers.values() if b.alive}

    def serving(self) -> dict[str, set[str]]:
        return {b.id: b.serving() for b in self.brokers.values() if b.alive}

    def channel(self) -> Mapping[str, ServiceUnitStateData]:
        """The channel's settled value per key (the topic's whole-log fold, or the store's nodes)."""
        return {key: rec.data() for key, rec in protocol.channel_values(self.state, self.setup).items()}

    @property
    def log_end(self) -> int:
        """The channel topic's next offset (its length)."""
        return self.state.topic.end

    @property
    def compaction_threshold(self) -> int:
        return self.state.topic.threshold

    def quiescent(self) -> bool:
        """No delivery, notification, task or syncer step is waiting (timers may be)."""
        return protocol.quiescent(self.state, self.setup)

    def work_actions(self) -> list[Action]:
        """The deliveries, notifications, tasks and syncer steps waiting, in broker order."""
        return list(protocol.work(self.state, self.setup))

    def run(self, operation: Callable[[protocol.Tx], None]) -> None:
        """Do ``operation`` on the protocol's handlers as one step (a test drives a handler
        directly, as Pulsar's channel tests call the channel's methods); not part of ``history``."""
        outcome = protocol.operate(self.state, self.setup, operation, self._choose)
        self.state = outcome.state
        self._take(outcome)

    @property
    def split_failures(self) -> int:
        return self.state.split_failures

    @property
    def failed_splits(self) -> frozenset[str]:
        return self.state.failed_splits

    def syncer_differences(self) -> dict[str, tuple[ServiceUnitStateData | None, ServiceUnitStateData | None]]:
        """The keys whose values differ between the syncer's views: key -> (topic's, store's)."""
        syncer = self.state.syncer
        if syncer is None:
            return {}
        topic, store = syncer.topic_view, syncer.store_view
        out = {}
        for key in sorted({*topic.items.keys(), *store.items.keys()}):
            one, other = topic.get(key), store.get(key)
            if one != other:
                out[key] = (None if one is None else one.data(), None if other is None else other.data())
        return out

    def put_node_from_outside(self, key: str, data: bytes) -> None:
        """Something that is not a broker writes ``data`` to the bundle's node of the metadata
        store (whatever version it holds): a value, or bytes no reader can read."""
        try:
            value: Rec | Raw = Rec.of(ServiceUnitStateData.model_validate_json(data))
        except ValueError:
            value = Raw(data)
        self.state = protocol.put_external(self.state, self.setup, key, value)

    def inject_split_failures(self, count: int) -> None:
        """The next split's bundle-metadata updates fail ``count`` times (BadVersionException)."""
        self.state = protocol.inject(self.state, split_failures=count)

    def publish_from_outside(self, key: str, value: ServiceUnitStateData | None) -> None:
        """A record written to the channel topic by something that is not a broker (a tool, an
        operator): every reader and the syncer see it as they see the brokers' records."""
        rec = None if value is None else Rec.of(value)
        self.state = protocol.publish_external(self.state, self.setup, key, rec)

    # -- running -----------------------------------------------------------------------------------------
    def drain(self, limit: int = 1_000_000) -> int:
        """Take every waiting delivery, notification, task and syncer step (no time passes).

        Deliveries and notifications go before tasks, so every broker sees each record before
        anyone acts on it (prompt delivery); racing orders come from the caller's own choices.
        Each step is the first of the waiting work in broker order: deliveries and
        notifications, then the syncer's, then tasks."""
        steps = 0
        while steps < limit:
            action = _first_work(self.state, self.setup)
            if action is None:
                return steps
            self.step(action)
            steps += 1
        raise RuntimeError(f"the cluster did not quiesce within {limit} steps")

    def advance(self, ms: int, limit: int = 1_000_000) -> int:
        """Let ``ms`` of time pass: fire due timers in order, draining work after each."""
        end = self.state.now + ms
        steps = self.drain(limit)
        while (timer := self.next_timer()) is not None and timer.due <= end:
            self.step(Tick())
            steps += 1 + self.drain(limit)
        if end > self.state.now:
            self.step(Wait(end - self.state.now))
        return steps

    @property
    def topic(self) -> TopicView:
        """The channel topic, read-only: its length and compaction threshold, its messages."""
        return TopicView(self.state.topic)

    def close(self) -> None:
        """Release the real store a mirror runs on, if any."""
        if self.mirror is not None:
            self.mirror.close()


class TopicView:
    """The channel topic of a run, read-only (what tools and tests look at)."""

    def __init__(self, topic: Topic) -> None:
        self._topic = topic

    @property
    def end(self) -> int:
        """The offset the next message gets (the log's length)."""
        return self._topic.end

    @property
    def horizon(self) -> int:
        return self._topic.horizon

    @property
    def compaction_threshold(self) -> int:
        return self._topic.threshold

    def __iter__(self) -> Iterator[tuple[str, ServiceUnitStateData | None]]:
        """Each message's key and value (None: a tombstone), in log order."""
        for message in self._topic.log:
            value = message.value
            yield message.key, value.data() if isinstance(value, Rec) else None


def _first_work(state: ClusterState, setup: protocol.Setup) -> Action | None:
    """The work :meth:`Cluster.drain` takes next: a delivery or notification (broker order), the
    syncer's, else a task."""
    topic = state.topic
    for broker in state.brokers:
        if broker.alive:
            if broker.view.position is not None and protocol._reader_has_next(state, broker.view):
                return Deliver(broker_name(broker.id))
            if broker.client.queue:
                return Notify(broker_name(broker.id))
    del topic
    syncer = state.syncer
    if syncer is not None:
        if protocol._reader_has_next(state, syncer.topic_view):
            return SyncTopic()
        if syncer.client.queue:
            return SyncStore()
        if protocol.reconcile_due(state, setup):
            return SyncReconcile()
    for broker in state.brokers:
        if broker.alive and broker.tasks:
            return RunTask(broker_name(broker.id))
    return None
