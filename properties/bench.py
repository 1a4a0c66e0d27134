"""The Hypothesis stateful bench: rule-based state machines over the cluster simulator.

Each rule is one kind of simulator action (a lookup, an admin operation, delivering the next
entry to one broker, compaction, a crash, a restart with the same id, a session loss, a leader
change, a syncer step); its argument picks one of the enabled actions of that kind, so shrinking
moves toward the first broker and the first bundle. After every step the catalogue's cluster
invariants are checked on the cluster's observation, and its step invariants on that observation
and the one before (TLA+'s ``[][A]_v``: version monotonic, one value per version, no resurrection,
a split partitions its parent); the teardown heals the cluster (sessions back, a broker running), lets
every delivery happen and the timers fire for the liveness bounds, checking at each step, and
checks the history invariants on the whole trace.

A failure raises :class:`InvariantBroken`, whose message is the run as a numbered timeline, and
saves the run (configuration + actions) for ``statechan replay``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from statechan.cluster import Cluster, Observation, SimConfig, StoreKind
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
)
from statechan.cluster.runfile import save_run
from statechan.cluster.runner import ObservationCheck
from statechan.cluster.timeline import build_timeline, format_timeline
from statechan.invariants.catalogue import (
    Violation,
    check,
    check_step,
    check_trace,
    cleanup_bound_ms,
    simulation_ids,
    simulation_settings,
)

RUNS_DIR_ENV = "STATECHAN_RUNS_DIR"
DEFAULT_RUNS_DIR = ".hypothesis/statechan-runs"

picks = st.integers(min_value=0, max_value=15)

TIMELY_MS = 1_000
"""The bench's timing assumption: what waits for a running broker is taken within a second, before
any later timer fires (Pulsar's timers are tens of seconds; a broker that stalls longer looks dead
and is overridden by design). Crashes, restarts and session losses stay unconstrained."""


class InvariantBroken(AssertionError):
    """An invariant broke; ``str()`` is the whole run as a timeline, ``invariants`` their ids."""

    def __init__(self, message: str, invariants: list[str], steps: int, run_file: Path | None) -> None:
        super().__init__(message)
        self.invariants = invariants
        self.steps = steps
        self.run_file = run_file


def violations_of(cluster: Cluster) -> list[Violation]:
    """The catalogue's default cluster invariants on the cluster as it is now."""
    return check(cluster.observe())


def history_violations_of(cluster: Cluster) -> list[Violation]:
    """The catalogue's default history invariants on the cluster's trace so far."""
    settings = simulation_settings(cluster.config, cluster.storage, cluster.model.name)
    return check_trace(cluster.trace, cluster.storage, cluster.model.name, simulation_ids(), settings)


def timeline_check() -> ObservationCheck:
    """A check for one timeline replay: the cluster invariants at each step, and the step
    invariants from each step's observation to the next."""
    return ObservationCheck(check, check_step)


