"""A cluster state as people who know Pulsar draw it: who owns each bundle in each broker's view
and in the channel, each broker's condition (process, channel, session, registry, leadership,
queued work), the channel itself (the system topic's log with each reader's position, or the
metadata store's nodes), the timers, and what changed since the state before.

Only reading: the picture is made of the state's records (:mod:`statechan.cluster.state`) and the
protocol's read-only helpers, and holds plain strings for the page's template.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from statechan.cluster import protocol
from statechan.cluster.config import SimConfig, StoreKind
from statechan.cluster.state import (
    LOOKUP_CHANNELS,
    Broker,
    ChannelState,
    ClusterState,
    Node,
    Raw,
    Rec,
    Registration,
    Timer,
    TimerKind,
    broker_name,
)

STATE_CLASSES = {
    "Init": "init",
    "Free": "free",
    "Owned": "owned",
    "Assigning": "assigning",
    "Releasing": "releasing",
    "Splitting": "splitting",
    "Deleted": "deleted",
}
"""Each bundle state's CSS class (its colour on the page)."""


def short(broker: int | None) -> str:
    """``broker-1`` for ``0`` (every simulated broker listens on 8080: the port says nothing)."""
    return "nobody" if broker is None else broker_name(broker).removesuffix(":8080")


def short_text(text: str) -> str:
    """Free text (an action, a violation) with the brokers' port dropped."""
    return text.replace(":8080", "")


def key_label(key: str) -> str:
    """A bundle key as a table row names it: the namespace's last part and the hash range."""
    namespace, _, bundle = key.rpartition("/")
    return f"{namespace.rsplit('/', 1)[-1]}/{bundle}"


def value_text(rec: Rec | None) -> str:
    """``Owned → broker-1 v2``, ``Releasing broker-1 → broker-2 v3``, ``Free force v4``."""
    if rec is None:
        return "—"
    parts = [rec.state.value]
    if rec.source_broker is not None and rec.dst_broker is None:
        parts.append(f"from {short(rec.source_broker)}")
    elif rec.source_broker is not None and rec.source_broker != rec.dst_broker:
        parts.append(f"{short(rec.source_broker)} → {short(rec.dst_broker)}")
    elif rec.dst_broker is not None:
        parts.append(f"→ {short(rec.dst_broker)}")
    if rec.split:
        parts.append("split: " + ", ".join(f"{r.rsplit('_', 1)[0]}→{short(b)}" for r, b in rec.split))
    if rec.force:
        parts.append("force")
    parts.append(f"v{rec.version_id}")
    return " ".join(parts)


@dataclass(frozen=True)
class Cell:
    """A value in the ownership table."""

    text: str
    css: str
    """The bundle state's class, or ``empty`` / ``down``."""
    title: str
    changed: bool = False
    owns: bool = False
    """The broker counts the bundle among those it owns (its view's owned set)."""


@dataclass(frozen=True)
class BundleRow:
    key: str
    label: str
    channel: Cell
    views: list[Cell]


@dataclass
class Card:
    """One broker."""

    name: str
    label: str
    alive: bool
    badges: list[tuple[str, str]] = field(default_factory=list)
    """(text, kind): kind is ``good``, ``bad``, ``warn``, ``lead`` or ``plain``."""
    lines: list[tuple[str, str]] = field(default_factory=list)
    changed: bool = False


@dataclass(frozen=True)
class LogRow:
    offset: int
    key: str
    value: str
    css: str
    producer: str
    time: str
    new: bool
    kept: bool
    """Still in the topic for a reader starting now: past the compaction horizon, or kept by it."""
    readers: tuple[str, ...]
    """The brokers whose reader reads this offset next."""


@dataclass(frozen=True)
class NodeRow:
    path: str
    value: str
    css: str
    version: int
    owner: str
    changed: bool


@dataclass(frozen=True)
class TimerRow:
    due: str
    left: str
    kind: str
    broker: str
    subject: str
    new: bool


