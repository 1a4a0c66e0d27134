"""The metadata store on a real ZooKeeper server (with kazoo), behind the same interface as the
in-process :class:`~statechan.stores.metadata.MetadataStore`: versioned compare-and-set writes,
per-client notifications delivered when the caller says so, sessions, ephemeral nodes. The
metadata-store table view, the broker registry and the syncer run on it unchanged.

How ZooKeeper's asynchronous world is made to look like the in-process store:

- Every client has its own ZooKeeper session and a persistent recursive watch on its root; the
  watch's events go to the client's queue as they arrive (on kazoo's thread).
- After every write, the store *settles*: each live session syncs and reads once. ZooKeeper
  dispatches a session's watch events before the replies that follow them, so when that read
  returns, every client's queue holds the write's notifications, in ZooKeeper's order. Callers
  then see ``pending`` exactly as with the in-process store, and runs stay deterministic.
- The in-process store creates parents implicitly and drops them when they empty. Here missing
  parents are created as empty nodes and remembered as *implicit*: they read as absent, are left
  out of ``paths()`` and notifications, and are deleted when their last child goes.
  Data nodes must therefore be leaves: creating a node where an implicit parent is, or deleting a
  node that has children, is refused with ``ValueError`` (ZooKeeper cannot do what the
  in-process store does there, and the channel never needs it).
- Losing a session closes it on the server (its ephemeral nodes go, in one transaction) and
  leaves the client without a session until ``reconnect()`` opens a new one.
- ZooKeeper's notifications carry no zxid; a notification's ``zxid`` is the last one the store
  had seen when the notification was queued.

Needs the ``zk`` extra (kazoo). Point ``root`` at a path of its own (the default makes a fresh
one) so that runs do not see each other's nodes.
"""

from __future__ import annotations

import contextlib
import uuid
from collections import deque
from typing import Any

from statechan.clock import Clock, ManualClock
from statechan.stores.metadata import (
    BadVersionError,
    MetadataClient,
    NodeEvent,
    NodeExistsError,
    NoNodeError,
    Notification,
    SessionExpiredError,
    Stat,
    Store,
    StoreError,
    StoreObserver,
    _check_path,
    _parent,
)
from statechan.stores.zkwatch import add_recursive_watch


class ZooKeeperUnreachableError(StoreError):
    """The server did not answer: one line with the address."""


def _stat(zstat: Any) -> Stat:
    return Stat(
        version=zstat.version,
        ephemeral_owner=zstat.ephemeralOwner or None,
        created_zxid=zstat.czxid,
        modified_zxid=zstat.mzxid,
        modified_ms=zstat.mtime,
    )


def _ancestors(path: str) -> list[str]:
    """``/a/b/c`` -> ``["/a", "/a/b"]`` (top first; not the root, not the path itself)."""
    out: list[str] = []
    parent = _parent(path)
    while parent != "/":
        out.append(parent)
        parent = _parent(parent)
    return out[::-1]


