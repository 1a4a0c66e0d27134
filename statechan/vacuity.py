"""Vacuity guards: what a bound should make happen, and whether it happened.

A protocol in which nothing happens is safe and live vacuously: no invariant can break where no
bundle is ever assigned, and every state settles when nothing is ever in flight. TLC users guard
against this with coverage, Stateright with ``sometimes`` properties. Here a model's declared
*flows* (assign, transfer, unload, split, tombstone, compaction-cut, cleanup) are the ``sometimes``
properties: a flow is *demanded* at a bound when the bound's events are enough to start and
finish it, and *reached* when the search walked every edge of one of its paths. A complete search
that leaves a demanded flow unreached fails, naming the flow and the edges it never took.

The second guard is over a battery of bounds (``statechan mutate``, the tests): every edge the
model declares is taken at one of them, or the model says why it cannot be (``unreached``); and
every transition taken is one the model declares (a tombstone is taken whatever the table says).
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pydantic

from statechan.model import ProtocolModel
from statechan.resolver import offer
from statechan.states import StorageType
from statechan.values import ServiceUnitStateData

if TYPE_CHECKING:
    from statechan.bounds import Bounds

Edge = tuple[str, str]
Coverage = Mapping[Edge, Counter[str]]
"""How often each edge was taken, by what took it (an action kind, or a record); a forced record's
count is under ``FORCED`` and that name: it took an override, which skips the table, so it says
nothing about the table's edge of the same two states."""

FORCED = "forced "


def demanded_flows(bounds: Bounds, storage: StorageType) -> dict[str, str]:
    """The flows a complete search within ``bounds`` must walk, each with the events that make it
    possible. Conservative: a flow is demanded only where every run that starts it can finish it
    within the bound (no depth bound; the tombstone of a Free, which waits an hour, is not)."""
    if bounds.depth is not None or bounds.lookups < 1:
        return {}
    demanded = {"assign": f"{bounds.lookups} lookup(s)"}
    kinds = set(bounds.admin_kinds) if bounds.admin >= 1 else set()
    if "transfer" in kinds and bounds.brokers >= 2:
        demanded["transfer"] = "a lookup, an admin transfer and two brokers"
    if "split" in kinds:
        demanded["split"] = "a lookup and an admin split"
        demanded["tombstone"] = "a split (its parent's Deleted is tombstoned at once)"
    if "unload" in kinds:
        demanded["unload"] = "a lookup and an admin unload"
    if storage is StorageType.SystemTopic and bounds.compactions >= 1:
        demanded["compaction-cut"] = "a lookup and a compaction (a reader starts from the compacted topic)"
    if (bounds.crashes or bounds.shutdowns) and bounds.brokers >= 2 and bounds.ticks >= 3:
        demanded["cleanup"] = "a lookup, a crash or shutdown, a second broker and three ticks (the clean-up delay)"
    return demanded


@dataclass(frozen=True)
class Unreached:
    """A demanded flow no path of which the search walked."""

    flow: str
    why: str
    """The events of the bound (or of the run) that should have made it happen."""
    missing: tuple[Edge, ...]
    """The edges never taken on the flow's path that came closest (none: the model declares no
    such flow)."""

    def __str__(self) -> str:
        if not self.missing:
            return f"never reached: flow {self.flow} (demanded by {self.why}); the model declares no such flow"
        edges = ", ".join(f"{a} -> {b}" for a, b in self.missing)
        return f"never reached: flow {self.flow} (demanded by {self.why}); never taken: {edges}"


def required_edges(path: tuple[str, ...], initial: str) -> list[Edge]:
    """The edges that walk ``path``. A last edge into the initial state is a tombstone, the
    ``tombstone`` flow's own business: a path of more than one edge does not need it (an unloaded
    bundle's Free is tombstoned only after the tombstone delay)."""
    edges = list(itertools.pairwise(path))
    if len(edges) > 1 and edges[-1][1] == initial:
        edges.pop()
    return edges


def _taken(coverages: Iterable[Coverage], forced: bool) -> set[Edge]:
    """The edges some coverage counted at least once by a forced record (``forced``: the
    overrides' business) or by an unforced one (the table's)."""
    return {
        edge
        for coverage in coverages
        for edge, counts in coverage.items()
        if any(n for by, n in counts.items() if by.startswith(FORCED) is forced)
    }


def _table(model: ProtocolModel, storage: StorageType) -> set[Edge]:
    """The edges of ``storage``'s table, by state name."""
    return {(a.name, b.name) for a, b in model.edges(storage)}


def _overrides(model: ProtocolModel) -> set[Edge]:
    """The overrides' edges, by state name (forced records: they skip the table)."""
    return {(o.src, o.dst) for o in model.spec.overrides}


