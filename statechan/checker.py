"""An explicit-state model checker over the cluster simulator: every interleaving of deliveries,
tasks, timers, crashes and admin operations within bounds, breadth first (so a counterexample is
a shortest one), with the property catalogue's cluster invariants checked on every state and a
liveness check on the explored graph.

The model is the simulator itself (:class:`~statechan.cluster.Cluster`): ``enabled_actions()``
is Next, ``check(observe())`` the invariants. Placement's random choice becomes a branch: each
candidate broker is a successor (``Cluster(picks=...)``), and a saved counterexample carries its
picks so ``statechan replay`` follows it exactly.

A state is a value (:func:`statechan.cluster.value.capture`): nested tuples holding everything that
decides what can happen next, times as ages capped beyond the longest timeout (so a monitor tick
that changes nothing leads back to a state already seen). The queue holds values; each successor
is stepped on a copy of its parent (the expanded copy, one rewound in place from a sibling, or one
restored from the value), and the fingerprint is the value's 64-bit hash. With symmetry on, it is
the least over the renamings of the broker ids that order the brokers by a renaming-invariant
signature (brokers are interchangeable but for what the state says), each a renaming of the one
captured value. Step invariants are checked on every transition, state invariants on every new
state.
"""

from __future__ import annotations

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
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from statechan.cluster.actions import (
    Action,
    Compact,
    Crash,
    Deliver,
    Lookup,
    LoseSession,
    Resign,
    Restart,
    Shutdown,
    Split,
    Tick,
    Transfer,
    Unload,
    Wait,
)
from statechan.cluster.config import VARIANTS, ChannelConfig, SimConfig, StoreKind, Variant
from statechan.cluster.sim import LEADER, REGISTRY, Cluster, _children
from statechan.cluster.value import (
    Value,
    capture,
    dispose,
    quick_signature,
    rename,
    restore,
    rewind,
    signature,
)
from statechan.model import load_model
from statechan.observation import Observation
from statechan.states import IN_FLIGHT, ServiceUnitState, StorageType
from statechan.stores.metadata import NodeEvent, SessionEvent
from statechan.vacuity import FORCED, Unreached, demanded_flows, undeclared_flows, unreached_flows
from statechan.values import ServiceUnitStateData

ADMIN_KINDS = ("transfer", "split", "unload")
"""The admin operations a bound may allow (``Bounds.admin_kinds``), by their action kind."""


class Bounds(BaseModel):
    """How far the checker looks: the cluster's size and how many of each kind of event a run
    may have. Deliveries, notifications and tasks are never bounded (they are the protocol)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    brokers: int = Field(2, ge=1, le=6)
    bundles: int = Field(1, ge=1, le=8)
    lookups: int = Field(1, ge=0, description="client lookups in the whole run")
    admin: int = Field(1, ge=0, description="admin operations (see admin_kinds) in the whole run")
    admin_kinds: tuple[str, ...] = ("transfer", "split")
    crashes: int = Field(0, ge=0)
    restarts: int = Field(0, ge=0)
    shutdowns: int = Field(0, ge=0)
    session_losses: int = Field(0, ge=0)
    leader_changes: int = Field(0, ge=0)
    compactions: int = Field(0, ge=0)
    ticks: int = Field(2, ge=0, description="timer firings (monitor, clean-up, expiry) in the whole run")
    depth: int | None = Field(None, ge=1, description="longest run explored (None: no limit)")
    tombstone_delay_s: int = Field(
        3_600,
        ge=30,
        description="loadBalancerServiceUnitStateTombstoneDelayTimeInSeconds: shorter lets a few ticks reach "
        "the tombstones of Free and Deleted",
    )
    timely_delivery_ms: int | None = Field(
        1_000,
        ge=0,
        description="the bench's timing assumption: no timer fires more than this long after work became "
        "waiting for a running broker (None: timers race any backlog; see docs/findings.md)",
    )

    @field_validator("admin_kinds")
    @classmethod
    def _known_admin_kinds(cls, kinds: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [k for k in kinds if k not in ADMIN_KINDS]
        if unknown:
            raise ValueError(f"unknown {', '.join(unknown)}; choose from {', '.join(ADMIN_KINDS)}")
        return kinds

    def budget(self) -> dict[str, int]:
        return {
            "lookup": self.lookups,
            "admin": self.admin,
            "crash": self.crashes,
            "restart": self.restarts,
            "shutdown": self.shutdowns,
            "lose-session": self.session_losses,
            "resign": self.leader_changes,
            "compact": self.compactions,
            "tick": self.ticks,
        }

    def options(self) -> list[str]:
        """The ``statechan check`` options that give these bounds (those that differ from the defaults)."""
        default = Bounds()
        out: list[str] = []
        for name in type(self).model_fields:
            value = getattr(self, name)
            if value == getattr(default, name):
                continue
            if name == "admin_kinds":
                out += [bound_flag(name), ",".join(value)]
            elif name == "timely_delivery_ms" and value is None:
                out.append("--untimely")
            else:
                out += [bound_flag(name), str(value)]
        return out

    def describe(self) -> str:
        parts = [counted(self.brokers, "broker"), counted(self.bundles, "bundle"), counted(self.lookups, "lookup")]
        parts.append(f"{self.admin} admin ({'/'.join(self.admin_kinds)})")
        for name, value in (
            ("crash", self.crashes),
            ("restart", self.restarts),
            ("shutdown", self.shutdowns),
            ("session loss", self.session_losses),
            ("leader change", self.leader_changes),
            ("compaction", self.compactions),
            ("tick", self.ticks),
        ):
            if value:
                parts.append(counted(value, name))
        if self.depth is not None:
            parts.append(f"depth <= {self.depth}")
        if self.tombstone_delay_s != 3_600:
            parts.append(f"tombstones after {self.tombstone_delay_s} s")
        if self.timely_delivery_ms is None:
            parts.append("untimely delivery")
        return ", ".join(parts)


BOUND_FLAGS = {"timely_delivery_ms": "--timely-ms", "tombstone_delay_s": "--tombstone-delay"}
"""The ``statechan check`` options whose names are not their :class:`Bounds` field's."""


