"""The invariant catalogue: each invariant written once, as a pure function, with its id, its
statement and the Pulsar issues it guards against.

Two kinds. *Cluster* invariants take an :class:`~statechan.cluster.Observation` (what the
simulator shows at one step); ``when`` says when they apply: ``always`` after every step,
``quiescent`` once no delivery, notification or task is waiting. *History* invariants take one
bundle's :class:`KeyHistory` (its channel records in log order and what each broker's view took),
which a simulated run and a captured trace both give. The Hypothesis bench, the model checker,
the long simulation tests and the trace auditor all call these functions; none restates them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from statechan.cluster.config import MAX_CLEAN_UP_DELAY_TIME_IN_SECS
from statechan.cluster.sim import Observation
from statechan.keys import BadKeyError, Bundle, parse_key
from statechan.model import DEFAULT_MODEL, ProtocolModel, load_model
from statechan.resolver import decide, rules_for
from statechan.states import ServiceUnitState, StorageType
from statechan.values import ServiceUnitStateData, brief

S = ServiceUnitState


def _model(obs: Observation) -> ProtocolModel:
    """The protocol model the observed cluster runs (its active and in-flight states)."""
    return load_model(obs.config.variant.model)


@dataclass(frozen=True)
class Violation:
    """One breach of an invariant, with what shows it."""

    invariant: str
    detail: str
    key: str | None = None

    def __str__(self) -> str:
        where = f" [{self.key}]" if self.key else ""
        return f"{self.invariant}{where}: {self.detail}"


@dataclass(frozen=True)
class HistoryRecord:
    """One record of a bundle's history: on the channel (``observer`` None) or taken by a view."""

    offset: int
    time: int
    value: ServiceUnitStateData | None
    """``None`` is a tombstone (the key deleted)."""
    observer: str | None = None
    accepted: bool = True
    """For a view record: whether the observer's view took it (channel records: always True)."""


@dataclass(frozen=True)
class KeyHistory:
    """Everything recorded about one bundle key, in order."""

    key: str
    channel: tuple[HistoryRecord, ...]
    views: Mapping[str, tuple[HistoryRecord, ...]] = field(default_factory=dict)
    storage: StorageType = StorageType.SystemTopic
    model: str = DEFAULT_MODEL

    @functools.cached_property
    def settled(self) -> tuple[HistoryRecord, ...]:
        """The channel records that stood: on a system topic, those a reader of the whole log
        accepts (the resolver on read); on a metadata store, every committed write."""
        if self.storage is StorageType.MetadataStore:
            return self.channel
        rules = rules_for(self.storage, self.model)
        held: ServiceUnitStateData | None = None
        kept = []
        for record in self.channel:
            if decide(rules, held, record.value).accepted:
                held = record.value
                kept.append(record)
        return tuple(kept)


ClusterCheck = Callable[[Observation], list[Violation]]
HistoryCheck = Callable[[KeyHistory], list[Violation]]


@dataclass(frozen=True)
class Invariant:
    id: str
    statement: str
    guards: tuple[str, ...]
    when: Literal["always", "quiescent", "history"]
    """``always``/``quiescent``: a cluster invariant checked then; ``history``: over a bundle's history."""
    cluster_check: ClusterCheck | None = None
    history_check: HistoryCheck | None = None
    default: bool = True
    """Checked unless named otherwise; False for a documented hazard of the current protocol."""

    @property
    def kind(self) -> str:
        return "history" if self.history_check is not None else "cluster"


CATALOGUE: dict[str, Invariant] = {}


def _register(inv: Invariant) -> None:
    if inv.id in CATALOGUE:
        raise ValueError(f"invariant {inv.id!r} is declared twice")
    CATALOGUE[inv.id] = inv


def invariant(
    id: str,
    statement: str,
    guards: Iterable[str],
    when: Literal["always", "quiescent"] = "always",
    default: bool = True,
) -> Callable[[ClusterCheck], ClusterCheck]:
    """Declare a cluster invariant."""

    def register(check: ClusterCheck) -> ClusterCheck:
        _register(Invariant(id, statement, tuple(guards), when, cluster_check=check, default=default))
        return check

    return register


def history_invariant(
    id: str, statement: str, guards: Iterable[str], default: bool = True
) -> Callable[[HistoryCheck], HistoryCheck]:
    """Declare an invariant over one bundle's history."""

    def register(check: HistoryCheck) -> HistoryCheck:
        _register(Invariant(id, statement, tuple(guards), "history", history_check=check, default=default))
        return check

    return register


