"""The invariant catalogue: each invariant written once, as a pure function, with its id, its
statement and the Pulsar issues it guards against.

Three forms. *Cluster* invariants take an :class:`~statechan.cluster.Observation` (what the
simulator shows at one step); ``when`` says when they apply: ``always`` after every step,
``quiescent`` once no delivery, notification or task is waiting. *History* invariants take one
bundle's :class:`KeyHistory` (its channel records in log order and what each broker's view took),
which a simulated run and a captured trace both give. *Record* invariants look at a namespace's
channel records replayed in log order (:mod:`statechan.invariants.replay`): each accepted record, each
state a key dwelt in, each clean-up deadline after a broker unregistered. One id may have a
cluster and a record form (``single-owner``, ``orphan-cleaned``): the same property, seen by the
simulator and in a trace. The Hypothesis bench, the long simulation tests, ``statechan
simulate``/``replay`` and the trace auditor all call these functions; none restates them.
"""

from __future__ import annotations

import dataclasses
import itertools
import operator
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from statechan.cluster.config import MAX_CLEAN_UP_DELAY_TIME_IN_SECS, ChannelConfig, SimConfig
from statechan.cluster.state import Rec, broker_name
from statechan.invariants.replay import (
    ColumnShortcut,
    Deadline,
    DeadlineCheck,
    Dwell,
    DwellCheck,
    FiresAfter,
    Looks,
    Namespace,
    RecordChecks,
    Registry,
    ReplaySettings,
    Step,
    StepCheck,
    StepColumns,
    TraceReplay,
    holder,
    light,
)
from statechan.invariants.violation import Violation as Violation
from statechan.kernel import interpreted
from statechan.keys import BadKeyError, Bundle, parse_key
from statechan.model import DEFAULT_MODEL, StorageRules
from statechan.observation import Observation
from statechan.resolver import offer, rules_for, settle
from statechan.states import ACTIVE, IN_FLIGHT, ServiceUnitState, StorageType
from statechan.values import ServiceUnitStateData, ValueView, brief

S = ServiceUnitState


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


@interpreted
class HistoryFold:
    """One history invariant as a fold over one bundle's records, a record at a time: it holds
    what the invariant needs (never the records, but a bounded tail) and reports each violation
    to ``found`` as soon as it is certain. Channel records come in log order, each with what a
    reader of the whole log holds after it and whether it stood (``settled``: on a system topic
    the resolver took it, on a metadata store always); each observer's view records come in its
    order, interleaved with the channel's in any way."""

    def __init__(self, key: str, storage: StorageType, rules: StorageRules, found: Callable[[Violation], None]):
        self.key, self.storage, self.rules, self.found = key, storage, rules, found

    def channel(self, record: HistoryRecord, held: ServiceUnitStateData | None, accepted: bool, settled: bool) -> None:
        """A channel record; ``held``: a full reader's value after it; ``accepted``: the resolver's verdict."""

    def view(self, record: HistoryRecord) -> None:
        """A record an observer's view was offered (``record.observer``)."""

    def finish(self) -> None:
        """The bundle's records are over."""

    def held(self) -> int:
        """How many values or records this fold holds now (what bounds its memory; the tests read it)."""
        return 0


class HistoryStream:
    """A bundle's history invariants, fed its records one at a time: the resolver's fold of the
    channel (:func:`statechan.resolver.offer`) once, and each invariant's :class:`HistoryFold`."""

    def __init__(
        self,
        key: str,
        folds: Iterable[tuple[type[HistoryFold], Callable[[Violation], None]]],
        storage: StorageType = StorageType.SystemTopic,
        model: str = DEFAULT_MODEL,
    ):
        """``folds``: each invariant's fold and where its violations go."""
        self.rules = rules_for(storage, model)
        self.every_write = storage is StorageType.MetadataStore  # every committed write stands
        self.value: ServiceUnitStateData | None = None
        self.folds = [fold(key, storage, self.rules, found) for fold, found in folds]

    def offer(self, record: HistoryRecord) -> None:
        """A channel record (``observer`` None) or a view record."""
        if record.observer is not None:
            for fold in self.folds:
                fold.view(record)
            return
        self.value, verdict = offer(self.rules, self.value, record.value)
        for fold in self.folds:
            fold.channel(record, self.value, verdict.accepted, self.every_write or verdict.accepted)

    def finish(self) -> None:
        for fold in self.folds:
            fold.finish()

    def held(self) -> int:
        return sum(fold.held() for fold in self.folds)


ClusterCheck = Callable[[Observation], list[Violation]]
HistoryCheck = type[HistoryFold]
ActionCheck = Callable[[Observation, Observation], list[Violation]]
"""A step invariant: a predicate over two consecutive observations (TLA+'s action ``[][A]_v``)."""
StepPart = Literal["channel", "views", "unloads"]
"""What a step invariant can fire on (``step_invariant(reads=...)``): ``channel``, the channel's
settled values (and their lifetimes); ``views``, the view of a broker running in both observations
in one incarnation; ``unloads``, the admin unloads a broker running in both waits for. A step that
replaced none of a part's records (told by identity: a step shares what it did not touch) left it
as it was."""


@dataclass(frozen=True)
class Invariant:
    id: str
    statement: str
    guards: tuple[str, ...]
    when: Literal["always", "quiescent", "history", "records", "step"]
    """``always``/``quiescent``: a cluster invariant checked then; ``history``: over a bundle's
    history; ``records``: only a record form (over a namespace's replayed records); ``step``: only
    a step form."""
    cluster_check: ClusterCheck | None = None
    history_check: HistoryCheck | None = None
    """The history form: a fold over one bundle's records (:class:`HistoryFold`)."""
    default: bool = True
    """Checked unless named otherwise; False for a documented hazard of the current protocol."""
    record_statement: str | None = None
    """The record form's definition (authoritative for record histories)."""
    step_check: StepCheck | None = None
    dwell_check: DwellCheck | None = None
    deadline_check: DeadlineCheck | None = None
    looks_at: Looks = None
    """The states the record form can fire on (None: any); see :data:`statechan.invariants.replay.Looks`."""
    fires_after: FiresAfter = None
    """A dwell form fires only on dwells longer than this; see :data:`statechan.invariants.replay.FiresAfter`."""
    action_check: ActionCheck | None = None
    """The step form: over an observation and the next (:func:`check_step`)."""
    step_statement: str | None = None
    """The step form's definition (what every engine that produces observations decides)."""
    step_differs: str | None = None
    """Where the step form decides another statement than the history or record form, and why."""
    step_reads: frozenset[StepPart] | None = None
    """The parts of the state the step form can fire on (:data:`StepPart`): it finds nothing in a
    step that left them all as they were, so :func:`check_step` skips it there (None: every step)."""

    @property
    def has_record_form(self) -> bool:
        return self.step_check is not None or self.dwell_check is not None or self.deadline_check is not None

    @property
    def kind(self) -> str:
        forms = []
        if self.cluster_check is not None:
            forms.append("cluster")
        if self.action_check is not None:
            forms.append("step")
        if self.history_check is not None:
            forms.append("history")
        if self.has_record_form:
            forms.append("records")
        return " + ".join(forms)


CATALOGUE: dict[str, Invariant] = {}
_REVISION = [0]
"""How many times the catalogue was written (what is worked out from it is kept per revision)."""


def _register(inv: Invariant) -> None:
    if inv.id in CATALOGUE:
        raise ValueError(f"invariant {inv.id!r} is declared twice")
    CATALOGUE[inv.id] = inv
    _REVISION[0] += 1


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
    """Declare an invariant over one bundle's history (a :class:`HistoryFold`)."""

    def register(check: HistoryCheck) -> HistoryCheck:
        _register(Invariant(id, statement, tuple(guards), "history", history_check=check, default=default))
        return check

    return register


def step_invariant(
    id: str,
    statement: str,
    guards: Iterable[str] = (),
    default: bool = True,
    differs: str | None = None,
    reads: Iterable[StepPart] | None = None,
) -> Callable[[ActionCheck], ActionCheck]:
    """Declare an invariant over two consecutive observations, or the step form of a declared
    history or record one (``differs``: where the two forms decide different statements, and why;
    ``reads``: the parts of the state it can fire on, :data:`StepPart`, so a step that changed
    none of them skips it; None: it runs on every step)."""

    def register(check: ActionCheck) -> ActionCheck:
        forms = {
            "action_check": check,
            "step_statement": statement,
            "step_differs": differs,
            "step_reads": None if reads is None else frozenset(reads),
        }
        existing = CATALOGUE.get(id)
        if existing is None:
            _register(Invariant(id, statement, tuple(guards), "step", default=default, **forms))  # type: ignore[arg-type]
        elif existing.action_check is not None:
            raise ValueError(f"invariant {id!r} has a step form already")
        else:
            CATALOGUE[id] = dataclasses.replace(existing, **forms)  # type: ignore[arg-type]
            _REVISION[0] += 1
        return check

    return register


RecordOn = Literal["step", "dwell", "deadline"]


def record_invariant(
    id: str,
    statement: str,
    on: RecordOn,
    guards: Iterable[str] = (),
    default: bool = True,
    looks_at: Looks = None,
    fires_after: FiresAfter = None,
) -> Callable[[Callable[..., list[Violation]]], Callable[..., list[Violation]]]:
    """Declare an invariant over replayed records, or the record form of a declared cluster one.

    ``on`` names the event it looks at: each accepted ``step``, each ``dwell`` (a state held until
    the next accepted record or the trace's end), each clean-up ``deadline``. ``looks_at`` (steps
    and dwells) names the states it can fire on, so the replay skips the call for the others;
    ``fires_after`` (dwells) the longest dwell it never fires on, so the replay skips shorter ones.
    """

    def register(check: Callable[..., list[Violation]]) -> Callable[..., list[Violation]]:
        forms = {f"{on}_check": check, "record_statement": statement, "looks_at": looks_at, "fires_after": fires_after}
        existing = CATALOGUE.get(id)
        if existing is None:
            _register(Invariant(id, statement, tuple(guards), "records", default=default, **forms))  # type: ignore[arg-type]
        elif existing.has_record_form:
            raise ValueError(f"invariant {id!r} has a record form already")
        else:
            CATALOGUE[id] = dataclasses.replace(existing, **forms)  # type: ignore[arg-type]
            _REVISION[0] += 1
        return check

    return register