def bound_flag(field: str) -> str:
    """The ``statechan check`` option that sets the :class:`Bounds` field ``field``."""
    return BOUND_FLAGS.get(field, "--" + field.replace("_", "-"))


def counted(n: int, noun: str) -> str:
    """``1 crash``, ``2 crashes``, ``2 session losses``, ``1,200 bundles``."""
    if n == 1:
        return f"{n} {noun}"
    return f"{n:,} {noun}es" if noun.endswith(("sh", "ss")) else f"{n:,} {noun}s"


_BUDGETED: dict[type[Action], str] = {
    Lookup: "lookup",
    Crash: "crash",
    Restart: "restart",
    Shutdown: "shutdown",
    LoseSession: "lose-session",
    Resign: "resign",
    Compact: "compact",
    Tick: "tick",
}


def budget_kind(action: Action, bounds: Bounds) -> str | None:
    """Which budget ``action`` spends (``None``: unbounded); admin kinds outside the bounds -> ``"off"``."""
    return _budget_of(type(action), bounds)


def _budget_of(kind: type[Action], bounds: Bounds) -> str | None:
    """:func:`budget_kind` of every action of the type ``kind``."""
    if kind in (Transfer, Split, Unload):
        return "admin" if kind.kind in bounds.admin_kinds else "off"
    if kind is Wait:
        return "off"
    return _BUDGETED.get(kind)


def budget_left(budget: dict[str, int], spent: Counter[str]) -> bytes:
    """The budgets a state has left, as the suffix of its key: two states alike but for what they
    may still do are different states (merging them would drop the runs that spend the rest)."""
    left = tuple([budget[kind] - spent.get(kind, 0) for kind in budget])
    found = _LEFT.get(left)
    if found is None:
        found = _LEFT[left] = "|".join(map(str, left)).encode()
    return found


_LEFT: dict[tuple[int, ...], bytes] = {}
"""Key suffixes by the budgets left (a search meets few combinations)."""


# -- fingerprints --------------------------------------------------------------------------------
_BROKER = re.compile(r"broker-(\d+):8080")

Names = dict[str, str] | None
"""A renaming of broker ids (None: every broker keeps its name)."""


class FingerprintCollision(AssertionError):
    """Two different states hashed to one fingerprint: the search would have merged them."""


class Fingerprinter:
    """Fingerprints of states: the hash of the state's captured value (:mod:`statechan.cluster.value`),
    optionally the least over renamings of the broker ids.

    Not every renaming is tried: each broker gets a signature that no renaming changes (its own
    record with every broker id blanked out), and only the renamings that number the brokers in
    signature order are captured — every order among equal signatures. Renamed states have the
    same signatures, so they get the same candidates and the same least text."""

    def __init__(self, brokers: int, cap: int, symmetry: bool) -> None:
        self.cap = cap
        self.symmetry = symmetry and brokers > 1
        self._renamings: dict[tuple[str, ...], Names] = {}
        """The renaming that numbers the brokers in an order, by the order (a search meets few)."""

    def __call__(self, cluster: Cluster) -> bytes:
        return self.digest(self.canonical(cluster)[2])

    @staticmethod
    def digest(hashed: int) -> bytes:
        """A state's fingerprint from its canonical value's hash (renamed states get the same least
        hash): 64 bits. Two different states share one with a chance of about n²/2⁶⁵ among n (TLC's
        fingerprints are as wide); ``verify_fingerprints`` compares the values themselves."""
        return hashed.to_bytes(8, "little", signed=True)

    def text(self, cluster: Cluster) -> str:
        """The canonical value as text (for people; the fingerprint hashes the value itself)."""
        return repr(self.canonical(cluster)[0])

    def canonical(self, cluster: Cluster) -> tuple[Value, Value, int]:
        """The canonical value (of the renamings tried, the one with the least hash), the
        cluster's own (unrenamed) value, and the canonical value's hash (a tuple's hash is not
        kept: worked out once here): captured once, and renamed for each candidate."""
        own = capture(cluster, self.cap)
        if not self.symmetry:
            return own, own, hash(own)
        best: Value | None = None
        least = 0
        for names in self.candidates(cluster):
            value = own if names is None else rename(own, names)
            hashed = hash(value)
            if best is None or hashed < least:
                best, least = value, hashed
        assert best is not None
        return best, own, least

    def candidates(self, cluster: Cluster) -> list[Names]:
        """The renamings worth capturing: those that number the brokers in descending signature
        order (descending, as the first broker is usually the leader: the identity then is the
        one renaming, and the capture of the state is its canonical value). A cheap part of the
        signature orders most brokers; only brokers it ties get the full signature."""
        quick = {broker_id: quick_signature(broker) for broker_id, broker in cluster.brokers.items()}
        if len(set(quick.values())) == len(quick):
            # no two brokers tie (the common case): one renaming, in descending signature order
            order = tuple(sorted(quick, key=quick.__getitem__, reverse=True))
            if order not in self._renamings:
                names = {old: f"broker-{new}:8080" for new, old in enumerate(order, 1)}
                self._renamings[order] = None if all(old == new for old, new in names.items()) else names
            return [self._renamings[order]]
        runs: list[list[str]] = []
        for _, tied in itertools.groupby(sorted(quick, key=quick.__getitem__, reverse=True), key=quick.__getitem__):
            group = list(tied)
            if len(group) == 1:
                runs.append(group)
                continue
            full = {broker_id: signature(cluster, broker_id) for broker_id in group}
            ordered = sorted(group, key=full.__getitem__, reverse=True)
            runs.extend(list(run) for _, run in itertools.groupby(ordered, key=full.__getitem__))
        tables: list[Names] = []
        for orders in itertools.product(*(itertools.permutations(run) for run in runs)):
            sequence = [broker_id for order in orders for broker_id in order]
            names = {old: f"broker-{new}:8080" for new, old in enumerate(sequence, 1)}
            tables.append(None if all(old == new for old, new in names.items()) else names)
        return tables


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
    protocol = max(cap, 180_000 + channel.monitor_interval_s * 1000) + channel.in_flight_wait_ms
    config = SimConfig(channel=channel)
    return max(protocol, cleanup_bound_ms(config) + 1, in_flight_bound_ms(config) + 1)


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


