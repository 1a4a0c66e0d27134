"""What a sequence diagram shows, built from what a run or a trace emits at its edges.

A saved run (or a model checker's counterexample) is replayed through the same timeline and
invariant checks as ``statechan replay``; the picture is made of what the cluster hands out after
each step — the action it took (``Cluster.history``), the records it wrote (``Cluster.trace``:
channel, view, registry and leader records, with their offsets) and the lookup answers it gave
(``Cluster.answers``) — never of its brokers, stores or timers. A key's story from a trace is made
of the same records, read back by :func:`statechan.explain.story`. Both become one
:class:`SequenceDiagram` that :mod:`statechan.diagram` draws.

The resolver's verdict on a channel record is the fold a reader of the whole channel makes
(:func:`statechan.resolver.offer` from the key's first record, as ``traces show`` and the auditor
replay it); each broker's own verdict is its view record (took or refused).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from statechan.resolver import Verdict, offer, rules_for
from statechan.states import StorageType
from statechan.traces import AnyRecord, ChannelRecord, LeaderRecord, RegistryRecord, ViewRecord, parse_record
from statechan.values import ServiceUnitStateData, brief

if TYPE_CHECKING:
    from statechan.cluster import Action, Cluster, LookupAnswer, SimConfig
    from statechan.cluster.runner import ObservationCheck
    from statechan.explain import Entry

CLIENTS = "clients"
CHANNEL = "channel"
"""The two lifelines that are no broker: the clients and admins on the left, the channel (the
system topic or the metadata store) on the right."""


class Lane(enum.Enum):
    CLIENTS = "clients"
    BROKER = "broker"
    CHANNEL = "channel"


class Kind(enum.Enum):
    WRITE = "write"
    """A channel record: an arrow from its writer to the channel."""
    DELIVER = "deliver"
    """A broker's view took (or refused) a record: an arrow from the channel to the broker."""
    REQUEST = "request"
    """A client's lookup or an admin's operation: an arrow from the clients to a broker."""
    ANSWER = "answer"
    """A lookup's answer: an arrow from the broker back to the clients."""
    MARK = "mark"
    """Something that happens on one lifeline: a fault, a registry change, an election, a compaction."""


class Mark(enum.Enum):
    CRASH = "crash"
    RESTART = "restart"
    SHUTDOWN = "shutdown"
    SESSION_LOST = "session-lost"
    SESSION_EXPIRED = "session-expired"
    RECONNECT = "reconnect"
    RESIGN = "resign"
    LEADER = "leader"
    COMPACTION = "compaction"
    REGISTERED = "registered"
    UNREGISTERED = "unregistered"
    UNATTRIBUTED = "unattributed"
    """A channel record whose writer the trace does not name (a metadata-store dump)."""

    @property
    def down(self) -> bool:
        """The broker's process stops here (its lifeline is drawn dashed until a restart)."""
        return self in (Mark.CRASH, Mark.SHUTDOWN)


@dataclass(frozen=True)
class Lifeline:
    id: str
    label: str
    lane: Lane


@dataclass(frozen=True)
class Event:
    """One row of the diagram."""

    kind: Kind
    source: str
    """The lifeline the arrow leaves (a mark's own lifeline)."""
    target: str | None
    """The lifeline the arrow reaches (None for a mark)."""
    label: str
    """Short, on the arrow or beside the mark."""
    detail: str
    """In full, in the log column beside the row."""
    ok: bool | None = None
    """The verdict on a record (accepted, refused); None where there is none."""
    offset: int | None = None
    mark: Mark | None = None


@dataclass(frozen=True)
class Breach:
    """An invariant broken at a group, with its statement from the catalogue."""

    invariant: str
    statement: str
    detail: str
    offset: int | None = None
    """The record the breach names, when it names one."""


@dataclass
class Group:
    """A step of a run (or an entry of a story): a heading in the gutter and its rows."""

    number: int | None
    heading: str
    time_ms: int
    events: list[Event] = field(default_factory=list)
    breaches: list[Breach] = field(default_factory=list)
    focus: bool = False
    """Asked for (``--around``, an audit example): drawn highlighted even without a breach."""
    loop: bool = False
    """Part of the repeating tail of a liveness counterexample."""
    error: str | None = None