def _bundle(key: str) -> Bundle | None:
    try:
        return parse_key(key)
    except BadKeyError:
        return None


def cleanup_bound_ms(cfg: ChannelConfig) -> int:
    """How long a dead broker may keep a bundle: the jittery clean-up delay, a monitor period,
    the in-flight wait and a session timeout (for a leader that died too), in ms."""
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
    registered = obs.registered
    return _overlapping_claims(obs, lambda broker: broker in registered, "single-owner")


@invariant(
    "single-server",
    "No two running brokers believe they own a bundle, or bundles with overlapping hash ranges, at the "
    "same step, registered or not: under zookeeperSessionExpiredPolicy=reconnect (the default) a broker "
    "whose metadata session expired keeps serving until it registers again. The current protocol does "
    "NOT hold this: the leader's clean-up hands a bundle over while its owner, out of the registry, "
    "still serves it (docs/findings.md, 4); reported on request.",
    ["#24478", "#26197"],
    default=False,
)
def single_server(obs: Observation) -> list[Violation]:
    return _overlapping_claims(obs, lambda _broker: True, "single-server")


def _overlapping_claims(obs: Observation, counted: Callable[[int], bool], invariant_id: str) -> list[Violation]:
    """Pairs of counted brokers whose owned sets hold the same bundle or overlapping ranges."""
    claims: list[tuple[str, int, int, str, str]] = []
    owners = 0
    for broker, keys in obs.serving.items():
        if not keys or not counted(broker):
            continue
        owners += 1
        for key in keys:
            bundle = _bundle(key)
            if bundle is not None:
                claims.append((bundle.namespace, bundle.lower, bundle.upper, key, broker_name(broker)))
    if owners < 2:
        return []  # one broker's claims cannot clash
    claims.sort()
    found = []
    for i, (namespace, _lower, upper, key, name) in enumerate(claims):
        for other_ns, other_lower, _, other_key, other_name in claims[i + 1 :]:
            if other_ns != namespace or other_lower >= upper:
                break
            if other_name != name:
                what = "the same bundle" if key == other_key else f"overlapping {other_key}"
                found.append(Violation(invariant_id, f"{name} and {other_name} both own {what}", key))
    return found


@invariant(
    "views-converge",
    "Once nothing is waiting to be delivered, every running broker's view is the same.",
    ["#20110", "#19546", "#24186", "#24478"],
    when="quiescent",
)
def views_converge(obs: Observation) -> list[Violation]:
    brokers = sorted((b for b in obs.views if b in obs.started and b in obs.connected), key=broker_name)
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
                detail = f"{broker_name(brokers[0])} holds {_brief(a)}, {broker_name(other)} holds {_brief(b)}"
                found.append(Violation("views-converge", detail, key))
    return found


@invariant(
    "leader-unique",
    "Once nothing is waiting, no broker but the elected one runs the leader's duties, and the elected "
    "one does when it runs and is connected.",
    ["#22112", "#23125", "#25999", "#25977"],
    when="quiescent",
)
def leader_unique(obs: Observation) -> list[Violation]:
    elected = _elected(obs)
    others = sorted(broker_name(b) for b in obs.acting_leaders if b != elected)
    if others:
        return [Violation("leader-unique", f"elected {_leader_name(obs)}, but {', '.join(others)} act as leader")]
    # a crashed, disconnected or shutting-down leader's node outlives it until its session ends
    if elected in obs.started and elected in obs.connected and elected not in obs.acting_leaders:
        detail = f"elected {_leader_name(obs)} runs and is connected, but does not act as leader"
        return [Violation("leader-unique", detail)]
    return []


def _elected(obs: Observation) -> int | None:
    """The broker the election names (None: nobody, or a value that is no broker's id: #21894)."""
    leader = obs.leader
    return None if leader is None or leader[1] else leader[0]


def _leader_name(obs: Observation) -> str | None:
    """The election's value as Pulsar writes it (a broker's id, or with #21894 its service URL)."""
    leader = obs.leader
    return None if leader is None else ("http://" if leader[1] else "") + broker_name(leader[0])


@invariant(
    "lookup-answers-live-owner",
    "A lookup never answers with an owner that is not registered (early redirects to an "
    "in-flight destination are not ownership answers; a channel disabled by a graceful shutdown, "
    "#24770, and a broker out of the registry, getActiveOwnerAsync's best efforts, answer the "
    "stored owner without the check, by design).",
    ["#21811", "#24478", "#26520", "#24770"],
)
def lookup_answers_live_owner(obs: Observation) -> list[Violation]:
    return [
        Violation(
            "lookup-answers-live-owner",
            f"{a.broker} answered {a.owner}, which is not registered (at {a.time})",
            a.bundle,
        )
        for a in obs.answers
        if a.owner is not None and not a.redirect and not a.unchecked and not a.owner_registered
    ]


@invariant(
    "orphan-cleaned",
    "No bundle stays owned by, or in flight to, an unregistered broker for longer than the clean-up bound "
    "(counted from the latest of the unregistration, the leader's start and the record's write: a record "
    "written after the leader's clean-up ran waits for its monitor).",
    ["#21811", "#23064", "#23349", "#26520", "#25132"],
)
def orphan_cleaned(obs: Observation) -> list[Violation]:
    if obs.leader_since is None or obs.timers_overdue:
        return []  # nobody cleans up without a leader; the bound counts from when there is one
    bound = cleanup_bound_ms(obs.channel_config)
    if obs.time - obs.leader_since <= bound:
        return []  # nothing can be overdue yet (a quick test of what follows)
    overdue = {
        b
        for b, since in obs.unregistered_at.items()
        if b not in obs.registered and obs.time - max(since, obs.leader_since) > bound
    }
    if not overdue:
        return []
    unregistered_at, leader_since, now = obs.unregistered_at, obs.leader_since, obs.time

    def orphaned(data: Rec) -> bool:
        held_by = holder(data)
        return (
            data.state in ACTIVE
            and held_by in overdue
            and now - max(unregistered_at[held_by], leader_since, data.timestamp) > bound
        )

    found = []
    for _broker, key, data in _first_holders(obs, orphaned):
        held_by = holder(data)
        since = unregistered_at[held_by]  # type: ignore[index]
        detail = f"{data.state.value} by {broker_name(held_by)}, unregistered for {(now - since) // 1000} s"
        found.append(Violation("orphan-cleaned", f"{detail} (bound {bound // 1000} s)", key))
    return found


def _first_holders(obs: Observation, holds: Callable[[Rec], bool]) -> Iterator[tuple[str, str, Rec]]:
    """Each key that some started broker's view holds a value ``holds`` accepts for, with the first
    such broker (in broker order, by name) and its value: an invariant over views reports a key once."""
    return _first_holders_of_keys(obs, lambda _key, data: holds(data))


def _first_holders_of_keys(obs: Observation, holds: Callable[[str, Rec], bool]) -> Iterator[tuple[str, str, Rec]]:
    """``_first_holders`` for a test that reads the key too."""
    reported: set[str] = set()
    started = obs.started
    for broker in obs.setup.by_name:
        if broker not in started:
            continue
        for key, data in sorted(obs.views.get(broker, {}).items()):
            if key not in reported and holds(key, data):
                reported.add(key)
                yield broker_name(broker), key, data


def in_flight_bound_ms(cfg: ChannelConfig) -> int:
    """How long an in-flight state may last with a leader acting: the in-flight wait, two monitor
    periods and the clean-up bound, in ms."""
    return cfg.in_flight_wait_ms + 2 * cfg.monitor_interval_s * 1000 + cleanup_bound_ms(cfg)


@invariant(
    "in-flight-completes",
    "With a leader acting, an in-flight state (Assigning, Releasing, Splitting) settles within the "
    "in-flight wait plus two monitor periods plus the clean-up bound.",
    ["#19988", "#21332", "#23349", "#26520"],
)
def in_flight_completes(obs: Observation) -> list[Violation]:
    if obs.leader_since is None or obs.timers_overdue:
        return []
    bound = in_flight_bound_ms(obs.channel_config)
    if obs.time - obs.leader_since <= bound:
        return []  # nothing has waited that long yet (a quick test of what follows)
    in_flight = IN_FLIGHT
    found = []
    reported: set[str] = set()
    for broker in sorted(obs.views, key=broker_name):
        for key, data in obs.views[broker].items():
            if data.state not in in_flight or key in reported or key in obs.failed_splits:
                continue
            waited = obs.time - max(data.timestamp, obs.leader_since)
            if waited > bound:
                reported.add(key)
                found.append(
                    Violation(
                        "in-flight-completes",
                        f"{broker_name(broker)} still sees {_brief(data)} after {waited // 1000} s "
                        f"(bound {bound // 1000} s)",
                        key,
                    )
                )
    return found


def tombstone_bound_ms(cfg: ChannelConfig) -> int:
    """How long a Free or Deleted record may stay with a leader acting: the tombstone delay, two
    monitor periods (the monitor that deletes it runs once a period) and a session timeout (a
    leader that died is replaced only when its session ends), in ms."""
    return (cfg.tombstone_delay_s + 2 * cfg.monitor_interval_s) * 1000 + cfg.session_timeout_ms


@invariant(
    "tombstoned-within",
    "Progress: with a leader acting, no running broker's view holds a Free or a Deleted record for "
    "longer than the tombstone delay (loadBalancerServiceUnitStateTombstoneDelayTimeInSeconds) plus two "
    "monitor periods (loadBalancerServiceUnitStateMonitorIntervalInSeconds) plus a session timeout: "
    "the leader's monitor deletes it.",
    ["#22743", "#21721", "#22859"],
)
def tombstoned_within(obs: Observation) -> list[Violation]:
    leader_since = obs.leader_since
    if leader_since is None or obs.timers_overdue:
        return []
    bound = tombstone_bound_ms(obs.channel_config)
    if obs.time - leader_since <= bound:
        return []  # nothing has lingered that long yet (a quick test of what follows)

    def lingers(data: Rec) -> bool:
        return data.state in (S.Free, S.Deleted) and obs.time - max(data.timestamp, leader_since) > bound

    return [
        Violation(
            "tombstoned-within",
            f"{broker} still holds {_brief(data)} after {(obs.time - max(data.timestamp, leader_since)) // 1000} s "
            f"(bound {bound // 1000} s)",
            key,
        )
        for broker, key, data in _first_holders(obs, lingers)
    ]


