"""Pulsar's channel value, ``ServiceUnitStateData``, with its JSON shape and Java's long arithmetic."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Protocol

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    model_validator,
)

from statechan.states import ServiceUnitState

LONG_MIN = -(2**63)
LONG_MAX = 2**63 - 1
VERSION_ID_INIT = 1
"""The version of a key's first record and of every split child (Pulsar's ``VERSION_ID_INIT``)."""


def wrap_long(value: int) -> int:
    """Reduce ``value`` to a Java ``long``: ``LONG_MAX + 1`` wraps to ``LONG_MIN`` as in Java."""
    return ((value - LONG_MIN) % 2**64) + LONG_MIN


def next_version(prev: ServiceUnitStateData | None) -> int:
    """The version a publisher writes after ``prev`` (``getNextVersionId``): 1 for a new key."""
    return VERSION_ID_INIT if prev is None else wrap_long(prev.version_id + 1)


def is_blank(value: str | int | None) -> bool:
    """Apache Commons ``StringUtils.isBlank``: null, empty or whitespace only (a simulated cluster's
    brokers are small integers: never blank)."""
    return value is None or (isinstance(value, str) and not value.strip())


SplitMap = tuple[tuple[str, str | None], ...]
"""A split's child ranges and optional destinations, kept sorted so values stay hashable.

Java's ``Map`` equality ignores order; a sorted tuple gives the same equality and a hash.
"""


def _to_split_map(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, Mapping):
        items = list(value.items())
    elif isinstance(value, list | tuple):
        items = [tuple(item) if isinstance(item, list | tuple) else item for item in value]
    else:
        return value  # let pydantic name the type error
    try:
        return tuple(sorted(items, key=lambda kv: kv[0]))
    except (TypeError, IndexError):
        return tuple(items)  # pydantic reports the malformed entries


def _from_split_map(value: SplitMap | None) -> dict[str, str | None] | None:
    return None if value is None else dict(value)


JavaLong = Annotated[int, BeforeValidator(lambda v: wrap_long(v) if type(v) is int else v)]


class ServiceUnitStateData(BaseModel):
    """One channel record's value (Pulsar's ``ServiceUnitStateData`` record).

    Equality is field-wise, as in Pulsar's newest record (``ServiceUnitStateDataTest.equalsTest``).
    ``timestamp`` is whatever the publisher's clock said; the model never reads a wall clock,
    so it defaults to 0 and the simulator passes its logical time.
    """

    model_config = ConfigDict(
        frozen=True,
        populate_by_name=True,
        extra="ignore",
        strict=False,
        validate_by_alias=True,
        validate_by_name=True,
        serialize_by_alias=True,
    )

    state: ServiceUnitState
    dst_broker: str | None = Field(default=None, alias="dstBroker")
    source_broker: str | None = Field(default=None, alias="sourceBroker")
    split_service_unit_to_dest_broker: Annotated[
        SplitMap | None,
        BeforeValidator(_to_split_map),
        PlainSerializer(_from_split_map),
    ] = Field(default=None, alias="splitServiceUnitToDestBroker")
    force: bool = False
    timestamp: JavaLong = 0
    version_id: JavaLong = Field(default=VERSION_ID_INIT, alias="versionId")

    @model_validator(mode="after")
    def _brokers_present(self) -> ServiceUnitStateData:
        if self.state is not ServiceUnitState.Free and is_blank(self.dst_broker) and is_blank(self.source_broker):
            raise ValueError(
                f"Empty broker: a {self.state.value} value needs dstBroker or sourceBroker (only Free may have neither)"
            )
        return self

    @property
    def split_children(self) -> tuple[str, ...]:
        """The child ranges of a split (the map's keys; the channel ignores the destinations)."""
        if self.split_service_unit_to_dest_broker is None:
            return ()
        return tuple(child for child, _ in self.split_service_unit_to_dest_broker)

    def to_json(self) -> str:
        """The value as Pulsar's Jackson mapper writes it (all seven properties)."""
        return self.model_dump_json(by_alias=True)

    @classmethod
    def from_json(cls, data: str | bytes) -> ServiceUnitStateData:
        """Read a value as Pulsar writes it; raises ``pydantic.ValidationError`` naming the field."""
        return cls.model_validate_json(data)


class ValueView(Protocol):
    """What the resolver and the record invariants read of a value.

    :class:`ServiceUnitStateData` is one; the trace auditor passes a lighter tuple with the same
    fields, so replaying millions of records does not build a validated model per record.
    """

    @property
    def state(self) -> ServiceUnitState: ...
    @property
    def dst_broker(self) -> str | int | None: ...
    @property
    def source_broker(self) -> str | int | None: ...
    @property
    def force(self) -> bool: ...
    @property
    def version_id(self) -> int: ...
    @property
    def split_children(self) -> tuple[str, ...]: ...


def brief(value: ValueView | None, none: str = "null") -> str:
    """A value in one line for people: ``Owned dst=b1 src=b2 force v3`` (``none`` for no value)."""
    if value is None:
        return none
    parts = [value.state.value]
    if value.dst_broker:
        parts.append(f"dst={value.dst_broker}")
    if value.source_broker:
        parts.append(f"src={value.source_broker}")
    if value.force:
        parts.append("force")
    parts.append(f"v{value.version_id}")
    return " ".join(parts)


def state_of(value: ServiceUnitStateData | None) -> ServiceUnitState:
    """Pulsar's ``ServiceUnitStateData.state(data)``: a null value is ``Init``."""
    return ServiceUnitState.Init if value is None else value.state