def _bundle(key: str) -> Bundle | None:
    try:
        return parse_key(key)
    except BadKeyError:
        return None


def cleanup_bound_ms(obs: Observation) -> int:
    """How long a dead broker may keep a bundle: the jittery clean-up delay, a monitor period,
    the in-flight wait and a session timeout (for a leader that died too), in ms."""
    cfg = obs.config.channel
    return (
        (MAX_CLEAN_UP_DELAY_TIME_IN_SECS + 2 * cfg.monitor_interval_s) * 1000
        + cfg.in_flight_wait_ms
        + cfg.session_timeout_ms
    )


@invariant(
    "single-owner",
    "No two registered brokers believe they own a bundle, or bundles with overlapping hash ranges, at the same step.",
    ["#24478", "#26197", "#24901", "#19546"],
)
def single_owner(obs: Observation) -> list[Violation]:
    # A broker out of the registry gets no new clients and is fenced by the new owner's ledger
    # (not modelled); it must not be registered again before its view has caught up.
    claims: list[tuple[str, int, int, str, str]] = []
    for broker, keys in sorted(obs.serving.items()):
        if broker not in obs.registered:
            continue
        for key in keys:
            bundle = _bundle(key)
            if bundle is not None:
                claims.append((bundle.namespace, bundle.lower, bundle.upper, key, broker))
    claims.sort()
    found = []
    for i, (namespace, _lower, upper, key, broker) in enumerate(claims):
        for other_ns, other_lower, _, other_key, other_broker in claims[i + 1 :]:
            if other_ns != namespace or other_lower >= upper:
                break
            if other_broker != broker:
                what = "the same bundle" if key == other_key else f"overlapping {other_key}"
                found.append(Violation("single-owner", f"{broker} and {other_broker} both own {what}", key))
    return found


@invariant(
    "views-converge",
    "Once nothing is waiting to be delivered, every running broker's view is the same.",
    ["#20110", "#19546", "#24186", "#24478"],
    when="quiescent",
)
def views_converge(obs: Observation) -> list[Violation]:
    brokers = sorted(b for b in obs.views if b in obs.started and b in obs.connected)
    if len(brokers) < 2:
        return []
    first = obs.views[brokers[0]]
    found = []
    for other in brokers[1:]:
        view = obs.views[other]
        if len(first) == len(view) and all(
            (theirs := view.get(key)) is mine or theirs == mine for key, mine in first.items()
        ):
            continue
        for key in sorted(set(first) | set(view)):
            if first.get(key) != view.get(key):
                a, b = first.get(key), view.get(key)
                found.append(
                    Violation("views-converge", f"{brokers[0]} holds {_brief(a)}, {other} holds {_brief(b)}", key)
                )
    return found


@invariant(
    "leader-unique",
    "Once nothing is waiting, no broker but the elected one runs the leader's duties, and the elected "
    "one does when it runs and is connected.",
    ["#22112", "#23125", "#25999", "#25977"],
    when="quiescent",
)
def leader_unique(obs: Observation) -> list[Violation]:
    others = sorted(b for b in obs.acting_leaders if b != obs.leader)
    if others:
        return [Violation("leader-unique", f"elected {obs.leader}, but {', '.join(others)} act as leader")]
    # a crashed, disconnected or shutting-down leader's node outlives it until its session ends
    if obs.leader in obs.started and obs.leader in obs.connected and obs.leader not in obs.acting_leaders:
        return [Violation("leader-unique", f"elected {obs.leader} runs and is connected, but does not act as leader")]
    return []


@invariant(
    "lookup-answers-live-owner",
    "A lookup never answers with an owner that is not registered (early redirects to an "
    "in-flight destination are not ownership answers).",
    ["#21811", "#24478", "#26520"],
)
def lookup_answers_live_owner(obs: Observation) -> list[Violation]:
    return [
        Violation(
            "lookup-answers-live-owner",
            f"{a.broker} answered {a.owner}, which is not registered (at {a.time})",
            a.bundle,
        )
        for a in obs.answers
        if a.owner is not None and not a.redirect and not a.owner_registered
    ]