def unreached_flows(model: ProtocolModel, coverage: Coverage, demanded: Mapping[str, str]) -> list[Unreached]:
    """The demanded flows none of whose paths the coverage walked. A demanded flow the model does
    not declare is reported too: the bound asks for it, and the protocol has no way to do it."""
    taken = {forced: _taken([coverage], forced) for forced in (False, True)}
    found = []
    declared = {flow.name: flow for flow in model.spec.flows}
    for name, why in demanded.items():
        flow = declared.get(name)
        if flow is None:
            found.append(Unreached(name, why, ()))
            continue
        gaps: list[Sequence[Edge]] = [
            [e for e in required_edges(p, model.spec.initial) if e not in taken[flow.forced]] for p in flow.paths
        ]
        if all(gaps):
            closest = min(gaps, key=len)
            found.append(Unreached(name, why, tuple(closest)))
    return found


def untaken_edges(model: ProtocolModel, storage: StorageType, coverages: Iterable[Coverage]) -> list[Edge]:
    """The edges ``model`` declares for ``storage`` that none of ``coverages`` took and the model
    does not explain (``unreached`` on the edge): a table edge must be taken by an unforced record,
    an override by a forced one (a forced record skips the table, so it cannot show that the
    table needs an edge)."""
    coverages = list(coverages)
    explained = model.unreached(storage)
    untaken = (_table(model, storage) - _taken(coverages, False)) | (_overrides(model) - _taken(coverages, True))
    return sorted(edge for edge in untaken if edge not in explained)


def undeclared_edges(model: ProtocolModel, storage: StorageType, coverages: Iterable[Coverage]) -> list[Edge]:
    """The transitions ``coverages`` took that ``model`` does not declare: an unforced record's
    edge not in ``storage``'s table, a forced record's not among the overrides; the model is meant
    to say everything the protocol does. On the system topic a
    tombstone (an edge into the initial state) is accepted whatever the table says, so it is judged
    by the declaration alone. On the metadata store no edge out of or into the initial state is
    judged: a key's first write skips the table (it must be version 1), and a tombstone is the
    node's deletion, which no table sees."""
    coverages = list(coverages)
    store = storage is StorageType.MetadataStore
    undeclared = (_taken(coverages, False) - _table(model, storage)) | (_taken(coverages, True) - _overrides(model))
    return sorted(edge for edge in undeclared if not (store and model.spec.initial in edge))


OPERATION_FLOWS = {
    "assign": "lookups (an unassigned bundle is assigned)",
    "transfer": "admin transfers",
    "unload": "admin unloads",
    "split": "admin splits",
}
"""The flows every operation the checker and the simulator can issue needs, whatever a bound's
budgets: a protocol model without one of them cannot finish what its clients and operators ask."""


def undeclared_flows(model: ProtocolModel) -> list[Unreached]:
    """The operations' flows ``model`` declares no path for: a protocol that can never do them
    (a model file without the unload flow can unload no bundle), named before any search."""
    declared = {flow.name for flow in model.spec.flows if flow.paths}
    return [Unreached(flow, why, ()) for flow, why in OPERATION_FLOWS.items() if flow not in declared]


EVENTS_DEMANDING = {"transfer": 5, "unload": 5, "split": 3}
"""How many admin operations of a kind a simulated run must issue before the flow is demanded of
it: one may be refused for a good reason (the bundle was not Owned, the broker not the owner)."""


def demanded_by_events(events: Mapping[str, int], brokers: int, storage: StorageType) -> dict[str, str]:
    """The flows a simulated run must walk, given how many of each action it took (a run's random
    workload may not start a flow at all, so a run is asked only for what it started)."""
    del storage  # the same flows on both stores (compaction-cut needs a reader started after a compaction)
    demanded: dict[str, str] = {}
    if events.get("lookup", 0) >= 1:
        demanded["assign"] = f"{events['lookup']:,} lookup(s)"
    for flow, least in EVENTS_DEMANDING.items():
        n = events.get(flow, 0)
        if n >= least and (flow != "transfer" or brokers >= 2):
            demanded[flow] = f"{n:,} admin {flow}(s)"
    if "split" in demanded:
        demanded["tombstone"] = "the splits (a parent's Deleted is tombstoned at once)"
    return demanded


def trace_coverage(trace: Iterable[Mapping[str, object]], model: ProtocolModel, storage: StorageType) -> Coverage:
    """The transitions a recorded run's channel records took, in the channel's order, as every
    reader folds them (the resolver of ``model`` for ``storage``): an accepted record of a key moves
    it from what the key held (Init: nothing) to its own state. A record whose value cannot be
    read is left out (the auditor reports those)."""
    rules = model.rules(storage)
    initial = model.spec.initial
    held: dict[str, ServiceUnitStateData | None] = {}
    coverage: dict[Edge, Counter[str]] = {}
    for record in trace:
        if record.get("kind") != "channel":
            continue
        key, raw = str(record.get("key")), record.get("value")
        try:
            value = None if raw is None else ServiceUnitStateData.model_validate(raw)
        except pydantic.ValidationError:
            continue
        before = held.get(key)
        after, verdict = offer(rules, before, value)
        if verdict.accepted:
            edge = (initial if before is None else before.state.name, initial if value is None else value.state.name)
            by = FORCED + "record" if value is not None and value.force else "record"
            coverage.setdefault(edge, Counter())[by] += 1
            held[key] = after
    return coverage
