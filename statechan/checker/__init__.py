"""An explicit-state model checker over the channel protocol: every interleaving of deliveries,
tasks, timers, crashes and admin operations within bounds, breadth first (so a counterexample is
a shortest one), with the invariant catalogue's cluster invariants checked on every state, its step
invariants on every transition, and a liveness check on the explored graph.

The model is the protocol itself (:mod:`statechan.cluster.protocol`): ``enabled`` is Next, ``step``
the transition relation, the catalogue's checks the properties, as in Stateright's ``Model``.
Placement's random choice is a branch: each candidate broker is a successor, and a saved
counterexample carries its picks so ``statechan replay`` follows it exactly.

A state is a value (:class:`~statechan.cluster.state.ClusterState`): the queue holds states, each
successor is its parent stepped, and the fingerprint is the 64-bit hash of the state's canonical
form (times as capped ages, what never changes behaviour left out), with broker symmetry the least
over the renamings that order the brokers by a renaming-invariant signature. Each record keeps the
hash of its own form, so a successor's fingerprint re-hashes only what its step replaced.
"""

from __future__ import annotations

import enum
import functools
import gc
import itertools
import operator
import os
import re
import sys
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from statechan.bounds import ADMIN_KINDS, BOUND_FLAGS, BUDGETED, Bounds, bound_flag, budget_kind, budget_of, counted
from statechan.cluster import protocol
from statechan.cluster.actions import Action, Deliver, Split, Transfer, Unload
from statechan.cluster.config import VARIANTS, ChannelConfig, SimConfig, StoreKind, Variant
from statechan.cluster.state import (
    LEADER_PATH,
    Canon,
    ClusterState,
    Rec,
    Task,
    TaskKind,
    TimerKind,
    broker_id,
    broker_name,
)
from statechan.collector import fewer
from statechan.kernel import interpreted
from statechan.model import load_model
from statechan.observation import Observation
from statechan.states import IN_FLIGHT, ServiceUnitState
from statechan.stores.metadata import NodeEvent, SessionEvent
from statechan.vacuity import FORCED, Unreached, demanded_flows, undeclared_flows, unreached_flows

if TYPE_CHECKING:
    from statechan.checker.compact import LevelReport

__all__ = [
    "ADMIN_KINDS",
    "BOUND_FLAGS",
    "Bounds",
    "CheckResult",
    "Engine",
    "FingerprintCollision",
    "Fingerprinter",
    "Node",
    "bound_flag",
    "budget_kind",
    "check",
    "checker_config",
    "counted",
    "fingerprint_cap",
    "graph_text",
    "settled",
]

_BROKER = re.compile(r"broker-(\d+):8080")


def budget_left(budget: dict[str, int], spent: Counter[str]) -> bytes:
    """The budgets a state has left, as the suffix of its key: two states alike but for what they
    may still do are different states (merging them would drop the runs that spend the rest)."""
    return "|".join([str(budget[kind] - spent.get(kind, 0)) for kind in budget]).encode()


# -- fingerprints --------------------------------------------------------------------------------
Perm = tuple[int, ...] | None
"""A renaming of broker ids (``perm[old] = new``; None: every broker keeps its id)."""
_TOKENS = itertools.count(1)
"""Canonical contexts' tokens, unique in the process (records cache their form's hash by token)."""


@interpreted
class FingerprintCollision(AssertionError):
    """Two different states hashed to one fingerprint: the search would have merged them."""


class Fingerprinter:
    """Fingerprints of states: the hash of the state's canonical form, optionally the least over
    renamings of the broker ids.

    Not every renaming is tried: each broker gets a signature that no renaming changes (its own
    record with every broker id left out, :meth:`~statechan.cluster.state.Broker.signature`), and only
    the renamings that number the brokers in signature order are tried — every order among equal
    signatures. Renamed states have the same signatures, so they get the same candidates and the
    same least hash."""

    def __init__(self, brokers: int, cap: int, symmetry: bool, producers: bool = False) -> None:
        self.cap = cap
        self.symmetry = symmetry and brokers > 1
        self.producers = producers
        """Whether a message's producer is part of the state: only the syncer reads it (its echoes)."""
        self._contexts: dict[tuple[int, Perm], Canon] = {}
        self._perms: dict[tuple[int, ...], Perm] = {}
        """The renaming that numbers the brokers in each order met (:func:`_perm`)."""

    def __call__(self, state: ClusterState) -> bytes:
        return self.digest(self.canonical(state)[0])

    @staticmethod
    def digest(hashed: int) -> bytes:
        """A state's fingerprint from its canonical form's hash: 64 bits. Two different states share
        one with a chance of about n²/2⁶⁵ among n (TLC's fingerprints are as wide);
        ``verify_fingerprints`` compares the forms themselves."""
        return hashed.to_bytes(8, "little", signed=True)

    def context(self, now: int, perm: Perm) -> Canon:
        """The canonical context at ``now`` under ``perm`` (one token per distinct context)."""
        found = self._contexts.get((now, perm))
        if found is None:
            if len(self._contexts) >= 4096:
                self._contexts.clear()
            found = self._contexts[(now, perm)] = Canon(now, self.cap, perm, self.producers, next(_TOKENS))
        return found

    def canonical(self, state: ClusterState) -> tuple[int, Canon]:
        """The least hash of the state's canonical form over the renamings tried, and its context."""
        best: Canon | None = None
        least = 0
        for perm in self.candidates(state) if self.symmetry else [None]:
            c = self.context(state.now, perm)
            hashed = state.ch(c)
            if best is None or hashed < least:
                best, least = c, hashed
        assert best is not None
        return least, best

    def form(self, state: ClusterState) -> tuple[Any, ...]:
        """The canonical form itself (what the fingerprint hashes, for verifying and for people)."""
        return state.canon(self.canonical(state)[1])

    def text(self, state: ClusterState) -> str:
        return repr(self.form(state))

    def candidates(self, state: ClusterState) -> list[Perm]:
        """The renamings worth trying: those that number the brokers in descending signature order
        (descending, as the first broker is usually the leader: the identity then is the one
        renaming)."""
        registry = state.store.registry
        signatures = [b.signature(b.id in registry) for b in state.brokers]
        ordered = sorted(range(len(signatures)), key=signatures.__getitem__, reverse=True)
        if all(signatures[one] != signatures[other] for one, other in itertools.pairwise(ordered)):
            # no two alike (the usual case): one renaming, worked out once per order
            key = tuple(ordered)
            found = self._perms.get(key, _UNSEEN)
            if found is _UNSEEN:
                found = self._perms[key] = _perm(ordered)
            return [found]  # type: ignore[list-item]
        runs: list[list[int]] = []
        for _, tied in itertools.groupby(ordered, key=signatures.__getitem__):
            runs.append(list(tied))
        perms: list[Perm] = []
        for orders in itertools.product(*(itertools.permutations(run) for run in runs)):
            perms.append(_perm([broker for order in orders for broker in order]))
        return perms


_UNSEEN = object()


def _perm(order: Sequence[int]) -> Perm:
    """The renaming that numbers the brokers in ``order`` (None where that keeps every id)."""
    perm = [0] * len(order)
    for new, old in enumerate(order):
        perm[old] = new
    return None if all(old == new for old, new in enumerate(perm)) else tuple(perm)


@interpreted
@dataclass(slots=True)
class Node:
    parent: int
    action: Action | None
    picks: tuple[int, ...]
    depth: int
    settled: bool = False
    expanded: bool = False
    successors: list[tuple[int, Action, tuple[int, ...]]] = field(default_factory=list)
    label: str = ""
    """What the state looks like, kept only for a graph export (``keep_graph``)."""
    timers_cut: bool = False
    """A timer was due but the tick budget was spent: where the run goes on is outside the bound."""