@invariant(
    "owner-registered",
    "No bundle stays owned by, or in flight to, an unregistered broker for longer than the clean-up bound.",
    ["#21811", "#23064", "#23349", "#26520", "#25132"],
)
def owner_registered(obs: Observation) -> list[Violation]:
    if obs.leader_since is None or obs.timers_overdue:
        return []  # nobody cleans up without a leader; the bound counts from when there is one
    bound = cleanup_bound_ms(obs)
    overdue = {
        b
        for b, since in obs.unregistered_at.items()
        if b not in obs.registered and obs.time - max(since, obs.leader_since) > bound
    }
    if not overdue:
        return []
    active = _model(obs).active
    found = []
    reported: set[str] = set()
    for broker in sorted(obs.views):
        if broker not in obs.started:
            continue
        for key, data in sorted(obs.views[broker].items()):
            if data.state not in active or key in reported:
                continue
            holder = data.dst_broker if data.state is not S.Splitting else data.source_broker
            if holder in overdue:
                since = obs.unregistered_at[holder]
                reported.add(key)
                found.append(
                    Violation(
                        "owner-registered",
                        f"{data.state.value} by {holder}, unregistered for "
                        f"{(obs.time - since) // 1000} s (bound {bound // 1000} s)",
                        key,
                    )
                )
    return found


@invariant(
    "in-flight-completes",
    "With a leader acting, an in-flight state (Assigning, Releasing, Splitting) settles within the "
    "in-flight wait plus two monitor periods plus the clean-up bound.",
    ["#19988", "#21332", "#23349", "#26520"],
)
def in_flight_completes(obs: Observation) -> list[Violation]:
    if obs.leader_since is None or obs.timers_overdue:
        return []
    cfg = obs.config.channel
    bound = cfg.in_flight_wait_ms + 2 * cfg.monitor_interval_s * 1000 + cleanup_bound_ms(obs)
    in_flight = _model(obs).in_flight
    found = []
    reported: set[str] = set()
    for broker in sorted(obs.views):
        for key, data in obs.views[broker].items():
            if data.state not in in_flight or key in reported or key in obs.failed_splits:
                continue
            waited = obs.time - max(data.timestamp, obs.leader_since)
            if waited > bound:
                reported.add(key)
                found.append(
                    Violation(
                        "in-flight-completes",
                        f"{broker} still sees {_brief(data)} after {waited // 1000} s (bound {bound // 1000} s)",
                        key,
                    )
                )
    return found


def _unacted(obs: Observation, states: frozenset[S], invariant_id: str) -> list[Violation]:
    found = []
    for broker in sorted(obs.started):
        view = obs.views.get(broker, {})
        for key, data in sorted(view.items()):
            if data.state not in states or key in obs.failed_splits:
                continue
            waits_on = data.dst_broker if data.state is S.Assigning else data.source_broker
            if waits_on == broker:
                found.append(Violation(invariant_id, f"{broker} holds {_brief(data)} and has not acted on it", key))
    return found


@invariant(
    "in-flight-acted-on",
    "Once nothing is waiting, no Assigning waits on its destination while that broker runs and its "
    "view holds it: the state found at start-up is acted on as the event would have been.",
    ["#25379", "#23152"],
    when="quiescent",
)
def in_flight_acted_on(obs: Observation) -> list[Violation]:
    return _unacted(obs, frozenset({S.Assigning}), "in-flight-acted-on")


@invariant(
    "release-acted-on",
    "Once nothing is waiting, no Releasing or Splitting waits on its source while that broker runs "
    "and its view holds it. The current protocol does NOT hold this: a broker restarted with the "
    "same id ignores a Releasing/Splitting of its previous incarnation until the leader's monitor "
    "overrides it (see docs/findings.md); reported on request.",
    ["#25379", "#19988"],
    when="quiescent",
    default=False,
)
def release_acted_on(obs: Observation) -> list[Violation]:
    return _unacted(obs, frozenset({S.Releasing, S.Splitting}), "release-acted-on")