@invariant(
    "lookup-within",
    "Progress: a lookup a running broker deferred is answered within the in-flight wait "
    "(loadBalancerInFlightServiceUnitStateWaitingTimeInMillis): by the event that settles its bundle, "
    "or by its timeout.",
    ["#20677", "#26146", "#22899"],
)
def lookup_within(obs: Observation) -> list[Violation]:
    if obs.timers_overdue or not obs.pending_lookups:
        return []
    wait = obs.channel_config.in_flight_wait_ms
    return [
        Violation(
            "lookup-within",
            f"{broker_name(broker)} deferred a lookup at {deferred_at} and still waits after "
            f"{(obs.time - deferred_at) // 1000} s (bound {wait // 1000} s)",
            key,
        )
        for broker, pending in sorted(obs.pending_lookups.items(), key=lambda item: broker_name(item[0]))
        for key, deferred_at in sorted(pending.items())
        if obs.time - deferred_at > wait
    ]


def _unacted(obs: Observation, states: frozenset[S], invariant_id: str) -> list[Violation]:
    found = []
    for broker in sorted(obs.started, key=broker_name):
        view = obs.views.get(broker, {})
        for key, data in sorted(view.items()):
            if data.state not in states or key in obs.failed_splits:
                continue
            waits_on = data.dst_broker if data.state is S.Assigning else data.source_broker
            if waits_on == broker:
                detail = f"{broker_name(broker)} holds {_brief(data)} and has not acted on it"
                found.append(Violation(invariant_id, detail, key))
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
    "and its view holds it, and no Deleted or forced Free that the source's previous incarnation left "
    "untombstoned is held while the source runs again. The current protocol does NOT hold this: a "
    "broker restarted with the same id ignores the records of its previous incarnation until the "
    "leader's monitor overrides or tombstones them (see docs/findings.md, 2); reported on request.",
    ["#25379", "#19988", "#22743"],
    when="quiescent",
    default=False,
)
def release_acted_on(obs: Observation) -> list[Violation]:
    found = _unacted(obs, frozenset({S.Releasing, S.Splitting}), "release-acted-on")
    inherited = obs.inherited
    if inherited:
        found += [
            Violation(
                "release-acted-on",
                f"{broker} holds {_brief(data)}, which its source's previous incarnation left untombstoned",
                key,
            )
            for broker, key, data in _first_holders_of_keys(
                obs, lambda key, data: (key, data.version_id) in inherited and _left_by_running_source(obs, data)
            )
        ]
    return found


@invariant(
    "departure-complete",
    "Once nothing is waiting, no running broker's view names a broker that shut down gracefully as "
    "the owner or destination of an active bundle, or the source of an in-flight one. A broker whose "
    "disableBroker did not run to its end (its clean-up skipped because it knew no leader, or its "
    "unregister failed without a session) leaves its bundles to the leader by design; orphan-cleaned "
    "bounds those. So do records another broker wrote after the departure, naming the departed broker "
    "from a stale registry read (departed-not-assigned reports them).",
    ["#26520", "#26634", "#23349", "#22573"],
    when="quiescent",
)
def departure_complete(obs: Observation) -> list[Violation]:
    departed = obs.departed
    if not departed:
        return []
    late = obs.named_late

    def names_departed(key: str, data: Rec) -> bool:
        if data.state not in ACTIVE:
            return False
        if data.dst_broker in departed:
            return not late or (key, data.dst_broker, data.version_id) not in late
        return data.state in IN_FLIGHT and data.source_broker in departed

    return [
        Violation("departure-complete", f"{broker} holds {_brief(data)} after the broker left", key)
        for broker, key, data in _first_holders_of_keys(obs, names_departed)
    ]


@invariant(
    "departed-not-assigned",
    "Once nothing is waiting, no running broker's view holds an active record that another broker wrote "
    "after a broker shut down gracefully, naming the departed broker as destination (a lookup or "
    "clean-up that selected it from a registry read before it left). Pulsar's #26520 refuses late "
    "assignments on the departing broker's own channel only; the leader's monitor overrides such a "
    "record later (orphan-cleaned bounds it). Reported on request (docs/findings.md, 12).",
    ["#26520"],
    when="quiescent",
    default=False,
)
def departed_not_assigned(obs: Observation) -> list[Violation]:
    late = obs.named_late
    if not late:
        return []
    departed = obs.departed

    def written_late(key: str, data: Rec) -> bool:
        return data.state in ACTIVE and data.dst_broker in departed and (key, data.dst_broker, data.version_id) in late

    return [
        Violation("departed-not-assigned", f"{broker} holds {_brief(data)}, written after the broker left", key)
        for broker, key, data in _first_holders_of_keys(obs, written_late)
    ]


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


@invariant(
    "registered-while-running",
    "Once nothing is waiting, every broker whose channel is started and whose metadata session is "
    "connected is in the registry: a broker takes full part or none.",
    ["#23298", "#23359", "#24932", "#23297"],
    when="quiescent",
)
def registered_while_running(obs: Observation) -> list[Violation]:
    return [
        Violation("registered-while-running", f"{broker_name(broker)} runs, connected, but is not registered")
        for broker in sorted(obs.started & obs.connected, key=broker_name)
        if broker not in obs.registered
    ]


@invariant(
    "lookup-not-stranded",
    "Once nothing is waiting, no running, connected broker holds a deferred lookup of a bundle its view "
    "shows with no owner (Init, Free, Deleted: their events answer lookups), or shows Owned (or "
    "Splitting) by a broker the registry has named without a break since the lookup was deferred: "
    "nothing but the lookup's timeout would answer it.",
    ["#20677", "#22899", "#26146", "#21811"],
    when="quiescent",
)
def lookup_not_stranded(obs: Observation) -> list[Violation]:
    found = []
    for broker, pending in sorted(obs.pending_lookups.items(), key=lambda item: broker_name(item[0])):
        if broker not in obs.started or broker not in obs.connected:
            continue
        view = obs.views.get(broker, {})
        for key, deferred_at in sorted(pending.items()):
            data = view.get(key)
            if data is None or data.state in (S.Init, S.Free, S.Deleted):
                held = _brief(data)
            elif data.state in (S.Owned, S.Splitting):
                owner = data.dst_broker if data.state is S.Owned else data.source_broker
                since = None if owner is None else obs.registered_since.get(owner)
                if since is None or since > deferred_at:
                    continue  # its owner left, or came back after: an event or the timeout decides
                held = f"{_brief(data)}, {broker_name(owner)} registered since before the lookup"
            else:
                continue  # in flight: the settling event answers it
            detail = (
                f"{broker_name(broker)} deferred a lookup at {deferred_at} and still waits, its view holding {held}"
            )
            found.append(Violation("lookup-not-stranded", detail, key))
    return found


@invariant(
    "semi-terminal-tombstoned",
    "Once nothing is waiting, no running broker's view holds a Deleted, or a forced Free, whose source "
    "broker runs: the source tombstones it at once, so a finished split or a forced release leaves no "
    "record behind to block the key's next life. A record its source's previous incarnation left (a "
    "crash, or the last broker's shutdown closing its channel before it reads its own Free) is existing "
    "to the new channel, which does not act on it: release-acted-on reports those (finding 2).",
    ["#22743", "#22859"],
    when="quiescent",
)
def semi_terminal_tombstoned(obs: Observation) -> list[Violation]:
    inherited = obs.inherited
    return [
        Violation(
            "semi-terminal-tombstoned",
            f"{broker} holds {_brief(data)}, and its source runs but has not tombstoned it",
            key,
        )
        for broker, key, data in _first_holders_of_keys(
            obs,
            lambda key, data: (
                _left_by_running_source(obs, data) and (not inherited or (key, data.version_id) not in inherited)
            ),
        )
    ]


def _left_by_running_source(obs: Observation, data: Rec) -> bool:
    """A Deleted or forced Free (its source tombstones it at once) whose source runs."""
    return data.tombstoned_by_source and data.source_broker in obs.started and data.source_broker in obs.connected


@invariant(
    "unload-not-stranded",
    "Once nothing is waiting, no running broker still waits for an admin unload of a bundle its view "
    "holds nothing for, holds Free with no force, or holds Owned with the unloaded owner as source (a "
    "transfer's end): the event that brought the view there ends the unload (system topic; a "
    "metadata-store view refilled after a session loss has no such event).",
    ["#22859", "#22379"],
    when="quiescent",
)
def unload_not_stranded(obs: Observation) -> list[Violation]:
    if obs.storage is not StorageType.SystemTopic:
        return []
    found = []
    for broker, ops in sorted(obs.pending_unloads.items(), key=lambda item: broker_name(item[0])):
        if broker not in obs.started:
            continue
        view = obs.views.get(broker, {})
        for key, (source, _destination) in sorted(ops.items()):
            value = view.get(key)
            ended = value is None or value.state is S.Init or (value.state is S.Free and not value.force)
            # a transfer's (or an override's) Owned names the unloaded owner as its source
            ended = ended or (
                value is not None and value.state is S.Owned and source is not None and value.source_broker == source
            )
            if ended:
                held = _brief(value)
                detail = f"{broker_name(broker)} still waits for its unload of {_name(source)}, its view holding {held}"
                found.append(Violation("unload-not-stranded", detail, key))
    return found


@invariant(
    "leader-elected",
    "Once nothing is waiting, while a broker runs with its session connected, the election names a "
    "leader, and the leader it names is one of the cluster's brokers.",
    ["#23516", "#23138", "#21894", "#23125"],
    when="quiescent",
)
def leader_elected(obs: Observation) -> list[Violation]:
    if not obs.started & obs.connected:
        return []
    if obs.leader is None:
        running = ", ".join(sorted(broker_name(b) for b in obs.started & obs.connected))
        return [Violation("leader-elected", f"nobody is elected while {running} run connected")]
    if _elected(obs) is None:
        return [Violation("leader-elected", f"the election names {_leader_name(obs)!r}, which is no broker's id")]
    return []


