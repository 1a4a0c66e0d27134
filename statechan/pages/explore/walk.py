"""A walk through the model: a start (a bound's initial state, a saved run's, a counterexample's),
the moves taken from it, and the state after each, with the invariants' verdicts.

States are values (:class:`~statechan.cluster.state.ClusterState`), so a walk keeps every state it
passed through: back and forward are indexes. A walk is named by its start and its *path*, one
token per move, so that a page's address says everything the page shows (a link, the browser's
history and a reload all give the same state):

- ``7``: the 8th action :func:`~statechan.cluster.protocol.enabled` lists in that state;
- ``7p0-1``: the same, with placement taking candidate 0 at its first choice and 1 at its second
  (the model checker's picks: no ``p`` means candidate 0 at every choice);
- ``x`` and the action's JSON in URL-safe base64 (and picks): an action that state does not list
  (a saved run's ``wait``, a tick naming no timer's source), which the protocol may still take.

A step is checked as the model checker checks a transition: the catalogue's cluster invariants on
the state it reaches (those that hold only once nothing waits, only then), its step invariants on
the pair. The history and record invariants are checked over the trace of the walk so far, as
``statechan replay`` checks a run's trace after its last step.
"""

from __future__ import annotations

import base64
import binascii
import json
import random
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from statechan.bounds import Bounds, budget_kind, counted
from statechan.cluster import protocol
from statechan.cluster.actions import Action, BadActionError, action_from_json
from statechan.cluster.config import SimConfig
from statechan.cluster.state import ClusterState, LookupAnswer, broker_name
from statechan.invariants.violation import Violation
from statechan.observation import Observation
from statechan.values import brief

TOKEN = re.compile(
    r"(?:(?P<index>\d{1,4})|x(?P<action>[A-Za-z0-9_-]{1,800}={0,2}))(?:p(?P<picks>\d{1,4}(?:-\d{1,4}){0,63}))?"
)
"""One move of a path (see the module's docstring)."""
MOST_MOVES = 2_000
"""The longest path a page replays (a saved run has tens of steps; the checker's paths fewer)."""


class WalkError(ValueError):
    """A path that cannot be walked: the message names the move and why."""


@dataclass(frozen=True)
class Move:
    """An action and placement's choices in it (an index among each choice's candidates)."""

    action: Action
    picks: tuple[int, ...] = ()


@dataclass(frozen=True)
class Start:
    """Where walks begin: a configuration, the bound whose budgets say which moves the model
    checker would take (None: every enabled move), the invariants checked, and a run to follow
    (a saved run or a counterexample: its moves, and what stopped it from being replayed whole)."""

    key: str
    title: str
    config: SimConfig
    bounds: Bounds | None
    invariants: tuple[str, ...]
    note: str = ""
    run: tuple[str, ...] = ()
    """The run's path (:func:`follow`): forward goes along it."""
    run_error: str | None = None
    """The run's first step that cannot be taken, said in full (its path stops before it)."""


@dataclass(frozen=True)
class Stop:
    """A state of a walk: how it was reached, what the step showed (its trace records, with their
    offsets in the walk's trace, and its lookup answers), the budgets spent so far, and the
    invariants the step broke (cluster and step invariants: the model checker's checks)."""

    number: int
    move: Move | None
    token: str | None
    state: ClusterState
    records: tuple[Mapping[str, object], ...]
    answers: tuple[LookupAnswer, ...]
    obs: Observation
    spent: Mapping[str, int]
    state_broken: tuple[Violation, ...]
    """The cluster invariants the state breaks."""
    step_broken: tuple[Violation, ...]
    """The step invariants the step into it breaks."""

    @property
    def broken(self) -> tuple[Violation, ...]:
        return self.state_broken + self.step_broken


@dataclass
class Walk:
    start: Start
    stops: list[Stop]
    """The start's state, then one per move."""

    @property
    def tokens(self) -> list[str]:
        return [s.token for s in self.stops[1:] if s.token is not None]

    @property
    def moves(self) -> list[Move]:
        return [s.move for s in self.stops[1:] if s.move is not None]

    def trace(self, upto: int | None = None) -> list[Mapping[str, object]]:
        """The walk's trace records (each with its ``offset``) up to stop ``upto`` (None: all)."""
        return [r for s in self.stops[: None if upto is None else upto + 1] for r in s.records]

    def picks(self, upto: int) -> list[int]:
        """Placement's choices of the moves up to stop ``upto``, in order (``Cluster(picks=...)``)."""
        return [p for s in self.stops[1 : upto + 1] if s.move is not None for p in s.move.picks]