@invariant(
    "departure-complete",
    "Once nothing is waiting, no running broker's view names a broker that shut down gracefully as "
    "the owner or destination of an active bundle, or the source of an in-flight one.",
    ["#26520", "#26634", "#23349", "#22573"],
    when="quiescent",
)
def departure_complete(obs: Observation) -> list[Violation]:
    if not obs.departed:
        return []
    model = _model(obs)
    found = []
    reported: set[str] = set()
    for broker in sorted(obs.started):
        for key, data in sorted(obs.views.get(broker, {}).items()):
            if key in reported or data.state not in model.active:
                continue
            names = data.dst_broker in obs.departed or (
                data.state in model.in_flight and data.source_broker in obs.departed
            )
            if names:
                reported.add(key)
                found.append(
                    Violation("departure-complete", f"{broker} holds {_brief(data)} after the broker left", key)
                )
    return found


@invariant(
    "syncer-equivalence",
    "Once nothing is waiting, the syncer's source and destination views hold the same entries, deletions included.",
    ["#25946", "#24357", "#23301"],
    when="quiescent",
)
def syncer_equivalence(obs: Observation) -> list[Violation]:
    if not obs.syncer_differences:
        return []
    return [Violation("syncer-equivalence", f"{obs.syncer_differences} key(s) differ between the two stores")]


# -- history invariants ------------------------------------------------------------------------------
def _streams(history: KeyHistory) -> list[tuple[str, list[HistoryRecord]]]:
    """The settled channel sequence and each observer's accepted sequence, named for messages."""
    streams = [("the channel", list(history.settled))]
    streams.extend(
        (observer, [r for r in records if r.accepted]) for observer, records in sorted(history.views.items())
    )
    return streams


@history_invariant(
    "version-monotonic",
    "Between deletions, the version a view (or the channel's settled sequence) holds for a key never goes back.",
    ["#20110", "#24186"],
)
def version_monotonic(history: KeyHistory) -> list[Violation]:
    found = []
    for who, records in _streams(history):
        held: ServiceUnitStateData | None = None
        for record in records:
            value = record.value
            if held is not None and value is not None and value.version_id < held.version_id:
                found.append(
                    Violation(
                        "version-monotonic",
                        f"{who} went from {_brief(held)} to {_brief(value)} (offset {record.offset})",
                        history.key,
                    )
                )
            held = value
    return found


@history_invariant(
    "one-value-per-version",
    "Within one lifetime of a key (between deletions), a version carries one value, and every value a "
    "broker's view takes is one the channel settled on.",
    ["#24186", "#24185"],
)
def one_value_per_version(history: KeyHistory) -> list[Violation]:
    found = []
    seen: dict[int, ServiceUnitStateData] = {}
    settled_values: set[ServiceUnitStateData] = set()
    for record in history.settled:
        value = record.value
        if value is None:
            seen.clear()
            continue
        settled_values.add(value)
        other = seen.setdefault(value.version_id, value)
        if other != value:
            found.append(
                Violation(
                    "one-value-per-version",
                    f"version {value.version_id} holds {_brief(other)} and then {_brief(value)} "
                    f"(offset {record.offset})",
                    history.key,
                )
            )
    for observer, records in sorted(history.views.items()):
        for record in records:
            if record.accepted and record.value is not None and record.value not in settled_values:
                found.append(
                    Violation(
                        "one-value-per-version",
                        f"{observer} took {_brief(record.value)}, which the channel never settled on "
                        f"(offset {record.offset})",
                        history.key,
                    )
                )
                break
    return found


@history_invariant(
    "no-resurrection",
    "Once a bundle is Deleted (its split is done), no later record makes it active again, tombstone or not.",
    ["#19546", "#19490"],
)
def no_resurrection(history: KeyHistory) -> list[Violation]:
    active = load_model(history.model).active
    found = []
    for who, records in _streams(history):
        deleted_at: int | None = None
        for record in records:
            value = record.value
            if value is None:
                continue
            if value.state is S.Deleted:
                deleted_at = record.offset if deleted_at is None else deleted_at
            elif deleted_at is not None and value.state in active:
                found.append(
                    Violation(
                        "no-resurrection",
                        f"{who} took {_brief(value)} at offset {record.offset}, after Deleted at offset {deleted_at}",
                        history.key,
                    )
                )
                break
    return found