class ZooKeeperStore(Store):
    """A store on the ZooKeeper at ``hosts`` (``host:port[,host:port]``), under ``root``."""

    def __init__(
        self,
        hosts: str,
        clock: Clock | None = None,
        root: str | None = None,
        timeout_s: float = 10.0,
    ) -> None:

        self.clock = clock if clock is not None else ManualClock()
        self.observers: list[StoreObserver] = []
        self.hosts = hosts
        self.root = root if root is not None else f"/statechan-{uuid.uuid4().hex[:12]}"
        _check_path(self.root)
        self.timeout_s = timeout_s
        self._clients: list[ZooKeeperClient] = []
        self._implicit: set[str] = set()
        self._changes: deque[tuple[NodeEvent, str]] = deque()
        self._zxid = 0
        setup = self._kazoo(chroot=False)
        try:
            setup.ensure_path(self.root)
        finally:
            setup.stop()
            setup.close()
        self._reader: Any = self._kazoo()
        self._zxid = int(self._reader.last_zxid or 0)
        add_recursive_watch(self._reader, "/", lambda event, path: self._changes.append((event, path)))

    def __str__(self) -> str:
        return f"{self.hosts}{self.root}"

    def _kazoo(self, chroot: bool = True) -> Any:
        """A started kazoo client (a new session)."""
        from kazoo.client import KazooClient
        from kazoo.handlers.threading import KazooTimeoutError

        hosts = self.hosts + (self.root if chroot and self.root != "/" else "")
        client = KazooClient(hosts=hosts, timeout=self.timeout_s)
        try:
            client.start(timeout=self.timeout_s)
        except KazooTimeoutError:
            client.close()
            raise ZooKeeperUnreachableError(
                f"cannot reach ZooKeeper at {self.hosts} (no answer within {self.timeout_s:g} s)"
            ) from None
        return client

    def connect(self, name: str) -> ZooKeeperClient:
        client = ZooKeeperClient(self, name)
        self._clients.append(client)
        return client

    @property
    def zxid(self) -> int:
        return self._zxid

    def get(self, path: str) -> tuple[bytes, Stat] | None:
        return self._read(self._reader, path)

    def _read(self, zk: Any, path: str) -> tuple[bytes, Stat] | None:
        from kazoo.exceptions import NoNodeError as ZkNoNode

        if path in self._implicit:
            return None
        try:
            data, zstat = zk.get(path)
        except ZkNoNode:
            return None
        return bytes(data), _stat(zstat)

    def paths(self) -> list[str]:
        from kazoo.exceptions import NoNodeError as ZkNoNode

        out: list[str] = []
        todo = ["/"]
        while todo:
            path = todo.pop()
            try:
                children = self._reader.get_children(path)
            except ZkNoNode:
                continue
            for child in children:
                full = f"{path.rstrip('/')}/{child}"
                if full == "/zookeeper":
                    continue
                if full not in self._implicit:
                    out.append(full)
                todo.append(full)
        return sorted(out)

    def close(self) -> None:
        """Close every client and the store's own session; the nodes stay on the server."""
        for client in list(self._clients):
            client.close()
        self._reader.stop()
        self._reader.close()

    def remove(self) -> None:
        """Close, then delete everything under ``root`` (a test's clean-up)."""
        self.close()
        cleaner = self._kazoo(chroot=False)
        try:
            cleaner.delete(self.root, recursive=True)
        finally:
            cleaner.stop()
            cleaner.close()

    # -- the barrier ------------------------------------------------------------------------------
    def _settle(self) -> None:
        """Wait until every live session has received every change so far, then tell the observers."""
        for zk in [c._zk for c in self._clients if c._zk is not None and c.connected] + [self._reader]:
            zk.sync("/")
            zk.exists("/")
        self._zxid = max(self._zxid, int(self._reader.last_zxid or 0))
        while self._changes:
            event, path = self._changes.popleft()
            if path in self._implicit or path == "/":
                continue
            node = None if event is NodeEvent.Deleted else self._read(self._reader, path)
            for observer in self.observers:
                observer(event, path, None if node is None else node[0], None if node is None else node[1])

    def _hidden(self, path: str) -> bool:
        return path in self._implicit or path == "/"

    def _drop_empty_parents(self, zk: Any, path: str) -> list[str]:
        """Delete the implicit parents of ``path`` that have no children left (bottom up)."""
        from kazoo.exceptions import NoNodeError as ZkNoNode
        from kazoo.exceptions import NotEmptyError

        dropped: list[str] = []
        for parent in reversed(_ancestors(path)):
            if parent not in self._implicit:
                break
            try:
                zk.delete(parent)
            except NotEmptyError:
                break
            except ZkNoNode:
                pass
            dropped.append(parent)
        return dropped


