"""Capturing a live metadata store's ownership state as a trace (the auditor's format).

``capture_zk`` reads a ZooKeeper's ``/service_unit_state/**`` nodes (PIP-378's metadata-store
channel: one node per bundle, its data the value's JSON) and its broker registry
(``/loadbalance/brokers/<broker>``) into trace records: the registry's brokers as ``registered``
events, then one channel record per bundle node in the order of the zxid that last wrote it
(``message_id`` ``"zxid:N"``, ``publish_time`` the node's modification time). A snapshot has no
deletions: a deleted node is simply absent. A node whose data is not a valid value is counted as
malformed, kept with its path and error, and the capture goes on.

Needs the ``zk`` extra (kazoo).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pydantic

from statechan.keys import BadKeyError, parse_key
from statechan.traces import AnyRecord, ChannelRecord, RegistryRecord, record_from_message, validation_reason

PATH_PREFIX = "/service_unit_state"
REGISTRY = "/loadbalance/brokers"


class CaptureError(RuntimeError):
    """The store could not be read at all (unreachable, refused): one line saying where."""


@dataclass
class BadNode:
    path: str
    error: str
    data: str

    def __str__(self) -> str:
        return f"{self.path}: {self.error}"


@dataclass
class Capture:
    """What a capture read: the records, in trace order, and the nodes it could not read."""

    records: list[AnyRecord] = field(default_factory=list)
    bad: list[BadNode] = field(default_factory=list)


def _leaves(client: Any, path: str) -> Iterator[tuple[str, bytes, Any]]:
    """Every node below ``path`` that has no children (the values), with its data and stat."""
    from kazoo.exceptions import NoNodeError

    try:
        children = client.get_children(path)
    except NoNodeError:
        return
    if not children:
        try:
            data, stat = client.get(path)
        except NoNodeError:
            return
        yield path, data, stat
        return
    for child in sorted(children):
        yield from _leaves(client, f"{path}/{child}")


def snapshot(client: Any) -> Capture:
    """The registry and every bundle node of a connected kazoo client, as trace records."""
    from kazoo.exceptions import NoNodeError

    out = Capture()
    try:
        brokers = sorted(client.get_children(REGISTRY))
    except NoNodeError:
        brokers = []
    for broker in brokers:
        _, stat = client.get(f"{REGISTRY}/{broker}")
        out.records.append(
            RegistryRecord(offset=len(out.records), time=stat.mtime, broker=broker, event="registered")
        )
    nodes = sorted(_leaves(client, PATH_PREFIX), key=lambda node: (node[2].mzxid, node[0]))
    for path, data, stat in nodes:
        if path == PATH_PREFIX:
            continue  # the root itself, empty
        key = path[len(PATH_PREFIX) + 1 :]
        try:
            parse_key(key)
            record: ChannelRecord = record_from_message(
                key, data, f"zxid:{stat.mzxid}", stat.mtime, len(out.records)
            )
        except BadKeyError as exc:
            out.bad.append(BadNode(path, str(exc), data.decode("utf-8", "replace")))
            continue
        except pydantic.ValidationError as exc:
            out.bad.append(BadNode(path, validation_reason(exc), data.decode("utf-8", "replace")))
            continue
        out.records.append(record)
    return out


def capture_zk(hosts: str, timeout_s: float = 10.0) -> Capture:
    """Connect to ZooKeeper at ``hosts`` (``host:port[,host:port]``), take a snapshot, disconnect."""
    from kazoo.client import KazooClient
    from kazoo.handlers.threading import KazooTimeoutError

    client = KazooClient(hosts=hosts, timeout=timeout_s, read_only=True)
    try:
        client.start(timeout=timeout_s)
    except KazooTimeoutError:
        client.close()
        raise CaptureError(f"cannot reach ZooKeeper at {hosts} (no answer within {timeout_s:g} s)") from None
    try:
        return snapshot(client)
    finally:
        client.stop()
        client.close()