@dataclass
class SequenceDiagram:
    title: str
    lifelines: list[Lifeline]
    groups: list[Group]
    subtitle: str = ""
    keys: dict[str, str] = field(default_factory=dict)
    """Tag -> bundle key, when the diagram has several keys (labels carry the tag)."""
    leader_at_start: str | None = None
    facts: list[tuple[str, str]] = field(default_factory=list)
    """What the page lists above the picture (the run's configuration, the trace's counts)."""
    text: str = ""
    """The same run as text (``statechan replay``'s timeline), for the page's text view."""
    omitted: str = ""
    """What the picture leaves out, said under it (steps past the break, entries past a window)."""
    checked: bool = False
    """The invariants were checked (a replayed run), so no breach means none broke."""

    @property
    def brokers(self) -> list[Lifeline]:
        return [line for line in self.lifelines if line.lane is Lane.BROKER]

    @property
    def breaches(self) -> list[tuple[Group, Breach]]:
        return [(g, b) for g in self.groups for b in g.breaches]


# -- names, short enough for a picture -----------------------------------------------------------------
class Names:
    """Short names for brokers (a port every broker shares dropped) and keys (a tag each, when there
    are several; the hash range alone when there is one)."""

    def __init__(self, brokers: Iterable[str], keys: Iterable[str]) -> None:
        ids = sorted(set(brokers))
        ports = {b.rsplit(":", 1)[1] for b in ids if ":" in b}
        self._port = f":{next(iter(ports))}" if len(ports) == 1 and all(":" in b for b in ids) else ""
        ordered = list(dict.fromkeys(keys))
        self.tags = {key: f"k{i}" for i, key in enumerate(ordered, start=1)} if len(ordered) > 1 else {}

    def broker(self, broker_id: str | None) -> str:
        if not broker_id:
            return "nobody"
        return broker_id.removesuffix(self._port) if self._port else broker_id

    def value(self, value: ServiceUnitStateData | None, none: str = "tombstone") -> str:
        """:func:`statechan.values.brief` with short broker names."""
        text = brief(value, none=none)
        return text.replace(self._port + " ", " ").removesuffix(self._port) if self._port else text

    def short_value(self, value: ServiceUnitStateData | None, none: str = "tombstone") -> str:
        """State and version: what fits on an arrow."""
        if value is None:
            return none
        return f"{value.state.value}{' force' if value.force else ''} v{value.version_id}"

    def key(self, key: str) -> str:
        """The key's tag in brackets when the diagram has several keys, else nothing."""
        return f"[{self.tags[key]}] " if key in self.tags else ""

    def bundle(self, key: str) -> str:
        """A bundle on an arrow: its tag when the diagram has several keys, else its hash range."""
        return f"[{self.tags[key]}]" if key in self.tags else key.rsplit("/", 1)[-1]

    def text(self, text: str) -> str:
        """Free text (an action, a violation) with short broker names."""
        return text.replace(self._port, "") if self._port else text

    def legend(self) -> dict[str, str]:
        return {tag: key for key, tag in self.tags.items()}


# -- records -> rows ---------------------------------------------------------------------------------------
def record_events(record: AnyRecord, verdict: Verdict | None, names: Names, actor: str | None = None) -> list[Event]:
    """The rows of one trace record: a channel record's write, a view's delivery, a registry
    change or an election as a mark. A channel record that does not name its producer (the
    metadata store's) is drawn from ``actor``, the broker whose step wrote it, when there is one."""
    if isinstance(record, ChannelRecord):
        tag = names.key(record.key)
        label = f"{tag}{names.short_value(record.value)}"
        said = "" if verdict is None else f" — {verdict}"
        detail = f"@{record.offset} {tag}{names.value(record.value)}{said}"
        ok = None if verdict is None else verdict.accepted
        if record.producer:
            by, how = record.producer, f" (by {names.broker(record.producer)})"
        elif actor:
            by, how = actor, f" (by {names.broker(actor)}, whose step wrote it)"
        else:
            return [
                Event(
                    Kind.MARK,
                    CHANNEL,
                    None,
                    label,
                    f"{detail} (writer not recorded)",
                    ok,
                    record.offset,
                    Mark.UNATTRIBUTED,
                )
            ]
        return [Event(Kind.WRITE, by, CHANNEL, label, detail + how, ok, record.offset)]
    if isinstance(record, ViewRecord):
        tag = names.key(record.key)
        if not record.accepted:
            what = "refused" if record.value is None else f"refused {names.short_value(record.value)}"
            full = "refused a record" if record.value is None else f"refused {names.value(record.value)}"
        else:
            what = "took " + names.short_value(record.value, none="nothing")
            full = "took " + names.value(record.value, none="nothing (the key is gone)")
        detail = f"@{record.offset} {tag}{names.broker(record.observer)}'s view {full}"
        return [Event(Kind.DELIVER, CHANNEL, record.observer, tag + what, detail, record.accepted, record.offset)]
    if isinstance(record, RegistryRecord):
        mark = Mark.REGISTERED if record.event == "registered" else Mark.UNREGISTERED
        detail = f"@{record.offset} registry: {names.broker(record.broker)} {record.event}"
        return [Event(Kind.MARK, record.broker, None, record.event, detail, None, record.offset, mark)]
    assert isinstance(record, LeaderRecord)
    detail = f"@{record.offset} {names.broker(record.broker)} is elected leader"
    return [Event(Kind.MARK, record.broker, None, "elected leader", detail, None, record.offset, Mark.LEADER)]