def settled(cluster: Cluster, views_agree: bool = True, obs: Observation | None = None) -> bool:
    """Nothing waits to be delivered or run, no bundle is in flight in any running view, and the
    running brokers' views agree (unless ``views_agree`` is off, with ``views-converge`` left
    out): where every fair run must get back to. Read from ``obs`` (the cluster's observation
    now) when given."""
    obs = obs if obs is not None else cluster.observe()
    if not obs.quiescent:
        return False
    views = [view for broker_id, view in obs.views.items() if broker_id in obs.started]
    for view in views:
        if any(value.state in IN_FLIGHT for value in view.values()):
            return False
    return not views_agree or all(view == views[0] for view in views[1:])


def _differ(old: ServiceUnitStateData | None, new: ServiceUnitStateData | None) -> bool:
    """Whether two values a key held differ: not the very object, and not equal (told apart by
    version or state first, as most are: pydantic's ``__eq__`` compares every field)."""
    return old is not new and (
        old is None or new is None or old.version_id != new.version_id or old.state is not new.state or old != new
    )


_Pair = tuple[str, str, bool]
"""A transition a step took: (from, to, whether the record was forced: an override, which skips
the table, so the coverage counts it apart from the table's edges)."""


def _channel_transitions(
    before: Mapping[str, ServiceUnitStateData], after: Mapping[str, ServiceUnitStateData]
) -> list[_Pair]:
    """The transitions of the keys whose settled value a step changed (a deleted key is Init)."""
    if before is after:
        return []
    pairs = []
    for key in sorted(before.keys() | after.keys()):
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

Visitor = Callable[[Cluster, dict[str, int]], None]
"""Called once with each distinct state the search reaches and the budgets it has left, the first
time (Stateright's ``visitor``): how a test or a tool sees what was explored without a second
search."""


_UNREWOUND = frozenset({"tick", "crash", "restart", "shutdown", "lose-session", "resign"})
"""Budgets whose steps leave a copy :func:`~statechan.cluster.value.rewind` refuses."""

_Live = tuple[Cluster, "Observation | None"]
_Item = tuple[Value, int, Counter[str], "_Live | None"]
"""A state to expand: its value, its clock, the budgets spent, and the stepped cluster itself
(with its observation) when the expander kept it."""
_Queued = tuple[int, Value, int, Counter[str], "_Live | None"]
"""A queued state: its node id and its :data:`_Item`."""

SHELVED = 8
"""How many unused copies the expander keeps for later expansions to rewind (:meth:`_Expander.shelve`):
most states' siblings find one of their time there instead of a restore."""

GC_YOUNGEST = 50_000
"""Allocations between two runs of the cycle collector's youngest generation during a search."""

LIVE_KEPT = 4_096
"""How many stepped clusters the expander keeps for the states waiting in the queue: each kept one
is expanded without a restore (about a third of a state's time at the default bound); beyond
these, states wait as values only, so the frontier's memory stays that of its values."""


BEFORE_SEARCH = "model's own checks, before searching"
"""What stopped a search the model's structural checks or missing flows kept from starting."""


