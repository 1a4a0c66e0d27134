"""ZooKeeper persistent recursive watches on a kazoo client: every change below a path, in
order, without re-arming — what Pulsar's ZooKeeper metadata store listens with (ZooKeeper 3.6's
``AddWatch``). Paths are the client's own (inside its chroot, if it has one). kazoo 2.11 has
no call for it, and its ``TreeCache`` coalesces changes; this
sends the request through kazoo's protocol layer and taps its event reader.

The callback runs on kazoo's connection thread: keep it short and thread-safe (append to a
queue). A persistent watch belongs to the session: after a session is lost, add it again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from statechan.stores.metadata import NodeEvent

PERSISTENT_RECURSIVE = 1
"""ZooKeeper's ``AddWatchMode.PERSISTENT_RECURSIVE``."""
_EVENTS = {1: NodeEvent.Created, 2: NodeEvent.Deleted, 3: NodeEvent.Modified}
"""ZooKeeper's event types (4, children changed, is not sent for recursive watches)."""

WatchCallback = Callable[[NodeEvent, str], None]


class _AddWatch:
    """The ``AddWatch`` request, in the shape kazoo's connection sends (``type``, ``serialize``)."""

    type = 106  # ZooKeeper's OpCode.addWatch

    def __init__(self, path: str, mode: int) -> None:
        self.path = path
        self.mode = mode

    def __repr__(self) -> str:
        return f"AddWatch(path={self.path!r}, mode={self.mode})"

    def serialize(self) -> bytearray:
        from kazoo.protocol.serialization import int_struct, write_string

        data = bytearray(write_string(self.path))
        data.extend(int_struct.pack(self.mode))
        return data

    @classmethod
    def deserialize(cls, buffer: bytes, offset: int) -> bool:
        return True  # the reply carries no body; an error arrives as an exception


def add_recursive_watch(client: Any, path: str, callback: WatchCallback, timeout_s: float = 10.0) -> None:
    """Call ``callback(event, path)`` for every node created, changed or deleted at or below
    ``path`` from now on, as ZooKeeper orders them."""
    from kazoo.protocol.serialization import Watch

    connection = client._connection
    taps: list[tuple[str, WatchCallback]] | None = getattr(connection, "_statechan_taps", None)
    if taps is None:
        taps = []
        original = connection._read_watch_event

        def read_watch_event(buffer: bytes, offset: int) -> Any:
            watch, _ = Watch.deserialize(buffer, offset)
            event = _EVENTS.get(watch.type)
            if event is not None:
                path = client.unchroot(watch.path)
                for prefix, tap in list(taps):
                    if path == prefix or path.startswith(prefix.rstrip("/") + "/"):
                        tap(event, path)
            return original(buffer, offset)

        connection._read_watch_event = read_watch_event
        connection._statechan_taps = taps
    taps.append((path, callback))
    result = client.handler.async_result()
    full = (client.chroot or "") + path if path != "/" else (client.chroot or "/")
    client._call(_AddWatch(full, PERSISTENT_RECURSIVE), result)
    result.get(timeout=timeout_s)
