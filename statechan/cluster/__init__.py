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

if TYPE_CHECKING:
    from statechan.cluster.sim import BrokerView, Cluster
    from statechan.cluster.state import ChannelState, LookupAnswer, MetadataState
    from statechan.observation import Observation

_LAZY = {
    "BrokerView": "statechan.cluster.sim",
    "Cluster": "statechan.cluster.sim",
    "ChannelState": "statechan.cluster.state",
    "LookupAnswer": "statechan.cluster.state",
    "MetadataState": "statechan.cluster.state",
    "Observation": "statechan.observation",
}


def __getattr__(name: str) -> Any:
    """The simulator's names, imported when first asked for: a module that needs only the actions
    or the configuration (the auditor) does not load the protocol and its stores."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'statechan.cluster' has no attribute {name!r}")


__all__ = [
    "ACTION_TYPES",
    "VARIANTS",
    "Action",
    "BadActionError",
    "BrokerView",
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
