"""How far the model checker looks (:class:`Bounds`): the cluster's size and how many of each kind
of event a run may have, and which budget each action spends."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from statechan.cluster.actions import (
    Action,
    Compact,
    Crash,
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


BUDGETED: dict[type[Action], str] = {
    Lookup: "lookup",
    Crash: "crash",
    Restart: "restart",
    Shutdown: "shutdown",
    LoseSession: "lose-session",
    Resign: "resign",
    Compact: "compact",
    Tick: "tick",
}
"""The action types each budget counts (the admin kinds spend ``admin``)."""


def budget_kind(action: Action, bounds: Bounds) -> str | None:
    """Which budget ``action`` spends (``None``: unbounded); admin kinds outside the bounds -> ``"off"``."""
    return budget_of(type(action), bounds)


def budget_of(kind: type[Action], bounds: Bounds) -> str | None:
    """:func:`budget_kind` of every action of the type ``kind``."""
    if kind in (Transfer, Split, Unload):
        return "admin" if kind.kind in bounds.admin_kinds else "off"
    if kind is Wait:
        return "off"
    return BUDGETED.get(kind)