class ZooKeeperClient(MetadataClient):
    """A client of :class:`ZooKeeperStore`: one ZooKeeper session at a time."""

    def __init__(self, store: ZooKeeperStore, name: str) -> None:
        self.store = store
        self._zk: Any = None
        self._ephemerals: dict[str, None] = {}
        super().__init__(name, 0)
        self._open_session()

    def _open_session(self) -> None:
        zk = self.store._kazoo()
        self._zk = zk
        self.session_id = int(zk.client_id[0])

        def queue(event: NodeEvent, path: str) -> None:
            if self.connected and not self.closed and not self.store._hidden(path):
                self._queue.append(Notification(event, path, self.store._zxid))

        add_recursive_watch(zk, "/", queue)

    def _end_session(self) -> None:
        """Close the session on the server: its ephemeral nodes go, with their emptied parents."""
        zk, self._zk = self._zk, None
        if zk is None:
            return
        zk.stop()
        zk.close()
        gone, self._ephemerals = list(self._ephemerals), {}
        dropped: list[str] = []
        for path in gone:
            dropped += self.store._drop_empty_parents(self.store._reader, path)
        self.store._settle()
        self.store._implicit.difference_update(dropped)

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Run a kazoo call, with ZooKeeper's failures as the store's exceptions."""
        from kazoo import exceptions as zke

        self._live()
        try:
            return fn(*args, **kwargs)
        except zke.NoNodeError:
            raise NoNodeError(args[0] if args else "") from None
        except zke.NodeExistsError:
            raise NodeExistsError(args[0] if args else "") from None
        except zke.BadVersionError:
            raise BadVersionError(f"{args[0] if args else ''}: version differs from the expected one") from None
        except (zke.SessionExpiredError, zke.ConnectionLoss) as exc:
            raise SessionExpiredError(f"client {self.name}: {type(exc).__name__}") from None

    def get(self, path: str) -> tuple[bytes, Stat] | None:
        self._live()
        return self.store._read(self._zk, path)

    def children(self, path: str) -> list[str]:
        from kazoo.exceptions import NoNodeError as ZkNoNode

        self._live()
        try:
            return sorted(self._zk.get_children(path))
        except ZkNoNode:
            return []

    def create(self, path: str, data: bytes, ephemeral: bool = False) -> Stat:
        from kazoo.exceptions import NodeExistsError as ZkNodeExists

        _check_path(path)
        self._live()
        if path in self.store._implicit:
            raise ValueError(f"{path} is a parent of other nodes; on ZooKeeper data nodes must be leaves")
        made: list[str] = []
        for parent in _ancestors(path):
            if self._zk.exists(parent) is None:
                self.store._implicit.add(parent)
                try:
                    self._zk.create(parent, b"")
                    made.append(parent)
                except ZkNodeExists:
                    self.store._implicit.discard(parent)
        try:
            _, zstat = self._call(self._zk.create, path, data, ephemeral=ephemeral, include_data=True)
        except NodeExistsError:
            self._undo_parents(made)
            raise
        if ephemeral:
            self._ephemerals[path] = None
        self.store._settle()
        return _stat(zstat)

    def _undo_parents(self, made: list[str]) -> None:
        for parent in reversed(made):
            with contextlib.suppress(Exception):
                self._zk.delete(parent)
        self.store._settle()
        self.store._implicit.difference_update(made)

    def _writable(self, path: str, expected_version: int | None) -> None:
        """Refuse what the in-process store refuses before ZooKeeper would read it differently."""
        self._live()
        if path in self.store._implicit:
            raise NoNodeError(path)
        if expected_version is not None and expected_version < 0:
            # ZooKeeper reads -1 as "any version"; the in-process store finds no such version
            if self.get(path) is None:
                raise NoNodeError(path)
            raise BadVersionError(f"{path}: expected version {expected_version}")

    def set(self, path: str, data: bytes, expected_version: int | None = None) -> Stat:
        self._writable(path, expected_version)
        zstat = self._call(self._zk.set, path, data, -1 if expected_version is None else expected_version)
        self.store._settle()
        return _stat(zstat)

    def delete(self, path: str, expected_version: int | None = None) -> None:
        from kazoo.exceptions import NotEmptyError

        self._writable(path, expected_version)
        try:
            self._call(self._zk.delete, path, -1 if expected_version is None else expected_version)
        except NotEmptyError:
            raise ValueError(f"{path} has children; on ZooKeeper data nodes must be leaves") from None
        self._ephemerals.pop(path, None)
        for client in self.store._clients:
            client._ephemerals.pop(path, None)
        dropped = self.store._drop_empty_parents(self._zk, path)
        self.store._settle()
        self.store._implicit.difference_update(dropped)

    def close(self) -> None:
        if self.closed:
            return
        self.connected = False
        self.closed = True
        self._queue.clear()
        self._end_session()
        if self in self.store._clients:
            self.store._clients.remove(self)
