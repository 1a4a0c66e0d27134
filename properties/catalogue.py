"""The invariant catalogue: each invariant written once, as a pure function, with its id, its
statement and the Pulsar issues it guards against.

Cluster invariants take an :class:`~statechan.cluster.Observation` (what the simulator shows at
one step) and return the violations they find. ``when`` says when an invariant applies:
``always`` after every step, ``quiescent`` once no delivery, notification or task is waiting.
The Hypothesis bench, the model checker and the long simulation tests all use these functions.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from statechan.cluster.config import MAX_CLEAN_UP_DELAY_TIME_IN_SECS
from statechan.cluster.sim import Observation
from statechan.keys import BadKeyError, Bundle, parse_key
from statechan.states import ServiceUnitState

S = ServiceUnitState
ACTIVE = frozenset({S.Owned, S.Assigning, S.Releasing, S.Splitting})
IN_FLIGHT = frozenset({S.Assigning, S.Releasing, S.Splitting})


@dataclass(frozen=True)
class Violation:
    """One breach of an invariant, with what shows it."""

    invariant: str
    detail: str
    key: str | None = None

    def __str__(self) -> str:
        where = f" [{self.key}]" if self.key else ""
        return f"{self.invariant}{where}: {self.detail}"


Check = Callable[[Observation], list[Violation]]


@dataclass(frozen=True)
class Invariant:
    id: str
    statement: str
    guards: tuple[str, ...]
    when: Literal["always", "quiescent"]
    check: Check


CATALOGUE: dict[str, Invariant] = {}


def invariant(
    id: str, statement: str, guards: Iterable[str], when: Literal["always", "quiescent"] = "always"
) -> Callable[[Check], Check]:
    def register(check: Check) -> Check:
        if id in CATALOGUE:
            raise ValueError(f"invariant {id!r} is declared twice")
        CATALOGUE[id] = Invariant(id, statement, tuple(guards), when, check)
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
    "Once nothing is waiting, exactly the elected broker runs the leader's duties.",
    ["#22112", "#23125", "#25999", "#25977"],
    when="quiescent",
)
def leader_unique(obs: Observation) -> list[Violation]:
    expected = {obs.leader} if obs.leader in obs.views else set()  # a dead leader's node outlives it a while
    if obs.acting_leaders != expected:
        return [Violation("leader-unique", f"elected {obs.leader}, acting as leader: {sorted(obs.acting_leaders)}")]
    return []


@invariant(
    "lookup-answers-live-owner",
    "A lookup never answers with a broker that is not registered.",
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
        if a.owner is not None and not a.owner_registered
    ]


@invariant(
    "owner-registered",
    "No bundle stays owned by, or in flight to, an unregistered broker for longer than the clean-up bound.",
    ["#21811", "#23064", "#23349", "#26520", "#25132"],
)
def owner_registered(obs: Observation) -> list[Violation]:
    bound = cleanup_bound_ms(obs)
    overdue = {b for b, since in obs.unregistered_at.items() if b not in obs.registered and obs.time - since > bound}
    if not overdue:
        return []
    found = []
    reported: set[str] = set()
    for broker in sorted(obs.views):
        if broker not in obs.started:
            continue
        for key, data in sorted(obs.views[broker].items()):
            if data.state not in ACTIVE or key in reported:
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
    "An in-flight state (Assigning, Releasing, Splitting) settles within the in-flight bound.",
    ["#19988", "#21332", "#25379", "#23349", "#26520"],
    when="quiescent",
)
def in_flight_completes(obs: Observation) -> list[Violation]:
    cfg = obs.config.channel
    bound = cfg.in_flight_wait_ms + 2 * cfg.monitor_interval_s * 1000 + cleanup_bound_ms(obs)
    found = []
    reported: set[str] = set()
    for broker in sorted(obs.views):
        for key, data in obs.views[broker].items():
            if data.state in IN_FLIGHT and key not in reported and obs.time - data.timestamp > bound:
                reported.add(key)
                found.append(
                    Violation(
                        "in-flight-completes",
                        f"{broker} still sees {_brief(data)} after {(obs.time - data.timestamp) // 1000} s",
                        key,
                    )
                )
    return found


def _brief(data: object) -> str:
    if data is None:
        return "nothing"
    from statechan.values import ServiceUnitStateData

    assert isinstance(data, ServiceUnitStateData)
    parts = [data.state.value]
    if data.dst_broker:
        parts.append(f"dst={data.dst_broker}")
    if data.source_broker:
        parts.append(f"src={data.source_broker}")
    if data.force:
        parts.append("force")
    parts.append(f"v{data.version_id}")
    return " ".join(parts)


def check(obs: Observation, ids: Iterable[str] | None = None) -> list[Violation]:
    """Every applicable invariant (or those named) on one observation."""
    found: list[Violation] = []
    for inv in CATALOGUE.values():
        if ids is not None and inv.id not in ids:
            continue
        if inv.when == "quiescent" and not obs.quiescent:
            continue
        found.extend(inv.check(obs))
    return found
