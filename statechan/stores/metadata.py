"""An in-process versioned metadata store with ZooKeeper's semantics, as Pulsar's metadata layer
exposes them: versioned nodes, compare-and-set writes, per-client notifications, sessions that can
be lost and re-established, and ephemeral nodes that vanish with their session.

Writes are linearizable (applied at once, in call order). Notifications are queued per client and
delivered only when the caller says so, so a test or the simulator decides who learns what when.
A client whose session is lost gets no notifications until it reconnects: that is the gap the
session-loss bugs (#24478) live in.
"""

from __future__ import annotations

import abc
import enum
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from statechan.clock import Clock, ManualClock


class StoreError(Exception):
    """Base of the store's failures (Pulsar's ``MetadataStoreException`` family)."""


class NoNodeError(StoreError):
    pass


class NodeExistsError(StoreError):
    pass


class BadVersionError(StoreError):
    """A compare-and-set found another version than expected."""


class SessionExpiredError(StoreError):
    """The client's session is lost; it must reconnect before it can read or write."""


class NodeEvent(enum.Enum):
    Created = "Created"
    Modified = "Modified"
    Deleted = "Deleted"


class SessionEvent(enum.Enum):
    SessionLost = "SessionLost"
    SessionReestablished = "SessionReestablished"


@dataclass(frozen=True, slots=True)
class Stat:
    """A node's metadata: its data version (0 when created) and the session owning it, if ephemeral."""

    version: int
    ephemeral_owner: int | None
    created_zxid: int
    modified_zxid: int
    modified_ms: int


@dataclass(frozen=True, slots=True)
class Notification:
    """A change to ``path``; the listener reads the node again to learn its value, as Pulsar does."""

    event: NodeEvent
    path: str
    zxid: int


NodeListener = Callable[[Notification], None]
SessionListener = Callable[[SessionEvent], None]


@dataclass(slots=True)
class _Node:
    data: bytes
    stat: Stat


def _parent(path: str) -> str:
    return path.rsplit("/", 1)[0] or "/"


def _check_path(path: str) -> None:
    if not path.startswith("/") or (path != "/" and path.endswith("/")) or "//" in path:
        raise ValueError(f"not a metadata path: {path!r} (absolute, no trailing or double slash)")


StoreObserver = Callable[[NodeEvent, str, bytes | None, Stat | None], None]
"""Called with every change as it is applied: (event, path, data or None, stat or None)."""


class Store(abc.ABC):
    """A metadata store the channel can run on: this in-process one, or a real ZooKeeper
    (:mod:`statechan.stores.zookeeper`). Views, the syncer and the simulator use only this."""

    clock: Clock
    observers: list[StoreObserver]

    @abc.abstractmethod
    def connect(self, name: str) -> MetadataClient:
        """A new client with a new session."""

    @property
    @abc.abstractmethod
    def zxid(self) -> int:
        """The id of the last change (ZooKeeper's transaction id)."""

    @abc.abstractmethod
    def get(self, path: str) -> tuple[bytes, Stat] | None:
        """A node's data and stat, read outside any client's session (for checks)."""

    @abc.abstractmethod
    def paths(self) -> list[str]:
        """Every data node, sorted (implicit parents are not nodes)."""

    def close(self) -> None:  # noqa: B027 - nothing to release in the in-process store
        """Release the store's connections (the in-process store has none)."""

    def dump(self) -> dict[str, tuple[bytes, Stat]]:
        """Every node's data and stat (for checks and captures)."""
        out: dict[str, tuple[bytes, Stat]] = {}
        for path in self.paths():
            node = self.get(path)
            if node is not None:
                out[path] = node
        return out