def _model_fails(result: CheckResult) -> bool:
    """The model's structural checks and the flows its operations need, before any search: a
    protocol that cannot do a flow fails naming it, whatever the bound (a search at a bound that
    issues no unload could not tell a model without one). Fills ``result`` and says whether it failed."""
    from statechan.graph import graph_problems

    model = load_model(result.config().variant.model)
    result.model_problems = graph_problems(model)
    result.never_reached = undeclared_flows(model)
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
) -> CheckResult:
    """Explore every run within ``bounds`` breadth first; stop at the first broken invariant.

    ``verify_fingerprints`` keeps every state's canonical value beside its 64-bit fingerprint and
    compares the values whenever a fingerprint is met again, raising :class:`FingerprintCollision`
    if two different states ever share one (the values take memory).

    ``workers`` > 1 expands the queued states in that many processes, a batch at a time, and
    merges their successors here in the order the states were queued: the same states, verdict
    and shortest counterexample as one worker. A ``visitor`` or ``verify_fingerprints`` needs the
    states here, so either keeps the search in this process.

    ``por`` (the default) expands a state through one delivery alone where that is shown sound
    (partial-order reduction, system topic without the syncer; see docs/checker.md): the same
    verdict, and every state without a pending delivery, in fewer states. With workers, each
    worker finds the ample candidates and the merge applies the cycle proviso (whether a
    successor is new to the whole search): the same states as one process.
    ``measure_por`` runs the search again without it, for the factor (``full_states``).

    ``vacuity`` (the default): a complete search that never walks a flow the bound demands
    fails with ``never_reached`` (:mod:`statechan.vacuity`); ``variant`` may be a
    :class:`Variant` itself (a mutant's model)."""
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
    expander = _expander(bounds, store, variant, symmetry, ids, keep_graph, verify_fingerprints, por)
    root = expander.root
    started = time.perf_counter()
    last_report = started

    if visitor is not None:
        visitor(root, bounds.budget())
    root_key, root_value = expander.key_of(root, Counter())
    ids_of: dict[bytes, int] = {root_key: 0}
    nodes: list[Node] = [
        Node(-1, None, (), 0, settled=settled(root, expander.agree), label=state_label(root) if keep_graph else "")
    ]
    if keep_graph:
        result.nodes = nodes
    queue: deque[_Queued] = deque([(0, root_value, root.clock.now_ms(), Counter(), None)])

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

    broken_at_start = check_invariants(root.observe(), ids)
    if broken_at_start:  # the initial state is a state within every bound (#21894 breaks it)
        fail(0, broken_at_start)
        return finish()

    # a search makes many small containers that live until their state is expanded: the cycle
    # collector's youngest generation, run every 700 allocations by default, took about 7 % of the
    # time (copies nobody keeps have their cycles broken, so reference counting frees them); the
    # search runs it less often, and puts the caller's setting back (workers inherit it)
    collector = gc.get_threshold()
    gc.set_threshold(max(collector[0], GC_YOUNGEST), *collector[1:])
    pool = _Pool(workers, bounds, store, variant, symmetry, ids, keep_graph, False, por) if workers > 1 else None
    try:

        def expanded() -> Iterator[tuple[_Queued, _Expansion]]:
            """Each queued state with its successors, in the order the states were queued."""
            while queue:
                if pool is None:
                    item = queue.popleft()
                    fresh = set[bytes]()
                    depth = nodes[item[0]].depth
                    yield item, expander.expand(item[1:], depth, ids_of.__contains__, visitor, fresh, depth_of=depth_of)
                    continue
                inflight: deque[_Queued] = deque()

                def jobs(inflight: deque[_Queued] = inflight) -> Iterator[tuple[_Item, int]]:
                    # popped as the pool takes them: the workers stay busy while the merge goes on
                    while queue:
                        job = queue.popleft()
                        inflight.append(job)
                        yield job[1:], nodes[job[0]].depth

                for expansion in pool.imap(jobs()):
                    item = inflight.popleft()
                    if por:
                        if _reduce_merged(expansion, nodes[item[0]].depth, ids_of, nodes):
                            expander.reduced += 1
                        if expansion.blockers:
                            expander.blockers.update(expansion.blockers)
                    yield item, expansion

        coverage = result.coverage
        for (node_id, *_), expansion in expanded():
            node = nodes[node_id]
            node.expanded = not expansion.beyond
            node.timers_cut = expansion.timers_cut
            if expansion.beyond:
                result.complete = False
                result.stopped = result.stopped or f"depth bound {bounds.depth}"
                continue
            for step in expansion.steps:
                if step.refused:
                    # listed as enabled but refused when taken: not a transition (counted, see notes)
                    result.refused += 1
                    continue
                result.transitions += 1
                for src, dst, forced in step.pairs:
                    counts = coverage.get((src, dst))
                    if counts is None:
                        counts = coverage[src, dst] = Counter()
                    counts[FORCED + step.action.kind if forced else step.action.kind] += 1
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
                        return finish()
                    assert step.value is not None
                    assert step.spent is not None
                    queue.append((known, step.value, step.now, step.spent, step.live))
                    continue
                node.successors.append((known, step.action, step.picks))
                if step.own_checks and step.broken:
                    # the answers a step gave are its own (not the state's): checked on every
                    # step that gives some, also one that leads back to a known state
                    fail(node_id, step.broken, (step.action, step.picks))
                    return finish()
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
        expander.close(item[-1] for item in queue)
        gc.set_threshold(*collector)
        if pool is not None:
            pool.terminate()
    finish()
    if result.violation is None and result.complete:
        _liveness(result, nodes)
    if vacuity and result.ok and result.complete:
        config = result.config()
        demanded = demanded_flows(bounds, config.storage)
        result.never_reached = unreached_flows(load_model(config.variant.model), result.coverage, demanded)
    if measure_symmetry and symmetry and result.complete and result.ok:
        plain = check(bounds, store, variant, False, max_states, max_seconds, max_memory_mb, invariants=ids, por=por)
        result.concrete_states = plain.states if plain.complete else 0
    if measure_por and por and result.complete and result.ok:
        full = check(
            bounds, store, variant, symmetry, max_states, max_seconds, max_memory_mb, invariants=ids, por=False
        )
        result.full_states = full.states if full.complete else 0
    return result


# -- expanding a state (one worker, or several) ------------------------------------------------------
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
    value: Value | None = None
    """The state's own value, where it was new to the expander (for the queue)."""
    now: int = 0
    spent: Counter[str] | None = None
    """The budgets spent, with ``value`` (a default Counter would cost every step one)."""
    settled: bool = False
    label: str = ""
    ample: bool = False
    """In a worker: a delivery that is an ample set if its successor passes the cycle proviso."""
    live: _Live | None = None
    """The stepped cluster itself, kept for expanding the state later (no restore then), while
    the expander keeps few enough of them; with its observation, unless the step gave answers
    (an observation holds the answers of the step that led to it: the state's own has none)."""