class Engine(enum.Enum):
    """How a search holds what it has seen."""

    compact = "compact"
    """64-bit fingerprints and flat arrays in memory, each level's states on disk (the default)."""
    memory = "memory"
    """A node object per state and every queued state in memory: what the explored graph
    (``keep_graph``) needs. It runs in one process."""


@interpreted
@dataclass
class CheckResult:
    """What a check covered and what it found."""

    bounds: Bounds
    store: StoreKind
    variant: str | Variant
    """A named variant, or one given whole (a mutant's model, ``statechan mutate``)."""
    states: int = 0
    """Distinct states (after symmetry reduction)."""
    transitions: int = 0
    depth: int = 0
    seconds: float = 0.0
    complete: bool = True
    stopped: str = ""
    refused: int = 0
    """Actions the simulator listed as enabled but refused when taken (a mismatch worth knowing)."""
    concrete_states: int = 0
    """Distinct states of the same complete search without symmetry reduction, when measured
    (``measure_symmetry``: a second search)."""
    violation: str | None = None
    path: list[Action] = field(default_factory=list)
    picks: list[int] = field(default_factory=list)
    liveness: str | None = None
    lasso: int = -1
    """On a liveness failure: the index in ``path`` where the repeating part begins."""
    coverage: dict[tuple[str, str], Counter[str]] = field(default_factory=dict)
    """How often each (from, to) was taken, by action kind (``forced `` and the kind for a forced
    record: an override, not the table's edge)."""
    nodes: list[Node] = field(default_factory=list)
    """The explored graph, with ``keep_graph``: for :func:`graph_text`."""
    por: bool = False
    """Partial-order reduction applied (asked for, and the store is the system topic alone)."""
    reduced: int = 0
    """States expanded through one delivery alone (partial-order reduction)."""
    por_blockers: Counter[str] = field(default_factory=Counter)
    """Why states with a delivery pending were fully expanded: for each, the reasons its candidates gave."""
    full_states: int = 0
    """Distinct states of the same complete search without partial-order reduction, when measured
    (``measure_por``: a second search)."""
    never_reached: list[Unreached] = field(default_factory=list)
    """The flows the bound demands that a complete search never walked (the vacuity guard), or
    that the model does not declare at all (found before searching)."""
    model_problems: list[str] = field(default_factory=list)
    """The model's failed structural checks (``statechan graph --check``), found before searching:
    a model whose table cannot do what it declares is not searched."""
    engine: Engine = Engine.memory
    levels: list[int] = field(default_factory=list)
    """States per breadth-first level (the compact search)."""
    peak_memory_mb: float = 0.0
    """The process's peak resident memory at the end of the search (MiB)."""
    memory_mb: float = 0.0
    """What the compact search's table and arrays held at the end (MiB)."""
    disk_mb: float = 0.0
    """The most disk the compact search's level files held at once (MiB)."""

    @property
    def collision_probability(self) -> float:
        """The chance that two of the distinct states shared a 64-bit fingerprint (TLC's estimate:
        n(n-1)/2 pairs at 2⁻⁶⁴), so that the search merged them and missed what one leads to."""
        from statechan.checker.table import collision_probability

        return collision_probability(self.states)

    @property
    def ok(self) -> bool:
        return self.violation is None and self.liveness is None and not self.never_reached and not self.model_problems

    @property
    def searched(self) -> bool:
        """Whether the search ran: not when the model failed its own checks first."""
        return self.stopped != BEFORE_SEARCH

    @property
    def within_bound(self) -> bool:
        """Every state within the bound was explored: the search completed, or stopped only at its
        depth bound (which is part of the bound)."""
        return self.complete or (self.bounds.depth is not None and self.stopped.startswith("depth bound"))

    @property
    def rate(self) -> float:
        return self.states / self.seconds if self.seconds > 0 else 0.0

    def config(self) -> SimConfig:
        return checker_config(self.bounds, self.store, self.variant)


def fingerprint_cap(channel: ChannelConfig) -> int:
    """How far back a time is told apart: just past the longest time anything compares (a timer,
    an in-flight wait, the monitor's 180 s stuck limit, and the invariants' clean-up and in-flight
    bounds), so older times all read the same and no invariant's wait is cut short."""
    from statechan.invariants.catalogue import cleanup_bound_ms, in_flight_bound_ms

    cap = max(channel.tombstone_delay_s * 1000, channel.session_timeout_ms, channel.unloading_timeout_ms) + 1
    protocol_cap = max(cap, 180_000 + channel.monitor_interval_s * 1000) + channel.in_flight_wait_ms
    return max(protocol_cap, cleanup_bound_ms(channel) + 1, in_flight_bound_ms(channel) + 1)


def checker_config(bounds: Bounds, store: StoreKind, variant: str | Variant) -> SimConfig:
    return SimConfig(
        brokers=bounds.brokers,
        bundles_per_namespace=bounds.bundles,
        store=store,
        variant=variant if isinstance(variant, Variant) else VARIANTS[variant],
        trace_views=False,
        timely_delivery_ms=bounds.timely_delivery_ms,
        channel=ChannelConfig(tombstone_delay_s=bounds.tombstone_delay_s),
    )


def settled(obs: Observation, views_agree: bool = True) -> bool:
    """Nothing waits to be delivered or run, no bundle is in flight in any running view, and the
    running brokers' views agree (unless ``views_agree`` is off, with ``views-converge`` left
    out): where every fair run must get back to."""
    if not obs.quiescent:
        return False
    views = [view for broker_id, view in obs.views.items() if broker_id in obs.started]
    for view in views:
        if any(value.state in IN_FLIGHT for value in view.values()):
            return False
    return not views_agree or all(view == views[0] for view in views[1:])


def _differ(old: Rec | None, new: Rec | None) -> bool:
    """Whether two values a key held differ: not the very object, and not equal (told apart by
    version or state first, as most are: pydantic's ``__eq__`` compares every field)."""
    return old is not new and (
        old is None or new is None or old.version_id != new.version_id or old.state is not new.state or old != new
    )


_Pair = tuple[str, str, bool]
"""A transition a step took: (from, to, whether the record was forced: an override, which skips
the table, so the coverage counts it apart from the table's edges)."""


def _channel_transitions(before: Mapping[str, Rec], after: Mapping[str, Rec]) -> list[_Pair]:
    """The transitions of the keys whose settled value a step changed (a deleted key is Init)."""
    if before is after:
        return []
    pairs = []
    for key in sorted({*before.keys(), *after.keys()}):
        old, new = before.get(key), after.get(key)
        if _differ(old, new):
            pairs.append(
                (
                    "Init" if old is None else old.state._name_,
                    "Init" if new is None else new.state._name_,
                    new is not None and new.force,
                )
            )
    return pairs