@dataclass
class Picture:
    time: str
    leader: str
    summary: list[tuple[str, str]]
    brokers: list[str]
    bundles: list[BundleRow]
    cards: list[Card]
    store: str
    log: list[LogRow] = field(default_factory=list)
    readers_at_end: list[str] = field(default_factory=list)
    horizon: int = 0
    nodes: list[NodeRow] = field(default_factory=list)
    registry: list[NodeRow] = field(default_factory=list)
    timers: list[TimerRow] = field(default_factory=list)
    syncer: list[tuple[str, str]] = field(default_factory=list)


def config_said(config: SimConfig) -> str:
    """A cluster's configuration in a line: its size, store, model and the bugs put back."""
    switched = [k for k, v in config.variant.model_dump().items() if v not in (False, None) and k != "model"]
    bundles = config.namespaces * config.bundles_per_namespace
    parts = [f"{config.brokers} broker(s)", f"{bundles} bundle(s)", config.store.value, f"model {config.variant.model}"]
    if switched:
        parts.append("put back: " + ", ".join(s.replace("_", " ") for s in switched))
    return " · ".join(parts)


def clock(ms: int, start_ms: int) -> str:
    return f"t+{(ms - start_ms) / 1000:.1f} s"


def picture(config: SimConfig, state: ClusterState, before: ClusterState | None) -> Picture:
    """``state`` drawn, with what differs from ``before`` (the state one step earlier) marked."""
    setup = protocol.setup(config)
    start = config.start_ms
    brokers = sorted(state.brokers, key=lambda b: broker_name(b.id))
    channel = protocol.channel_values(state, setup)
    old_channel = protocol.channel_values(before, setup) if before is not None else None
    keys = sorted(set(state.sorted_bundle_keys()) | set(channel) | {k for b in brokers for k in b.view.items})
    rows = []
    for key in keys:
        held = channel.get(key)
        was = None if old_channel is None else old_channel.get(key)
        views = [_view_cell(b, key, _broker(before, b.id)) for b in brokers]
        rows.append(BundleRow(key, key_label(key), _cell(held, old_channel is not None and was != held), views))
    elected = state.leader
    leader = "nobody elected"
    if elected is not None:
        leader = ("http://" if elected[1] else "") + short(elected[0])
    acting = [short(b.id) for b in brokers if b.is_leader]
    waiting = list(protocol.work(state, setup))
    summary = [
        ("time", clock(state.now, start)),
        (
            "elected leader",
            leader + ("" if elected is None or not elected[1] else " (a service URL: matches no broker)"),
        ),
        ("acting as leader", ", ".join(acting) or "nobody"),
        (
            "work waiting",
            ", ".join(short_text(a.describe()) for a in waiting) if waiting else "none (quiescent)",
        ),
    ]
    found = Picture(
        time=clock(state.now, start),
        leader=leader,
        summary=summary,
        brokers=[short(b.id) for b in brokers],
        bundles=rows,
        cards=[_card(config, state, b, _broker(before, b.id)) for b in brokers],
        store=config.store.value,
        timers=_timers(state, before, start),
    )
    if config.store is not StoreKind.metadata_store:
        _topic(found, state, before, start)
    _store(found, state, before, channel_nodes=config.store is not StoreKind.system_topic)
    if state.syncer is not None:
        syncer = state.syncer
        differing = sorted(k for k in {*syncer.topic_view.items, *syncer.store_view.items}
                           if syncer.topic_view.get(k) != syncer.store_view.get(k))  # fmt: skip
        found.syncer = [
            ("running", "yes" if syncer.active else "stopped"),
            ("keys whose two views differ", ", ".join(key_label(k) for k in differing) or "none"),
            ("keys left unsynced", ", ".join(key_label(k) for k in sorted(syncer.unsynced)) or "none"),
            ("topic reader at", str(syncer.topic_view.position)),
            ("notifications queued", str(len(syncer.client.queue))),
        ]
    return found


def _broker(state: ClusterState | None, broker: int) -> Broker | None:
    return None if state is None else state.brokers[broker]