class ChannelMachine(RuleBasedStateMachine):
    """The bench over one cluster configuration; subclasses choose it with ``config``."""

    config: ClassVar[SimConfig] = SimConfig(
        brokers=3, bundles_per_namespace=1, compaction_threshold=0, timely_delivery_ms=TIMELY_MS
    )
    settle_ms: ClassVar[int | None] = None
    """How long the teardown lets timers fire (default: the tombstone delay plus the liveness bounds)."""
    looks_for: ClassVar[tuple[str, ...] | None] = None
    """The invariants checked (default: every default one). A bug hunt looks for its bug's alone, so a
    run that first reaches a documented finding of the current protocol does not end it."""

    def __init__(self) -> None:
        super().__init__()
        self.cluster = Cluster(self.config)
        self._enabled_step = -1
        self._enabled: list[Action] = []
        self._histories_checked_at = -1
        self._last: Observation = self.cluster.observe()
        """The observation the last check saw: the step invariants compare the next with it."""

    # -- choosing among enabled actions ------------------------------------------------------------
    def enabled(self, kind: type[Action]) -> list[Action]:
        if self._enabled_step != len(self.cluster.history):
            self._enabled = self.cluster.enabled_actions()
            self._enabled_step = len(self.cluster.history)
        return [a for a in self._enabled if type(a) is kind]

    def take(self, kind: type[Action], pick: int = 0) -> None:
        candidates = self.enabled(kind)
        self.cluster.step(candidates[pick % len(candidates)])

    @staticmethod
    def _can(kind: type[Action]) -> Callable[[ChannelMachine], bool]:
        return lambda self: bool(self.enabled(kind))

    # -- rules: the interleaving ---------------------------------------------------------------------
    @precondition(_can(Deliver))
    @rule(pick=picks)
    def deliver(self, pick: int) -> None:
        self.take(Deliver, pick)

    @precondition(_can(Notify))
    @rule(pick=picks)
    def notify(self, pick: int) -> None:
        self.take(Notify, pick)

    @precondition(_can(RunTask))
    @rule(pick=picks)
    def run_task(self, pick: int) -> None:
        self.take(RunTask, pick)

    @precondition(_can(Tick))
    @rule()
    def tick(self) -> None:
        self.take(Tick)

    # -- rules: clients and admins ---------------------------------------------------------------------
    @precondition(_can(Lookup))
    @rule(pick=picks)
    def lookup(self, pick: int) -> None:
        self.take(Lookup, pick)

    @precondition(_can(Unload))
    @rule(pick=picks)
    def unload(self, pick: int) -> None:
        self.take(Unload, pick)

    @precondition(_can(Transfer))
    @rule(pick=picks)
    def transfer(self, pick: int) -> None:
        self.take(Transfer, pick)

    @precondition(_can(Split))
    @rule(pick=picks)
    def split(self, pick: int) -> None:
        self.take(Split, pick)

    # -- rules: the system topic -------------------------------------------------------------------------
    @precondition(_can(Compact))
    @rule()
    def compact(self) -> None:
        self.take(Compact)

    # -- rules: faults ------------------------------------------------------------------------------------
    @precondition(_can(Crash))
    @rule(pick=picks)
    def crash(self, pick: int) -> None:
        self.take(Crash, pick)

    @precondition(_can(Restart))
    @rule(pick=picks)
    def restart(self, pick: int) -> None:
        self.take(Restart, pick)

    @precondition(_can(Shutdown))
    @rule(pick=picks)
    def shutdown(self, pick: int) -> None:
        self.take(Shutdown, pick)

    @precondition(_can(LoseSession))
    @rule(pick=picks)
    def lose_session(self, pick: int) -> None:
        self.take(LoseSession, pick)

    @precondition(_can(Reconnect))
    @rule(pick=picks)
    def reconnect(self, pick: int) -> None:
        self.take(Reconnect, pick)

    @precondition(_can(Resign))
    @rule(pick=picks)
    def leader_change(self, pick: int) -> None:
        self.take(Resign, pick)

    # -- rules: the syncer ------------------------------------------------------------------------------
    @precondition(_can(SyncTopic))
    @rule()
    def sync_topic(self) -> None:
        self.take(SyncTopic)

    @precondition(lambda self: bool(self.enabled(SyncStore) or self.enabled(SyncReconcile)))
    @rule()
    def sync_store(self) -> None:
        """The syncer's store side: its next notification, or (none waiting) its periodic reconcile.
        One rule for both, so the machines' rule list stays as it was before the reconcile was
        modelled (a new rule would shift every machine's choice of rule)."""
        self.take(SyncStore if self.enabled(SyncStore) else SyncReconcile)

    # -- checking ----------------------------------------------------------------------------------------
    @invariant()
    def catalogue_holds(self) -> None:
        self._check_now()

    def _check_now(self) -> None:
        """The cluster invariants on the observation now, the step invariants from the last one."""
        now = self.cluster.observe()
        found = check(now, self.looks_for) + check_step(self._last, now, self.looks_for)
        self._last = now
        if found:
            self.fail(found)

    def teardown(self) -> None:
        """Heal, quiesce and let the timers run; check at every step, then the histories."""
        cluster = self.cluster
        for broker_id, broker in sorted(cluster.brokers.items()):
            if broker.alive and not broker.connected and not broker.closed:
                self._settle_step(Reconnect(broker_id))
        if not any(b.alive for b in cluster.brokers.values()):
            self._settle_step(Restart(sorted(cluster.brokers)[0]))
        self._quiesce()
        self._check_histories()  # before the timers run: the shortest story for a history invariant
        cfg = cluster.config.channel
        settle = self.settle_ms
        if settle is None:
            settle = cfg.tombstone_delay_s * 1000 + 2 * cleanup_bound_ms(cluster.config.channel)
        end = cluster.clock.now_ms() + settle
        while (timer := cluster.next_timer()) is not None and timer.due <= end:
            self._settle_step(Tick())
            self._quiesce()
            self._check_histories()

    def _check_histories(self) -> None:
        """The history invariants, when something was recorded since they last looked."""
        if len(self.cluster.trace) == self._histories_checked_at:
            return
        self._histories_checked_at = len(self.cluster.trace)
        found = history_violations_of(self.cluster)
        if self.looks_for is not None:
            found = [v for v in found if v.invariant in self.looks_for]
        if found:
            self.fail(found)

    def _quiesce(self) -> None:
        while work := self.cluster.work_actions():
            deliveries = [a for a in work if not isinstance(a, RunTask)]
            self._settle_step(deliveries[0] if deliveries else work[0])

    def _settle_step(self, action: Action) -> None:
        self.cluster.step(action)
        self._check_now()

    def fail(self, found: list[Violation]) -> None:
        """Stop the run with its timeline (replayed, each step's writes and breaks) and save it."""
        cluster = self.cluster
        ids = sorted({v.invariant for v in found})
        steps = build_timeline(cluster.config, cluster.history, check=timeline_check())
        if steps and not steps[-1].violations:
            steps[-1].violations = [str(v) for v in found]
        title = (
            f"{type(self).__name__} ({cluster.config.variant.label()}, {cluster.config.store.value}): "
            f"{', '.join(ids)} broken after {len(cluster.history)} steps"
        )
        run_file = self._save(ids)
        message = format_timeline(steps, title)
        if run_file is not None:
            message += f"\nsaved: {run_file}  (statechan replay {run_file})"
        raise InvariantBroken(message, ids, len(cluster.history), run_file)

    def _save(self, ids: list[str]) -> Path | None:
        directory = Path(os.environ.get(RUNS_DIR_ENV, DEFAULT_RUNS_DIR))
        try:
            directory.mkdir(parents=True, exist_ok=True)
            path = directory / f"{type(self).__name__}.json"
            save_run(path, self.cluster.config, list(self.cluster.history), note="broken: " + ", ".join(ids))
        except OSError:
            return None
        return path