def _view_transitions(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[_Pair]:
    """The keys a view saw for the first time between two of its snapshots, as (Init, state):
    after a compaction a reader may first see a key mid-life (the table's compaction-cut edges:
    a reader takes any first value, forced or not). Its other changes are either the writers'
    edges again or a lagging reader's version-gap jumps, which are not edges of the table."""
    return [("Init", after[key].state._name_, False) for key in after.keys() - before.keys()]


def resident_mb() -> float:
    """This process's resident memory now (Linux), else its peak so far."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / 2**20 if sys.platform == "darwin" else peak / 1024


Progress = Callable[[int, int, int, float], None]
"""Called now and then with (states, queue size, depth, seconds)."""

Visitor = Callable[[ClusterState, dict[str, int]], None]
"""Called once with each distinct state the search reaches and the budgets it has left, the first
time (Stateright's ``visitor``): how a test or a tool sees what was explored without a second
search."""


_CLOCK_MOVING = frozenset({"tick", "crash", "restart", "shutdown", "lose-session", "resign"})
"""Budgets whose steps move the clock or start or stop a broker: taken last in an expansion (the
order changes no state's depth, only which of equally short runs is met first)."""

_Item = tuple[ClusterState, Counter[str], "Observation | None"]
"""A state to expand: the state, the budgets spent, and its observation when the search has it."""
_Queued = tuple[int, ClusterState, Counter[str], "Observation | None"]
"""A queued state: its node id and its :data:`_Item`."""


BEFORE_SEARCH = "model's own checks, before searching"
"""What stopped a search the model's structural checks or missing flows kept from starting."""


@functools.lru_cache(maxsize=32)
def _model_checks(model: str) -> tuple[tuple[str, ...], tuple[Unreached, ...]]:
    """The model's failed structural checks and undeclared flows, worked out once per model (a
    model is loaded once, as :func:`~statechan.model.load_model` keeps it)."""
    from statechan.graph import graph_problems

    loaded = load_model(model)
    return tuple(graph_problems(loaded)), tuple(undeclared_flows(loaded))


def _model_fails(result: CheckResult) -> bool:
    """The model's structural checks and the flows its operations need, before any search: a
    protocol that cannot do a flow fails naming it, whatever the bound (a search at a bound that
    issues no unload could not tell a model without one). Fills ``result`` and says whether it failed."""
    problems, undeclared = _model_checks(result.config().variant.model)
    result.model_problems = list(problems)
    result.never_reached = list(undeclared)
    if result.model_problems or result.never_reached:
        result.complete = False
        result.stopped = BEFORE_SEARCH
        return True
    return False


def check(
    bounds: Bounds | None = None,
    store: StoreKind = StoreKind.system_topic,
    variant: str | Variant = "current",
    symmetry: bool = True,
    max_states: int = 1_000_000,
    max_seconds: float | None = None,
    max_memory_mb: int | None = None,
    keep_graph: bool = False,
    invariants: Iterable[str] | None = None,
    progress: Progress | None = None,
    progress_every_s: float = 10.0,
    measure_symmetry: bool = False,
    visitor: Visitor | None = None,
    verify_fingerprints: bool = False,
    workers: int = 1,
    por: bool = True,
    measure_por: bool = False,
    vacuity: bool = True,
    engine: Engine | None = None,
    on_level: LevelReport | None = None,
    spill_dir: Path | None = None,
    checkpoint: Path | None = None,
    resume: bool = False,
    checkpoint_every_s: float = 600.0,
    note: Callable[[str], None] | None = None,
) -> CheckResult:
    """Explore every run within ``bounds`` breadth first; stop at the first broken invariant.

    ``verify_fingerprints`` keeps every state's canonical value beside its 64-bit fingerprint and
    compares the values whenever a fingerprint is met again, raising :class:`FingerprintCollision`
    if two different states ever share one (the values take memory).

    ``workers`` > 1 expands each level from the first of :data:`~statechan.checker.parallel.HANDOVER`
    states on in that many processes (this one included) and merges their expansions here in the
    order one process takes the states: the same states, verdict and shortest counterexample as
    one worker. A ``visitor`` or ``verify_fingerprints`` needs the states here, so either keeps the
    search in this process; the in-memory search (``keep_graph``) runs in one process.

    ``por`` (the default) expands a state through one delivery alone where that is shown sound
    (partial-order reduction, system topic without the syncer; see docs/checker.md): the same
    verdict, and every state without a pending delivery, in fewer states. With workers, each
    worker finds the ample candidates and the merge applies the cycle proviso (whether a
    successor is new to the whole search): the same states as one process.
    ``measure_por`` runs the search again without it, for the factor (``full_states``).

    ``vacuity`` (the default): a complete search that never walks a flow the bound demands
    fails with ``never_reached`` (:mod:`statechan.vacuity`); ``variant`` may be a
    :class:`Variant` itself (a mutant's model).

    ``engine``: :attr:`Engine.compact` (the default in one process) keeps 64-bit fingerprints and
    flat arrays in memory and each level's states on disk (in ``spill_dir``, else the system's
    temporary directory), calling ``on_level`` as each breadth-first level completes;
    :attr:`Engine.memory` keeps every state's node (needed by ``keep_graph``, which chooses it).
    Both give the same states, verdict and shortest counterexample.

    ``checkpoint`` (the compact search): a folder where the end of a level is saved every
    ``checkpoint_every_s``, and ``resume`` goes on from the newest saved there
    (:mod:`statechan.checker.checkpoint`: the process must hash repeatably); ``note`` hears of each."""
    from statechan.invariants.catalogue import simulation_ids

    bounds = bounds if bounds is not None else Bounds()
    if isinstance(variant, str) and variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; choose from {', '.join(VARIANTS)}")
    ids = list(invariants) if invariants is not None else simulation_ids()
    if workers < 1:
        raise ValueError(f"workers must be at least 1, not {workers}")
    por = por and _por_applies(bounds, store)
    if visitor is not None or verify_fingerprints:
        workers = 1
    result = CheckResult(bounds, store, variant, por=por)
    if vacuity and _model_fails(result):
        return result
    if engine is None:
        engine = Engine.memory if keep_graph else Engine.compact
    if engine is Engine.compact and keep_graph:
        raise ValueError("the compact search keeps no graph: use Engine.memory")
    if engine is Engine.memory and workers > 1:
        raise ValueError("the in-memory search (the explored graph) runs in one process: workers need Engine.compact")
    if (checkpoint is not None or resume) and (engine is Engine.memory or visitor is not None or verify_fingerprints):
        raise ValueError("a checkpoint is the compact search's, without a visitor or verify_fingerprints")
    if resume and checkpoint is None:
        raise ValueError("resume goes on from a checkpoint: name its folder")
    result.engine = engine
    expander = _expander(bounds, store, variant, symmetry, ids, keep_graph, verify_fingerprints, por)
    if engine is Engine.compact:
        from statechan.checker.checkpoint import run_signature
        from statechan.checker.compact import search

        search(
            result,
            expander,
            ids,
            max_states=max_states,
            max_seconds=max_seconds,
            max_memory_mb=max_memory_mb,
            visitor=visitor,
            progress=progress,
            progress_every_s=progress_every_s,
            on_level=on_level,
            spill_dir=spill_dir,
            workers=workers,
            checkpoint=checkpoint,
            resume=resume,
            signature=run_signature(bounds, store, variant, symmetry, ids, por),
            checkpoint_every_s=checkpoint_every_s,
            note=note,
        )
    else:
        _search_in_memory(
            result,
            expander,
            ids,
            max_states,
            max_seconds,
            max_memory_mb,
            keep_graph,
            visitor,
            progress,
            progress_every_s,
        )
    return _after_search(
        result,
        bounds,
        store,
        variant,
        symmetry,
        ids,
        max_states,
        max_seconds,
        max_memory_mb,
        vacuity,
        measure_symmetry,
        measure_por,
        por,
        engine,
        spill_dir,
    )


def _search_in_memory(
    result: CheckResult,
    expander: _Expander,
    ids: list[str],
    max_states: int,
    max_seconds: float | None,
    max_memory_mb: int | None,
    keep_graph: bool,
    visitor: Visitor | None,
    progress: Progress | None,
    progress_every_s: float,
) -> None:
    """The search that keeps a :class:`Node` per state."""
    bounds = result.bounds
    root = expander.root
    started = time.perf_counter()
    last_report = started

    if visitor is not None:
        visitor(root, bounds.budget())
    root_key = expander.key_of(root, Counter())
    root_obs = Observation(root, expander.setup)
    ids_of: dict[bytes, int] = {root_key: 0}
    nodes: list[Node] = [
        Node(-1, None, (), 0, settled=settled(root_obs, expander.agree), label=state_label(root) if keep_graph else "")
    ]
    if keep_graph:
        result.nodes = nodes
    queue: deque[_Queued] = deque([(0, root, Counter(), root_obs)])

    def finish() -> CheckResult:
        result.reduced, result.por_blockers = expander.reduced, expander.blockers
        return _finish(result, nodes, started)

    def depth_of(key: bytes) -> int | None:
        """The depth of a state the search holds (for the reduction's cycle proviso)."""
        known = ids_of.get(key)
        return None if known is None else nodes[known].depth

    def fail(node_id: int, broken: Sequence[object], step: tuple[Action, tuple[int, ...]] | None = None) -> None:
        """The search ends on ``broken``: the run to ``node_id`` (and then ``step``, when the
        violation is that step's own and its state was already known)."""
        result.violation = "; ".join(str(v) for v in broken[:3])
        path, picks = _path(nodes, node_id)
        if step is not None:
            path, picks = [*path, step[0]], [*picks, *step[1]]
        result.path, result.picks = path, picks

    from statechan.invariants.catalogue import check as check_invariants

    broken_at_start = check_invariants(root_obs, ids)
    if broken_at_start:  # the initial state is a state within every bound (#21894 breaks it)
        fail(0, broken_at_start)
        finish()
        return

    collector = fewer()  # statechan.collector: put back when the search ends
    try:

        def expanded() -> Iterator[tuple[_Queued, _Expansion]]:
            """Each queued state with its successors, in the order the states were queued."""
            while queue:
                item = queue.popleft()
                depth = nodes[item[0]].depth
                yield item, expander.expand(item[1:], depth, ids_of.__contains__, visitor, set(), depth_of=depth_of)

        for (node_id, *_), expansion in expanded():
            node = nodes[node_id]
            node.expanded = not expansion.beyond
            node.timers_cut = expansion.timers_cut
            if expansion.beyond:
                result.complete = False
                result.stopped = result.stopped or f"depth bound {bounds.depth}"
                continue
            for step in expansion.steps:
                if not _counted(result, step):
                    continue
                known = ids_of.get(step.key)
                if known is None:
                    known = len(nodes)
                    ids_of[step.key] = known
                    nodes.append(
                        Node(node_id, step.action, step.picks, node.depth + 1, settled=step.settled, label=step.label)
                    )
                    result.depth = max(result.depth, node.depth + 1)
                    node.successors.append((known, step.action, step.picks))
                    if step.broken:
                        fail(known, step.broken)
                        finish()
                        return
                    assert step.state is not None
                    assert step.spent is not None
                    queue.append((known, step.state, step.spent, step.obs))
                    continue
                node.successors.append((known, step.action, step.picks))
                if step.own_checks and step.broken:
                    # the answers a step gave are its own (not the state's): checked on every
                    # step that gives some, also one that leads back to a known state
                    fail(node_id, step.broken, (step.action, step.picks))
                    finish()
                    return
            if len(nodes) >= max_states:
                result.complete = False
                result.stopped = f"state bound {max_states:,}"
                queue.clear()
                break
            if max_memory_mb is not None and node_id % 256 == 0 and resident_mb() > max_memory_mb:
                result.complete = False
                result.stopped = f"memory bound {max_memory_mb:,} MiB"
                queue.clear()
                break
            now = time.perf_counter()
            if max_seconds is not None and now - started > max_seconds:
                result.complete = False
                result.stopped = f"time bound {max_seconds:g} s"
                queue.clear()
                break
            if progress is not None and now - last_report >= progress_every_s:
                progress(len(nodes), len(queue), node.depth, now - started)
                last_report = now
    finally:
        gc.set_threshold(*collector)
    finish()
    if result.violation is None and result.complete:
        _liveness(result, nodes)


def _after_search(
    result: CheckResult,
    bounds: Bounds,
    store: StoreKind,
    variant: str | Variant,
    symmetry: bool,
    ids: list[str],
    max_states: int,
    max_seconds: float | None,
    max_memory_mb: int | None,
    vacuity: bool,
    measure_symmetry: bool,
    measure_por: bool,
    por: bool,
    engine: Engine,
    spill_dir: Path | None,
) -> CheckResult:
    """The vacuity guard and the measured reductions, after either search."""
    from statechan.checker.compact import peak_resident_mb

    result.peak_memory_mb = peak_resident_mb()
    if vacuity and result.ok and result.complete:
        config = result.config()
        demanded = demanded_flows(bounds, config.storage)
        result.never_reached = unreached_flows(load_model(config.variant.model), result.coverage, demanded)
    if measure_symmetry and symmetry and result.complete and result.ok:
        plain = check(
            bounds,
            store,
            variant,
            False,
            max_states,
            max_seconds,
            max_memory_mb,
            invariants=ids,
            por=por,
            engine=engine,
            spill_dir=spill_dir,
        )
        result.concrete_states = plain.states if plain.complete else 0
    if measure_por and por and result.complete and result.ok:
        full = check(
            bounds,
            store,
            variant,
            symmetry,
            max_states,
            max_seconds,
            max_memory_mb,
            invariants=ids,
            por=False,
            engine=engine,
            spill_dir=spill_dir,
        )
        result.full_states = full.states if full.complete else 0
    return result


# -- expanding a state (one worker, or several) ------------------------------------------------------
@interpreted
@dataclass(slots=True)
class _Step:
    """One action (with one placement pick) taken from a state, and what it led to."""

    action: Action
    picks: tuple[int, ...] = ()
    refused: bool = False
    pairs: list[_Pair] = field(default_factory=list)
    key: bytes = b""
    own_checks: bool = False
    """The step gave lookup answers or broke a step invariant: what it broke is the step's own,
    reported even where the state it led to was known."""
    broken: list[Any] = field(default_factory=list)
    """The invariants the new state (or the step's answers) broke; checked where the state was
    new to the expander or the step gave answers."""
    state: ClusterState | None = None
    """The state it led to, where it was new to the expander (for the queue)."""
    spent: Counter[str] | None = None
    """The budgets spent, with ``state`` (a default Counter would cost every step one)."""
    obs: Observation | None = None
    """The state's observation, unless the step gave answers (an observation holds the answers of
    the step that led to it: the state's own has none)."""
    settled: bool = False
    label: str = ""
    ample: bool = False
    """In a worker: a delivery that is an ample set if its successor passes the cycle proviso."""
    position: int = 0
    """Where the step comes in its state's expansion, refused steps counted (:meth:`_Expander.branch`
    takes it again from this number alone: the compact search keeps it instead of the action)."""


@interpreted
@dataclass
class _Expansion:
    steps: list[_Step]
    timers_cut: bool = False
    beyond: bool = False
    """The state is at the depth bound: not expanded."""
    blockers: Counter[str] | None = None
    """In a worker: why its deliveries could not be ample sets (the reduction's report)."""
    reduced: bool = False
    """Expanded through one delivery alone (partial-order reduction)."""
    undecided: bool = False
    """In a worker of the compact search: expanded fully, with the ample candidates flagged, for the
    merge to decide the reduction (the worker could not tell whether the proviso holds)."""


class _Left:
    """What a combination of budgets left decides in an expansion: the action kinds not worth
    listing, the budgets spent out, and the key suffix of a successor that spends one of a kind."""

    __slots__ = ("_after", "left", "out", "unlisted")

    def __init__(
        self, left: dict[str, int], unlisted: frozenset[type[Action]], out: frozenset[str], suffix: bytes
    ) -> None:
        self.left = left
        """How many of each kind are left."""
        self.unlisted = unlisted
        self.out = out
        self._after: dict[str | None, bytes] = {None: suffix}

    def after(self, kind: str | None, spent: Counter[str], budget: dict[str, int]) -> bytes:
        """The key suffix of a successor that spent one ``kind`` (``spent``: what it has spent)."""
        found = self._after.get(kind)
        if found is None:
            found = self._after[kind] = budget_left(budget, spent)
        return found


class _Expander:
    """Takes every enabled action (and placement pick) from a queued state: the one place the
    search steps the protocol, whether it runs in this process or in a worker."""

    def __init__(
        self,
        config: SimConfig,
        bounds: Bounds,
        fingerprint: Fingerprinter,
        ids: list[str],
        keep_graph: bool,
        values: dict[bytes, tuple[Any, ...]] | None,
        por: bool = False,
    ) -> None:
        self.config = config
        self.setup = protocol.setup(config)
        self.por = por
        """Partial-order reduction: expand a state through one delivery where that is sound."""
        self.reduced = 0
        """States expanded through one delivery alone."""
        self.blockers: Counter[str] = Counter()
        """Why a candidate delivery was not taken alone, by reason (for tuning and the docs)."""
        self.root = protocol.init(self.setup, trace=False).state
        self.bounds = bounds
        self.budget = bounds.budget()
        self.fingerprint = fingerprint
        self.ids = ids
        self._ids = tuple(ids)
        """The ids as the catalogue keys what it works out for them (a tuple, not copied per check)."""
        from statechan.invariants.catalogue import check, check_step, step_ids

        self._check, self._check_step = check, check_step
        """The catalogue's checks (imported here: the catalogue loads with the first search)."""
        self.agree = "views-converge" in ids
        self.steps = tuple(step_ids(ids))
        """The step invariants among ``ids`` (checked on every transition)."""
        self.keep_graph = keep_graph
        self.values = values
        """Every key's canonical form, when fingerprints are verified."""
        self._left: dict[tuple[int, ...], _Left] = {}
        self._totals, self._zeros = tuple(self.budget.values()), (0,) * len(self.budget)
        self._kinds: dict[type[Action], str | None] = {}
        """Each action type's budget (:func:`budget_kind`), by type."""

    def left(self, spent: Counter[str]) -> _Left:
        """What a state that has spent ``spent`` may still do, worked out once per combination of
        budgets left (a search meets few): every expansion asks."""
        left = tuple(map(operator.sub, self._totals, map(spent.get, self.budget, self._zeros)))
        found = self._left.get(left)
        if found is None:
            out = frozenset(kind for kind, n in zip(self.budget, left, strict=True) if n <= 0)
            # ticks are listed even when spent: a spent tick budget marks the state's timers as cut
            unlisted = frozenset(
                t
                for t in (*BUDGETED, *_ADMIN_TYPES)
                if (kind := budget_of(t, self.bounds)) in out | {"off"} and kind != "tick"
            )
            found = self._left[left] = _Left(
                dict(zip(self.budget, left, strict=True)), unlisted, out, budget_left(self.budget, spent)
            )
        return found

    def key_of(self, state: ClusterState, spent: Counter[str], left: bytes | None = None) -> bytes:
        """The state's key: its fingerprint and the budgets left (``left``, when known)."""
        hashed, context = self.fingerprint.canonical(state)
        left = left if left is not None else budget_left(self.budget, spent)
        key = self.fingerprint.digest(hashed) + left
        if self.values is not None and self.values.setdefault(key, state.canon(context)) != state.canon(context):
            raise FingerprintCollision(f"two different states share the fingerprint {key.hex()}")
        return key

    def _order(
        self, state: ClusterState, spent: Counter[str], budgets: _Left, por: bool, count: bool = True
    ) -> tuple[list[tuple[Action, str | None]], dict[int, _PorCandidate], bool]:
        """The actions an expansion takes from ``state``, in the order it takes them (with ``por``,
        the candidate ample deliveries first), the candidates by their action's identity, and
        whether a timer was due with the tick budget spent. The one order :meth:`expand` and
        :meth:`branch` share: a step's position names it."""
        bounds = self.bounds
        taken: list[tuple[Action, str | None]] = []
        timers_cut = False
        kinds = self._kinds
        for action in protocol.enabled(state, self.setup, budgets.unlisted):
            kind = kinds.get(type(action), "?")
            if kind == "?":
                kind = kinds[type(action)] = budget_kind(action, bounds)
            if kind == "off" or kind in budgets.out:
                if kind == "tick":
                    timers_cut = True
                continue
            taken.append((action, kind))
        taken.sort(key=lambda pair: pair[1] in _CLOCK_MOVING)
        ready: dict[int, _PorCandidate] = {}
        if por:
            candidates = _por_candidates(state, self.setup, taken, self.budget, spent, bounds, budgets.left)
            ready = {id(c.action): c for c in candidates if not c.reasons - {"tick-clock"}}
            for blocked in candidates:
                if count and id(blocked.action) not in ready:
                    self.blockers.update(blocked.reasons)
            # the candidates go first: the first whose step passes the checks is the ample set
            if ready:
                taken.sort(key=lambda pair: id(pair[0]) not in ready)
        return taken, ready, timers_cut

    def branches(
        self, state: ClusterState, spent: Counter[str]
    ) -> Iterator[tuple[Action, tuple[int, ...], ClusterState, Counter[str]]]:
        """Every step :meth:`expand` takes from ``state``, in its order, refused ones left out: the
        action, placement picks, successor and budgets spent."""
        for _, action, made, child, child_spent in self._branches(state, spent):
            if child is not None and child_spent is not None:
                yield action, made, child, child_spent

    def branch(
        self, state: ClusterState, spent: Counter[str], position: int
    ) -> tuple[Action, tuple[int, ...], ClusterState, Counter[str]]:
        """The step at ``position`` in the expansion of ``state`` (refused steps counted): how a
        search that keeps only each state's parent and position rebuilds a run, by stepping again
        from the initial state."""
        for at, action, made, child, child_spent in self._branches(state, spent):
            if at == position:
                if child is None or child_spent is None:
                    raise ValueError(f"the step at position {position} is refused")
                return action, made, child, child_spent
        raise ValueError(f"no step at position {position}")

    def _branches(
        self, state: ClusterState, spent: Counter[str]
    ) -> Iterator[tuple[int, Action, tuple[int, ...], ClusterState | None, Counter[str] | None]]:
        budgets = self.left(spent)
        taken, _, _ = self._order(state, spent, budgets, self.por, count=False)
        at = 0
        for action, kind in taken:
            for outcome in _outcomes(state, action, self.setup):
                if outcome is None:
                    yield at, action, (), None, None
                    at += 1
                    break
                child_spent = spent
                if kind is not None:
                    child_spent = _copied(spent)
                    child_spent[kind] += 1
                yield at, action, tuple(outcome.picks), outcome.state, child_spent
                at += 1

    def expand(
        self,
        item: _Item,
        depth: int,
        known: Callable[[bytes], bool],
        visitor: Visitor | None,
        fresh: set[bytes],
        exact: bool = True,
        depth_of: Callable[[bytes], int | None] | None = None,
    ) -> _Expansion:
        """The successors of ``item`` (a queued state at ``depth``). ``known`` says which keys the
        search holds; with ``exact`` it holds them all, so the expansion stops at the first step
        that breaks an invariant (with several workers it cannot know, and takes every step).
        ``depth_of`` gives a known state's depth: with it (one process), a state may be expanded
        through one delivery alone (partial-order reduction, :func:`_por_candidates`)."""
        check_invariants, check_step = self._check, self._check_step
        state, spent, observed = item
        bounds, budget, setup = self.bounds, self.budget, self.setup
        if bounds.depth is not None and depth >= bounds.depth:
            return _Expansion([], beyond=True)
        expansion = _Expansion([])
        budgets = self.left(spent)
        por = self.por and (depth_of is not None or not exact)
        taken, ready, expansion.timers_cut = self._order(state, spent, budgets, por)
        before = observed if observed is not None else Observation(state, setup)
        for action, kind in taken:
            reader = broker_id(action.broker) if isinstance(action, Deliver) else None
            candidate = ready.get(id(action))
            # every sequence of placement picks the step can make (a clean-up may place several orphans)
            for outcome in _outcomes(state, action, setup):
                if outcome is None:
                    expansion.steps.append(_Step(action, refused=True, position=len(expansion.steps)))
                    break
                made = outcome.picks
                child = outcome.state
                step = _Step(action, tuple(made), position=len(expansion.steps))
                after = before.successor(child, outcome.answers)
                step.pairs = _channel_transitions(before.channel, after.channel)
                if reader is not None and child.brokers[reader].alive:
                    # what the delivering broker's view took: after a compaction, edges no writer takes
                    # (its view as the observations hold it, read off its records)
                    was = state.brokers[reader]
                    if was.view is not child.brokers[reader].view or not was.alive:
                        step.pairs += _view_transitions(
                            was.view.data() if was.alive else {}, child.brokers[reader].view.data()
                        )
                # a step that spends no budget shares its parent's record of what was spent (never
                # changed in place); the key's suffix is worked out once per kind a combination spends
                child_spent = spent
                if kind is not None:
                    child_spent = _copied(spent)
                    child_spent[kind] += 1
                step.key = self.key_of(child, child_spent, budgets.after(kind, child_spent, budget))
                step.own_checks = bool(outcome.answers)
                if self.steps:
                    # a step invariant is the step's own (TLA+'s [A]_v): checked on every step,
                    # also one that leads back to a known state
                    step.broken = check_step(before, after, self.steps)
                    step.own_checks = step.own_checks or bool(step.broken)
                new = not known(step.key) and step.key not in fresh
                ample = False
                if candidate is not None:
                    why = _por_after(state, outcome, before, after, candidate, budget, spent, bounds, budgets.left)
                    if made:
                        why.append("placement")  # one pick of the delivery is not all of it
                    if not exact:
                        # a worker cannot tell whether the successor is new to the whole search:
                        # the merge applies the proviso (``reduce_merged`` in compact.search), in this order
                        step.ample = not why
                        if why:
                            self.blockers.update(why)
                    elif not new and (depth_of is None or depth_of(step.key) != depth + 1):
                        # the proviso: neither new nor on the next level, the edge could close a cycle
                        # of reduced states (every reduced edge goes one level deeper: none can)
                        why.append("proviso")
                    if exact:
                        ample = not why
                        if why:
                            self.blockers.update(why)
                if new:
                    fresh.add(step.key)
                    step.settled = settled(after, self.agree)
                    step.label = state_label(child) if self.keep_graph else ""
                    if visitor is not None:
                        visitor(child, {kind: budget[kind] - child_spent[kind] for kind in budget})
                    step.broken += check_invariants(after, self._ids)
                    step.state, step.spent = child, child_spent
                    step.obs = None if outcome.answers else after
                elif outcome.answers:
                    # the answers a step gave are its own (not the state's): checked on every
                    # step that gives some, also one that leads back to a known state
                    step.broken += check_invariants(after, self._ids)
                expansion.steps.append(step)
                if exact and step.broken:
                    return expansion
                if ample:
                    # the ample set is this delivery alone: the candidates tried before it are not in it
                    expansion.steps = [step]
                    expansion.reduced = True
                    self.reduced += 1
                    return expansion
        return expansion


_ADMIN_TYPES: tuple[type[Action], ...] = (Transfer, Split, Unload)


def _copied(spent: Counter[str]) -> Counter[str]:
    """A copy of the budgets spent (``Counter.copy`` goes through ``Counter.update``'s Python code;
    a dict's update is C's)."""
    copy: Counter[str] = Counter()
    dict.update(copy, spent)
    return copy


def _outcomes(state: ClusterState, action: Action, setup: protocol.Setup) -> Iterator[protocol.Outcome | None]:
    """Every outcome of taking ``action`` (one per sequence of placement picks), then None if the
    protocol refused it (an action ``enabled`` lists but ``step`` refuses: counted, not a step)."""
    branches = protocol.each_outcome(state, action, setup)
    while True:
        try:
            outcome = next(branches)
        except StopIteration:
            return
        except ValueError:
            yield None
            return
        yield outcome


def _expander(
    bounds: Bounds,
    store: StoreKind,
    variant: str | Variant,
    symmetry: bool,
    ids: list[str],
    keep_graph: bool,
    verify: bool = False,
    por: bool = False,
) -> _Expander:
    """The search's expander, from the root state of ``bounds`` (the same in every worker)."""
    config = checker_config(bounds, store, variant)
    fingerprint = Fingerprinter(bounds.brokers, fingerprint_cap(config.channel), symmetry, store is StoreKind.both)
    return _Expander(config, bounds, fingerprint, ids, keep_graph, {} if verify else None, por)


def _counted(result: CheckResult, step: _Step) -> bool:
    """Count a step into ``result`` (a transition and the coverage of what it wrote), unless the
    protocol refused it (listed as enabled but refused when taken: not a transition, counted
    apart); whether it was a transition."""
    if step.refused:
        result.refused += 1
        return False
    result.transitions += 1
    coverage = result.coverage
    for src, dst, forced in step.pairs:
        counts = coverage.get((src, dst))
        if counts is None:
            counts = coverage[src, dst] = Counter()
        counts[FORCED + step.action.kind if forced else step.action.kind] += 1
    return True


def _finish(result: CheckResult, nodes: list[Node], started: float) -> CheckResult:
    result.states = len(nodes)
    result.seconds = time.perf_counter() - started
    return result


def _path(nodes: list[Node], node_id: int) -> tuple[list[Action], list[int]]:
    steps: list[tuple[Action, tuple[int, ...]]] = []
    while node_id > 0:
        node = nodes[node_id]
        assert node.action is not None
        steps.append((node.action, node.picks))
        node_id = node.parent
    steps.reverse()
    return [a for a, _ in steps], [p for _, picks in steps for p in picks]


def _liveness(result: CheckResult, nodes: list[Node]) -> None:
    """Every explored state must be able to reach a settled one (under fairness a run cannot stay
    forever where no settled state is reachable); otherwise report a lasso, or the path to a
    state where nothing can happen. A state whose timers the tick budget cut off counts as able:
    its future is outside the bound."""
    predecessors: list[list[int]] = [[] for _ in nodes]
    for i, node in enumerate(nodes):
        for j, _, _ in node.successors:
            predecessors[j].append(i)
    good = [node.settled or not node.expanded or node.timers_cut for node in nodes]
    todo = deque(i for i, ok in enumerate(good) if ok)
    while todo:
        j = todo.popleft()
        for i in predecessors[j]:
            if not good[i]:
                good[i] = True
                todo.append(i)
    stuck = [i for i, ok in enumerate(good) if not ok]
    if not stuck:
        return
    first = min(stuck, key=lambda i: nodes[i].depth)
    path, picks = _path(nodes, first)

    def first_successor(current: int) -> tuple[int, Action, Sequence[int]] | None:
        return nodes[current].successors[0] if nodes[current].successors else None

    _lasso(result, len(stuck), first, path, picks, first_successor)


def _lasso(
    result: CheckResult,
    stuck: int,
    first: int,
    path: list[Action],
    picks: list[int],
    first_successor: Callable[[int], tuple[int, Action, Sequence[int]] | None],
) -> None:
    """Report a liveness failure: the shortest run to ``first`` (the first state that cannot
    settle), then its first successors, each stuck too, until one repeats (the loop) or nothing
    can happen. Both searches walk their graphs through ``first_successor``."""
    seen = {first: 0}
    tail_actions: list[Action] = []
    tail_picks: list[int] = []
    current = first
    start = -1
    while (edge := first_successor(current)) is not None:
        nxt, action, edge_picks = edge
        tail_actions.append(action)
        tail_picks.extend(edge_picks)
        if nxt in seen:
            start = seen[nxt]
            break
        seen[nxt] = len(seen)
        current = nxt
    ending = (
        f"leads to a loop of {len(tail_actions) - start} step(s)"
        if start >= 0
        else f"leads in {len(tail_actions)} step(s) to a state where nothing can happen"
    )
    result.liveness = (
        f"{stuck:,} state(s) cannot reach a settled state (nothing waiting, nothing in flight, "
        f"views agree); the shortest {ending}"
    )
    result.path = path + tail_actions
    result.picks = picks + tail_picks
    result.lasso = len(path) + start if start >= 0 else -1


# -- partial-order reduction -----------------------------------------------------------------------
# A state's ample set is one delivery, Deliver(b), where the conditions below show it persistent (no
# action outside it that depends on it can happen before it: C1), unable to hide a broken state or
# step invariant (C2, in the form safety needs), and its successor new or one level deeper (C3, the
# proviso of a breadth-first search). The argument, condition by condition: docs/por.md.


def _por_applies(bounds: Bounds, store: StoreKind) -> bool:
    """Where the reduction is argued: the system topic alone (a store notification re-reads its
    node, so it depends on every write to it), with timely delivery (which bounds the ticks that
    can come before a delivery)."""
    return store is StoreKind.system_topic and bounds.timely_delivery_ms is not None


@dataclass
class _PorCandidate:
    """A delivery that may be a state's ample set, with what keeps it from being one (read off the
    state before it is taken) and the latest the clock can read before it is taken."""

    action: Deliver
    reasons: set[str]
    latest: int


_CLOCK_RISKS = frozenset(
    {TimerKind.cleanup, TimerKind.cleanup_recheck, TimerKind.session_expiry, TimerKind.shutdown_complete}
)


def _por_candidates(
    state: ClusterState,
    setup: protocol.Setup,
    taken: list[tuple[Action, str | None]],
    budget: dict[str, int],
    spent: Counter[str],
    bounds: Bounds,
    left: Mapping[str, int] | None = None,
) -> list[_PorCandidate]:
    """Each enabled delivery, with the reasons (read off the state) it cannot be the ample set.
    ``tick-clock`` is dropped later if the delivery leaves a task (so it never ends the backlog).
    ``left``: the budgets left (``budget`` less ``spent``), when the caller has them."""
    deliveries = [a for a, _ in taken if isinstance(a, Deliver)]
    if not deliveries:
        return []
    if left is None:
        left = {kind: budget[kind] - spent.get(kind, 0) for kind in budget}
    common = {kind for kind in ("compact", "shutdown", "lose-session", "resign") if left[kind] > 0}
    # a crash of the delivering broker disables the delivery, but absorbs it: a dead broker's view is
    # not in the state, so crash(deliver(x)) = crash(x) and the reduced search reaches every state after it
    brokers = state.brokers
    if any(b.alive and not b.client.connected and not b.client.closed for b in brokers):
        common.add("reconnect")
    now = state.now
    work_since = state.work_since
    dead = {b.id for b in brokers if not b.alive}
    restart_possible = left["restart"] > 0 and bool(dead)
    # Ticks that may fire before the delivery: the timers due within the timely-delivery bound of
    # when the backlog began (it cannot end while the delivery waits), whichever broker's fires first
    # among those due together (Tick(b) or Tick()), and those a notification or a restart may schedule
    # at once (a new leader's monitor, a clean-up). Such a tick commutes with the delivery if its timer
    # is another broker's and the delivering broker cannot come to lead (its monitor and clean-up read
    # and flush its view); and, unless the delivery leaves a task behind (so it never ends the
    # backlog), if no tick moves the clock past when the backlog began.
    tick_own: set[int] = set()
    tick_leader: set[int] = set()
    clock_risk = False
    latest = now
    timely = bounds.timely_delivery_ms
    if left["tick"] > 0 and timely is not None:
        began = work_since if work_since is not None else now
        slack = began + timely
        window = [t for t in state.timers if t.due <= slack]
        leader_events: set[int] = set()
        deletions = False
        for b in brokers:
            if not b.alive:
                continue
            for event in b.client.queue:
                if isinstance(event, SessionEvent) or event[1] == LEADER_PATH:
                    leader_events.add(b.id)
                elif isinstance(event[1], int) and event[0] is NodeEvent.Deleted:
                    deletions = True
        elected = state.leader
        leader = None if elected is None or elected[1] else elected[0]
        restart_leads = restart_possible and (elected is None or leader in dead)
        if window or (slack >= now and (leader_events or deletions or restart_leads)):
            latest = max(now, slack)
            unregistered = any(b.id not in state.store.registry for b in brokers)
            clock_risk = (
                began != now
                or any(t.due != now for t in window)
                or any(t.kind in _CLOCK_RISKS for t in window)
                or deletions
                or (unregistered and bool(window or leader_events or restart_leads))
            )
            expiring = any(t.kind is TimerKind.session_expiry for t in window)
            for b in brokers:
                if any(t.broker == b.id and t.kind is not TimerKind.session_expiry for t in window):
                    tick_own.add(b.id)
                if (
                    elected is None
                    or leader == b.id
                    or b.leader_view == (b.id, False)
                    or b.id in leader_events
                    or expiring
                ):
                    tick_leader.add(b.id)
    if work_since is not None and work_since != now and (left["lookup"] > 0 or left["admin"] > 0 or restart_possible):
        common.add("work-since")  # the delivery may end the backlog, a lookup start a new one later
    out: list[_PorCandidate] = []
    for action in deliveries:
        i = broker_id(action.broker)
        reasons = set(common)
        if i in tick_own:
            reasons.add("tick-own-timer")
        if i in tick_leader:
            reasons.add("tick-leader")
        if clock_risk:
            reasons.add("tick-clock")  # dropped if the delivery leaves a task (see _por_after)
        if any(isinstance(e, SessionEvent) for e in brokers[i].client.queue):
            reasons.add("session-event")  # a re-established session flushes the view
        out.append(_PorCandidate(action, reasons, latest))
    return out


def _por_after(
    parent: ClusterState,
    outcome: protocol.Outcome,
    before: Observation,
    after: Observation,
    candidate: _PorCandidate,
    budget: dict[str, int],
    spent: Counter[str],
    bounds: Bounds,
    left: Mapping[str, int] | None = None,
) -> list[str]:
    """The reasons the delivery, now taken, cannot be the ample set (what it did decides).
    ``left``: the budgets left before it (``budget`` less ``spent``), when the caller has them."""
    from statechan.invariants.catalogue import cleanup_bound_ms, in_flight_bound_ms

    child = outcome.state
    i = broker_id(candidate.action.broker)
    reader, after_reader = parent.brokers[i], child.brokers[i]
    had = reader.tasks
    tasks = after_reader.tasks
    why: list[str] = []
    leaves_task = tasks is not had and (
        len(tasks) != len(had) or any(not _same_task(a, b) for a, b in zip(tasks, had, strict=True))
    )
    if "tick-clock" in candidate.reasons and not leaves_task:
        why.append("tick-clock")  # it may end the backlog, and a tick after it start a new one later
    if after.answers:
        why.append("answers")  # a lookup answer is a step the invariants check
    # (read off the broker's records as the observations hold them: its unloads and views while it runs)
    unloads = reader.unloads if reader.alive and reader.unloads else None
    still = after_reader.unloads if after_reader.alive and after_reader.unloads else None
    if unloads is not still and unloads != still:
        why.append("unload")  # an unload reported done: unload-completion-matches judges this very step
    served, serving = reader.serving(), after_reader.serving()
    if not serving >= served:
        # single-owner reads the owned sets: a claim given up could end a breach the search has not
        # yet seen (a claim taken cannot: a breach stays a breach)
        why.append("owned-set")
    elif serving != served:
        # a claim taken changes the broker's load, which placement reads when the last report is 30 s old
        loads_at = child.loads_at
        if loads_at < 0 or candidate.latest - loads_at >= protocol.LOAD_REPORT_INTERVAL_MS:
            why.append("loads")
    old_view: Mapping[str, Rec] = reader.view.data() if reader.alive else {}
    new_view: Mapping[str, Rec] = after_reader.view.data() if after_reader.alive else {}
    changed = (
        set()
        if old_view is new_view
        else {k for k in old_view.keys() | new_view.keys() if _differ(old_view.get(k), new_view.get(k))}
    )
    for key in changed:
        old, new = old_view.get(key), new_view.get(key)
        if old is not None and new is not None and new.version_id <= old.version_id:
            # a view's step to a lower or equal version is judged by the step invariants against the
            # channel's settled value, which writes before the delivery could change: only a step up
            # in version is judged alike wherever the delivery is taken
            why.append("step-version")
            break
    if changed and candidate.latest > child.now:
        # ticks may move the clock before the delivery: the entry it replaces must not come due meanwhile
        # (orphan-cleaned and in-flight-completes read the time; the delivery could hide a breach)
        channel = before.channel_config
        setup = before.setup
        since = child.leader_since if child.leader_since is not None else child.now
        for key in changed:
            was = old_view.get(key)
            if was is None:
                continue
            if was.state in setup.in_flight and candidate.latest - max(was.timestamp, since) > in_flight_bound_ms(
                channel
            ):
                why.append("deadline")
            if (
                was.state in setup.active
                and child.unregistered_at
                and candidate.latest - since > cleanup_bound_ms(channel) - 1
            ):
                why.append("deadline")
    accepted = any(broker == i for broker, _ in outcome.handled)
    if changed or leaves_task or accepted:
        if left is None:
            left = {kind: budget[kind] - spent.get(kind, 0) for kind in budget}
        if left["lookup"] > 0:
            why.append("lookup")  # a lookup at this broker of this key would see the difference
        if left["admin"] > 0 and any(
            v is not None and v.state is ServiceUnitState.Owned
            for k in changed
            for v in (old_view.get(k), new_view.get(k))
        ):
            why.append("admin")
        for task in had:
            # a split reads its parent and children in the view, an assignment its bundle
            reads = {task.key} if task.kind in (TaskKind.assign, TaskKind.split) else set()
            if task.kind is TaskKind.split and task.data is not None:
                reads |= {c.key for c in protocol._children(task.key, task.data)}
            if reads & changed:
                why.append("task-reads-view")
                break
    return why


def _same_task(one: Task, other: Task) -> bool:
    """Two queued tasks alike (what they do, not the writes they wait on)."""
    return one is other or (
        one.kind is other.kind and one.key == other.key and one.data == other.data and one.target == other.target
    )


# -- a picture of a small explored graph ---------------------------------------------------------
_LETTER = {"Init": "I", "Free": "F", "Owned": "O", "Assigning": "A", "Releasing": "R", "Splitting": "S", "Deleted": "D"}


def state_label(state: ClusterState) -> str:
    """Each running broker's view of each key, short: ``b1: O2 | b2: A2`` (state letter, then the
    destination broker's number), ``-`` where a view holds nothing, ``x`` for a broker down."""
    keys = sorted({key for broker in state.brokers for key in broker.view.items})
    parts = []
    for broker in sorted(state.brokers, key=lambda b: broker_name(b.id)):
        number = broker.id + 1
        if not broker.alive:
            parts.append(f"b{number}: x")
            continue
        cells = []
        for key in keys:
            value = broker.view.get(key)
            if value is None:
                cells.append("-")
            else:
                dst = "" if value.dst_broker is None else str(value.dst_broker + 1)
                cells.append(_LETTER.get(value.state.name, "?") + dst)
        parts.append(f"b{number}: {' '.join(cells) or '-'}")
    return " | ".join(parts)


def graph_text(result: CheckResult, fmt: str) -> str:
    """The explored graph (``check(keep_graph=True)``) as Graphviz DOT (``fmt="dot"``) or a
    Mermaid flowchart (``"mermaid"``): states labelled by their views, settled states in
    green, the counterexample's states in red, edges labelled by the action."""
    if not result.nodes:
        raise ValueError("no graph kept: run check(..., keep_graph=True)")
    if fmt not in ("dot", "mermaid"):
        raise ValueError(f"unknown graph format {fmt!r}; choose dot or mermaid")
    on_path = {0}
    current = 0
    for action in result.path:
        nxt = next((j for j, a, _ in result.nodes[current].successors if a == action), None)
        if nxt is None:
            break
        on_path.add(nxt)
        current = nxt
    if not result.path:
        on_path = set()
    lines: list[str] = []
    if fmt == "dot":
        lines.append("digraph statechan_check {")
        lines.append('  node [shape=box, fontname="monospace", fontsize=10];')
        for i, node in enumerate(result.nodes):
            color = (
                ', style=filled, fillcolor="#f4cccc"'
                if i in on_path
                else (', style=filled, fillcolor="#d9ead3"' if node.settled else "")
            )
            lines.append(f'  s{i} [label="{i}: {node.label}"{color}];')
        for i, node in enumerate(result.nodes):
            for j, action, _ in node.successors:
                lines.append(f'  s{i} -> s{j} [label="{_action_label(action)}", fontsize=9];')
        lines.append("}")
    else:
        lines.append("flowchart TD")
        for i, node in enumerate(result.nodes):
            lines.append(f'  s{i}["{i}: {node.label}"]')
            if i in on_path:
                lines.append(f"  style s{i} fill:#f4cccc")
            elif node.settled:
                lines.append(f"  style s{i} fill:#d9ead3")
        for i, node in enumerate(result.nodes):
            for j, action, _ in node.successors:
                lines.append(f'  s{i} -->|"{_action_label(action)}"| s{j}')
    return "\n".join(lines) + "\n"


def _action_label(action: Action) -> str:
    text = _BROKER.sub(lambda m: "b" + m.group(1), action.describe())
    return re.sub(r"[\w-]+/[\w-]+/", "", text).replace('"', "'")
