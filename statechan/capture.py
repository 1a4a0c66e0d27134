"""Capturing a live metadata store's ownership state as a trace (the auditor's format).

``capture_zk`` reads a ZooKeeper's ``/service_unit_state/**`` nodes (PIP-378's metadata-store
channel: one node per bundle, its data the value's JSON) and its broker registry
(``/loadbalance/brokers/<broker>``) into trace records: the registry's brokers as ``registered``
events, then one channel record per bundle node in the order of the zxid that last wrote it
(``message_id`` ``"zxid:N"``, ``publish_time`` the node's modification time). A snapshot has no
deletions: a deleted node is simply absent. A node whose data is not a valid value is counted as
malformed, kept with its path and error, and the capture goes on.

Following (``follow``) goes on after the snapshot: ZooKeeper's persistent recursive watch reports
every change, and each becomes a record — a new value (read when the event is handled, so a
value that a quicker later write replaced is not seen, but every key's latest value is), a
tombstone for a deleted bundle node, a registry event for a broker node. The watch is set before
the snapshot is read, so nothing falls between the two.

Needs the ``zk`` extra (kazoo).
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pydantic

from statechan.keys import BadKeyError, parse_key
from statechan.stores.metadata import NodeEvent
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
    values_at: dict[str, int] = field(default_factory=dict)
    """Each bundle node with a value recorded, and the zxid that wrote it (for following)."""
    registered: set[str] = field(default_factory=set)
    versions_at: dict[str, int] = field(default_factory=dict)
    """Each bundle node's data version when last read."""
    unseen: dict[str, int] = field(default_factory=dict)
    """Per bundle node, the writes a following capture could not record: a watch tells that a
    node changed, and the read after it gets only the latest value (its version shows how many
    writes came in between)."""

    def add_node(self, path: str, data: bytes, mzxid: int, mtime: int, version: int | None = None) -> None:
        """A bundle node's value as the next channel record (or as a bad node); ``version``, the
        node's data version, counts the writes between this read and the last in :attr:`unseen`."""
        if version is not None:
            last = self.versions_at.get(path)
            if last is not None and version > last + 1:
                self.unseen[path] = self.unseen.get(path, 0) + version - last - 1
            self.versions_at[path] = version
        key = path[len(PATH_PREFIX) + 1 :]
        try:
            parse_key(key)
            record: ChannelRecord = record_from_message(key, data, f"zxid:{mzxid}", mtime, len(self.records))
        except BadKeyError as exc:
            self.bad.append(BadNode(path, str(exc), data.decode("utf-8", "replace")))
            return
        except pydantic.ValidationError as exc:
            self.bad.append(BadNode(path, validation_reason(exc), data.decode("utf-8", "replace")))
            return
        self.records.append(record)
        self.values_at[path] = mzxid

    def add_registry(self, broker: str, event: str, time_ms: int) -> None:
        if (event == "registered") == (broker in self.registered):
            return  # already known
        (self.registered.add if event == "registered" else self.registered.discard)(broker)
        self.records.append(RegistryRecord(offset=len(self.records), time=time_ms, broker=broker, event=event))


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
        try:
            _, stat = client.get(f"{REGISTRY}/{broker}")
        except NoNodeError:
            continue
        out.add_registry(broker, "registered", stat.mtime)
    nodes = sorted(_leaves(client, PATH_PREFIX), key=lambda node: (node[2].mzxid, node[0]))
    for path, data, stat in nodes:
        if path != PATH_PREFIX:  # the root itself, empty
            out.add_node(path, bytes(data), stat.mzxid, stat.mtime, stat.version)
    return out


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _is_key(path: str) -> bool:
    try:
        parse_key(path[len(PATH_PREFIX) + 1 :])
    except BadKeyError:
        return False
    return True


def follow(
    client: Any,
    changes: queue.Queue[tuple[NodeEvent, str]],
    out: Capture,
    stop: Callable[[], bool],
    on_record: Callable[[AnyRecord], None] | None = None,
    poll_s: float = 0.1,
) -> None:
    """Turn the watch's ``changes`` into records on ``out`` until ``stop()`` says so."""
    from kazoo.exceptions import NoNodeError

    while not stop():
        try:
            event, path = changes.get(timeout=poll_s)
        except queue.Empty:
            continue
        before = len(out.records)
        if path.startswith(REGISTRY + "/") and "/" not in path[len(REGISTRY) + 1 :]:
            broker = path[len(REGISTRY) + 1 :]
            if event is NodeEvent.Created:
                out.add_registry(broker, "registered", _now_ms())
            elif event is NodeEvent.Deleted:
                out.add_registry(broker, "unregistered", _now_ms())
        elif path.startswith(PATH_PREFIX + "/"):
            if event is NodeEvent.Deleted:
                out.versions_at[path] = -1  # gone: if made again, its first write has version 0
                if out.values_at.pop(path, None) is not None:
                    key = path[len(PATH_PREFIX) + 1 :]
                    zxid = int(client.last_zxid or 0)
                    out.records.append(record_from_message(key, None, f"zxid:{zxid}", _now_ms(), len(out.records)))
            else:
                try:
                    data, stat = client.get(path)
                except NoNodeError:
                    continue  # deleted since; its Deleted event follows
                if stat.numChildren or (not data and not _is_key(path)):
                    continue  # a parent, not a bundle node
                if event is NodeEvent.Created:
                    out.versions_at.setdefault(path, -1)  # made while followed: every write counts
                if stat.mzxid > out.values_at.get(path, 0):
                    out.add_node(path, bytes(data), stat.mzxid, stat.mtime, stat.version)
        if on_record is not None:
            for record in out.records[before:]:
                on_record(record)


def capture_zk(
    hosts: str,
    timeout_s: float = 10.0,
    follow_s: float = 0.0,
    stop: Callable[[], bool] | None = None,
    on_record: Callable[[AnyRecord], None] | None = None,
) -> Capture:
    """Connect to ZooKeeper at ``hosts`` (``host:port[,host:port][/root]``), take a snapshot, then
    follow changes for ``follow_s`` seconds (or until ``stop()``, when given), disconnect.
    ``on_record`` sees every record of a following capture as it is made, the snapshot's first."""
    from kazoo.client import KazooClient
    from kazoo.handlers.threading import KazooTimeoutError

    client = KazooClient(hosts=hosts, timeout=timeout_s, read_only=True)
    try:
        client.start(timeout=timeout_s)
    except KazooTimeoutError:
        client.close()
        raise CaptureError(f"cannot reach ZooKeeper at {hosts} (no answer within {timeout_s:g} s)") from None
    try:
        if follow_s <= 0 and stop is None:
            return snapshot(client)
        from statechan.stores.zkwatch import add_recursive_watch

        changes: queue.Queue[tuple[NodeEvent, str]] = queue.Queue()
        add_recursive_watch(client, "/", lambda event, path: changes.put((event, path)))
        out = snapshot(client)
        if on_record is not None:
            for record in out.records:
                on_record(record)
        deadline = time.monotonic() + follow_s
        follow(client, changes, out, stop if stop is not None else lambda: time.monotonic() >= deadline, on_record)
        return out
    finally:
        client.stop()
        client.close()