# -- stepping --------------------------------------------------------------------------------------------
def _tape(picks: Sequence[int]) -> Callable[[int], int]:
    """Placement's choices taken from ``picks`` in order (candidate 0 once they run out), as a
    model checker's saved run replays them."""
    plan = iter(picks)

    def choose(width: int) -> int:
        wanted = next(plan, 0)
        return wanted if wanted < width else 0

    return choose


def _seeded(seed: int) -> Callable[[int], int]:
    """Placement's choices as the simulator makes them without picks: its seeded generator."""
    rng = random.Random(seed)

    def choose(width: int) -> int:
        return rng.choice(range(width))

    return choose


def _checks(ids: Sequence[str]) -> tuple[Callable[[Observation], list[Violation]], Callable[..., list[Violation]]]:
    from statechan.invariants.catalogue import check, check_step

    return (lambda obs: check(obs, ids)), (lambda before, after: check_step(before, after, ids))


def begin(start: Start) -> Stop:
    """The start's state: every broker booted, the first elected (the start-up's records)."""
    setup = protocol.setup(start.config)
    outcome = protocol.init(setup)
    obs = Observation(outcome.state, setup, outcome.answers)
    check, _ = _checks(start.invariants)
    records = tuple({**r, "offset": i} for i, r in enumerate(outcome.records))
    return Stop(0, None, None, outcome.state, records, tuple(outcome.answers), obs, {}, tuple(check(obs)), ())


def advance(start: Start, stop: Stop, move: Move, token: str, offset: int) -> Stop:
    """The state ``move`` leads to from ``stop`` (``ValueError`` if it cannot be taken there);
    ``offset``: where its trace records begin in the walk's trace."""
    setup = protocol.setup(start.config)
    outcome = protocol.step(stop.state, move.action, setup, _tape(move.picks))
    obs = Observation(outcome.state, setup, outcome.answers)
    check, check_step = _checks(start.invariants)
    spent = dict(stop.spent)
    kind = None if start.bounds is None else budget_kind(move.action, start.bounds)
    if kind is not None and kind != "off":
        spent[kind] = spent.get(kind, 0) + 1
    records = tuple({**r, "offset": offset + i} for i, r in enumerate(outcome.records))
    taken = Move(move.action, tuple(outcome.picks))
    return Stop(
        stop.number + 1,
        taken,
        token,
        outcome.state,
        records,
        tuple(outcome.answers),
        obs,
        spent,
        tuple(check(obs)),
        tuple(check_step(stop.obs, obs)),
    )


# -- paths -----------------------------------------------------------------------------------------------
def encode(state: ClusterState, start: Start, move: Move) -> str:
    """The token of ``move`` in ``state`` (its index among the enabled actions when listed)."""
    listed = protocol.enabled(state, protocol.setup(start.config))
    picks = "p" + "-".join(map(str, move.picks)) if any(move.picks) else ""
    if move.action in listed:
        return f"{listed.index(move.action)}{picks}"
    raw = json.dumps(move.action.to_json(), separators=(",", ":")).encode()
    return "x" + base64.urlsafe_b64encode(raw).decode() + picks


def decode(token: str, state: ClusterState, start: Start, number: int) -> Move:
    """The move a token names in ``state`` (``number``: its place in the path, for messages)."""
    found = TOKEN.fullmatch(token)
    if found is None:
        raise WalkError(f"move {number} of the path: {token[:40]!r} is not a move (expected e.g. 7, 7p1 or x…)")
    picks = tuple(int(p) for p in found["picks"].split("-")) if found["picks"] else ()
    if found["index"] is not None:
        listed = protocol.enabled(state, protocol.setup(start.config))
        index = int(found["index"])
        if index >= len(listed):
            raise WalkError(
                f"move {number} of the path: the state after move {number - 1} has {len(listed)} enabled "
                f"action(s), no number {index}"
            )
        return Move(listed[index], picks)
    try:
        data = json.loads(base64.urlsafe_b64decode(found["action"]))
        return Move(action_from_json(data, f"move {number} of the path"), picks)
    except (binascii.Error, UnicodeDecodeError, json.JSONDecodeError):
        raise WalkError(f"move {number} of the path: not an action") from None
    except BadActionError as exc:
        raise WalkError(str(exc)) from None