@dataclass
class _Expansion:
    steps: list[_Step]
    timers_cut: bool = False
    beyond: bool = False
    """The state is at the depth bound: not expanded."""
    blockers: Counter[str] | None = None
    """In a worker: why its deliveries could not be ample sets (the reduction's report)."""


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
        root: Cluster,
        bounds: Bounds,
        fingerprint: Fingerprinter,
        ids: list[str],
        keep_graph: bool,
        values: dict[bytes, Value] | None,
        por: bool = False,
    ) -> None:
        self.por = por
        """Partial-order reduction: expand a state through one delivery where that is sound."""
        self.reduced = 0
        """States expanded through one delivery alone."""
        self.blockers: Counter[str] = Counter()
        """Why a candidate delivery was not taken alone, by reason (for tuning and the docs)."""
        self.root = root
        self.bounds = bounds
        self.budget = bounds.budget()
        self.fingerprint = fingerprint
        self.ids = ids
        from statechan.invariants.catalogue import check, check_step, step_ids

        self._check, self._check_step = check, check_step
        """The catalogue's checks (imported here: the catalogue loads with the first search)."""
        self.agree = "views-converge" in ids
        self.steps = step_ids(ids)
        """The step invariants among ``ids`` (checked on every transition)."""
        self.keep_graph = keep_graph
        self.values = values
        """Every key's canonical value, when fingerprints are verified."""
        self.kept = 0
        """Stepped clusters handed out with their states (``_Step.live``) and not yet expanded."""
        self._left: dict[tuple[int, ...], _Left] = {}
        self._totals, self._zeros = tuple(self.budget.values()), (0,) * len(self.budget)
        self._kinds: dict[type[Action], str | None] = {}
        """Each action type's budget (:func:`budget_kind`), by type."""
        self.shelf: list[tuple[int, Cluster, Value]] = []
        """Copies expansions left unused, with their time and value, oldest first (see :meth:`shelve`)."""

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
                for t in (*_BUDGETED, Transfer, Split, Unload)
                if (kind := _budget_of(t, self.bounds)) in out | {"off"} and kind != "tick"
            )
            found = self._left[left] = _Left(
                dict(zip(self.budget, left, strict=True)), unlisted, out, budget_left(self.budget, spent)
            )
        return found

    def unlisted(self, spent: Counter[str]) -> frozenset[type[Action]]:
        """The kinds of action not worth listing from a state that has spent ``spent``: their
        budget is spent, or the bounds leave them out (ticks are listed: a spent tick budget
        marks the state's timers as cut)."""
        return self.left(spent).unlisted

    def key_of(self, cluster: Cluster, spent: Counter[str], left: bytes | None = None) -> tuple[bytes, Value]:
        """The state's key (its fingerprint and the budgets left: ``left``, when known), and its own
        (unrenamed) value."""
        value, own, hashed = self.fingerprint.canonical(cluster)
        left = left if left is not None else budget_left(self.budget, spent)
        key = self.fingerprint.digest(hashed) + left
        if self.values is not None and self.values.setdefault(key, value) != value:
            raise FingerprintCollision(f"two different states share the fingerprint {key.hex()}")
        return key, own

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
        frozen, at, spent, kept = item
        live, observed = kept if kept is not None else (None, None)
        bounds, budget = self.bounds, self.budget
        if live is not None:
            self.kept -= 1
        if bounds.depth is not None and depth >= bounds.depth:
            if live is not None:
                self.shelve((live, frozen))
            return _Expansion([], beyond=True)
        cluster = live if live is not None else restore(frozen, at, self.root)
        expansion = _Expansion([])
        taken: list[tuple[Action, str | None]] = []
        budgets = self.left(spent)
        kinds = self._kinds
        spare: Cluster | None = cluster
        """The expanded copy, until a successor takes it."""
        stale: tuple[Cluster, Value] | None = None
        """A successor's copy nothing keeps, with its value: rewinding it is cheaper than a restore."""
        for action in cluster.enabled_actions(budgets.unlisted):
            kind = kinds.get(type(action), "?")
            if kind == "?":
                kind = kinds[type(action)] = budget_kind(action, bounds)
            if kind == "off" or kind in budgets.out:
                if kind == "tick":
                    expansion.timers_cut = True
                continue
            taken.append((action, kind))
        # the steps a copy cannot be rewound from (they move the clock or start or stop a broker)
        # go last, so no sibling after them needs a restore; the order changes no state's
        # depth, only which of equally short runs is met first
        taken.sort(key=lambda pair: pair[1] in _UNREWOUND)
        ready: dict[int, _PorCandidate] = {}
        """The candidates that may be ample sets, by their action's identity (it is ``taken``'s)."""
        if self.por and (depth_of is not None or not exact):
            candidates = _por_candidates(cluster, taken, budget, spent, bounds, budgets.left)
            ready = {id(c.action): c for c in candidates if not c.reasons - {"tick-clock"}}
            for blocked in candidates:
                if id(blocked.action) not in ready:
                    self.blockers.update(blocked.reasons)
            # the candidates go first: the first whose step passes the checks is the ample set
            if ready:
                taken.sort(key=lambda pair: id(pair[0]) not in ready)
        # what each successor is compared with (the step invariants, the edges it took): read
        # now, as the expanded copy is stepped first
        before = observed if observed is not None else cluster.observe()
        for action, kind in taken:
            reader = action.broker if isinstance(action, Deliver) else None
            candidate = ready.get(id(action))
            # every sequence of placement picks the step can make, in lexicographic order: a plan
            # fixes a prefix, the choices after it take candidate 0, and each of those choices'
            # other candidates is a plan of its own (a clean-up may place several orphans)
            plans: list[list[int]] = [[]]
            while plans:
                plan = plans.pop()
                # the first successor takes the expanded copy itself; the others take a copy
                # rewound, or else a restore
                child = None
                if spare is not None:
                    child, spare = spare, None
                else:
                    # a sibling's copy, else one an earlier expansion left at this time: rewound to
                    # this state (a sibling's that moved the clock may fit a later state: shelved)
                    used, stale = stale, None
                    if used is not None and not rewind(used[0], frozen, at, used[1]):
                        self.shelve(used)
                        used = None
                    if used is None:
                        used = self.unshelve(at)
                        if used is not None and not rewind(used[0], frozen, at, used[1]):
                            dispose(used[0])
                            used = None
                    if used is not None:
                        child = used[0]
                if child is None:
                    child = restore(frozen, at, self.root)
                child.plan = deque(plan)
                trial = _por_before(child, candidate.action.broker) if candidate is not None else None
                try:
                    child.step(action)
                except ValueError:
                    expansion.steps.append(_Step(action, refused=True))
                    break
                made = list(child.picks or ())
                for position in range(len(plan), len(made)):
                    plans.extend([*made[:position], v] for v in range(child.widths[position] - 1, 0, -1))
                step = _Step(action, tuple(made))
                child.picks = []
                child.trace.clear()
                child.history.clear()
                after = child.observe()
                step.pairs = _channel_transitions(before.channel, after.channel)
                if reader is not None and reader in after.views:
                    # what the delivering broker's view took: after a compaction, edges no writer takes
                    step.pairs += _view_transitions(before.views.get(reader, {}), after.views[reader])
                # a step that spends no budget shares its parent's record of what was spent (never
                # changed in place); the key's suffix is worked out once per kind a combination spends
                child_spent = spent
                if kind is not None:
                    child_spent = spent.copy()
                    child_spent[kind] += 1
                step.key, own = self.key_of(child, child_spent, budgets.after(kind, child_spent, budget))
                step.own_checks = bool(child.answers)
                if self.steps:
                    # a step invariant is the step's own (TLA+'s [A]_v): checked on every step,
                    # also one that leads back to a known state
                    step.broken = check_step(before, after, self.steps)
                    step.own_checks = step.own_checks or bool(step.broken)
                new = not known(step.key) and step.key not in fresh
                ample = False
                if candidate is not None and trial is not None:
                    why = _por_after(trial, child, before, after, candidate, budget, spent, bounds, budgets.left)
                    if made:
                        why.append("placement")  # one pick of the delivery is not all of it
                    if not exact:
                        # a worker cannot tell whether the successor is new to the whole search:
                        # the merge applies the proviso (:func:`_reduce_merged`), in this order
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
                    step.settled = settled(child, self.agree, after)
                    step.label = state_label(child) if self.keep_graph else ""
                    if visitor is not None:
                        visitor(child, {kind: budget[kind] - child_spent[kind] for kind in budget})
                    step.broken += check_invariants(after, self.ids)
                    child.answers.clear()
                    step.value = own
                    step.now, step.spent = child.clock.now_ms(), child_spent
                    if exact and self.kept < LIVE_KEPT:
                        # nothing steps this cluster again before it is expanded: keep it, and
                        # expanding the state needs no restore. A sibling still to come then takes
                        # a restore instead of a rewind of it, which costs less than the restore
                        # it saves later (measured: docs/benchmarks.md)
                        step.live = (child, None if after.answers else after)
                        self.kept += 1
                elif child.answers:
                    # the answers a step gave are its own (not the state's): checked on every
                    # step that gives some, also one that leads back to a known state
                    step.broken += check_invariants(after, self.ids)
                if step.live is None:
                    if stale is None:
                        stale = (child, own)  # rewound for the next successor, if one needs a copy
                    else:
                        self.shelve((child, own))
                expansion.steps.append(step)
                if exact and step.broken:
                    return expansion
                if ample:
                    # the ample set is this delivery alone: the candidates tried before it are not in it
                    for other in expansion.steps[:-1]:
                        if other.live is not None:
                            dispose(other.live[0])
                            self.kept -= 1
                    expansion.steps = [step]
                    self.reduced += 1
                    if stale is not None:
                        self.shelve(stale)
                    return expansion
        if stale is not None:
            self.shelve(stale)
        if spare is not None:
            self.shelve((spare, frozen))  # nothing was enabled: the expanded copy itself is left
        return expansion

    def close(self, kept: Iterable[_Live | None] = ()) -> None:
        """Free the copies the search no longer needs (shelved, or ``kept`` for states it will not
        expand) at once: left to the cycle collector, the first collection after the search (its
        threshold back to the caller's) would find them."""
        for _, cluster, _ in self.shelf:
            dispose(cluster)
        self.shelf.clear()
        for live in kept:
            if live is not None:
                dispose(live[0])

    def shelve(self, copy: tuple[Cluster, Value]) -> None:
        """Keep a copy nothing needs (with its value) for a later expansion to rewind, in place of
        a restore: rewinding from another state of the same time and brokers costs less. Only on
        the system topic: on the metadata store an observation's ``born`` reads the nodes'
        creation zxids, which the value leaves out, so a copy with another state's history could
        show a lifetime beginning where the parent's observation saw none (within one expansion
        every copy is the parent's own cluster or a restore, whose zxids are 0: never later)."""
        if copy[0].storage is not StorageType.SystemTopic:
            dispose(copy[0])
            return
        if len(self.shelf) >= SHELVED:
            dispose(self.shelf.pop(0)[1])
        self.shelf.append((copy[0].clock.now_ms(), *copy))

    def unshelve(self, now: int) -> tuple[Cluster, Value] | None:
        """The copy shelved last at the time ``now`` (:func:`rewind` takes no other to a state then)."""
        shelf = self.shelf
        for index in range(len(shelf) - 1, -1, -1):
            if shelf[index][0] == now:
                _, cluster, value = shelf.pop(index)
                return cluster, value
        return None