# -- history invariants ------------------------------------------------------------------------------
@history_invariant(
    "version-monotonic",
    "Between deletions, the version a view (or the channel's settled sequence) holds for a key never goes back.",
    ["#20110", "#24186"],
)
class VersionMonotonic(HistoryFold):
    """The auditor's streaming form of ``version-monotonic``, over a recorded trace (a simulated
    run's too): one held value per stream, the channel's settled sequence and each observer's
    accepted one. Engines that produce observations decide :func:`version_monotonic_step`."""

    def __init__(self, key: str, storage: StorageType, rules: StorageRules, found: Callable[[Violation], None]):
        super().__init__(key, storage, rules, found)
        self.last: dict[str | None, ServiceUnitStateData | None] = {}

    def _next(self, who: str | None, record: HistoryRecord) -> None:
        held, value = self.last.get(who), record.value
        if held is not None and value is not None and value.version_id < held.version_id:
            name = "the channel" if who is None else who
            detail = f"{name} went from {_brief(held)} to {_brief(value)}"
            self.found(Violation("version-monotonic", detail, self.key, record.offset))
        self.last[who] = value

    def channel(self, record: HistoryRecord, held: ServiceUnitStateData | None, accepted: bool, settled: bool) -> None:
        if settled:
            self._next(None, record)

    def view(self, record: HistoryRecord) -> None:
        if record.accepted:
            self._next(record.observer, record)

    def held(self) -> int:
        return len(self.last)


@history_invariant(
    "one-value-per-version",
    "Within one lifetime of a key (between deletions), a version carries one value, and every value a "
    "broker's view takes is one the channel settled on.",
    ["#24186", "#24185"],
)
class OneValuePerVersion(HistoryFold):
    """The auditor's streaming form of ``one-value-per-version`` (engines that produce
    observations decide :func:`one_value_per_version_step`, its per-step part). It holds the
    values of the current lifetime by version, every distinct value the channel settled on, and
    per observer the distinct values its view took that the channel has not settled on (yet: the
    first left at the end is reported)."""

    def __init__(self, key: str, storage: StorageType, rules: StorageRules, found: Callable[[Violation], None]):
        super().__init__(key, storage, rules, found)
        self.seen: dict[int, ServiceUnitStateData] = {}
        self.settled_values: set[ServiceUnitStateData] = set()
        self.unsettled: dict[str, dict[ServiceUnitStateData, int]] = {}

    def channel(self, record: HistoryRecord, held: ServiceUnitStateData | None, accepted: bool, settled: bool) -> None:
        value = record.value
        if not settled:
            return
        if value is None:
            self.seen.clear()
            return
        if value not in self.settled_values:
            self.settled_values.add(value)
            for taken in self.unsettled.values():
                taken.pop(value, None)
        other = self.seen.setdefault(value.version_id, value)
        if other != value:
            detail = f"version {value.version_id} holds {_brief(other)} and then {_brief(value)}"
            detail += _differing(other, value)
            self.found(Violation("one-value-per-version", detail, self.key, record.offset))

    def view(self, record: HistoryRecord) -> None:
        value = record.value
        if record.accepted and value is not None and value not in self.settled_values:
            self.unsettled.setdefault(str(record.observer), {}).setdefault(value, record.offset)

    def finish(self) -> None:
        for observer, taken in sorted(self.unsettled.items()):
            for value, offset in taken.items():  # the first, in the view's order
                detail = f"{observer} took {_brief(value)}, which the channel never settled on"
                self.found(Violation("one-value-per-version", detail, self.key, offset))
                break

    def held(self) -> int:
        return len(self.seen) + len(self.settled_values) + sum(len(t) for t in self.unsettled.values())


# -- record invariants (over a namespace's replayed records; definitions from the auditor's issue) -----
def _becomes_active(step: Step, ns: Namespace) -> bool:
    """The step moves the key from no value or an inactive state into an active one."""
    value, prev, active = step.value, step.prev, ns.active_states
    if value is None or value.state not in active:
        return False
    return prev is None or prev.value.state not in active


def _splitting_parent(parent: Bundle, value: ValueView, child: Bundle) -> bool:
    inside = parent.lower <= child.lower and child.upper <= parent.upper
    return value.state is S.Splitting and parent != child and inside


@record_invariant(
    "single-owner",
    "An accepted record makes a key active while another key of the same namespace with an "
    "overlapping hash range is active, and neither is the Splitting parent of the other.",
    on="step",
    looks_at=("becomes-active",),
)
def single_owner_records(step: Step, ns: Namespace) -> list[Violation]:
    if not _becomes_active(step, ns):
        return []
    value = step.value
    assert value is not None
    bundle, held, bundles, active = step.bundle, ns.held, ns.bundles, ns.active
    key = step.key
    clashing = [
        other_key
        for other_key in ns.overlapping(key)  # one namespace, so overlapping ranges
        if other_key in active
        and not _splitting_parent(other := bundles[other_key], held[other_key].value, bundle)
        and not _splitting_parent(bundle, value, other)
    ]
    if not clashing:
        return []
    other_key = min(clashing)  # the report names the same key whatever the set's order
    return [
        Violation(
            "single-owner",
            f"becomes {_brief(value)} while overlapping {other_key} is {_brief(held[other_key].value)}",
            key,
            step.offset,
        )
    ]


@record_invariant(
    "no-resurrection",
    "After an accepted Deleted, the key becomes active (Owned, Assigning, Releasing, Splitting) again "
    "before a tombstone.",
    on="step",
    looks_at=("becomes-active",),
    guards=["#19546", "#19490"],
)
def no_resurrection(step: Step, ns: Namespace) -> list[Violation]:
    """The auditor's form of ``no-resurrection``, over replayed records; engines that produce
    observations decide :func:`no_resurrection_step`."""
    deleted_at = ns.deleted_at.get(step.key)
    if deleted_at is None or not _becomes_active(step, ns):
        return []
    return [
        Violation(
            "no-resurrection",
            f"becomes {_brief(step.value)} ({step.reason.value}) after Deleted at offset {deleted_at}",
            step.key,
            step.offset,
        )
    ]


@record_invariant(
    "split-partitions-parent",
    "A split whose parent reaches Deleted while the children that became Owned since its Splitting "
    "record do not partition the parent's hash range exactly.",
    on="step",
    looks_at=("Deleted",),
    guards=["#19988", "#22743"],
)
def split_partitions_parent(step: Step, ns: Namespace) -> list[Violation]:
    """The auditor's form of ``split-partitions-parent``, over replayed records; engines that
    produce observations decide :func:`split_partitions_parent_step`."""
    value, prev = step.value, step.prev
    if value is None or value.state is not S.Deleted or prev is None or prev.value.state is not S.Splitting:
        return []
    parent, since = step.bundle, prev.since_offset
    children = sorted(
        ns.bundles[key]
        for key, owned in ns.owned_at.items()
        if owned > since and _splitting_parent(parent, prev.value, ns.bundles[key])
    )
    edge = parent.lower
    for child in children:
        if child.lower != edge:
            break
        edge = child.upper
    else:
        if edge == parent.upper:
            return []
    ranges = ", ".join(child.range_name for child in children) or "none"
    return [
        Violation(
            "split-partitions-parent",
            f"Deleted after Splitting at offset {since}; children Owned since: {ranges}, "
            f"which do not partition {parent.range_name}",
            step.key,
            step.offset,
        )
    ]


@record_invariant(
    "owner-registered",
    "An accepted Assigning or Owned record names a destination broker that is not registered at that "
    "offset (checked only when the trace has registry records).",
    on="step",
    looks_at=("Assigning", "Owned"),
    guards=["#21811", "#26520"],
)
def owner_registered(step: Step, ns: Namespace) -> list[Violation]:
    value, prev = step.value, step.prev
    if value is None or value.state not in (S.Assigning, S.Owned) or not ns.registry.present:
        return []
    if prev is not None and prev.value.state in (S.Assigning, S.Owned) and prev.value.dst_broker == value.dst_broker:
        return []  # the same hand-over as the record before: one episode
    if ns.registry.registered_at(value.dst_broker, step.offset):  # type: ignore[arg-type]
        return []
    return [
        Violation("owner-registered", f"{_brief(value)}: {value.dst_broker} is not registered", step.key, step.offset)
    ]


@record_invariant(
    "orphan-cleaned",
    "A bundle is still Owned by, or in flight to, a broker more than the clean-up timeout (default "
    "300 s) after that broker unregistered (unless it registered again by then), in a state it held "
    "then (one accepted later is another clock's, which the record form does not measure).",
    on="deadline",
)
def orphan_cleaned_records(deadline: Deadline, ns: Namespace) -> list[Violation]:
    if ns.registry.registers_again(deadline.broker, deadline.offset, deadline.due):
        return []
    found = []
    for key in sorted(ns.active):
        held = ns.held[key]
        # a record accepted after the unregistration starts a clock this deadline does not measure
        if holder(held.value) == deadline.broker and held.since_time <= deadline.time:
            found.append(
                Violation(
                    "orphan-cleaned",
                    f"still {_brief(held.value)} {(deadline.due - deadline.time) // 1000} s after "
                    f"{deadline.broker} unregistered (offset {deadline.offset})",
                    key,
                    held.since_offset,
                )
            )
    return found


def _dwelt(dwell: Dwell, limit_ms: int, what: str, invariant_id: str) -> list[Violation]:
    held_for = dwell.until_time - dwell.since_time
    if held_for <= limit_ms:
        return []
    until = "the trace's end" if dwell.until_offset is None else f"offset {dwell.until_offset}"
    return [
        Violation(
            invariant_id,
            f"{what} {_brief(dwell.value)} for {held_for / 1000:g} s (limit {limit_ms / 1000:g} s), "
            f"from offset {dwell.since_offset} until {until}",
            dwell.key,
            dwell.since_offset,
        )
    ]