class MetadataStore(Store):
    """The in-process store; brokers talk to it through a :class:`StoreClient` each."""

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock: Clock = clock if clock is not None else ManualClock()
        self._nodes: dict[str, _Node] = {}
        self._children: dict[str, set[str]] = {}
        self._clients: list[StoreClient] = []
        self._zxid = 0
        self._next_session = 1
        self.observers: list[StoreObserver] = []

    def connect(self, name: str) -> StoreClient:
        client = StoreClient(self, name, self._new_session())
        self._clients.append(client)
        return client

    def _new_session(self) -> int:
        session = self._next_session
        self._next_session += 1
        return session

    @property
    def zxid(self) -> int:
        return self._zxid

    def paths(self) -> list[str]:
        return sorted(self._nodes)

    # -- operations, applied at once -------------------------------------------------------
    def get(self, path: str) -> tuple[bytes, Stat] | None:
        node = self._nodes.get(path)
        return None if node is None else (node.data, node.stat)

    def _children_of(self, path: str) -> list[str]:
        return sorted(self._children.get(path, ()))

    def _create(self, path: str, data: bytes, ephemeral_owner: int | None) -> Stat:
        _check_path(path)
        if path in self._nodes:
            raise NodeExistsError(path)
        self._zxid += 1
        stat = Stat(0, ephemeral_owner, self._zxid, self._zxid, self.clock.now_ms())
        self._nodes[path] = _Node(data, stat)
        child = path
        while child != "/":
            parent = _parent(child)
            self._children.setdefault(parent, set()).add(child.rsplit("/", 1)[1])
            child = parent
        self._notify(NodeEvent.Created, path)
        return stat

    def _existing(self, path: str, expected_version: int | None) -> _Node:
        """The node at ``path``, if it exists and (when one is given) has the expected version."""
        node = self._nodes.get(path)
        if node is None:
            raise NoNodeError(path)
        if expected_version is not None and expected_version != node.stat.version:
            raise BadVersionError(f"{path}: expected version {expected_version}, found {node.stat.version}")
        return node

    def _set(self, path: str, data: bytes, expected_version: int | None) -> Stat:
        node = self._existing(path, expected_version)
        self._zxid += 1
        old = node.stat
        node.stat = Stat(old.version + 1, old.ephemeral_owner, old.created_zxid, self._zxid, self.clock.now_ms())
        node.data = data
        self._notify(NodeEvent.Modified, path)
        return node.stat

    def _delete(self, path: str, expected_version: int | None) -> None:
        self._existing(path, expected_version)
        self._zxid += 1
        del self._nodes[path]
        child = path
        while child != "/":
            parent = _parent(child)
            siblings = self._children.get(parent)
            if siblings is not None:
                siblings.discard(child.rsplit("/", 1)[1])
            # an implicit parent with no data node and no children disappears too
            if parent in self._nodes or self._children.get(parent):
                break
            self._children.pop(parent, None)
            child = parent
        self._notify(NodeEvent.Deleted, path)

    def _notify(self, event: NodeEvent, path: str) -> None:
        node = self._nodes.get(path)
        for observer in self.observers:
            observer(event, path, None if node is None else node.data, None if node is None else node.stat)
        notification = Notification(event, path, self._zxid)
        for client in self._clients:
            if client.connected and not client.closed:
                client._queue.append(notification)

    def _expire(self, client: StoreClient) -> None:
        owned = [p for p, n in self._nodes.items() if n.stat.ephemeral_owner == client.session_id]
        for path in owned:
            self._delete(path, None)