_WORKER: list[_Expander] = []
"""A worker process's expander (set when the pool starts it)."""


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
    root = Cluster(config, picks=[])
    root.trace.clear()
    fingerprint = Fingerprinter(bounds.brokers, fingerprint_cap(config.channel), symmetry)
    return _Expander(root, bounds, fingerprint, ids, keep_graph, {} if verify else None, por)


def _start_worker(*args: Any) -> None:
    """A worker's start: its expander, built from the arguments of the search's own (:func:`_expander`)."""
    _WORKER[:] = [_expander(*args)]


_PRODUCED: set[bytes] = set()
"""The keys this worker has produced. The first time the search meets a key, in the order states
were queued, it is new to the worker that meets it (a worker takes its states in that order), so a
worker need not capture or check a state it produced before: the search knows it by then."""


def _expand_in_worker(job: tuple[_Item, int]) -> _Expansion:
    item, depth = job
    expander = _WORKER[0]
    if not expander.por:
        return expander.expand(item, depth, _PRODUCED.__contains__, None, _PRODUCED, exact=False)
    # with the reduction, the merge may drop any successor but the ample one, so a state this
    # worker produced before may still be new to the search: every successor comes with its value
    expander.blockers = Counter()
    expansion = expander.expand(item, depth, _NOTHING.__contains__, None, set(), exact=False)
    expansion.blockers = expander.blockers
    return expansion