@record_invariant(
    "stuck-in-flight",
    "A key stays in an accepted in-flight state (Assigning, Releasing, Splitting) for longer than the "
    "in-flight timeout (default 90 s: the 30 s in-flight wait plus the 60 s monitor period) before its "
    "next accepted record, or until the trace's last time.",
    on="dwell",
    looks_at=("in-flight",),
    fires_after=lambda settings: settings.in_flight_timeout_ms,
    guards=["#19988", "#21332", "#23349"],
)
def stuck_in_flight(dwell: Dwell, ns: Namespace) -> list[Violation]:
    if dwell.value.state not in ns.in_flight_states:
        return []
    return _dwelt(dwell, ns.settings.in_flight_timeout_ms, "in flight as", "stuck-in-flight")


@record_invariant(
    "lingering-semi-terminal",
    "A key stays Free or Deleted longer than the tombstone timeout (default 3660 s) without a tombstone.",
    on="dwell",
    looks_at=("Free", "Deleted"),
    fires_after=lambda settings: settings.tombstone_timeout_ms,
    guards=["#22743"],
)
def lingering_semi_terminal(dwell: Dwell, ns: Namespace) -> list[Violation]:
    if dwell.value.state is not S.Free and dwell.value.state is not S.Deleted:
        return []
    return _dwelt(dwell, ns.settings.tombstone_timeout_ms, "left", "lingering-semi-terminal")


COMPACTION_CHECK_LIMIT = 400
"""Longest channel history checked at every compaction point; a longer one is checked at its last
``COMPACTION_CHECK_LIMIT`` points (the check is quadratic in the history's length)."""


@interpreted
class _CompactionDivergence(HistoryFold):
    """Readers at every position p, served the log compacted at every horizon h > p, then the tail.

    ``across_deletions`` False: only readers whose held value is of the compacted value's lifetime
    (no deletion settled between p and h); True: only readers a deletion separates from it.
    Held: the last ``COMPACTION_CHECK_LIMIT`` channel records (the horizons checked and their
    tails) and the distinct values a reader held at the positions those horizons try: the
    lifetimes they fall in (False), or every one before them (True).
    """

    invariant_id = "compaction-equivalence"
    across_deletions = False

    def __init__(self, key: str, storage: StorageType, rules: StorageRules, found: Callable[[Violation], None]):
        super().__init__(key, storage, rules, found)
        self.count = 0  # channel records so far: the reader's position after the last one
        self.tail: deque[tuple[int, HistoryRecord, ServiceUnitStateData | None, int]] = deque(
            maxlen=COMPACTION_CHECK_LIMIT
        )
        """(h, the h-th record, a full reader's value after it, where its lifetime began)."""
        self.born = 0  # where the current lifetime began
        self.lifetimes: deque[tuple[int, dict[int, tuple[int, ServiceUnitStateData | None]]]] = deque()
        self.lifetimes.append((0, {id(None): (0, None)}))
        """Per lifetime (its start), the distinct values (by identity) a reader held in it, at their first position."""

    def channel(self, record: HistoryRecord, held: ServiceUnitStateData | None, accepted: bool, settled: bool) -> None:
        if self.storage is not StorageType.SystemTopic:
            return
        self.count += 1
        position = self.count
        if accepted and held is None:
            self.born = position
            if not self.across_deletions:  # a lifetime no horizon left to check can fall in is dropped
                while len(self.lifetimes) > 1 and self.lifetimes[1][0] <= position - COMPACTION_CHECK_LIMIT:
                    self.lifetimes.popleft()
                self.lifetimes.append((position, {}))
        self.lifetimes[-1][1].setdefault(id(held), (position, held))
        self.tail.append((position, record, held, self.born))

    def finish(self) -> None:
        if not self.tail:
            return
        final = self.tail[-1][2]
        values = [record.value for _, record, _, _ in self.tail]
        for index, (horizon, record, compacted, born) in enumerate(self.tail):
            if compacted is None:
                continue  # the compacted ledger has no entry for the key
            if self.across_deletions:
                starts = [start for lifetime in self.lifetimes for start in lifetime[1].values() if start[0] < born]
            else:
                lifetime = next(held for begun, held in self.lifetimes if begun == born)
                starts = [start for start in lifetime.values() if start[0] < horizon]
            for position, start in starts:
                served, _ = offer(self.rules, start, compacted)
                if served is compacted or served == compacted:  # identity first: pydantic's == is slow
                    continue
                end = settle(self.rules, values[index + 1 :], served)
                if end is not final and end != final:
                    detail = (
                        f"a reader holding {_brief(start)} (after {position} records) and served the log "
                        f"compacted at {horizon} ({_brief(compacted)}) ends with {_brief(end)}; "
                        f"the whole log gives {_brief(final)}"
                    )
                    self.found(Violation(self.invariant_id, detail, self.key, record.offset))
                    return

    def held(self) -> int:
        return len(self.tail) + sum(len(held) for _, held in self.lifetimes)


@history_invariant(
    "compaction-equivalence",
    "Compacting the log at any point changes no reader's outcome: a reader that had read any prefix of "
    "the key's current lifetime and is then served the compacted value plus the tail ends where a "
    "reader of the whole log ends.",
    ["#20110", "#19546"],
)
class CompactionEquivalence(_CompactionDivergence):
    pass


@history_invariant(
    "compaction-keeps-deletions",
    "A reader that a deletion separates from the compacted value (it read the key's previous "
    "lifetime, then fell behind the compaction horizon) still ends where a reader of the whole log "
    "ends. Pulsar's compacted ledger drops tombstones, so the current protocol does NOT hold this: "
    "a known hazard, reported on request, not a fixed bug.",
    ["docs/findings.md"],
    default=False,
)
class CompactionKeepsDeletions(_CompactionDivergence):
    invariant_id = "compaction-keeps-deletions"
    across_deletions = True


# -- step invariants (over two consecutive observations) -------------------------------------------
class _Changes:
    """What changed from one observation to the next, worked out once for every step invariant:
    the channel's keys whose settled value changed, and each view's keys whose value changed
    (a broker running in both, in the same incarnation, holding a value before and after)."""

    def __init__(self, before: Observation, after: Observation) -> None:
        self.before, self.after = before, after
        self.channel: list[tuple[str, Rec | None, Rec | None]] = []
        old_channel, new_channel = before.channel, after.channel
        if old_channel is not new_channel:
            for key in _changed(old_channel, new_channel):
                self.channel.append((key, old_channel.get(key), new_channel[key]))
            self.channel.extend((key, old, None) for key, old in old_channel.items() if key not in new_channel)
        self.views: list[tuple[int, str, Rec, Rec]] = []
        old_state, new_state = before.state, after.state
        if not (
            before.handmade
            or after.handmade
            or old_state is None
            or new_state is None
            or len(old_state.brokers) != len(new_state.brokers)
        ):
            # read off the brokers' records: a view the step did not replace is the very record
            for was_broker, now_broker in zip(old_state.brokers, new_state.brokers, strict=True):
                if (
                    was_broker is now_broker
                    or was_broker.view is now_broker.view
                    or not (was_broker.alive and now_broker.alive)
                    or was_broker.incarnation != now_broker.incarnation
                ):
                    continue
                was_view, now_view = was_broker.view.data(), now_broker.view.data()
                for key in _changed(was_view, now_view):
                    held = was_view.get(key)
                    if held is not None:
                        self.views.append((now_broker.id, key, held, now_view[key]))
            return
        old_views, was, now = before.views, before.incarnations, after.incarnations
        for broker, view in after.views.items():
            old_view = old_views.get(broker)
            if old_view is None or old_view is view:
                continue
            if was.get(broker) != now.get(broker):
                continue  # restarted in between: its view began afresh
            for key in _changed(old_view, view):
                old = old_view.get(key)
                if old is not None:
                    self.views.append((broker, key, old, view[key]))

    def same_lifetime(self, key: str) -> bool:
        """The key was not deleted and written again between the two observations (as far as the
        channel's ``born`` tells: a later start of its lifetime)."""
        was, now = self.before.born.get(key), self.after.born.get(key)
        return was is None or now is None or now <= was

    def crossed_deletion(self, broker: int, key: str) -> bool:
        """The broker's topic reader moved past the start of the key's current lifetime in this
        step: its view crossed the key's deletion (a flush reads the tombstone and what follows)."""
        born = self.after.born.get(key)
        was, now = self.before.positions.get(broker), self.after.positions.get(broker)
        return born is not None and was is not None and now is not None and was <= born < now

    def lands_on_channel(self, key: str, value: Rec) -> bool:
        """A view's new value is the channel's settled one: a reader that caught up, possibly
        across a deletion (a store view reads the node as it is, a topic view reads to the end)."""
        settled = self.after.channel.get(key)
        return settled is value or (settled is not None and settled == value)


def _changed(old: Mapping[str, Rec], new: Mapping[str, Rec]) -> Iterable[str]:
    """The keys of ``new`` whose value is not the very object ``old`` holds. A view or the channel
    changes a few keys a step and keeps its keys' order, so the common case compares the two in
    C, a key at a time only when the keys differ."""
    keys = list(new)
    if len(keys) == len(old) and keys == list(old):
        return itertools.compress(keys, map(operator.is_not, new.values(), old.values()))
    return [key for key in keys if old.get(key) is not new[key]]


_LAST_CHANGES: list[_Changes] = []
"""The last pair's changes: the step invariants of one :func:`check_step` share them."""


def _changes(before: Observation, after: Observation) -> _Changes:
    if _LAST_CHANGES and _LAST_CHANGES[0].before is before and _LAST_CHANGES[0].after is after:
        return _LAST_CHANGES[0]
    changes = _Changes(before, after)
    _LAST_CHANGES[:] = [changes]
    return changes