@history_invariant(
    "split-partitions-parent",
    "A Splitting record's children cover the parent's hash range exactly: contiguous, no overlap, no gap.",
    ["#19988", "#22743"],
)
def split_partitions_parent(history: KeyHistory) -> list[Violation]:
    parent = _bundle(history.key)
    if parent is None:
        return []
    found = []
    for record in history.channel:
        value = record.value
        if value is None or value.state is not S.Splitting or not value.split_children:
            continue
        try:
            children = sorted(parent.child(name) for name in value.split_children)
        except BadKeyError as exc:
            found.append(Violation("split-partitions-parent", f"offset {record.offset}: {exc}", history.key))
            continue
        edges = [parent.lower] + [c for child in children for c in (child.lower, child.upper)] + [parent.upper]
        joined = all(edges[i] == edges[i + 1] for i in range(0, len(edges), 2))
        if not joined or any(child.lower >= child.upper for child in children):
            ranges = ", ".join(child.range_name for child in children)
            found.append(
                Violation(
                    "split-partitions-parent",
                    f"offset {record.offset}: children {ranges} do not partition {parent.range_name}",
                    history.key,
                )
            )
    return found


COMPACTION_CHECK_LIMIT = 400
"""Longest channel history checked at every compaction point; a longer one is checked at its last
``COMPACTION_CHECK_LIMIT`` points (the check is quadratic in the history's length)."""


def _compaction_divergence(history: KeyHistory, across_deletions: bool) -> list[Violation]:
    """Readers at every position p, served the log compacted at every horizon h > p, then the tail.

    ``across_deletions`` False: only readers whose held value is of the compacted value's lifetime
    (no deletion settled between p and h); True: only readers a deletion separates from it.
    """
    if history.storage is not StorageType.SystemTopic or not history.channel:
        return []
    invariant_id = "compaction-keeps-deletions" if across_deletions else "compaction-equivalence"
    rules = rules_for(history.storage, history.model)
    values = [r.value for r in history.channel]
    held: list[ServiceUnitStateData | None] = [None]  # held[i]: a full reader after i records
    lifetime_start = [0]  # lifetime_start[i]: where the lifetime held[i] belongs to began
    for i, value in enumerate(values, start=1):
        last = held[-1]
        accepted = decide(rules, last, value).accepted
        held.append(value if accepted else last)
        lifetime_start.append(i if accepted and value is None else lifetime_start[-1])
    final = held[-1]

    def finish(start: ServiceUnitStateData | None, tail_from: int) -> ServiceUnitStateData | None:
        current = start
        for value in values[tail_from:]:
            if decide(rules, current, value).accepted:
                current = value
        return current

    first = max(1, len(values) - COMPACTION_CHECK_LIMIT + 1)
    for horizon in range(first, len(values) + 1):
        compacted = held[horizon]
        if compacted is None:
            continue  # the compacted ledger has no entry for the key
        born = lifetime_start[horizon]
        positions = range(born) if across_deletions else range(born, horizon)
        tried: list[ServiceUnitStateData | None] = []
        for position in positions:
            start = held[position]
            if any(start is t for t in tried):
                continue
            tried.append(start)
            served = compacted if decide(rules, start, compacted).accepted else start
            if served == compacted:
                continue
            end = finish(served, horizon)
            if end != final:
                return [
                    Violation(
                        invariant_id,
                        f"a reader holding {_brief(start)} (after {position} records) and served the log "
                        f"compacted at {horizon} ({_brief(compacted)}) ends with {_brief(end)}; "
                        f"the whole log gives {_brief(final)}",
                        history.key,
                    )
                ]
    return []


@history_invariant(
    "compaction-equivalence",
    "Compacting the log at any point changes no reader's outcome: a reader that had read any prefix of "
    "the key's current lifetime and is then served the compacted value plus the tail ends where a "
    "reader of the whole log ends.",
    ["#20110", "#19546"],
)
def compaction_equivalence(history: KeyHistory) -> list[Violation]:
    return _compaction_divergence(history, across_deletions=False)


@history_invariant(
    "compaction-keeps-deletions",
    "A reader that a deletion separates from the compacted value (it read the key's previous "
    "lifetime, then fell behind the compaction horizon) still ends where a reader of the whole log "
    "ends. Pulsar's compacted ledger drops tombstones, so the current protocol does NOT hold this: "
    "a known hazard, reported on request, not a fixed bug.",
    ["docs/findings.md"],
    default=False,
)
def compaction_keeps_deletions(history: KeyHistory) -> list[Violation]:
    return _compaction_divergence(history, across_deletions=True)


def _brief(data: ServiceUnitStateData | None) -> str:
    return brief(data, none="nothing")


