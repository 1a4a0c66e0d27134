"""Service-unit (namespace bundle) keys: ``tenant/namespace/0xLLLLLLLL_0xUUUUUUUU``."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

FULL_RANGE = (0x00000000, 0xFFFFFFFF)
_KEY = re.compile(r"^(?P<ns>[^/\s]+/[^/\s]+)/0x(?P<lo>[0-9a-fA-F]{8})_0x(?P<hi>[0-9a-fA-F]{8})$")
_RANGE = re.compile(r"^0x(?P<lo>[0-9a-fA-F]{8})_0x(?P<hi>[0-9a-fA-F]{8})$")


class BadKeyError(ValueError):
    """A service-unit key that is not ``tenant/namespace/0xLLLLLLLL_0xUUUUUUUU``."""


@dataclass(frozen=True, order=True, slots=True)
class Bundle:
    """A namespace bundle: a hash range ``[lower, upper)`` of a namespace (the last range ends at 0xffffffff)."""

    namespace: str
    lower: int
    upper: int

    @property
    def range_name(self) -> str:
        return f"0x{self.lower:08x}_0x{self.upper:08x}"

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.range_name}"

    def __str__(self) -> str:
        return self.key

    def overlaps(self, other: Bundle) -> bool:
        return self.namespace == other.namespace and self.lower < other.upper and other.lower < self.upper

    def split(self, at: int | None = None) -> tuple[Bundle, Bundle]:
        """Two children at ``at`` (default: the middle, as Pulsar's range-equally-divide does)."""
        point = (self.lower + self.upper) // 2 if at is None else at
        if not self.lower < point < self.upper:
            raise ValueError(f"split point 0x{point:08x} is not inside {self.range_name}")
        return Bundle(self.namespace, self.lower, point), Bundle(self.namespace, point, self.upper)

    def child(self, range_name: str) -> Bundle:
        """The bundle of this namespace with the given ``0xLLLLLLLL_0xUUUUUUUU`` range."""
        match = _RANGE.match(range_name)
        if match is None:
            raise BadKeyError(f"not a bundle range: {range_name!r} (expected 0xLLLLLLLL_0xUUUUUUUU)")
        return Bundle(self.namespace, int(match["lo"], 16), int(match["hi"], 16))


@functools.lru_cache(maxsize=65_536)
def parse_key(key: str) -> Bundle:
    """The bundle a channel key names; :class:`BadKeyError` says what is wrong."""
    match = _KEY.match(key)
    if match is None:
        raise BadKeyError(f"not a service-unit key: {key!r} (expected tenant/namespace/0xLLLLLLLL_0xUUUUUUUU)")
    lower, upper = int(match["lo"], 16), int(match["hi"], 16)
    if lower >= upper:
        raise BadKeyError(f"empty hash range in {key!r}: 0x{lower:08x} is not below 0x{upper:08x}")
    return Bundle(match["ns"], lower, upper)


def is_key(key: str) -> bool:
    return _KEY.match(key) is not None


def namespace_bundles(namespace: str, count: int) -> list[Bundle]:
    """``count`` equal bundles covering the full hash range, as Pulsar's initial bundles do."""
    if count < 1:
        raise ValueError(f"a namespace has at least one bundle, not {count}")
    lo, hi = FULL_RANGE
    step = (hi - lo) // count
    bounds = [lo + i * step for i in range(count)] + [hi]
    return [Bundle(namespace, bounds[i], bounds[i + 1]) for i in range(count)]


# -- the system namespaces a broker owns without the channel (NamespaceService's formats) ------------------
CLUSTER_NAME = "standalone"
"""The cluster name in the system namespaces' names (Pulsar standalone's default; the channel never
sees them, so the name is only what the owned set and a system lookup print)."""

_HEARTBEAT_V1 = re.compile(r"^pulsar/[^/]+/([^:]+:\d+)$")
_HEARTBEAT_V2 = re.compile(r"^pulsar/([^:]+:\d+)$")
_SLA_MONITOR = re.compile(r"^sla-monitor/[^/]+/([^:]+:\d+)$")


def system_bundle_keys(
    broker: str, two_heartbeat_namespaces: bool = False, cluster: str = CLUSTER_NAME
) -> tuple[str, ...]:
    """The bundles a broker's table view puts in its owned set when it starts
    (``ServiceUnitStateTableViewBase.init``): its heartbeat namespace's and its SLA-monitor namespace's
    full bundles. Since #25304 one heartbeat namespace (``pulsar/<broker>``); before it, two (also
    ``pulsar/<cluster>/<broker>``, ``NamespaceService.getHeartbeatNamespace``)."""
    heartbeat = [f"pulsar/{cluster}/{broker}"] if two_heartbeat_namespaces else []
    heartbeat.append(f"pulsar/{broker}")
    # each its namespace's one full-range bundle (system namespaces are never split)
    return tuple(Bundle(ns, *FULL_RANGE).key for ns in (*heartbeat, f"sla-monitor/{cluster}/{broker}"))


def system_bundle_broker(key: str) -> tuple[str, bool] | None:
    """The broker a heartbeat or SLA-monitor bundle belongs to, and whether it is an SLA-monitor one
    (``NamespaceService.checkHeartbeatNamespace``, ``checkHeartbeatNamespaceV2``,
    ``getSLAMonitorBrokerName``, tried in that order on the key's namespace); None for any other key."""
    namespace, _, _ = key.rpartition("/")
    for pattern, sla in ((_HEARTBEAT_V1, False), (_HEARTBEAT_V2, False), (_SLA_MONITOR, True)):
        match = pattern.match(namespace)
        if match is not None:
            return match[1], sla
    return None