@step_invariant(
    "version-monotonic",
    "From one observation to the next, the channel's settled value for a key never takes a lower "
    "version within one lifetime (unless the key was deleted and written again in between), and no "
    "running broker's view (the same incarnation) moves a key it held to a lower version, unless it "
    "lands on the channel's settled value or its topic reader passed the start of the key's current "
    "lifetime in that step (a reader that crossed a deletion).",
    differs="The history form sees every record a view takes and counts a deletion only when the view "
    "itself took the tombstone; the step form sees where each step leaves a view and counts a deletion by "
    "the channel. So a metadata-store view that reads a node deleted and created again since its last "
    "notification, and jumps to the new lifetime's lower version, is reported by the history form only; "
    "and so is a lower version a view takes and leaves again within one step (a catch-up that reads "
    "several records; on the simulator one delivery is one record).",
    reads=("channel", "views"),
)
def version_monotonic_step(before: Observation, after: Observation) -> list[Violation]:
    changes = _changes(before, after)
    found = []
    for key, old, new in changes.channel:
        if old is not None and new is not None and new.version_id < old.version_id and changes.same_lifetime(key):
            detail = f"the channel went from {_brief(old)} to {_brief(new)}"
            found.append(Violation("version-monotonic", detail, key))
    for broker, key, old, new in changes.views:
        if (
            new.version_id < old.version_id
            and not changes.lands_on_channel(key, new)
            and not changes.crossed_deletion(broker, key)
        ):
            settled = _brief(after.channel.get(key))
            detail = f"{broker_name(broker)} went from {_brief(old)} to {_brief(new)} (the channel holds {settled})"
            found.append(Violation("version-monotonic", detail, key))
    return found


@step_invariant(
    "one-value-per-version",
    "From one observation to the next, the channel's settled value for a key never changes to a "
    "different value of the same version within one lifetime, and no running broker's view (the same "
    "incarnation) replaces a value it held by a different one of the same version, unless it lands on "
    "the channel's settled value or its topic reader crossed the key's deletion in that step.",
    differs="The history form also requires every value a view takes to be one the channel settled on "
    "at some time: that needs every value settled so far, a history the state does not hold, so the "
    "step form decides the per-step part only (a view taking a value of a higher version than the "
    "channel ever held is reported by the history form alone).",
    reads=("channel", "views"),
)
def one_value_per_version_step(before: Observation, after: Observation) -> list[Violation]:
    changes = _changes(before, after)
    found = []
    for key, old, new in changes.channel:
        if old is None or new is None or new.version_id != old.version_id or not changes.same_lifetime(key):
            continue
        if old != new:
            detail = f"the channel's version {new.version_id} went from {_brief(old)} to {_brief(new)}"
            found.append(Violation("one-value-per-version", detail + _differing(old, new), key))
    for broker, key, old, new in changes.views:
        if (
            new.version_id == old.version_id
            and old != new
            and not changes.lands_on_channel(key, new)
            and not changes.crossed_deletion(broker, key)
        ):
            detail = f"{broker_name(broker)}'s version {new.version_id} went from {_brief(old)} to {_brief(new)}"
            found.append(Violation("one-value-per-version", detail + _differing(old, new), key))
    return found


@step_invariant(
    "no-resurrection",
    "From one observation to the next, a key whose current lifetime has a Deleted settled on the "
    "channel does not become active (Owned, Assigning, Releasing, Splitting) unless it was deleted "
    "and written again in between.",
    differs="The observation knows a Deleted of the key's current lifetime exactly on the system topic "
    "(folded from the log, which the state holds); on the metadata store only while the node holds it "
    "(the node's history is not state, and the table's one way out of Deleted is the node's removal), "
    "so a store key taken from Deleted to Free and then to Owned by writes that bypass the resolver is "
    "reported by the record form alone. A key that becomes active and leaves it again within one step is "
    "seen by the record form alone.",
    reads=("channel",),
)
def no_resurrection_step(before: Observation, after: Observation) -> list[Violation]:
    if not before.deleted:
        return []
    changes = _changes(before, after)
    found = []
    for key, old, new in changes.channel:
        if key not in before.deleted or new is None or new.state not in ACTIVE or not changes.same_lifetime(key):
            continue
        if old is not None and old.state in ACTIVE:
            continue  # already active: reported when it became so
        detail = f"becomes {_brief(new)} after Deleted (held {_brief(old)})"
        found.append(Violation("no-resurrection", detail, key))
    return found


@step_invariant(
    "split-partitions-parent",
    "From one observation to the next, a key whose settled value goes from Splitting to Deleted leaves "
    "the channel holding keys strictly inside its hash range that partition that range exactly.",
    differs="The record form counts the children that became Owned since the parent's Splitting record "
    "(the log's history); the step form counts the children the channel holds when the parent becomes "
    "Deleted, whatever their state. A child Owned and then tombstoned before its parent's Deleted counts "
    "in the first only, a child written but never Owned in the second only (Pulsar writes children "
    "Owned at once, and a tombstone waits an hour).",
    reads=("channel",),
)
def split_partitions_parent_step(before: Observation, after: Observation) -> list[Violation]:
    changes = _changes(before, after)
    found = []
    for key, old, new in changes.channel:
        if old is None or new is None or old.state is not S.Splitting or new.state is not S.Deleted:
            continue
        parent = _bundle(key)
        if parent is None:
            continue
        children = sorted(
            child
            for other in after.channel
            if other != key
            and (child := _bundle(other)) is not None
            and _splitting_parent(parent, old, child)
            and child.namespace == parent.namespace
        )
        edge = parent.lower
        for child in children:
            if child.lower != edge:
                break
            edge = child.upper
        else:
            if edge == parent.upper:
                continue
        ranges = ", ".join(child.range_name for child in children) or "none"
        detail = f"Deleted after {_brief(old)}; children held: {ranges}, which do not partition {parent.range_name}"
        found.append(Violation("split-partitions-parent", detail, key))
    return found


@step_invariant(
    "no-spurious-takeover",
    "From one observation to the next, the channel never takes a bundle Owned by a broker that runs "
    "and is registered in both away from that broker by a forced record (a clean-up or monitor "
    "override) or a tombstone: overrides are for the bundles of brokers that left or died.",
    ["#23064", "#21721"],
    reads=("channel",),
)
def no_spurious_takeover(before: Observation, after: Observation) -> list[Violation]:
    changes = _changes(before, after)
    found = []
    for key, old, new in changes.channel:
        if old is None or old.state is not S.Owned or (new is not None and (not new.force or new == old)):
            continue
        owner = old.dst_broker
        if owner is None or not all(owner in o.registered and owner in o.started for o in (before, after)):
            continue
        what = "tombstoned" if new is None else f"overridden by {_brief(new)}"
        detail = f"{_brief(old)} {what} while {broker_name(owner)} runs, registered"
        found.append(Violation("no-spurious-takeover", detail, key))
    return found


@step_invariant(
    "unload-completion-matches",
    "From one observation to the next, an admin unload a broker issued is reported done only on a "
    "record the unload caused: its view's value for the bundle then names the unloaded owner as its "
    "source (the Free of a plain unload, the Owned that ends a transfer or an override) or is the "
    "tombstone; never an assignment's Owned, which has no source. A step in which the broker's reader "
    "takes several records (a flush) is not judged: the record that ended the unload may be one it passed.",
    ["#22379", "#22859"],
    reads=("unloads",),
)
def unload_completion_matches(before: Observation, after: Observation) -> list[Violation]:
    if not before.pending_unloads:
        return []
    found = []
    for broker, ops in before.pending_unloads.items():
        if broker not in after.incarnations or before.incarnations.get(broker) != after.incarnations.get(broker):
            continue  # crashed or restarted: its unloads failed with it
        if after.positions.get(broker, 0) - before.positions.get(broker, 0) > 1:
            # its reader took several records in one step (a flush): the record that ended the
            # unload may be one it passed, which the step's two ends do not show; a delivery is one
            continue
        still = after.pending_unloads.get(broker, {})
        for key, (source, _destination) in ops.items():
            if key in still:
                continue
            value = after.views.get(broker, {}).get(key)
            if value is None or value.source_broker == source:
                continue
            detail = f"{broker_name(broker)} reported its unload of {_name(source)} done on {_brief(value)}"
            found.append(Violation("unload-completion-matches", detail, key))
    return found


def _brief(data: ValueView | Rec | None) -> str:
    if isinstance(data, Rec):
        return data.brief()
    return brief(data, none="nothing")


def _name(broker: int | None) -> str | None:
    return None if broker is None else broker_name(broker)


def _differing(first: Rec | ServiceUnitStateData, second: Rec | ServiceUnitStateData) -> str:
    """Where two values differ, when their brief forms read the same (a timestamp, a split map)."""
    if _brief(first) != _brief(second):
        return ""
    one = first.data() if isinstance(first, Rec) else first
    other = second.data() if isinstance(second, Rec) else second
    fields = [name for name in type(one).model_fields if getattr(one, name) != getattr(other, name)]
    return f", which differs in {', '.join(fields)}"


def _chosen(ids: Iterable[str] | None) -> list[Invariant]:
    """The invariants named, or every default one (the hazards only when named)."""
    if ids is None:
        return [inv for inv in CATALOGUE.values() if inv.default]
    wanted = set(ids)
    return [inv for inv in CATALOGUE.values() if inv.id in wanted]


def check_step(before: Observation, after: Observation, ids: Iterable[str] | None = None) -> list[Violation]:
    """Every default step invariant (or those named) on two consecutive observations of one
    cluster (``after`` the later). Sound on any two observations of a run in order, but complete
    only on consecutive ones: a change made and undone between them is not seen."""
    found: list[Violation] = []
    changed: frozenset[StepPart] | None = None
    for inv in _with_form(ids, "action_check"):
        if inv.step_reads is not None:
            if changed is None:
                changed = changed_parts(before, after)
            if not inv.step_reads & changed:
                continue
        shown = inv.action_check(before, after)  # type: ignore[misc]
        if shown:
            found.extend(shown)
    return found


_ORDER: tuple[StepPart, ...] = ("channel", "views", "unloads")
_PARTS: dict[tuple[bool, ...], frozenset[StepPart]] = {
    changed: frozenset(part for part, flag in zip(_ORDER, changed, strict=True) if flag)
    for changed in itertools.product((False, True), repeat=len(_ORDER))
}
"""Every set of parts (by whether the channel, the views, the unloads changed), made once."""