def _chosen(ids: Iterable[str] | None) -> list[Invariant]:
    """The invariants named, or every default one (the hazards only when named)."""
    if ids is None:
        return [inv for inv in CATALOGUE.values() if inv.default]
    wanted = set(ids)
    return [inv for inv in CATALOGUE.values() if inv.id in wanted]


def check(obs: Observation, ids: Iterable[str] | None = None) -> list[Violation]:
    """Every applicable default cluster invariant (or those named) on one observation."""
    found: list[Violation] = []
    for inv in _chosen(ids):
        if inv.cluster_check is None or (inv.when == "quiescent" and not obs.quiescent):
            continue
        found.extend(inv.cluster_check(obs))
    return found


def check_history(history: KeyHistory, ids: Iterable[str] | None = None) -> list[Violation]:
    """Every default history invariant (or those named) on one bundle's history."""
    found: list[Violation] = []
    for inv in _chosen(ids):
        if inv.history_check is not None:
            found.extend(inv.history_check(history))
    return found


def histories_from_trace(
    trace: Iterable[Mapping[str, object]],
    storage: StorageType = StorageType.SystemTopic,
    model: str = DEFAULT_MODEL,
) -> list[KeyHistory]:
    """Group a trace's channel and view records by key (values decoded from Pulsar JSON)."""
    channel: dict[str, list[HistoryRecord]] = {}
    views: dict[str, dict[str, list[HistoryRecord]]] = {}
    for record in trace:
        kind = record.get("kind")
        if kind not in ("channel", "view"):
            continue
        key = str(record["key"])
        raw = record.get("value")
        value = None if raw is None else ServiceUnitStateData.model_validate(raw)
        offset = int(record["offset"])  # type: ignore[call-overload]
        if kind == "channel":
            time = int(record.get("publish_time", 0))  # type: ignore[call-overload]
            channel.setdefault(key, []).append(HistoryRecord(offset, time, value))
        else:
            observer = str(record["observer"])
            if record.get("incarnation") is not None:  # a restarted broker's view starts afresh
                observer = f"{observer}#{record['incarnation']}"
            time = int(record.get("time", 0))  # type: ignore[call-overload]
            entry = HistoryRecord(offset, time, value, observer, bool(record.get("accepted", True)))
            views.setdefault(key, {}).setdefault(observer, []).append(entry)
    return [
        KeyHistory(
            key,
            tuple(channel.get(key, ())),
            {o: tuple(r) for o, r in sorted(views.get(key, {}).items())},
            storage,
            model,
        )
        for key in sorted(set(channel) | set(views))
    ]


def catalogue_page(note: str) -> str:
    """The catalogue as a Markdown page (``docs/catalogue.md``), generated from the declarations."""
    out = [
        "# Invariant catalogue",
        "",
        note,
        "",
        "Each invariant is one function in `properties/catalogue.py`. The Hypothesis bench "
        "(`properties/bench.py`), the simulation tests, `statechan simulate` and `statechan replay` "
        "call these functions, and the model checker and the trace auditor are to call the same "
        "ones; nothing restates them. *Cluster* invariants "
        "look at the simulated cluster at one step (`always`: after every step; `quiescent`: once "
        "nothing is waiting to be delivered); *history* invariants look at one bundle's records "
        "(the channel's, in log order, and what each broker's view took), so they run on a "
        "captured trace as well.",
        "",
        "Invariants marked *hazard* are not checked unless named: the current protocol does not "
        "hold them, for reasons documented in [findings.md](findings.md).",
        "",
        "| id | kind | checked | statement | guards |",
        "|---|---|---|---|---|",
    ]
    for inv in CATALOGUE.values():
        checked: str = inv.when if inv.kind == "cluster" else "per bundle"
        if not inv.default:
            checked += ", hazard"
        guards = ", ".join(inv.guards)
        out.append(f"| `{inv.id}` | {inv.kind} | {checked} | {inv.statement} | {guards} |")
    out.append("")
    return "\n".join(out)


def check_trace(
    trace: Iterable[Mapping[str, object]],
    storage: StorageType = StorageType.SystemTopic,
    model: str = DEFAULT_MODEL,
    ids: Iterable[str] | None = None,
) -> list[Violation]:
    """Every default history invariant (or those named) on every bundle of a trace."""
    wanted = None if ids is None else list(ids)
    found: list[Violation] = []
    for history in histories_from_trace(trace, storage, model):
        found.extend(check_history(history, wanted))
    return found