class VerdictFold:
    """The resolver's verdict on each channel record, folded per key from its first record."""

    def __init__(self, storage: StorageType, model: str | None) -> None:
        self.rules = rules_for(storage, model)
        self.held: dict[str, ServiceUnitStateData | None] = {}

    def __call__(self, record: ChannelRecord) -> Verdict:
        self.held[record.key], verdict = offer(self.rules, self.held.get(record.key), record.value)
        return verdict


def _brokers_named(records: Iterable[AnyRecord]) -> Iterator[str]:
    for record in records:
        if isinstance(record, ChannelRecord):
            yield from (b for b in (record.producer,) if b)
            if record.value is not None:
                yield from (b for b in (record.value.dst_broker, record.value.source_broker) if b)
        elif isinstance(record, ViewRecord):
            yield record.observer
        else:
            yield record.broker


def _lifelines(
    brokers: Sequence[str], names: Names, clients: bool, channel: str, groups: Sequence[Group]
) -> list[Lifeline]:
    """The clients (for a run), each broker, then any other the events name (an action on a
    broker the cluster does not have), and the channel."""
    named = [b for g in groups for e in g.events for b in (e.source, e.target) if b not in (None, CLIENTS, CHANNEL)]
    lines = [Lifeline(CLIENTS, "clients & admin", Lane.CLIENTS)] if clients else []
    lines += [Lifeline(b, names.broker(b), Lane.BROKER) for b in dict.fromkeys([*brokers, *named]) if b]
    return [*lines, Lifeline(CHANNEL, channel, Lane.CHANNEL)]


# -- breaches ----------------------------------------------------------------------------------------------
_VIOLATION = re.compile(r"(?P<id>[A-Za-z0-9_-]+)(?: \[(?P<key>[^\]]*?)(?: @ (?P<at>\d+))?\]| @ (?P<at2>\d+))?: ")
LIVENESS_STATEMENT = (
    "Every state can still reach a settled one (nothing waiting, nothing in flight, views agree): "
    "no run stays forever where none can be reached."
)


def breach(text: str, statements: Mapping[str, str]) -> Breach:
    """A violation as the checks print it (``id [key @ offset]: detail``), with its statement
    (none for a text that names no invariant of the catalogue)."""
    found = _VIOLATION.match(text)
    if found is None or found["id"] not in statements:
        return Breach("broken", "", text)
    at = found["at"] or found["at2"]
    return Breach(found["id"], statements[found["id"]], text, int(at) if at else None)


def statements() -> dict[str, str]:
    """Each invariant's statement, by id (the catalogue's)."""
    from statechan.invariants.catalogue import CATALOGUE

    return {i: inv.statement for i, inv in CATALOGUE.items()}


