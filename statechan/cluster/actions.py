"""The simulator's actions: every step of a run is one of these, explicit and enumerable.

The model checker enumerates them, Hypothesis chooses among them, the seeded scheduler samples
them; a run is its list of actions, and replaying the list replays the run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from pydantic import TypeAdapter


@dataclass(frozen=True, order=True)
class Action:
    """One step. ``kind`` names it in timelines and in saved runs."""

    kind: ClassVar[str] = "action"

    def describe(self) -> str:
        fields = ", ".join(f"{v}" for v in self.__dict__.values())
        return f"{self.kind}({fields})"

    def to_json(self) -> dict[str, object]:
        return {"kind": self.kind, **self.__dict__}


@dataclass(frozen=True, order=True)
class Deliver(Action):
    """The broker's system-topic reader takes the next message."""

    kind: ClassVar[str] = "deliver"
    broker: str


@dataclass(frozen=True, order=True)
class Notify(Action):
    """The broker's metadata client takes its next notification or session event."""

    kind: ClassVar[str] = "notify"
    broker: str


@dataclass(frozen=True, order=True)
class RunTask(Action):
    """The broker runs the next follow-up its handlers queued (publish Owned, Assigning, …)."""

    kind: ClassVar[str] = "run-task"
    broker: str


@dataclass(frozen=True, order=True)
class Lookup(Action):
    """A client asks the broker who owns the bundle (and so may start an assignment)."""

    kind: ClassVar[str] = "lookup"
    broker: str
    bundle: str


@dataclass(frozen=True, order=True)
class Unload(Action):
    """An admin unload through the broker: Releasing with no destination. ``force``: a forced
    unload, as a namespace's deletion unloads its bundles (``unloadNamespaceBundleAsync`` with
    ``force=true``); the engines generate unforced ones only."""

    kind: ClassVar[str] = "unload"
    broker: str
    bundle: str
    force: bool = False

    def describe(self) -> str:
        return f"{self.kind}({self.broker}, {self.bundle}{', force' if self.force else ''})"

    def to_json(self) -> dict[str, object]:
        saved: dict[str, object] = {"kind": self.kind, "broker": self.broker, "bundle": self.bundle}
        if self.force:
            saved["force"] = True
        return saved


@dataclass(frozen=True, order=True)
class Transfer(Action):
    """An admin unload with a destination (PIP-307 transfer) through the broker."""

    kind: ClassVar[str] = "transfer"
    broker: str
    bundle: str
    destination: str


@dataclass(frozen=True, order=True)
class Split(Action):
    """The owner splits the bundle in two at the middle of its range."""

    kind: ClassVar[str] = "split"
    broker: str
    bundle: str


@dataclass(frozen=True, order=True)
class Tick(Action):
    """The clock moves to the next timer and it fires.

    ``broker`` chooses among timers of several sources that fall due at the same time: the next
    timer of that broker fires (its own timers fire in the order they were scheduled, as one
    executor runs them), or with ``zk:`` and a broker's id, ZooKeeper's expiry of that broker's
    crashed session. Empty: the timer scheduled first, as the simulator runs them. Different
    sources keep no common order, so the model checker takes each, and its states need not
    remember which of two such timers was scheduled first."""

    kind: ClassVar[str] = "tick"
    broker: str = ""


@dataclass(frozen=True, order=True)
class Wait(Action):
    """Time passes: the clock moves forward by ``ms`` (timers that fall due wait for a tick)."""

    kind: ClassVar[str] = "wait"
    ms: int


@dataclass(frozen=True, order=True)
class Compact(Action):
    """The channel topic is compacted up to its end."""

    kind: ClassVar[str] = "compact"


@dataclass(frozen=True, order=True)
class Crash(Action):
    """The broker's process dies; its metadata session expires later."""

    kind: ClassVar[str] = "crash"
    broker: str


@dataclass(frozen=True, order=True)
class Restart(Action):
    """A crashed broker starts again with the same id (a new incarnation)."""

    kind: ClassVar[str] = "restart"
    broker: str


@dataclass(frozen=True, order=True)
class Shutdown(Action):
    """Graceful shutdown: disable the channel, unregister, hand the bundles over, stop."""

    kind: ClassVar[str] = "shutdown"
    broker: str


@dataclass(frozen=True, order=True)
class LoseSession(Action):
    """The broker's metadata session is lost (the process lives on)."""

    kind: ClassVar[str] = "lose-session"
    broker: str


@dataclass(frozen=True, order=True)
class Reconnect(Action):
    """The broker's metadata client gets a new session."""

    kind: ClassVar[str] = "reconnect"
    broker: str


@dataclass(frozen=True, order=True)
class Resign(Action):
    """The leader gives up leadership (a leader change the simulator injects)."""

    kind: ClassVar[str] = "resign"
    broker: str


@dataclass(frozen=True, order=True)
class SyncTopic(Action):
    """The syncer's topic view takes the next message."""

    kind: ClassVar[str] = "sync-topic"


@dataclass(frozen=True, order=True)
class SyncStore(Action):
    """The syncer's metadata client takes its next notification."""

    kind: ClassVar[str] = "sync-store"


@dataclass(frozen=True, order=True)
class SyncReconcile(Action):
    """The syncer's periodic reconcile runs (master, #25946): it copies the items the destination
    lacks and deletes its leftovers from before the syncer started."""

    kind: ClassVar[str] = "sync-reconcile"


ACTION_TYPES: dict[str, type[Action]] = {
    cls.kind: cls
    for cls in (
        Deliver,
        Notify,
        RunTask,
        Lookup,
        Unload,
        Transfer,
        Split,
        Tick,
        Wait,
        Compact,
        Crash,
        Restart,
        Shutdown,
        LoseSession,
        Reconnect,
        Resign,
        SyncTopic,
        SyncStore,
        SyncReconcile,
    )
}


class BadActionError(ValueError):
    """A saved action that names no known kind or lacks its fields."""


def action_from_json(data: object, where: str = "action") -> Action:
    """Rebuild an action saved with :meth:`Action.to_json`."""
    if not isinstance(data, dict) or "kind" not in data:
        raise BadActionError(f"{where}: expected an object with a 'kind', got {data!r}")
    kind = data["kind"]
    cls = ACTION_TYPES.get(str(kind))
    if cls is None:
        raise BadActionError(f"{where}: unknown action kind {kind!r}; known: {', '.join(sorted(ACTION_TYPES))}")
    fields = {k: v for k, v in data.items() if k != "kind"}
    try:
        return TypeAdapter(cls).validate_python(fields)
    except Exception as exc:  # pydantic's error names the missing or wrong field
        raise BadActionError(f"{where}: bad {kind} action: {exc}") from None
