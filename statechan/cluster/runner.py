"""Long seeded simulations: a workload (lookups, admin operations, faults) over simulated time,
with racing deliveries chosen by the seeded generator, and a summary a person can read."""

from __future__ import annotations

import heapq
import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from statechan.clock import Clock
from statechan.cluster.actions import (
    Action,
    Compact,
    Crash,
    Lookup,
    LoseSession,
    Reconnect,
    Resign,
    Restart,
    Shutdown,
    Split,
    Tick,
    Transfer,
    Unload,
    Wait,
)
from statechan.cluster.config import SimConfig
from statechan.cluster.sim import Cluster
from statechan.cluster.state import LOOKUP_CHANNELS, ChannelState, broker_name
from statechan.collector import fewer_collections
from statechan.observation import Observation
from statechan.states import ServiceUnitState
from statechan.stores.metadata import Store

S = ServiceUnitState
HOUR = 3_600_000


class Workload(BaseModel):
    """What happens to the cluster, as rates per simulated hour (Poisson arrivals)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    lookups_per_hour: float = Field(600.0, ge=0)
    transfers_per_hour: float = Field(60.0, ge=0, description="load-shedding transfers (PIP-307)")
    unloads_per_hour: float = Field(20.0, ge=0)
    splits_per_hour: float = Field(2.0, ge=0)
    crashes_per_hour: float = Field(0.5, ge=0)
    shutdowns_per_hour: float = Field(0.2, ge=0)
    session_losses_per_hour: float = Field(0.5, ge=0)
    leader_changes_per_hour: float = Field(0.2, ge=0)
    restart_after_ms: int = Field(120_000, ge=0, description="a crashed or stopped broker comes back after this")
    reconnect_after_ms: int = Field(10_000, ge=0)
    compaction_every_ms: int = Field(
        600_000,
        ge=0,
        description="how often the channel topic compacts while its threshold allows (automatic compaction; "
        "0: never); operators' manual compactions are not modelled",
    )
    settle_ms: int = Field(2 * HOUR, ge=0, description="fault-free time at the end, for everything to settle")
    assign_all_at_start: bool = True


@dataclass
class RunSummary:
    """What a simulation did and how it ended."""

    seed: int
    simulated_ms: int
    actions: int
    channel_records: int
    counters: Counter[str]
    ownership_moves: int
    bundles: int
    final_states: Counter[str]
    bundles_per_broker: dict[str, int]
    in_flight_ms: dict[str, float]
    violations: list[str] = field(default_factory=list)
    checked_steps: int = 0
    never_reached: list[str] = field(default_factory=list)
    """The flows the run started (its admin operations, its lookups) and never walked: a
    protocol that does nothing passes every invariant (:mod:`statechan.vacuity`)."""

    def lines(self) -> list[str]:
        hours = self.simulated_ms / HOUR
        out = [
            f"seed {self.seed}: {self.actions:,} actions over {hours:.1f} simulated hours; "
            f"{self.channel_records:,} channel records",
            f"bundles: {self.bundles}; final states: "
            + ", ".join(f"{k} {v}" for k, v in sorted(self.final_states.items())),
            f"ownership moves: {self.ownership_moves}; crashes {self.counters['crash']}, restarts "
            f"{self.counters['restart']}, shutdowns {self.counters['shutdown']}, session losses "
            f"{self.counters['lose-session']}, leader changes {self.counters['resign']}, "
            f"compactions {self.counters['compact']}",
            "bundles per broker: " + ", ".join(f"{b} {n}" for b, n in sorted(self.bundles_per_broker.items())),
        ]
        if self.in_flight_ms:
            out.append(
                "mean time in flight (simulated ms; deliveries take none): "
                + ", ".join(f"{k} {v:,.0f}" for k, v in sorted(self.in_flight_ms.items()))
            )
        out.append(
            f"invariants checked at {self.checked_steps:,} steps: "
            + ("no violation" if not self.violations else f"{len(self.violations)} violation(s)")
        )
        out.extend(f"  {v}" for v in self.violations[:20])
        out.extend(f"vacuous: {gap}" for gap in self.never_reached)
        return out


StepCheck = Callable[[Cluster], list[str]]


class ObservationCheck:
    """A :data:`StepCheck` over a run's observations in order: each on its own (``state``: the
    catalogue's cluster invariants) and each with the one before it (``step``: its step
    invariants). It keeps the last observation of the cluster it last looked at (one check per
    run), so the step invariants compare consecutive checked observations: every step's, unless
    the run checks only every n-th step (then they are sound, but miss what was done and undone
    in between). The runner takes no catalogue (it sits below it): the caller hands the functions,
    e.g. ``ObservationCheck(catalogue.check, catalogue.check_step)``."""

    def __init__(
        self,
        state: Callable[[Observation], Sequence[object]],
        step: Callable[[Observation, Observation], Sequence[object]] | None = None,
    ) -> None:
        self.state, self.step = state, step
        self._cluster: Cluster | None = None
        self._last: Observation | None = None

    def start(self, cluster: Cluster) -> None:
        """Take ``cluster``'s observation now as the one the next check's step starts from."""
        self._cluster, self._last = cluster, cluster.observe()

    def __call__(self, cluster: Cluster) -> list[str]:
        now = cluster.observe()
        found = [str(v) for v in self.state(now)]
        last = self._last if self._cluster is cluster else None
        if self.step is not None and last is not None:
            found += [str(v) for v in self.step(last, now)]
        self._cluster, self._last = cluster, now
        return found


_NEEDS_RUNNING = frozenset({"transfer", "unload", "split", "crash", "shutdown", "lose-session"})
"""The external events that pick among the running brokers (a lookup picks among the answering ones)."""


class Simulation:
    """Drives a :class:`Cluster` with a :class:`Workload`; every choice comes from one seeded RNG."""

    def __init__(
        self,
        config: SimConfig,
        workload: Workload | None = None,
        make_store: Callable[[Clock], Store] | None = None,
    ) -> None:
        """``make_store``: the metadata store to run on (default the in-process one; see :class:`Cluster`)."""
        self.config = config
        self.workload = workload if workload is not None else Workload()
        self.cluster = Cluster(config, make_store)
        self.rng = random.Random(config.seed + 1)
        w = self.workload
        self._rates = {  # each external event's kind and its rate per hour, in the order they are first drawn
            "lookup": w.lookups_per_hour,
            "transfer": w.transfers_per_hour,
            "unload": w.unloads_per_hour,
            "split": w.splits_per_hour,
            "crash": w.crashes_per_hour,
            "shutdown": w.shutdowns_per_hour,
            "lose-session": w.session_losses_per_hour,
            "resign": w.leader_changes_per_hour,
        }
        self._events: list[tuple[int, int, str, str]] = []
        self._seq = 0
        self._answering_of: tuple[object, list[str]] = ((), [])
        """The brokers a lookup may reach, for the state's brokers they were worked out from (a step
        that changed no broker keeps the same tuple)."""

    def _at(self, when: int, kind: str, arg: str = "") -> None:
        self._seq += 1
        heapq.heappush(self._events, (when, self._seq, kind, arg))

    def _schedule_next(self, kind: str, per_hour: float, start: int) -> None:
        if per_hour > 0:
            self._at(start + int(self.rng.expovariate(per_hour / HOUR)), kind)

    def run(self, duration_ms: int, check: StepCheck | None = None, check_every: int = 1) -> RunSummary:
        """Run the workload for ``duration_ms``, then ``settle_ms`` without faults; ``check`` after
        every ``check_every``-th step (an :class:`ObservationCheck` starts from the state before the first)."""
        with fewer_collections():  # a step's drafts die young and never in a cycle
            return self._run(duration_ms, check, check_every)

    def _run(self, duration_ms: int, check: StepCheck | None, check_every: int) -> RunSummary:
        cluster, w = self.cluster, self.workload
        if isinstance(check, ObservationCheck):
            check.start(cluster)
        start = cluster.clock.now_ms()
        end = start + duration_ms
        violations: list[str] = []
        checked = 0
        if w.assign_all_at_start:
            for key in cluster.sorted_bundle_keys():
                self._at(start, "lookup", key)
        for kind, rate in self._rates.items():
            self._schedule_next(kind, rate, start)
        if w.compaction_every_ms:
            self._at(start + w.compaction_every_ms, "compact")
        steps_since_check = 0

        def after_step() -> None:
            nonlocal steps_since_check, checked
            steps_since_check += 1
            if check is not None and steps_since_check >= check_every:
                steps_since_check = 0
                checked += 1
                for problem in check(cluster):
                    if len(violations) < 1000:
                        violations.append(
                            f"step {len(cluster.history)} t+{(cluster.clock.now_ms() - start) // 1000}s: {problem}"
                        )

        settle_until = end + w.settle_ms
        while True:
            self._drain(after_step)
            next_event = self._events[0][0] if self._events else None
            timer = cluster.next_timer()
            horizon = settle_until if next_event is None else min(next_event, settle_until)
            if timer is not None and timer.due <= horizon:
                cluster.step(Tick())
                after_step()
                continue
            if next_event is None or next_event > settle_until:
                break
            when, _, kind, arg = heapq.heappop(self._events)
            if when > cluster.clock.now_ms():
                cluster.step(Wait(when - cluster.clock.now_ms()))
            faults_over = when >= end
            self._external(kind, arg, faults_over, end)
            after_step()
        if settle_until > cluster.clock.now_ms():
            cluster.step(Wait(settle_until - cluster.clock.now_ms()))
        self._drain(after_step)
        if check is not None:
            checked += 1
            violations.extend(f"end: {p}" for p in check(cluster))
        return self._summary(start, violations, checked)

    def _drain(self, after_step: Callable[[], None]) -> None:
        cluster = self.cluster
        while True:
            work = cluster.work_actions()
            if not work:
                return
            cluster.step(work[self.rng.randrange(len(work))] if len(work) > 1 else work[0])
            after_step()

    def _running(self) -> list[str]:
        brokers = self.cluster.state.brokers
        return sorted(broker_name(b.id) for b in brokers if b.alive and b.channel is ChannelState.Started)

    def _answering(self) -> list[str]:
        """The brokers a client's lookup may reach: started ones, and (#24770) ones shutting down."""
        brokers = self.cluster.state.brokers
        of, answering = self._answering_of
        if of is not brokers:
            answering = sorted(broker_name(b.id) for b in brokers if b.alive and b.channel in LOOKUP_CHANNELS)
            self._answering_of = (brokers, answering)
        return answering

    def _external(self, kind: str, arg: str, faults_over: bool, end: int) -> None:
        cluster, w, rng = self.cluster, self.workload, self.rng
        now = cluster.clock.now_ms()
        running = self._running() if kind in _NEEDS_RUNNING else []
        rates = self._rates
        if kind in rates and not arg and now < end:
            self._schedule_next(kind, rates[kind], now)
        action: Action | None = None
        answering = self._answering() if kind == "lookup" else []
        if kind == "lookup" and answering:
            key = arg or rng.choice(cluster.sorted_bundle_keys())
            if key in cluster.live_bundle_keys():
                action = Lookup(rng.choice(answering), key)
        elif kind in ("transfer", "unload", "split") and running and not faults_over:
            broker = cluster.brokers[rng.choice(running)]
            keys = cluster.sorted_bundle_keys()
            candidates = [k for k in (rng.choice(keys) for _ in range(8)) if _owned(broker.value(k))]
            if candidates:
                key = candidates[0]
                owner = broker.value(key).dst_broker  # type: ignore[union-attr]
                if kind == "split":
                    if owner in running and cluster.brokers[owner].value(key) == broker.value(key):
                        action = Split(str(owner), key)
                elif kind == "unload":
                    action = Unload(broker.id, key)
                else:
                    others = [b for b in running if b != owner and broker.is_registered(b)]
                    if others:
                        action = Transfer(broker.id, key, rng.choice(others))
        elif kind in ("crash", "shutdown") and not faults_over and len(running) > 1:
            victim = rng.choice(running)
            action = Crash(victim) if kind == "crash" else Shutdown(victim)
            self._at(now + w.restart_after_ms + (OWNERSHIP_WAIT if kind == "shutdown" else 0), "restart", victim)
        elif kind == "restart":
            if not cluster.brokers[arg].alive:
                action = Restart(arg)
            elif cluster.brokers[arg].shutting_down:
                self._at(now + 1_000, "restart", arg)
        elif kind == "lose-session" and not faults_over and running:
            victim = rng.choice(running)
            if cluster.brokers[victim].connected:
                action = LoseSession(victim)
                self._at(now + w.reconnect_after_ms, "reconnect", victim)
        elif kind == "reconnect":
            broker = cluster.brokers[arg]
            if broker.alive and not broker.connected and not broker.closed:
                action = Reconnect(arg)
        elif kind == "resign" and not faults_over:
            leader = cluster.leader()
            if leader is not None and cluster.brokers[leader].alive:
                action = Resign(leader)
        elif kind == "compact":
            if cluster.storage.value == "SystemTopic" and cluster.compaction_threshold > 0:
                action = Compact()
            if now < end + w.settle_ms:
                self._at(now + w.compaction_every_ms, "compact")
        if action is not None:
            cluster.step(action)

    def _summary(self, start: int, violations: list[str], checked: int) -> RunSummary:
        cluster = self.cluster
        reference = next((b for b in sorted(cluster.brokers) if cluster.brokers[b].alive), None)
        view = cluster.brokers[reference].view() if reference else {}
        states = Counter(v.state.value for v in view.values())
        states["Init (no record)"] = len(cluster.live_bundle_keys() - set(view))
        per_broker = Counter(v.dst_broker or "-" for v in view.values() if v.state is S.Owned)
        moves = 0
        for record in cluster.trace:
            value = record.get("value")
            if record["kind"] == "channel" and isinstance(value, dict) and value.get("state") == "Owned":
                moves += 1
        return RunSummary(
            seed=self.config.seed,
            simulated_ms=cluster.clock.now_ms() - start,
            actions=len(cluster.history),
            channel_records=sum(1 for r in cluster.trace if r["kind"] == "channel"),
            counters=Counter(cluster.counters),
            ownership_moves=moves,
            bundles=len(cluster.live_bundle_keys()),
            final_states=states,
            bundles_per_broker=dict(per_broker),
            in_flight_ms=in_flight_durations(cluster.trace),
            violations=violations,
            checked_steps=checked,
            never_reached=self.never_reached(),
        )

    def never_reached(self) -> list[str]:
        """The flows this run's events demand (:func:`~statechan.vacuity.demanded_by_events`)
        that its channel records never walked."""
        from statechan.vacuity import demanded_by_events, trace_coverage, unreached_flows

        cluster = self.cluster
        demanded = demanded_by_events(cluster.counters, len(cluster.brokers), cluster.storage)
        coverage = trace_coverage(cluster.trace, cluster.model, cluster.storage)
        return [str(gap) for gap in unreached_flows(cluster.model, coverage, demanded)]


OWNERSHIP_WAIT = 5_000


def _owned(value: object) -> bool:
    return getattr(value, "state", None) is S.Owned and bool(getattr(value, "dst_broker", None))


def in_flight_durations(trace: list[dict[str, object]]) -> dict[str, float]:
    """Mean time a bundle spent in each in-flight state, from the channel records."""
    entered: dict[str, tuple[str, int]] = {}
    totals: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    for record in trace:
        if record["kind"] != "channel":
            continue
        key, value, when = str(record["key"]), record.get("value"), int(record["publish_time"])  # type: ignore[call-overload]
        state = value.get("state") if isinstance(value, dict) else None
        if key in entered and entered[key][0] != state:
            previous, since = entered.pop(key)
            totals[previous] += when - since
            counts[previous] += 1
        if state in ("Assigning", "Releasing", "Splitting") and key not in entered:
            entered[key] = (str(state), when)
    return {state: totals[state] / counts[state] for state in counts}