# -- a run ---------------------------------------------------------------------------------------------------
def _action_events(action: Action, names: Names) -> list[Event]:
    """The rows an action makes before the records it writes: a client's or an admin's request, or a fault."""
    from statechan.cluster import (
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
    )
    from statechan.cluster.state import ZK_EXPIRY

    if isinstance(action, Lookup | Unload | Split):
        verb = action.kind
        return [
            Event(
                Kind.REQUEST,
                CLIENTS,
                action.broker,
                f"{verb} {names.bundle(action.bundle)}",
                f"{verb} of {action.bundle} through {names.broker(action.broker)}",
            )
        ]
    if isinstance(action, Transfer):
        to = names.broker(action.destination)
        return [
            Event(
                Kind.REQUEST,
                CLIENTS,
                action.broker,
                f"transfer {names.bundle(action.bundle)} → {to}",
                f"transfer of {action.bundle} to {to} through {names.broker(action.broker)}",
            )
        ]
    marks: dict[type, tuple[Mark, str, str]] = {
        Crash: (Mark.CRASH, "crash", "the process dies; its metadata session expires later"),
        Restart: (Mark.RESTART, "restart", "starts again with the same id (a new incarnation)"),
        Shutdown: (Mark.SHUTDOWN, "shutdown", "shuts down gracefully: hands its bundles over, unregisters"),
        LoseSession: (Mark.SESSION_LOST, "session lost", "loses its metadata session (the process lives on)"),
        Reconnect: (Mark.RECONNECT, "reconnect", "gets a new metadata session"),
        Resign: (Mark.RESIGN, "resigns", "gives up leadership"),
    }
    if type(action) in marks:
        mark, label, said = marks[type(action)]
        broker = getattr(action, "broker")  # noqa: B009 (every action in ``marks`` names one)
        return [Event(Kind.MARK, broker, None, label, f"{names.broker(broker)} {said}", mark=mark)]
    if isinstance(action, Compact):
        return [
            Event(
                Kind.MARK,
                CHANNEL,
                None,
                "compaction",
                "the channel topic is compacted up to its end",
                mark=Mark.COMPACTION,
            )
        ]
    if isinstance(action, Tick) and action.broker.startswith(ZK_EXPIRY):
        broker = action.broker.removeprefix(ZK_EXPIRY)
        return [
            Event(
                Kind.MARK,
                broker,
                None,
                "session expires",
                f"ZooKeeper expires {names.broker(broker)}'s session",
                mark=Mark.SESSION_EXPIRED,
            )
        ]
    return []


def _answer_event(answer: LookupAnswer, names: Names) -> Event:
    bundle = names.bundle(answer.bundle)
    if answer.error is not None:
        label, said, ok = f"{bundle} → error", f"error: {answer.error}", False
    elif answer.owner is None:
        label, said, ok = f"{bundle} → no owner", "no owner", None
    else:
        owner = names.broker(answer.owner)
        label = f"{bundle} → {owner}" + ("" if answer.owner_registered or answer.redirect else " (not registered)")
        said, ok = f"{owner} ({'registered' if answer.owner_registered else 'NOT registered'})", None
    notes = [
        n
        for n, on in (
            ("deferred", answer.deferred),
            ("early redirect", answer.redirect),
            ("unchecked: channel disabled", answer.unchecked),
        )
        if on
    ]
    extra = f" [{', '.join(notes)}]" if notes else ""
    detail = f"{names.broker(answer.broker)} answers the lookup of {answer.bundle}: {said}{extra}"
    return Event(Kind.ANSWER, answer.broker, CLIENTS, label, detail, ok)