def _cell(rec: Rec | None, changed: bool, owns: bool = False) -> Cell:
    if rec is None:
        return Cell("—", "empty", "holds nothing", changed)
    return Cell(value_text(rec), STATE_CLASSES[rec.state.value], rec.brief(), changed, owns)


def _view_cell(broker: Broker, key: str, before: Broker | None) -> Cell:
    if not broker.alive:
        return Cell("down", "down", f"{broker_name(broker.id)} is not running", before is not None and before.alive)
    rec = broker.view.get(key)
    was = None if before is None or not before.alive else before.view.get(key)
    changed = before is not None and (was != rec or not before.alive)
    return _cell(rec, changed, key in broker.view.owned)


def _card(config: SimConfig, state: ClusterState, broker: Broker, before: Broker | None) -> Card:
    name = broker_name(broker.id)
    card = Card(name, short(broker.id), broker.alive, changed=before is not None and before is not broker)
    if not broker.alive:
        card.badges.append(("crashed" if broker.id not in state.departed else "shut down", "bad"))
        card.badges.append((f"incarnation {broker.incarnation}", "plain"))
        registered = state.registered(broker.id)
        card.badges.append(("still registered" if registered else "not registered", "warn" if registered else "plain"))
        return card
    card.badges.append((f"incarnation {broker.incarnation}", "plain"))
    channel_kind = "good" if broker.channel is ChannelState.Started else "warn"
    card.badges.append((f"channel {broker.channel.name}", channel_kind))
    client = broker.client
    session = "session connected" if client.connected else "session lost"
    if client.closed:
        session = "metadata client closed"
    card.badges.append((session, "good" if client.live else "bad"))
    card.badges.append(("registered", "good") if state.registered(broker.id) else ("not registered", "bad"))
    if broker.is_leader:
        card.badges.append(("★ leader", "lead"))
    if broker.shutting_down:
        card.badges.append(("shutting down", "warn"))
    if broker.channel not in LOOKUP_CHANNELS:
        card.badges.append(("answers no lookups", "warn"))
    position = broker.view.position
    if position is not None:
        behind = state.topic.end - position
        card.lines.append(
            ("topic reader", f"at offset {position}" + (f" ({behind} to read)" if behind > 0 else " (caught up)"))
        )
    if client.queue:
        card.lines.append(("notifications queued", ", ".join(_event(e) for e in client.queue)))
    if broker.tasks:
        card.lines.append(("tasks queued", "; ".join(short_text(t.describe()) for t in broker.tasks)))
    if broker.lookups:
        card.lines.append(
            (
                "deferred lookups",
                ", ".join(
                    f"{key_label(k)} (gives up at {clock(at, config.start_ms)})" for k, at in broker.lookups.items()
                ),
            )
        )
    if broker.unloads:
        card.lines.append(
            (
                "admin unloads waited on",
                ", ".join(
                    f"{key_label(k)} (from {short(src)}" + (f" to {short(dst)})" if dst is not None else ")")
                    for k, (src, dst) in broker.unloads.items()
                ),
            )
        )
    if broker.jobs:
        card.lines.append(("clean-ups it runs", ", ".join(f"after {short(t)}" for t in sorted(broker.jobs))))
    known = broker.leader_view
    if known is not None and not broker.is_leader:
        card.lines.append(("knows the leader as", ("http://" if known[1] else "") + short(known[0])))
    elif known is None:
        card.lines.append(("knows the leader as", "nobody"))
    owned = sorted(broker.view.owned)
    card.lines.append(("owns (its view)", ", ".join(key_label(k) for k in owned) or "nothing"))
    return card


def _event(event: object) -> str:
    if isinstance(event, tuple):
        kind, path = event
        where = f"registry/{short(path)}" if isinstance(path, int) else key_label(path) if "/" in path else path
        return f"{kind.value} {where}"
    return str(getattr(event, "value", event))