_NOTHING: frozenset[bytes] = frozenset()


def _reduce_merged(expansion: _Expansion, depth: int, ids_of: dict[bytes, int], nodes: list[Node]) -> bool:
    """Apply the reduction to a worker's expansion where it is merged, as one process would have
    while expanding: the first delivery the worker found ample whose successor is new to the
    search (or one level deeper) is the state's only successor, unless a step before it ends the
    search. True if the expansion was reduced."""
    fresh: set[bytes] = set()
    for step in expansion.steps:
        if step.refused:
            continue
        new = step.key not in ids_of and step.key not in fresh
        if step.broken and (new or step.own_checks):
            return False  # the search stops at this step (one process stops before reducing)
        if step.ample:
            known = ids_of.get(step.key)
            if new or (known is not None and nodes[known].depth == depth + 1):
                expansion.steps = [step]
                return True
            if expansion.blockers is not None:
                expansion.blockers["proviso"] += 1
        if new:
            fresh.add(step.key)
    return False


class _Pool:
    """Worker processes that expand states (forked: each builds the same root cluster)."""

    def __init__(self, workers: int, *args: object) -> None:
        import multiprocessing

        self.pool = multiprocessing.get_context("fork").Pool(workers, initializer=_start_worker, initargs=args)

    def imap(self, jobs: Iterable[tuple[Any, int]]) -> Iterable[_Expansion]:
        return self.pool.imap(_expand_in_worker, jobs, chunksize=8)

    def terminate(self) -> None:
        self.pool.terminate()
        self.pool.join()


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
    # walk on from there: every successor is stuck too; the first repeat closes the loop
    seen = {first: 0}
    tail_actions: list[Action] = []
    tail_picks: list[int] = []
    current = first
    start = -1
    while nodes[current].successors:
        nxt, action, edge_picks = nodes[current].successors[0]
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
        f"{len(stuck):,} state(s) cannot reach a settled state (nothing waiting, nothing in flight, "
        f"views agree); the shortest {ending}"
    )
    result.path = path + tail_actions
    result.picks = picks + tail_picks
    result.lasso = len(path) + start if start >= 0 else -1


# -- a picture of a small explored graph ---------------------------------------------------------
_LETTER = {"Init": "I", "Free": "F", "Owned": "O", "Assigning": "A", "Releasing": "R", "Splitting": "S", "Deleted": "D"}


def state_label(cluster: Cluster) -> str:
    """Each running broker's view of each key, short: ``b1: O2 | b2: A2`` (state letter, then the
    destination broker's number), ``-`` where a view holds nothing, ``x`` for a broker down."""
    keys = sorted({key for broker in cluster.brokers.values() for key in broker.view.data()})
    parts = []
    for name, broker in sorted(cluster.brokers.items()):
        number = _BROKER.sub(lambda m: m.group(1), name)
        if not broker.alive:
            parts.append(f"b{number}: x")
            continue
        data = broker.view.data()
        cells = []
        for key in keys:
            value = data.get(key)
            if value is None:
                cells.append("-")
            else:
                dst = _BROKER.sub(lambda m: m.group(1), value.dst_broker or "")
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