def changed_parts(before: Observation, after: Observation) -> frozenset[StepPart]:
    """The parts of the state (:data:`StepPart`) a step may have changed from ``before`` to
    ``after``, told by identity (a step shares every record it did not replace): the parts it
    left as they were are certainly unchanged. Every part for a hand-made observation."""
    old, new = before.state, after.state
    if before.handmade or after.handmade or old is None or new is None or len(old.brokers) != len(new.brokers):
        return _PARTS[True, True, True]
    if before.setup.on_store:
        channel = old.store.channel is not new.store.channel
    else:
        channel = old.topic.settled is not new.topic.settled
    views = unloads = False
    for was, now in zip(old.brokers, new.brokers, strict=True):
        if was is now or not (was.alive and now.alive and was.incarnation == now.incarnation):
            continue  # the same record, or not running in one incarnation in both
        if was.view is not now.view:
            views = True
        if was.unloads is not now.unloads:
            unloads = True
    return _PARTS[channel, views, unloads]


def step_ids(ids: Iterable[str] | None = None) -> list[str]:
    """The ids of the step invariants :func:`check_step` would run."""
    return [inv.id for inv in _chosen(ids) if inv.action_check is not None]


def check(obs: Observation, ids: Iterable[str] | None = None) -> list[Violation]:
    """Every applicable default cluster invariant (or those named) on one observation."""
    found: list[Violation] = []
    for inv in _with_form(ids, "cluster_check", obs.quiescent):
        shown = inv.cluster_check(obs)  # type: ignore[misc]
        if shown:
            found.extend(shown)
    return found


def _with_form(ids: Iterable[str] | None, form: str, quiescent: bool = True) -> tuple[Invariant, ...]:
    """The invariants named (or every default one) that have ``form`` (an :class:`Invariant`
    field: ``cluster_check``, ``action_check``) and apply (those checked ``when="quiescent"``
    only where ``quiescent``), worked out once per set of ids, form and quiescence: the model
    checker asks on every transition."""
    if ids is None or isinstance(ids, tuple):
        # the same tuple as the last call (the checker passes its own on every state and step):
        # what that call worked out, without hashing every id again
        last = _LAST_FORM.get((form, quiescent))
        if last is not None and last[0] is ids and last[1] == _REVISION[0]:
            return last[2]
    key = (form, None if ids is None else tuple(ids), quiescent)
    known = _FORMS.get(key)
    if known is None or known[0] != _REVISION[0]:
        chosen = tuple(
            inv for inv in _chosen(key[1]) if getattr(inv, form) is not None and (quiescent or inv.when != "quiescent")
        )
        known = _FORMS[key] = (_REVISION[0], chosen)
    if ids is None or isinstance(ids, tuple):
        _LAST_FORM[form, quiescent] = (ids, known[0], known[1])
    return known[1]


_FORMS: dict[tuple[str, tuple[str, ...] | None, bool], tuple[int, tuple[Invariant, ...]]] = {}
"""What :func:`_with_form` worked out, with the catalogue's revision it read."""
_LAST_FORM: dict[tuple[str, bool], tuple[tuple[str, ...] | None, int, tuple[Invariant, ...]]] = {}
"""Per form and quiescence, the ids (a tuple, or None) :func:`_with_form` was last asked for, the
catalogue's revision and the answer."""


def record_checks(ids: Iterable[str] | None = None) -> RecordChecks:
    """The record forms of the default invariants (or those named), grouped by the event they read."""
    chosen = _chosen(ids)
    return RecordChecks(
        steps=tuple((inv.step_check, inv.looks_at) for inv in chosen if inv.step_check is not None),
        dwells=tuple((inv.dwell_check, inv.looks_at, inv.fires_after) for inv in chosen if inv.dwell_check is not None),
        deadlines=tuple(inv.deadline_check for inv in chosen if inv.deadline_check is not None),
    )


def record_ids(ids: Iterable[str] | None = None) -> list[str]:
    """The ids of the record invariants :func:`record_checks` would run."""
    return [inv.id for inv in _chosen(ids) if inv.has_record_form]


def history_ids(ids: Iterable[str] | None = None) -> list[str]:
    """The ids of the history invariants :func:`check_history` would run."""
    return [inv.id for inv in _chosen(ids) if inv.history_check is not None]


def check_history(history: KeyHistory, ids: Iterable[str] | None = None) -> list[Violation]:
    """Every default history invariant (or those named) on one bundle's history."""
    folds = history_folds(ids)
    found: list[list[Violation]] = [[] for _ in folds]  # each invariant's, in the catalogue's order
    sinks = [into.append for into in found]
    stream = HistoryStream(history.key, zip(folds, sinks, strict=True), history.storage, history.model)
    for record in history.channel:
        stream.offer(record)
    for _, records in sorted(history.views.items()):
        for record in records:
            stream.offer(record)
    stream.finish()
    return [violation for each in found for violation in each]


def history_folds(ids: Iterable[str] | None = None) -> list[type[HistoryFold]]:
    """The folds of the default history invariants (or those named), in the catalogue's order."""
    return [inv.history_check for inv in _chosen(ids) if inv.history_check is not None]


def _validated(raw: object) -> ServiceUnitStateData:
    """A record's value: already validated, or Pulsar's JSON object."""
    return raw if isinstance(raw, ServiceUnitStateData) else ServiceUnitStateData.model_validate(raw)


def _decoded(record: Mapping[str, object]) -> Mapping[str, object]:
    """A channel or view record with its value validated (so the two kinds of check share it)."""
    raw = record.get("value")
    if raw is None or record.get("kind") not in ("channel", "view"):
        return record
    value = _validated(raw)
    return record if value is raw else {**record, "value": value}


def history_record(record: Mapping[str, object]) -> tuple[str, HistoryRecord] | None:
    """A trace's channel or view record as its key and :class:`HistoryRecord` (value decoded
    from Pulsar JSON, or already :class:`ServiceUnitStateData`; a restarted broker's view, by
    its ``incarnation``, is another observer); None for other records."""
    kind = record.get("kind")
    if kind not in ("channel", "view"):
        return None
    raw = record.get("value")
    value = None if raw is None else _validated(raw)
    offset = int(record["offset"])  # type: ignore[call-overload]
    if kind == "channel":
        time = int(record.get("publish_time", 0))  # type: ignore[call-overload]
        return str(record["key"]), HistoryRecord(offset, time, value)
    observer = str(record["observer"])
    if record.get("incarnation") is not None:  # a restarted broker's view starts afresh
        observer = f"{observer}#{record['incarnation']}"
    time = int(record.get("time", 0))  # type: ignore[call-overload]
    return str(record["key"]), HistoryRecord(offset, time, value, observer, bool(record.get("accepted", True)))


def histories_from_trace(
    trace: Iterable[Mapping[str, object]],
    storage: StorageType = StorageType.SystemTopic,
    model: str = DEFAULT_MODEL,
) -> list[KeyHistory]:
    """Group a trace's channel and view records by key (values decoded from Pulsar JSON, or
    already :class:`ServiceUnitStateData`)."""
    channel: dict[str, list[HistoryRecord]] = {}
    views: dict[str, dict[str, list[HistoryRecord]]] = {}
    for record in trace:
        found = history_record(record)
        if found is None:
            continue
        key, entry = found
        if entry.observer is None:
            channel.setdefault(key, []).append(entry)
        else:
            views.setdefault(key, {}).setdefault(entry.observer, []).append(entry)
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


Form = Literal["cluster", "step", "history", "records"]

ENGINE_FORMS: dict[str, frozenset[Form]] = {
    "model checker": frozenset({"cluster", "step"}),
    "Hypothesis bench: each step": frozenset({"cluster", "step"}),
    "simulate, replay: each step": frozenset({"cluster", "step"}),
    "simulate, replay, bench: the run's trace": frozenset({"history", "records"}),
    "auditor": frozenset({"history", "records"}),
}
"""Which forms each engine runs (the catalogue page's table is generated from it). ``statechan
simulate``/``replay`` decide the step forms by comparing each checked observation with the one
before (:class:`statechan.cluster.runner.ObservationCheck`)."""


def _forms(inv: Invariant) -> list[Form]:
    found: list[Form] = []
    if inv.cluster_check is not None:
        found.append("cluster")
    if inv.action_check is not None:
        found.append("step")
    if inv.history_check is not None:
        found.append("history")
    if inv.has_record_form:
        found.append("records")
    return found