class MetadataClient(abc.ABC):
    """One broker's connection: reads, writes, listeners and a queue of undelivered events.

    Events wait in the queue until the caller delivers them (``deliver_next``), so a test or the
    simulator decides who learns what when, whichever store is behind the client.
    """

    def __init__(self, name: str, session_id: int) -> None:
        self.name = name
        self.session_id = session_id
        self.connected = True
        self.closed = False
        self._queue: deque[Notification | SessionEvent] = deque()
        self._node_listeners: list[NodeListener] = []
        self._session_listeners: list[SessionListener] = []

    def __repr__(self) -> str:
        state = "closed" if self.closed else "connected" if self.connected else "session lost"
        return f"{type(self).__name__}({self.name!r}, session {self.session_id}, {state})"

    def _live(self) -> None:
        if self.closed:
            raise SessionExpiredError(f"client {self.name} is closed")
        if not self.connected:
            raise SessionExpiredError(f"client {self.name}: session {self.session_id} is lost")

    @abc.abstractmethod
    def get(self, path: str) -> tuple[bytes, Stat] | None: ...

    @abc.abstractmethod
    def children(self, path: str) -> list[str]:
        """The names below ``path``, sorted (``[]`` when there is no such node)."""

    @abc.abstractmethod
    def create(self, path: str, data: bytes, ephemeral: bool = False) -> Stat:
        """Create a node (parents implicitly); ``NodeExistsError`` if it exists."""

    @abc.abstractmethod
    def set(self, path: str, data: bytes, expected_version: int | None = None) -> Stat:
        """Replace a node's data; ``expected_version`` None = any version."""

    @abc.abstractmethod
    def delete(self, path: str, expected_version: int | None = None) -> None:
        """Delete a node; parents left empty and never created explicitly go too."""

    def put(self, path: str, data: bytes, expected_version: int | None = None, ephemeral: bool = False) -> Stat:
        """Pulsar's ``MetadataStore.put``: ``expected_version`` -1 = must not exist, ``None`` = any."""
        self._live()
        if expected_version == -1 or (expected_version is None and self.get(path) is None):
            return self.create(path, data, ephemeral)
        return self.set(path, data, expected_version)

    # -- notifications -----------------------------------------------------------------------
    def add_listener(self, listener: NodeListener) -> None:
        self._node_listeners.append(listener)

    def add_session_listener(self, listener: SessionListener) -> None:
        self._session_listeners.append(listener)

    @property
    def pending(self) -> int:
        """Events queued for this client and not yet delivered."""
        return len(self._queue)

    def peek(self) -> Notification | SessionEvent | None:
        return self._queue[0] if self._queue else None

    def deliver_next(self) -> Notification | SessionEvent | None:
        """Hand the oldest queued event to the listeners; returns it (``None`` if none was queued)."""
        if not self._queue:
            return None
        event = self._queue.popleft()
        if isinstance(event, SessionEvent):
            for session_listener in list(self._session_listeners):
                session_listener(event)
        else:
            for listener in list(self._node_listeners):
                listener(event)
        return event

    def deliver_all(self) -> int:
        count = 0
        while self.deliver_next() is not None:
            count += 1
        return count

    def _drop_node_events(self) -> None:
        self._queue = deque(e for e in self._queue if isinstance(e, SessionEvent))

    # -- sessions ------------------------------------------------------------------------------
    def expire_session(self) -> None:
        """The session is lost: its ephemeral nodes go, its queued node events are dropped, and a
        ``SessionLost`` event waits for delivery."""
        if self.closed or not self.connected:
            return
        self.connected = False
        self._drop_node_events()
        self._end_session()
        self._queue.append(SessionEvent.SessionLost)

    def reconnect(self) -> None:
        """A new session; a ``SessionReestablished`` event waits for delivery."""
        if self.closed:
            raise SessionExpiredError(f"client {self.name} is closed")
        if self.connected:
            return
        self._open_session()
        self.connected = True
        self._queue.append(SessionEvent.SessionReestablished)

    @abc.abstractmethod
    def _end_session(self) -> None:
        """The store ends this client's session (its ephemeral nodes go)."""

    @abc.abstractmethod
    def _open_session(self) -> None:
        """The store opens a new session for this client."""

    @abc.abstractmethod
    def close(self) -> None:
        """Close the client: ephemeral nodes go, nothing more is delivered."""


class StoreClient(MetadataClient):
    """A client of the in-process :class:`MetadataStore`."""

    def __init__(self, store: MetadataStore, name: str, session_id: int) -> None:
        super().__init__(name, session_id)
        self.store = store

    def get(self, path: str) -> tuple[bytes, Stat] | None:
        self._live()
        return self.store.get(path)

    def children(self, path: str) -> list[str]:
        self._live()
        return self.store._children_of(path)

    def create(self, path: str, data: bytes, ephemeral: bool = False) -> Stat:
        self._live()
        return self.store._create(path, data, self.session_id if ephemeral else None)

    def set(self, path: str, data: bytes, expected_version: int | None = None) -> Stat:
        self._live()
        return self.store._set(path, data, expected_version)

    def delete(self, path: str, expected_version: int | None = None) -> None:
        self._live()
        self.store._delete(path, expected_version)

    def _end_session(self) -> None:
        self.store._expire(self)

    def _open_session(self) -> None:
        self.session_id = self.store._new_session()

    def close(self) -> None:
        if self.closed:
            return
        if self.connected:
            self.store._expire(self)
        self.closed = True
        self.connected = False
        self._queue.clear()
        self.store._clients.remove(self)