def _topic(found: Picture, state: ClusterState, before: ClusterState | None, start: int) -> None:
    topic = state.topic
    old_end = before.topic.end if before is not None else topic.end
    kept = set(topic.compacted)
    readers: dict[int, list[str]] = {}
    for broker in state.brokers:
        if broker.alive and broker.view.position is not None:
            readers.setdefault(broker.view.position, []).append(short(broker.id))
    if state.syncer is not None and state.syncer.topic_view.position is not None:
        readers.setdefault(state.syncer.topic_view.position, []).append("syncer")
    found.horizon = topic.horizon
    for offset, message in enumerate(topic.log):
        value = message.value
        if isinstance(value, Raw):
            text, css = "unreadable bytes", "empty"
        elif value is None:
            text, css = "tombstone", "empty"
        else:
            text, css = value_text(value), STATE_CLASSES[value.state.value]
        producer = (
            "outside" if message.producer is None else "syncer" if message.producer < 0 else short(message.producer)
        )
        found.log.append(
            LogRow(
                offset,
                key_label(message.key),
                text,
                css,
                producer,
                clock(message.publish_time, start),
                offset >= old_end,
                offset >= topic.horizon or offset in kept,
                tuple(readers.get(offset, ())),
            )
        )
    found.readers_at_end = readers.get(topic.end, [])


def _store(found: Picture, state: ClusterState, before: ClusterState | None, channel_nodes: bool) -> None:
    store = state.store
    old = before.store if before is not None else None
    if channel_nodes:
        for key, node in sorted(store.channel.items()):
            was = None if old is None else old.channel.get(key)
            found.nodes.append(_node(key_label(key), node, was, old is not None))
    for broker, node in sorted(store.registry.items()):
        was = None if old is None else old.registry.get(broker)
        found.registry.append(_node(f"/loadbalance/brokers/{broker_name(broker)}", node, was, old is not None))
    if store.leader is not None:
        was = None if old is None else old.leader
        found.registry.append(_node("/loadbalance/leader", store.leader, was, old is not None))


def _node(path: str, node: Node, was: Node | None, compared: bool) -> NodeRow:
    data = node.data
    if isinstance(data, Rec):
        text, css = value_text(data), STATE_CLASSES[data.state.value]
    elif isinstance(data, Raw):
        text, css = "unreadable bytes", "empty"
    elif isinstance(data, Registration):
        text, css = f"{broker_name(data.broker)} (incarnation {data.incarnation})", "plain"
    else:
        text, css = ("http://" if data[1] else "") + broker_name(data[0]), "plain"
    owner = "persistent" if node.owner is None else f"ephemeral: {_owner(node.owner)}'s session"
    return NodeRow(path, text, css, node.version, owner, compared and was is not node)


def _owner(owner: tuple[int, int]) -> str:
    broker, incarnation = owner
    return "the syncer" if broker < 0 else f"{short(broker)} #{incarnation}"


TIMER_NAMES = {
    TimerKind.monitor: "monitor (the leader's periodic look)",
    TimerKind.cleanup: "clean-up after a broker",
    TimerKind.cleanup_recheck: "clean-up re-check",
    TimerKind.lookup_timeout: "deferred lookup gives up",
    TimerKind.shutdown_complete: "shutdown completes",
    TimerKind.session_expiry: "ZooKeeper expires the session",
}


def _timers(state: ClusterState, before: ClusterState | None, start: int) -> list[TimerRow]:
    old: Iterable[Timer] = before.timers if before is not None else state.timers
    seen = {id(t) for t in old}
    rows = []
    for timer in state.timers:
        subject = key_label(timer.key) if timer.key else short(timer.target) if timer.target is not None else ""
        if timer.attempt:
            subject += f" (look {timer.attempt + 1})"
        left = timer.due - state.now
        rows.append(
            TimerRow(
                clock(timer.due, start),
                f"in {left / 1000:.1f} s" if left >= 0 else f"overdue by {-left / 1000:.1f} s",
                TIMER_NAMES.get(timer.kind, timer.kind.value),
                ("ZooKeeper, for " if timer.kind is TimerKind.session_expiry else "")
                + f"{short(timer.broker)} #{timer.incarnation}",
                subject,
                id(timer) not in seen,
            )
        )
    return rows