def extend(walk: Walk, tokens: Iterable[str]) -> Walk:
    """``walk`` with the moves ``tokens`` name taken after its last stop."""
    stops = list(walk.stops)
    offset = sum(len(s.records) for s in stops)
    for token in tokens:
        if len(stops) > MOST_MOVES:
            raise WalkError(f"a path of more than {MOST_MOVES:,} moves")
        last = stops[-1]
        move = decode(token, last.state, walk.start, last.number + 1)
        try:
            stop = advance(walk.start, last, move, token, offset)
        except ValueError as exc:
            raise WalkError(
                f"move {last.number + 1} of the path ({move.action.describe()}) cannot be taken: {exc}"
            ) from None
        offset += len(stop.records)
        stops.append(stop)
    return Walk(walk.start, stops)


def follow(start: Start, actions: Sequence[Action], picks: Sequence[int] | None) -> tuple[list[str], str | None]:
    """The tokens of a run's ``actions`` taken in turn from the start, and the first that cannot
    be taken, said in full (the tokens stop before it). ``picks``: placement's choices, in order
    (a model checker's run); None: the run made them with the configuration's seeded generator,
    as the simulator does (:class:`~statechan.cluster.Cluster`)."""
    choose = _seeded(start.config.seed) if picks is None else _tape(picks)
    setup = protocol.setup(start.config)
    state = protocol.init(setup, trace=False).state
    tokens: list[str] = []
    for number, action in enumerate(actions, start=1):
        try:
            outcome = protocol.step(state, action, setup, choose, trace=False)
        except ValueError as exc:
            return tokens, f"step {number} ({action.describe()}) cannot be taken: {exc}"
        tokens.append(encode(state, start, Move(action, tuple(outcome.picks))))
        state = outcome.state
    return tokens, None


# -- what can happen next ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Choice:
    """A move that can be taken from a stop, what it writes, and what it breaks."""

    token: str
    move: Move
    label: str
    effect: tuple[str, ...]
    """The channel records it writes and the answers it gives, briefly."""
    breaks: tuple[str, ...]
    """The invariants the state it leads to breaks (ids, in the catalogue's order)."""
    outside: str | None = None
    """Why the model checker would not take it within the start's bound (None: it would)."""
    branches: int = 1
    """How many placements the action has (each is a choice of its own)."""
    refused: str | None = None
    """The protocol lists the action but refuses it when taken (why): no move."""


def outside_bound(start: Start, stop: Stop, action: Action) -> str | None:
    """Why the checker would not take ``action`` at ``stop`` within the start's bound."""
    bounds = start.bounds
    if bounds is None:
        return None
    if bounds.depth is not None and stop.number >= bounds.depth:
        return f"the bound's depth {bounds.depth} is reached"
    kind = budget_kind(action, bounds)
    if kind == "off":
        return f"{action.kind} is not in the bound (admin kinds: {', '.join(bounds.admin_kinds) or 'none'})"
    if kind is not None:
        budget = bounds.budget()[kind]
        if stop.spent.get(kind, 0) >= budget:
            noun = {"lose-session": "session loss", "resign": "leader change", "compact": "compaction"}.get(kind, kind)
            return f"the bound's {counted(budget, noun)} spent" if budget else f"the bound allows no {noun}"
    return None


def choices(start: Start, stop: Stop, names: Callable[[str], str] = str) -> list[Choice]:
    """Every move the protocol can take at ``stop``: each enabled action, once per placement
    branch (the model checker's successors), with its effect and the invariants it breaks."""
    setup = protocol.setup(start.config)
    check, check_step = _checks(start.invariants)
    found: list[Choice] = []
    for index, action in enumerate(protocol.enabled(stop.state, setup)):
        outside = outside_bound(start, stop, action)
        try:
            branches = protocol.outcomes(stop.state, action, setup)
        except ValueError as exc:  # listed, yet refused when taken (the checker counts these)
            found.append(Choice(str(index), Move(action), names(action.describe()), (), (), outside, refused=str(exc)))
            continue
        for branch in branches:
            picks = tuple(branch.picks)
            outcome = protocol.step(stop.state, action, setup, _tape(picks))
            obs = Observation(outcome.state, setup, outcome.answers)
            broken = [*check(obs), *check_step(stop.obs, obs)]
            token = f"{index}" + ("p" + "-".join(map(str, picks)) if any(picks) else "")
            found.append(
                Choice(
                    token,
                    Move(action, picks),
                    names(action.describe()),
                    tuple(
                        names(e)
                        for e in [*effects(outcome.records, outcome.answers), *queued(stop.state, outcome.state)]
                    ),
                    tuple(dict.fromkeys(v.invariant for v in broken)),
                    outside,
                    len(branches),
                )
            )
    return found