@dataclass
class RunCapture:
    """A replayed run as the cluster emitted it: where each step's records and answers end."""

    cluster: Cluster | None = None
    ends: list[tuple[int, int]] = field(default_factory=list)
    """Per checked state (the start, then each step): (records, answers) written so far."""

    def note(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.ends.append((len(cluster.trace), len(cluster.answers)))


Check = Callable[["Cluster"], list[str]]
"""A check of the cluster after each step, as the timeline takes it (its violations as text)."""


def _capturing(inner: Check | None, capture: RunCapture) -> ObservationCheck:
    """The replay's own invariant checks (none: a check that finds nothing), noting after each step
    how far the trace and the answers go. It is an :class:`ObservationCheck` so that the timeline
    starts it on the starting state, and hands that on to ``inner`` when it is one too."""
    from statechan.cluster.runner import ObservationCheck

    class Capturing(ObservationCheck):
        def start(self, cluster: Cluster) -> None:
            if isinstance(inner, ObservationCheck):
                inner.start(cluster)

        def __call__(self, cluster: Cluster) -> list[str]:
            capture.note(cluster)
            return [] if inner is None else inner(cluster)

    return Capturing(lambda _obs: [])


def run_diagram(
    config: SimConfig,
    actions: Sequence[Action],
    title: str,
    *,
    check: Check | None = None,
    final_check: Check | None = None,
    picks: Sequence[int] | None = None,
    problem: str | None = None,
    liveness: bool = False,
    lasso: int = -1,
    note: str = "",
) -> SequenceDiagram:
    """Replay ``actions`` as ``statechan replay`` does (``check`` at every step, stopping at the
    first breach; ``final_check`` after the last) and draw what the cluster emitted. ``problem``:
    a breach found elsewhere (the model checker's), shown at the last step (``liveness``: it is
    the checker's liveness failure; ``lasso``: where its loop begins). View records are switched
    on for the picture: they record each broker's deliveries and change nothing in the run."""
    from statechan.cluster.state import ZK_EXPIRY
    from statechan.cluster.timeline import build_timeline, format_timeline

    capture = RunCapture()
    steps = build_timeline(
        config.model_copy(update={"trace_views": True}),
        actions,
        _capturing(check, capture),
        stop_at_violation=check is not None,
        final_check=final_check,
        picks=picks,
    )
    cluster = capture.cluster
    assert cluster is not None  # the check runs on the starting state at least
    records = [parse_record(r) for r in cluster.trace]
    keys = [r.key for r in records if isinstance(r, ChannelRecord)]
    keys += [str(getattr(a, "bundle")) for a in actions if hasattr(a, "bundle")]  # noqa: B009
    brokers = list(dict.fromkeys([*config.broker_ids(), *sorted(set(_brokers_named(records)))]))
    names = Names(brokers, keys)
    fold = VerdictFold(config.storage, config.variant.model)
    known = statements()
    at_start = steps[0].violations if steps and steps[0].number == 0 else []
    taken = [s for s in steps if s.number > 0]
    ends = [*capture.ends[: len(taken) + 1], (len(cluster.trace), len(cluster.answers))]
    groups = [Group(None, "start", 0, breaches=[breach(v, known) for v in at_start])]
    groups += [
        Group(s.number, names.text(s.action), s.time_ms, error=s.error, loop=0 <= lasso < s.number) for s in taken
    ]
    for group, (first, last) in zip(groups, zip([(0, 0), *ends], ends, strict=False), strict=False):
        actor = None
        if group.number is not None:
            action = actions[group.number - 1]
            group.events.extend(_action_events(action, names))
            actor = str(getattr(action, "broker", "")) or None
            actor = actor if actor in brokers and not actor.startswith(ZK_EXPIRY) else None
        for record in records[first[0] : last[0]]:
            verdict = fold(record) if isinstance(record, ChannelRecord) else None
            group.events.extend(record_events(record, verdict, names, actor))
        group.events.extend(_answer_event(a, names) for a in cluster.answers[first[1] : last[1]])
    for group, step in zip(groups[1:], taken, strict=True):
        group.breaches.extend(breach(v, known) for v in step.violations)
    if problem is not None:
        found = Breach("liveness", LIVENESS_STATEMENT, problem) if liveness else breach(problem, known)
        groups[-1].breaches.append(found)
    replayed = sum(1 for s in taken if s.error is None)
    omitted = ""
    if replayed < len(actions) and not any(s.error for s in taken):
        omitted = f"the run's {len(actions) - replayed} step(s) after the break are not replayed"
    start_records = records[: capture.ends[0][0]]
    return SequenceDiagram(
        title=title,
        subtitle=note,
        lifelines=_lifelines(brokers, names, True, _channel_name(config), groups),
        groups=groups,
        keys=names.legend(),
        leader_at_start=next((r.broker for r in start_records if isinstance(r, LeaderRecord)), None),
        facts=_run_facts(config, actions, replayed),
        text=format_timeline(steps, title),
        omitted=omitted,
        checked=check is not None or problem is not None,
    )


def _channel_name(config: SimConfig) -> str:
    from statechan.cluster import StoreKind

    return {
        StoreKind.system_topic: "system topic",
        StoreKind.metadata_store: "metadata store",
        StoreKind.both: "system topic (+ syncer)",
    }[config.store]


def _run_facts(config: SimConfig, actions: Sequence[Action], replayed: int) -> list[tuple[str, str]]:
    changed = [k for k, v in config.variant.model_dump().items() if v not in (False, None) and k != "model"]
    return [
        ("brokers", str(config.brokers)),
        ("bundles", f"{config.namespaces} namespace(s) × {config.bundles_per_namespace}"),
        ("store", config.store.value),
        ("model", config.variant.model),
        ("variant", ", ".join(changed) or "the current protocol"),
        ("steps", f"{replayed} of {len(actions)} replayed"),
    ]


# -- a key's story from a trace ------------------------------------------------------------------------------
def story_diagram(
    entries: Sequence[Entry],
    title: str,
    *,
    focus: Mapping[int, Sequence[Breach]] | None = None,
    facts: Sequence[tuple[str, str]] = (),
    omitted: str = "",
) -> SequenceDiagram:
    """A story's entries (:func:`statechan.explain.story`), one group each, with the verdicts the
    story computed. ``focus``: offsets to highlight, with the breaches an audit reported there
    (the group of the first entry at or after each offset)."""
    records = [e.record for e in entries]
    keys = [r.key for r in records if isinstance(r, ChannelRecord)]
    brokers = sorted(set(_brokers_named(records)))
    names = Names(brokers, keys)
    origin = entries[0].time if entries else 0
    groups = []
    for entry in entries:
        group = Group(None, f"@{entry.offset}", entry.time - origin)
        group.events.extend(record_events(entry.record, entry.verdict, names))
        groups.append(group)
    for offset, found in (focus or {}).items():
        at = next((g for g, e in zip(groups, entries, strict=True) if e.offset >= offset), None)
        if at is not None:
            at.focus = True
            at.breaches.extend(found)
    leader = next((r.broker for r in records if isinstance(r, LeaderRecord)), None)
    return SequenceDiagram(
        title=title,
        lifelines=_lifelines(brokers, names, False, "channel", groups),
        groups=groups,
        keys=names.legend(),
        leader_at_start=leader,
        facts=list(facts),
        omitted=omitted,
    )


# -- an audit's examples, each with its key's story -------------------------------------------------------
STORIES_PER_INVARIANT = 10
"""Examples of an invariant drawn as stories on the audit page (the rest are listed with the
``traces show`` command that tells their story)."""
STORY_CONTEXT = 15
"""Entries drawn either side of an example's offset."""


@dataclass
class AuditStory:
    """One example's key, drawn around its offset, with what the audit reported there."""

    anchor: str
    key: str
    offset: int
    breaches: list[Breach]
    diagram: SequenceDiagram


@dataclass
class AuditStories:
    stories: list[AuditStory] = field(default_factory=list)
    by_example: dict[tuple[str, int], str] = field(default_factory=dict)
    """(key, offset) -> the anchor of its story."""
    records: int = 0
    malformed: int = 0


def audit_stories(
    inputs: Sequence[str],
    violations: Mapping[str, Sequence[tuple[str | None, int | None, str]]],
    storage: StorageType,
    model: str | None,
    per_invariant: int = STORIES_PER_INVARIANT,
    context: int = STORY_CONTEXT,
) -> AuditStories:
    """The stories of an audit's examples (``violations``: invariant -> (key, offset, detail) of
    each example, as the report lists them), read from its traces in one pass: each example's
    key, ``context`` entries either side of its offset, with the resolver's verdicts and the
    example highlighted with its invariant's statement. Examples at the same key and offset
    share a story."""
    from statechan.explain import Selection, Story, story

    known = statements()
    wanted: dict[tuple[str, int], list[Breach]] = {}
    for invariant, examples in violations.items():
        drawn = [(k, o, d) for k, o, d in examples if k is not None and o is not None][:per_invariant]
        for key, offset, detail in drawn:
            if key is None or offset is None:  # for the type checker: left out just above
                continue
            statement = known.get(invariant, "")
            wanted.setdefault((key, offset), []).append(Breach(invariant, statement, detail, offset))
    result = AuditStories()
    if not wanted:
        return result
    told = story(inputs, Selection(frozenset(k for k, _ in wanted), views=True), storage, model)
    result.records, result.malformed = told.records, told.malformed
    for number, ((key, offset), breaches) in enumerate(sorted(wanted.items()), start=1):
        own = Story(entries=[e for e in told.entries if getattr(e.record, "key", key) == key])
        shown = own.around(offset, context)
        if not any(isinstance(e.record, ChannelRecord) for e in shown):
            continue  # the trace no longer holds the key's records (changed since the audit)
        left = len(own.entries) - len(shown)
        diagram = story_diagram(
            shown,
            f"{key} around offset {offset}",
            focus={offset: breaches},
            omitted=f"{left:,} more entries of this key's story are not drawn" if left else "",
        )
        anchor = f"story-{number}"
        result.stories.append(AuditStory(anchor, key, offset, breaches, diagram))
        result.by_example[(key, offset)] = anchor
    return result
