"""The metadata store's operations of a run carried out on a real store as well: a second
interpreter of what the protocol does to the store (:class:`~statechan.stores.zookeeper.ZooKeeperStore`),
which must agree with the model's at every step.

The protocol decides every operation on its own store (a value in the state); each step's
operations (creates, sets and deletes with their expected versions, sessions opened, lost and
closed, notifications delivered) are then made on the real store by one real client per session
owner, in the same order. Each must end as the model's did (done, or refused with the same
error), and each notification a real client delivers must be the one the model delivered: a real
ZooKeeper that disagrees with the in-process semantics at any point stops the run with
:class:`MirrorMismatch`, naming the step and the operation.

One freedom is allowed: the deletions of the ephemeral nodes a closed or expired session held reach
the watchers in an order ZooKeeper does not define (``DataTree.killSession`` deletes them from a hash
set), so a deletion the real store delivers ahead of the model's is held until the model delivers it.
"""

from __future__ import annotations

from statechan.cluster.config import SimConfig
from statechan.cluster.state import LEADER_PATH, REGISTRY_PATH, SYNCER, NodeData, Owner, Path, Raw, Rec, broker_name
from statechan.stores.metadata import MetadataClient, Notification, SessionEvent, Store, StoreError
from statechan.stores.tableview import PATH_PREFIX

StoreOp = tuple[str, Owner, Path | None, NodeData | None, int | None, str | None]
"""One operation of a step on the model's store: (kind, session owner, path, data, expected
version, the error it ended with or None). Kinds: ``create``, ``create-ephemeral``, ``set``,
``delete``, ``connect``, ``lose``, ``reconnect``, ``close``, ``drop`` (the client's queue emptied
unread), and ``deliver``, whose last field is the event delivered (a session event's name, or a
node event's with its path)."""


def _deletion(event: object) -> bool:
    return isinstance(event, tuple) and event[0] == "Deleted"


class MirrorMismatch(AssertionError):
    """The real store did not do what the model's store did."""


def real_path(path: Path) -> str:
    if isinstance(path, int):
        return f"{REGISTRY_PATH}/{broker_name(path)}"
    if path == LEADER_PATH:
        return LEADER_PATH
    return f"{PATH_PREFIX}/{path}"


def real_data(data: NodeData) -> bytes:
    """A node's data as Pulsar (and the in-process store) writes it."""
    if isinstance(data, Rec):
        return data.data().to_json().encode()
    if isinstance(data, Raw):
        return data.payload
    if isinstance(data, tuple):
        return (("http://" if data[1] else "") + broker_name(data[0])).encode()
    return data.json()


class StoreMirror:
    """A run's store operations, made again on ``store``."""

    def __init__(self, store: Store, config: SimConfig) -> None:
        self.store = store
        self.config = config
        self.clients: dict[Owner, MetadataClient] = {}
        self.ahead: dict[Owner, list[object]] = {}
        """Deletions a real client delivered before the model delivered them (see the module's note)."""
        self.step = 0

    def __str__(self) -> str:
        return str(self.store)

    def follow(self, ops: list[StoreOp], step: str) -> None:
        """Make a step's operations on the real store (``step`` names the step in a mismatch)."""
        self.step += 1
        for op in ops:
            self._apply(op, step)

    def _client(self, owner: Owner) -> MetadataClient:
        client = self.clients.get(owner)
        if client is None:
            raise MirrorMismatch(f"the real store has no session for {_name(owner)}")
        return client

    def _apply(self, op: StoreOp, step: str) -> None:
        kind, owner, path, data, expected, error = op
        if kind == "connect":
            self.clients[owner] = self.store.connect(_name(owner))
            return
        client = self._client(owner)
        if kind == "lose":
            client.expire_session()
        elif kind == "reconnect":
            client.reconnect()
        elif kind == "close":
            client.close()
            del self.clients[owner]
            self.ahead.pop(owner, None)
        elif kind == "drop":
            while client.deliver_next() is not None:
                pass
            self.ahead.pop(owner, None)
        elif kind == "deliver":
            self._deliver(client, owner, None if path is None else (error, real_path(path)), error, step)
        else:
            self._write(client, kind, owner, path, data, expected, error, step)

    def _deliver(self, client: MetadataClient, owner: Owner, node: object, error: str | None, step: str) -> None:
        """The real client's next event must be the model's (``node``: a node event, else the session
        event ``error`` names), but for deletions, which may come in another order (held ahead)."""
        wanted: object = error if node is None else node
        ahead = self.ahead.setdefault(owner, [])
        if wanted in ahead:
            ahead.remove(wanted)
            return
        while True:
            event = client.deliver_next()
            seen: object = event.value if isinstance(event, SessionEvent) else event
            if isinstance(event, Notification):
                seen = (event.event.value, event.path)
            if seen == wanted:
                return
            if not (_deletion(seen) and _deletion(wanted)):
                held = f" (held ahead: {ahead})" if ahead else ""
                raise MirrorMismatch(
                    f"step {self.step} ({step}): {_name(owner)} was delivered {seen}, the model {wanted}{held}"
                )
            ahead.append(seen)

    def _write(
        self,
        client: MetadataClient,
        kind: str,
        owner: Owner,
        path: Path | None,
        data: NodeData | None,
        expected: int | None,
        error: str | None,
        step: str,
    ) -> None:
        assert path is not None
        where = real_path(path)
        found: str | None = None
        try:
            if kind in ("create", "create-ephemeral"):
                client.create(where, real_data(data), ephemeral=kind == "create-ephemeral")  # type: ignore[arg-type]
            elif kind == "set":
                client.set(where, real_data(data), expected)  # type: ignore[arg-type]
            else:
                client.delete(where, expected)
        except StoreError as exc:
            found = type(exc).__name__
        if found != error:
            did = "refused it with " + found if found else "did it"
            model = "refused it with " + error if error else "did it"
            raise MirrorMismatch(
                f"step {self.step} ({step}): {kind} {where} by {_name(owner)}: the real store {did}, the model {model}"
            )

    def close(self) -> None:
        for client in self.clients.values():
            client.close()
        self.clients.clear()
        self.store.close()


def _name(owner: Owner) -> str:
    return "syncer" if owner[0] == SYNCER else f"{broker_name(owner[0])}#{owner[1]}"