def machine_for(config: SimConfig, name: str | None = None) -> type[ChannelMachine]:
    """A bench machine over ``config`` (a subclass; Hypothesis runs machine classes)."""
    label = name or f"Bench_{config.store.name}_{config.variant.label()}"
    safe = "".join(ch if ch.isalnum() else "_" for ch in label)
    return type(safe, (ChannelMachine,), {"config": config})


class SystemTopicBench(ChannelMachine):
    """Three brokers on the system-topic table view, one bundle. No compaction step (threshold 0):
    the history invariant ``compaction-equivalence`` judges every compaction point of the trace
    instead, and the model checker's ``--compactions`` bounds compact the cluster itself."""

    config = SimConfig(brokers=3, bundles_per_namespace=1, compaction_threshold=0, timely_delivery_ms=TIMELY_MS)


class MetadataStoreBench(ChannelMachine):
    """Three brokers on the metadata-store table view, one bundle."""

    config = SimConfig(brokers=3, bundles_per_namespace=1, store=StoreKind.metadata_store, timely_delivery_ms=TIMELY_MS)


class SyncerBench(ChannelMachine):
    """A live migration: brokers on the system topic, the syncer copying to the metadata store."""

    config = SimConfig(
        brokers=3, bundles_per_namespace=1, store=StoreKind.both, compaction_threshold=0, timely_delivery_ms=TIMELY_MS
    )