def catalogue_page(note: str) -> str:
    """The catalogue as a Markdown page (``docs/catalogue.md``), generated from the declarations."""
    out = [
        "# Invariant catalogue",
        "",
        note,
        "",
        "Each invariant is one function in `statechan/invariants/catalogue.py` per form it has, all under "
        "one id and one statement. The Hypothesis bench (`properties/bench.py`), the simulation tests, "
        "`statechan simulate`, `statechan replay`, the model checker and the trace auditor "
        "(`statechan audit`) call these functions; nothing restates them.",
        "",
        "- *cluster* invariants look at the cluster at one step, as an observation every engine that "
        "steps the cluster produces (`always`: after every step; `quiescent`: once nothing is waiting "
        "to be delivered): state predicates;",
        "- *step* invariants look at two consecutive observations, as TLA+'s actions `[][A]_v`: what may "
        "change from one step to the next. The observation carries what they need of the channel itself "
        "(each key's settled value, where its lifetime began, whether a Deleted was settled in it) and "
        "each broker's incarnation; they are the definition every engine that produces observations "
        "decides;",
        "- *history* invariants look at one bundle's records (the channel's, in log order, and what "
        "each broker's view took), a record at a time: the auditor's streaming form;",
        "- *records* invariants look at a namespace's channel records replayed through the resolver in "
        "log order (`statechan/invariants/replay.py`): each accepted record, each state a key dwelt in, each "
        "clean-up deadline after a broker unregistered. Their definitions are the auditor's "
        "(see `traces/README.md`), and each is counted once per offending episode.",
        "",
        "Where an id has a step form and a history or record form, the two decide the same statement "
        "from what each sees, and the row says where they differ and why (*Step* and *Records* give "
        "each form's exact definition). History and record invariants run on a captured trace as well "
        "as on a simulated run. Invariants marked *hazard* are not checked unless named: the current "
        "protocol does not hold them, for reasons documented in [findings.md](findings.md).",
        "",
        "| id | forms | checked | statement | guards |",
        "|---|---|---|---|---|",
    ]
    for inv in CATALOGUE.values():
        checked: list[str] = [inv.when] if inv.cluster_check is not None else []
        if inv.action_check is not None:
            checked.append("each step")
        if inv.history_check is not None:
            checked.append("per bundle")
        if inv.has_record_form:
            checked.append("per namespace")
        if not inv.default:
            checked.append("hazard")
        statement = inv.statement
        if inv.step_statement is not None and inv.step_statement != inv.statement:
            statement += f" *Step:* {inv.step_statement}"
        if inv.record_statement is not None and inv.record_statement != inv.statement:
            statement += f" *Records:* {inv.record_statement}"
        if inv.step_differs is not None:
            statement += f" *Where the forms differ:* {inv.step_differs}"
        guards = ", ".join(inv.guards)
        out.append(f"| `{inv.id}` | {inv.kind} | {', '.join(checked)} | {statement} | {guards} |")
    engines = list(ENGINE_FORMS)
    out += [
        "",
        "## Which engine checks which",
        "",
        "Every engine calls the functions above; what each can decide depends on what it sees. The model "
        "checker (`statechan check`) holds states, not runs: it decides the cluster forms on every new "
        "state and on every step that answers a lookup, and the step forms on every transition, one into a "
        "known state too (the parent's observation and the child's). The simulator (`statechan simulate`, `statechan "
        "replay`) and the Hypothesis bench decide the forms below after every step and, at the end of a "
        "run, the history and record forms over the run's trace. The auditor (`statechan audit`) sees only "
        "a recorded trace: the history and record forms. Each cell names the form an engine runs.",
        "",
        "| id | " + " | ".join(engines) + " |",
        "|---|" + "---|" * len(engines),
    ]
    simulated = set(simulation_ids())
    for inv in CATALOGUE.values():
        cells = []
        for engine, runs in ENGINE_FORMS.items():
            forms = [form for form in _forms(inv) if form in runs]
            if not forms:
                cells.append("—")
            elif not inv.default:
                cells.append(" + ".join(forms) + " if named (hazard)")
            elif engine.endswith("the run's trace") and inv.id not in simulated:
                cells.append("no (see below)")
            else:
                cells.append(" + ".join(forms))
        out.append(f"| `{inv.id}` | " + " | ".join(cells) + " |")
    out += [
        "",
        "Gaps, and why:",
        "",
        *(f"- `{key}`: {why}" for key, why in STEP_GAPS.items()),
        *(
            f"- {engine.split(':')[0]}: its check looks at each observation alone, so it decides no step form "
            "yet; an `ObservationCheck(check, check_step)` (`statechan.cluster.runner`) in its place decides them."
            for engine, runs in ENGINE_FORMS.items()
            if "cluster" in runs and "step" not in runs
        ),
        "- Not run on simulated runs' traces: "
        + "; ".join(f"`{key}`: {why}" for key, why in NOT_IN_SIMULATION.items()),
        "",
    ]
    return "\n".join(out)


STEP_GAPS = {
    "single-owner, orphan-cleaned": "a cluster form (on the brokers' views and the registry, with the "
    "simulator's clean-up bound) and a record form (on the channel's records, with the auditor's "
    "thresholds): one property, seen by the brokers in a cluster and by the records in a trace, where "
    "a trace has no views.",
    "owner-registered": "record form only. A step form would read the channel's new Assigning or Owned "
    "and the registry of the two observations, but the simulated protocol does not hold it (see below), "
    "so every engine that produces observations would report the same known race.",
    "stuck-in-flight, lingering-semi-terminal": "dwell forms only: they time a state over a trace's "
    "publish times against a production cluster's timeouts. On an observation, `in-flight-completes` is "
    "`stuck-in-flight`'s counterpart (its bound counts from when a leader acts, as nothing moves without "
    "one); a state form of `lingering-semi-terminal` would fire whenever a simulated run leaves the "
    "cluster without a leader for an hour, as only the leader tombstones.",
    "compaction-equivalence, compaction-keeps-deletions": "history forms only: they quantify over every "
    "reader position and every compaction horizon of a key's log, quadratic in the log; a state holds "
    "the log (the model checker's too), but deciding them at every state would cost that at every state.",
    "one-value-per-version (views)": "the history form's second part, every value a view takes being one "
    "the channel settled on at some time, needs every value settled so far: a history the state does not "
    "hold. The step form decides the per-step part; the trace forms decide the rest.",
    "registered-while-running, leader-elected, lookup-not-stranded, unload-not-stranded, "
    "unload-completion-matches": "no trace form: they read what a broker holds in memory (whether its "
    "channel runs, its session, its deferred lookups, the unloads it waits for), which a channel trace "
    "does not record; the trace's `registry` and `leader` records alone cannot tell a running broker "
    "from a stopped one.",
    "no-spurious-takeover, semi-terminal-tombstoned": "no trace form yet: a trace records the channel's "
    "overrides and tombstones, but whether the owner was running then needs the registry records and a "
    "liveness the trace does not carry (a crashed broker stays registered until its session ends).",
}
"""What the step forms do not cover, and why (the catalogue page lists it)."""


def registry_from_trace(trace: Iterable[Mapping[str, object]]) -> Registry:
    """The broker registry a trace's ``registry`` records describe."""
    return Registry(
        (int(r["offset"]), int(r.get("time", 0)), str(r["broker"]), r["event"] == "registered")  # type: ignore[call-overload]
        for r in trace
        if r.get("kind") == "registry"
    )


def replay_trace(
    trace: Iterable[Mapping[str, object]],
    settings: ReplaySettings | None = None,
    ids: Iterable[str] | None = None,
) -> tuple[list[Violation], TraceReplay]:
    """The record invariants over a trace's channel records (a list: it is read twice, registry
    first); values as Pulsar's JSON objects or already validated."""
    records = list(trace)
    replay = TraceReplay(record_checks(ids), settings, registry_from_trace(records))
    found: list[Violation] = []
    end = 0
    for record in records:
        time = int(record.get("publish_time", record.get("time", 0)))  # type: ignore[call-overload]
        end = max(end, time)
        if record.get("kind") != "channel":
            continue
        raw = record.get("value")
        value = None if raw is None else light(_validated(raw))
        found.extend(replay.offer(str(record["key"]), int(record["offset"]), time, value))  # type: ignore[call-overload]
    found.extend(replay.finish(end))
    return found, replay


NOT_IN_SIMULATION = {
    "owner-registered": "a lookup decides its destination on the registry it read; the Assigning it "
    "writes may name a broker that has left since (the leader's clean-up moves it, which "
    "orphan-cleaned bounds). A production trace holds it in practice; a simulated run with a "
    "shutdown racing a lookup does not.",
}
"""Default invariants the end-of-run check of a simulated cluster leaves out, and why."""


def simulation_ids() -> list[str]:
    """The default invariants a simulated run's history is checked against."""
    return [inv.id for inv in _chosen(None) if inv.id not in NOT_IN_SIMULATION]


def hazard_ids() -> list[str]:
    """The cluster invariants off by default: hazards the current protocol is known not to hold,
    checked when named."""
    return [inv.id for inv in CATALOGUE.values() if not inv.default and inv.cluster_check is not None]


def checked_ids(skip: Iterable[str] = (), also: Iterable[str] = ()) -> list[str]:
    """The invariants a check of a simulated cluster runs: the defaults but those in ``skip``, and
    the hazard entries named in ``also`` (``statechan check --skip/--also``)."""
    left_out, named = set(skip), set(also)
    return [i for i in simulation_ids() if i not in left_out] + [h for h in hazard_ids() if h in named]


def simulation_settings(config: SimConfig, storage: StorageType, model: str) -> ReplaySettings:
    """Record-invariant thresholds for a simulated cluster: the liveness bounds its cluster
    invariants use, rather than the auditor's defaults for a production cluster."""
    cfg = config.channel
    return ReplaySettings(
        storage=storage,
        model=model,
        in_flight_timeout_ms=in_flight_bound_ms(cfg),
        cleanup_timeout_ms=cleanup_bound_ms(cfg),
        # the leader's monitor tombstones after the delay, at its next run; a leader change adds the clean-up bound
        tombstone_timeout_ms=(cfg.tombstone_delay_s + 2 * cfg.monitor_interval_s) * 1000 + cleanup_bound_ms(cfg),
    )


def check_trace(
    trace: Iterable[Mapping[str, object]],
    storage: StorageType = StorageType.SystemTopic,
    model: str = DEFAULT_MODEL,
    ids: Iterable[str] | None = None,
    settings: ReplaySettings | None = None,
) -> list[Violation]:
    """Every default history and record invariant (or those named) on a trace; ``settings``
    (default: the auditor's) give the record invariants' thresholds."""
    wanted = None if ids is None else list(ids)
    records = [_decoded(record) for record in trace]
    found: list[Violation] = []
    for history in histories_from_trace(records, storage, model):
        found.extend(check_history(history, wanted))
    settings = settings or ReplaySettings(storage=storage, model=model)
    found.extend(replay_trace(records, settings, wanted)[0])
    return found


# -- column shortcuts of the record invariants ----------------------------------------------------------
def owner_registered_quiet(columns: StepColumns) -> Any:
    """The records :func:`owner_registered` cannot fire on, by column: not an Assigning or Owned
    value, a trace without registry records, the same destination as an Assigning or Owned value
    held (one hand-over), or a destination registered at the record's offset."""
    import numpy as np

    handing = [value.state in (S.Assigning, S.Owned) for value in columns.values]
    if not columns.registry.present or not any(handing):
        return np.ones(len(columns.value), dtype=bool)
    brokers = list(dict.fromkeys(value.dst_broker for value in columns.values))
    code = {broker: i for i, broker in enumerate(brokers)}
    takes = np.array([*handing, False])  # number -1: a tombstone, nothing held
    dst = np.array([*(code[value.dst_broker] for value in columns.values), -1], dtype=np.int64)
    value, held = columns.value, columns.held
    quiet = ~takes[value] | (takes[held] & (dst[held] == dst[value]))
    asked = np.flatnonzero(~quiet)
    quiet[asked] = columns.registry.registered_many(brokers, dst[value[asked]], columns.offset[asked])
    return quiet


COLUMN_SHORTCUTS: dict[StepCheck, ColumnShortcut] = {owner_registered: owner_registered_quiet}
"""The step checks with a column shortcut (:data:`statechan.invariants.replay.ColumnShortcut`): the
auditor works out a batch's records each cannot fire on at once, and calls the check for the others."""
