"""What the invariants see of a cluster at one step: the observation type every engine produces
and the catalogue reads. It holds values only (no broker, store or simulator object), so the
catalogue can import it without the simulator."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from statechan.values import ServiceUnitStateData

if TYPE_CHECKING:
    from statechan.cluster.config import SimConfig


@dataclass(frozen=True)
class LookupAnswer:
    """What a broker answered a client: an owner, nobody (``owner`` None), or an error."""

    time: int
    broker: str
    bundle: str
    owner: str | None
    error: str | None
    owner_registered: bool
    deferred: bool
    redirect: bool = False
    """An in-flight bundle's destination, given at once without the active-owner check (Pulsar
    redirects clients early so the source never blocks); not an ownership answer."""
    unchecked: bool = False
    """Answered by a disabled channel (a broker shutting down gracefully, #24770): the stored owner
    with no liveness check, by design, so a client is sent on rather than refused while the
    broker's bundles move away; the exception lookup-answers-live-owner makes."""


@dataclass(frozen=True)
class Observation:
    """A cluster as the invariants see it at one step: values only, none of which changes after
    (its views are copies), so an engine can keep it and compare the next one with it."""

    time: int
    step: int
    views: dict[str, Mapping[str, ServiceUnitStateData]]
    serving: dict[str, set[str]]
    started: set[str]
    connected: set[str]
    registered: set[str]
    unregistered_at: dict[str, int]
    leader: str | None
    leader_since: int | None
    """Since when the elected leader has been running, connected and acting (None: no such leader)."""
    acting_leaders: set[str]
    answers: tuple[LookupAnswer, ...]
    """The lookup answers the last step gave (every answer is in one step's observation)."""
    bundles: frozenset[str]
    quiescent: bool
    config: SimConfig
    syncer_differences: int | None
    timers_overdue: bool = False
    """A timer's due time has passed without it firing (after a ``wait``): time bounds do not apply."""
    departed: frozenset[str] = frozenset()
    """Brokers whose graceful shutdown completed (and that have not started again)."""
    failed_splits: frozenset[str] = frozenset()
    """Parents whose split gave up after its retries (left Splitting for the leader, as in Pulsar)."""
    channel: Mapping[str, ServiceUnitStateData] = field(default_factory=dict)
    """The channel's settled value per key (a key it holds nothing for is absent): on the system
    topic what a reader of the whole log holds, on the metadata store the node. The truth the
    views follow, and what the step invariants compare from one observation to the next."""
    born: Mapping[str, int] = field(default_factory=dict)
    """Per key in ``channel``, where its current lifetime began (the offset of the first record
    after nothing on the topic, the node's creation zxid on the store): a history variable, so
    two observations tell whether the key was deleted between them."""
    deleted: frozenset[str] = frozenset()
    """Keys with a Deleted settled in their current lifetime (a history variable: on the topic,
    from the log; on the store, the node holds Deleted, its only way out being its removal)."""
    incarnations: Mapping[str, int] = field(default_factory=dict)
    """Each running broker's incarnation: a view restarted between two observations starts afresh."""
    pending_lookups: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    """Per running broker, the lookups it has deferred and not answered yet: key -> when deferred."""
    pending_unloads: Mapping[str, Mapping[str, tuple[str | None, str | None]]] = field(default_factory=dict)
    """Per running broker, the admin unloads it issued and has not seen complete: key -> (the
    owner it unloads, the destination of a transfer or None)."""
    positions: Mapping[str, int] = field(default_factory=dict)
    """Per running broker on the system topic, its reader's position (the next offset it reads): a
    view that moves past a key's ``born`` in one step crossed that key's deletion."""
    registered_since: Mapping[str, int] = field(default_factory=dict)
    """Per registered broker, when its registry node was last written (created, or taken over by a
    restart): how long the registry has named it without a break."""

    @classmethod
    def of(cls, **fields: Any) -> Observation:
        """The same observation as the constructor's, built without the frozen dataclass's
        ``object.__setattr__`` per field (a third of the time of an observation, and the model
        checker makes one a transition). Every field must be given."""
        return cls.from_dict(fields)

    @classmethod
    def from_dict(cls, fields: dict[str, Any]) -> Observation:
        """:meth:`of` from a dict of every field, which the observation takes as its own (the
        caller keeps no reference to it): a dict display is built at once, keywords one by one."""
        if fields.keys() != _FIELDS:
            wrong = sorted((_FIELDS - fields.keys()) | (fields.keys() - _FIELDS))
            raise TypeError(f"Observation.of needs every field, and only those: {', '.join(wrong)}")
        obs: Observation = object.__new__(cls)
        object.__setattr__(obs, "__dict__", fields)
        return obs


_FIELDS = frozenset(f.name for f in fields(Observation))