def effects(records: Iterable[Mapping[str, object]], answers: Iterable[LookupAnswer]) -> list[str]:
    """A step's channel writes, registry changes, elections and answers, one line each (the
    views' records are left out: the state shows what each view holds)."""
    from statechan.traces import ChannelRecord, LeaderRecord, RegistryRecord, parse_record

    said = []
    for raw in records:
        if raw["kind"] == "view":
            continue
        record = parse_record({"offset": 0, **raw})
        if isinstance(record, ChannelRecord):
            said.append(f"{record.key.rsplit('/', 1)[-1]} := {brief(record.value, none='tombstone')}")
        elif isinstance(record, RegistryRecord):
            said.append(f"registry: {record.broker} {record.event}")
        elif isinstance(record, LeaderRecord):
            said.append(f"{record.broker} elected leader")
    for answer in answers:
        if answer.error is not None:
            said.append(f"answers {answer.bundle.rsplit('/', 1)[-1]}: error: {answer.error}")
        else:
            deferred = " (deferred)" if answer.deferred else ""
            said.append(f"answers {answer.bundle.rsplit('/', 1)[-1]}: {answer.owner or 'no owner'}{deferred}")
    return said


def queued(before: ClusterState, after: ClusterState) -> list[str]:
    """The tasks a step queued and the timers it set, one line each."""
    said = []
    for old, new in zip(before.brokers, after.brokers, strict=True):
        if new.alive and new.tasks is not old.tasks:
            for task in new.tasks:
                if not any(task is known for known in old.tasks):
                    what = task.describe().replace(task.key, task.key.rsplit("/", 1)[-1])
                    said.append(f"{broker_name(new.id)} queues {what}")
    set_before = {id(timer) for timer in before.timers}
    for timer in after.timers:
        if id(timer) not in set_before:
            said.append(
                f"timer set: {timer.kind.value} ({timer.source_name()}) in {(timer.due - after.now) / 1000:g} s"
            )
    return said


# -- verdicts ----------------------------------------------------------------------------------------------
@dataclass
class Verdict:
    """One invariant on one stop: its verdict on the state, on the step into it, and on the
    walk's records so far (None: the invariant has no such form, or it does not apply)."""

    id: str
    statement: str
    state: list[Violation] | None = None
    step: list[Violation] | None = None
    records: list[Violation] | None = None
    why_not: str = ""
    """Why the state form was not checked here (it holds once nothing waits)."""

    @property
    def broken(self) -> bool:
        return bool(self.state or self.step or self.records)

    @property
    def violations(self) -> list[Violation]:
        return [*(self.state or []), *(self.step or []), *(self.records or [])]


@dataclass
class Verdicts:
    rows: list[Verdict] = field(default_factory=list)

    @property
    def broken(self) -> list[Verdict]:
        return [r for r in self.rows if r.broken]


def verdicts(walk: Walk, at: int) -> Verdicts:
    """Every invariant the start checks, on stop ``at``: the state, the step, the records so far."""
    from statechan.invariants.catalogue import CATALOGUE, check_trace, history_ids, record_ids, simulation_settings

    start, stop = walk.start, walk.stops[at]
    ids = start.invariants
    config = start.config
    traced = sorted(set(history_ids(ids)) | set(record_ids(ids)))
    settings = simulation_settings(config, config.storage, config.variant.model)
    found = check_trace(walk.trace(at), config.storage, config.variant.model, traced, settings)
    quiet = stop.obs.quiescent
    rows = []
    for invariant_id in ids:
        inv = CATALOGUE[invariant_id]
        row = Verdict(invariant_id, inv.statement)
        if inv.cluster_check is not None:
            if inv.when == "quiescent" and not quiet:
                row.why_not = "checked once nothing waits; work is waiting"
            else:
                row.state = [v for v in stop.state_broken if v.invariant == invariant_id]
        if inv.action_check is not None and at > 0:
            row.step = [v for v in stop.step_broken if v.invariant == invariant_id]
        if invariant_id in traced:
            row.records = [v for v in found if v.invariant == invariant_id]
        rows.append(row)
    return Verdicts(rows)