def _por_candidates(
    cluster: Cluster,
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
    brokers = list(cluster.brokers.values())
    if any(b.alive and not b.client.connected and not b.client.closed for b in brokers):
        common.add("reconnect")
    now = cluster.clock.now_ms()
    work_since = cluster._work_since
    dead = [b.id for b in brokers if not b.alive]
    restart_possible = left["restart"] > 0 and bool(dead)
    # Ticks that may fire before the delivery: the timers due within the timely-delivery bound of
    # when the backlog began (it cannot end while the delivery waits), whichever broker's fires first
    # among those due together (Tick(b) or Tick()), and those a notification or a restart may schedule
    # at once (a new leader's monitor, a clean-up). Such a tick commutes with the delivery if its timer
    # is another broker's and the delivering broker cannot come to lead (its monitor and clean-up read
    # and flush its view); and, unless the delivery leaves a task behind (so it never ends the
    # backlog), if no tick moves the clock past when the backlog began.
    tick_own: set[str] = set()
    tick_leader: set[str] = set()
    clock_risk = False
    latest = now
    timely = bounds.timely_delivery_ms
    if left["tick"] > 0 and timely is not None:
        began = work_since if work_since is not None else now
        slack = began + timely
        window = [t for t in cluster.live_timers(ordered=False) if t.due <= slack]
        leader_events: set[str] = set()
        deletions = False
        for b in brokers:
            if not b.alive:
                continue
            for event in b.client._queue:
                if isinstance(event, SessionEvent) or event.path == LEADER:
                    leader_events.add(b.id)
                elif event.path.startswith(REGISTRY + "/") and event.event is NodeEvent.Deleted:
                    deletions = True
        leader = cluster.leader()
        restart_leads = restart_possible and (leader is None or leader in dead)
        if window or (slack >= now and (leader_events or deletions or restart_leads)):
            latest = max(now, slack)
            unregistered = any(not cluster.registered(b.id) for b in brokers)
            clock_risk = (
                began != now
                or any(t.due != now for t in window)
                or any(t.kind in ("cleanup", "cleanup-recheck", "session-expiry", "shutdown-complete") for t in window)
                or deletions
                or (unregistered and bool(window or leader_events or restart_leads))
            )
            expiring = any(t.kind == "session-expiry" for t in window)
            for b in brokers:
                if any(t.broker == b.id and t.kind != "session-expiry" for t in window):
                    tick_own.add(b.id)
                if leader is None or leader == b.id or b.leader_view == b.id or b.id in leader_events or expiring:
                    tick_leader.add(b.id)
    if work_since is not None and work_since != now and (left["lookup"] > 0 or left["admin"] > 0 or restart_possible):
        common.add("work-since")  # the delivery may end the backlog, a lookup start a new one later
    out: list[_PorCandidate] = []
    for action in deliveries:
        broker = cluster.brokers[action.broker]
        reasons = set(common)
        if action.broker in tick_own:
            reasons.add("tick-own-timer")
        if action.broker in tick_leader:
            reasons.add("tick-leader")
        if clock_risk:
            reasons.add("tick-clock")  # dropped if the delivery leaves a task (see _por_after)
        if any(isinstance(e, SessionEvent) for e in broker.client._queue):
            reasons.add("session-event")  # a re-established session flushes the view
        out.append(_PorCandidate(action, reasons, latest))
    return out


@dataclass
class _PorBefore:
    """What the delivering broker holds before the delivery (read on the copy it steps)."""

    tasks: list[Any]
    handled: int
    """Records its handler has taken: a record the view accepts calls it, even if the value held stays."""


def _por_before(cluster: Cluster, broker_id: str) -> _PorBefore:
    broker = cluster.brokers[broker_id]
    return _PorBefore(list(broker.tasks), sum(broker.handled.values()))


def _por_after(
    trial: _PorBefore,
    child: Cluster,
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
    broker_id = candidate.action.broker
    broker = child.brokers[broker_id]
    why: list[str] = []
    tasks = list(broker.tasks)
    leaves_task = len(tasks) > len(trial.tasks) or tasks[: len(trial.tasks)] != trial.tasks
    if "tick-clock" in candidate.reasons and not leaves_task:
        why.append("tick-clock")  # it may end the backlog, and a tick after it start a new one later
    if after.answers:
        why.append("answers")  # a lookup answer is a step the invariants check
    if before.pending_unloads.get(broker_id) != after.pending_unloads.get(broker_id):
        why.append("unload")  # an unload reported done: unload-completion-matches judges this very step
    served, serving = before.serving.get(broker_id, set()), after.serving.get(broker_id, set())
    if not serving >= served:
        # single-owner reads the owned sets: a claim given up could end a breach the search has not
        # yet seen (a claim taken cannot: a breach stays a breach)
        why.append("owned-set")
    elif serving != served:
        # a claim taken changes the broker's load, which placement reads when the last report is 30 s old
        loads_at = child._loads_at
        if loads_at < 0 or candidate.latest - loads_at >= child.LOAD_REPORT_INTERVAL_MS:
            why.append("loads")
    old_view, new_view = before.views.get(broker_id, {}), after.views.get(broker_id, {})
    changed = {k for k in old_view.keys() | new_view.keys() if _differ(old_view.get(k), new_view.get(k))}
    for key in changed:
        old, new = old_view.get(key), new_view.get(key)
        if old is not None and new is not None and new.version_id <= old.version_id:
            # a view's step to a lower or equal version is judged by the step invariants against the
            # channel's settled value, which writes before the delivery could change: only a step up
            # in version is judged alike wherever the delivery is taken
            why.append("step-version")
            break
    if changed and candidate.latest > child.clock.now_ms():
        # ticks may move the clock before the delivery: the entry it replaces must not come due meanwhile
        # (orphan-cleaned and in-flight-completes read the time; the delivery could hide a breach)
        from statechan.invariants.catalogue import cleanup_bound_ms, in_flight_bound_ms

        config, model = child.config, child.model
        since = child.leader_since if child.leader_since is not None else child.clock.now_ms()
        for key in changed:
            was = old_view.get(key)
            if was is None:
                continue
            if was.state in model.in_flight and candidate.latest - max(was.timestamp, since) > in_flight_bound_ms(
                config
            ):
                why.append("deadline")
            if (
                was.state in model.active
                and child.unregistered_at
                and candidate.latest - since > cleanup_bound_ms(config) - 1
            ):
                why.append("deadline")
    accepted = sum(broker.handled.values()) > trial.handled
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
        for task in trial.tasks:
            # a split reads its parent and children in the view, an assignment its bundle
            reads = {task.key} if task.kind in ("assign", "split") else set()
            if task.kind == "split" and task.data is not None:
                reads |= {c.key for c in _children(task.key, task.data)}
            if reads & changed:
                why.append("task-reads-view")
                break
    return why
