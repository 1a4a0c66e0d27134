"""``--through-channel``: the balancer's decisions carried out by the cluster model's channel.

Every assignment is a client lookup whose placement returns the broker the lab decided; every
unload is the leader's admin unload (Releasing, then Free) followed by the clients' lookup; every
transfer is the leader's PIP-307 transfer; every split is the owner's split (Splitting, the
children Owned by it, the parent Deleted and tombstoned), with a client's lookup of the parent
while it splits and of both children after. The cluster runs its own timers as the minutes pass,
the invariant catalogue checks it, and the lookups that had to wait or failed are counted. The
lab's ownership table and the channel's must agree after every minute (counted as mismatches).

The cluster model is driven only here, through ``Cluster``'s public surface.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from statechan.balance.lab import Chooser, MoveEvent, SplitEvent
from statechan.balance.load import MINUTE_MS, Bundles, Ints, namespace_name
from statechan.balance.settings import Workload
from statechan.cluster import (
    Cluster,
    Crash,
    Lookup,
    Restart,
    SimConfig,
    Split,
    StoreKind,
    Transfer,
    Unload,
)
from statechan.cluster.placement import BrokerLoad
from statechan.keys import parse_key
from statechan.states import ServiceUnitState


@dataclass
class Decided:
    """A cluster placement that returns the broker the balancer chose (the channel carries the
    decision, it does not make one); asked with no decision pending (the leader placing a dead
    broker's bundles), it asks the balancer's placement."""

    choice: str | None = None
    ask: Callable[[Sequence[str]], str | None] | None = None

    def select(self, candidates: Sequence[str], loads: dict[str, BrokerLoad], rng: random.Random) -> str | None:
        if self.choice is not None:
            return self.choice if self.choice in candidates else None
        return self.ask(candidates) if self.ask is not None else None


def cluster_config(workload: Workload, store: StoreKind, seed: int) -> SimConfig:
    """The workload's cluster as the channel model's configuration.

    ``SimConfig`` caps brokers at 64 for the command line's simulations; the lab's cluster is
    already validated by :class:`Workload`, so it is built without that cap."""
    base = SimConfig(
        brokers=2,
        namespaces=workload.namespaces,
        bundles_per_namespace=workload.namespace_bundle_count,
        store=store,
        seed=seed,
        trace_views=False,
    )
    return base.model_copy(update={"brokers": workload.brokers})


@dataclass
class ThroughChannel:
    """A :class:`statechan.balance.lab.Carrier` over a :class:`Cluster`.

    ``crashes_per_hour`` > 0 crashes a running broker at that rate (drawn per minute from a
    generator seeded by the workload's seed) and restarts it ``down_minutes`` later; the leader's
    clean-up then moves its bundles without the balancer, and each minute the lab's table is
    brought in line with the channel's owners. Without faults the tables never differ."""

    workload: Workload
    store: StoreKind = StoreKind.system_topic
    check_every_minutes: int = 10
    crashes_per_hour: float = 0.0
    down_minutes: int = 5
    cluster: Cluster = field(init=False)
    placement: Decided = field(default_factory=Decided)
    counts: dict[str, int] = field(default_factory=dict)
    breaches: list[str] = field(default_factory=list)
    _owner: dict[str, str] = field(default_factory=dict)
    _restart_at: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.cluster = Cluster(cluster_config(self.workload, self.store, self.workload.seed))
        self.cluster.placement = self.placement
        self.ids = self.cluster.config.broker_ids()
        self.index = {broker: i for i, broker in enumerate(self.ids)}
        w = self.workload
        start = Bundles.even(
            [namespace_name(n) for n in range(w.namespaces)], [w.namespace_bundle_count] * w.namespaces
        )
        self.keys: dict[int, str] = {b: start.key(b) for b in range(len(start))}
        missing = set(self.keys.values()) - self.cluster.live_bundle_keys()
        if missing:
            raise ValueError(f"the lab's bundles are not the channel's: {sorted(missing)[:3]}")
        self.faults = random.Random(f"balance-faults-{self.workload.seed}")
        for name in (
            "move_lookups",
            "move_lookups_delayed",
            "move_lookups_failed",
            "mismatches",
            "checks",
            "breaches",
            "crashes",
            "moves_refused",
            "moved_by_channel",
            "splits",
            "splits_refused",
            "split_lookups",
            "split_lookups_delayed",
            "split_lookups_failed",
            "split_boundary_moved",
        ):
            self.counts[name] = 0

    def bind(self, choose: Chooser) -> None:
        def ask(candidates: Sequence[str]) -> str | None:
            chosen = choose([self.index[c] for c in candidates if c in self.index])
            return None if chosen is None else self.ids[chosen]

        self.placement.ask = ask

    def _healthy(self, preferred: int) -> str:
        """The broker a client or an admin call goes through: ``preferred`` if it runs, else the next that does."""
        for step in range(len(self.ids)):
            broker = self.ids[(preferred + step) % len(self.ids)]
            if self.cluster.healthy(broker):
                return broker
        return self.ids[preferred % len(self.ids)]

    def _lookup(self, bundle: int, broker: int, client: int) -> None:
        key = self.keys[bundle]
        self.placement.choice = self.ids[broker]
        try:
            self.cluster.step(Lookup(self._healthy(client), key))
        finally:
            self.placement.choice = None
        self._owner[key] = self.ids[broker]

    def assign(self, bundle: int, broker: int) -> None:
        self._lookup(bundle, broker, bundle)

    def move(self, event: MoveEvent) -> None:
        cluster = self.cluster
        cluster.drain()
        admin = cluster.leader() or self._healthy(0)
        key = self.keys[event.bundle]
        try:
            if event.transfer:
                cluster.step(Transfer(admin, key, self.ids[event.destination]))
            else:
                cluster.step(Unload(admin, key))
        except ValueError:  # a fault got there first: the bundle is not Owned as the balancer saw it
            self.counts["moves_refused"] += 1
            return
        if event.transfer:
            self._owner[key] = self.ids[event.destination]
        cluster.drain()
        # the clients reconnect: one lookup, which assigns an unloaded bundle
        before = len(cluster.answers)
        self._lookup(event.bundle, event.destination, event.bundle + event.minute)
        cluster.drain()
        self._count_answers("move_lookups", before)

    def _count_answers(self, name: str, since: int) -> None:
        """Count the lookups answered since ``since``: all, delayed (deferred until the bundle was
        owned), failed."""
        for answer in self.cluster.answers[since:]:
            self.counts[name] += 1
            if answer.error is not None:
                self.counts[f"{name}_failed"] += 1
            elif answer.deferred:
                self.counts[f"{name}_delayed"] += 1

    def split(self, event: SplitEvent) -> bool:
        """The owner splits the bundle; a client looks the parent up while it splits, and both
        children once they are owned. The channel's split divides the range in the middle (its
        ``Split`` names no boundary): a split the lab made elsewhere is counted
        (``split_boundary_moved``), its children mapped to the channel's lower and upper halves."""
        cluster = self.cluster
        cluster.drain()
        key = self.keys[event.bundle]
        owner = self.ids[event.broker]
        try:
            cluster.step(Split(owner, key))
        except ValueError:  # a fault got there first: the owner does not hold the bundle Owned
            self.counts["splits_refused"] += 1
            return False
        before = len(cluster.answers)
        cluster.step(Lookup(self._healthy(event.bundle + event.minute), key))
        cluster.drain()
        lower, upper = parse_key(key).split()
        if lower.key not in cluster.live_bundle_keys():
            self.counts["splits_refused"] += 1
            return False
        self.counts["splits"] += 1
        if event.boundary != lower.upper:
            self.counts["split_boundary_moved"] += 1
        for child, part in zip(event.children, (lower, upper), strict=True):
            self.keys[child] = part.key
            self._owner[part.key] = owner
        self._owner.pop(key, None)
        for child in event.children:
            cluster.step(Lookup(self._healthy(child + event.minute), self.keys[child]))
        cluster.drain()
        self._count_answers("split_lookups", before)
        return True

    def minute(self, minute: int, owner: Ints) -> frozenset[int]:
        cluster = self.cluster
        cluster.drain()
        for broker, when in list(self._restart_at.items()):
            if minute >= when:
                cluster.step(Restart(broker))
                del self._restart_at[broker]
        if self.crashes_per_hour > 0 and self.faults.random() < self.crashes_per_hour / 60:
            running = [b for b in self.ids if cluster.healthy(b)]
            if len(running) > 1:
                victim = self.faults.choice(running)
                cluster.step(Crash(victim))
                self._restart_at[victim] = minute + self.down_minutes
                self.counts["crashes"] += 1
        cluster.drain()
        cluster.advance(MINUTE_MS)
        if (minute + 1) % self.check_every_minutes == 0:
            self.check()
        if self.crashes_per_hour > 0:
            self._follow(owner)
        return frozenset(self.index[b] for b in self.ids if not cluster.healthy(b))

    def _follow(self, owner: Ints) -> None:
        """Take the channel's owner of every bundle it holds Owned (read from the leader's view)."""
        cluster = self.cluster
        reader = cluster.brokers[cluster.leader() or self._healthy(0)]
        for bundle, key in self.keys.items():
            if int(owner[bundle]) < 0:
                continue  # a split's parent
            data = reader.value(key)
            if data is None or data.state is not ServiceUnitState.Owned or data.dst_broker not in self.index:
                continue
            where = self.index[data.dst_broker]
            if int(owner[bundle]) != where:
                owner[bundle] = where
                self.counts["moved_by_channel"] += 1
            self._owner[key] = data.dst_broker

    def check(self) -> None:
        """The catalogue's cluster invariants, and the channel's owners against the lab's (before
        a fault's moves are followed: with faults, mismatches are expected)."""
        from statechan.invariants.catalogue import check

        cluster = self.cluster
        cluster.drain()
        self.counts["checks"] += 1
        for violation in check(cluster.observe()):
            self.counts["breaches"] += 1
            if len(self.breaches) < 20:
                self.breaches.append(f"t+{cluster.clock.now_ms() // 1000}s: {violation}")
        reader = cluster.brokers[cluster.leader() or self._healthy(0)]
        for key, owner in self._owner.items():
            data = reader.value(key)
            if data is None or data.state is not ServiceUnitState.Owned or data.dst_broker != owner:
                self.counts["mismatches"] += 1

    def finish(self) -> dict[str, int]:
        """The final check; the counts (lookups after a move: answered at once, delayed until the
        bundle was owned again, or failed)."""
        self.check()
        self.counts["records"] = self.cluster.topic.end
        return dict(self.counts)
