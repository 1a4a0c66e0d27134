"""The channel protocol on each broker, the leader's duties, and the cluster simulator."""

from typing import TYPE_CHECKING, Any

from statechan.cluster.actions import (
    ACTION_TYPES,
    Action,
    BadActionError,
    Compact,
    Crash,
    Deliver,
    Lookup,
    LoseSession,
    Notify,
    Reconnect,
    Resign,
    Restart,
    RunTask,
    Shutdown,
    Split,
    SyncReconcile,
    SyncStore,
    SyncTopic,
    Tick,
    Transfer,
    Unload,
    Wait,
    action_from_json,
)
from statechan.cluster.config import VARIANTS, ChannelConfig, PlacementKind, SimConfig, StoreKind, Variant
from statechan.observation import LookupAnswer, Observation

if TYPE_CHECKING:
    from statechan.cluster.sim import Broker, ChannelState, Cluster, MetadataState

_SIMULATOR = frozenset({"Broker", "ChannelState", "Cluster", "MetadataState"})


def __getattr__(name: str) -> Any:
    """The simulator's names, imported when first asked for: a module that needs only the actions
    or the configuration (the invariant catalogue, the auditor) does not load the simulator and
    its stores."""
    if name in _SIMULATOR:
        from statechan.cluster import sim

        return getattr(sim, name)
    raise AttributeError(f"module 'statechan.cluster' has no attribute {name!r}")


__all__ = [
    "ACTION_TYPES",
    "VARIANTS",
    "Action",
    "BadActionError",
    "Broker",
    "ChannelConfig",
    "ChannelState",
    "Cluster",
    "Compact",
    "Crash",
    "Deliver",
    "Lookup",
    "LookupAnswer",
    "LoseSession",
    "MetadataState",
    "Notify",
    "Observation",
    "PlacementKind",
    "Reconnect",
    "Resign",
    "Restart",
    "RunTask",
    "Shutdown",
    "SimConfig",
    "Split",
    "StoreKind",
    "SyncReconcile",
    "SyncStore",
    "SyncTopic",
    "Tick",
    "Transfer",
    "Unload",
    "Variant",
    "Wait",
    "action_from_json",
]
