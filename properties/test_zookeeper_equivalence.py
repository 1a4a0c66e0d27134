"""The in-process metadata store behaves as a real ZooKeeper does (issue: a real ZooKeeper).

The same random sequence of operations — creates, compare-and-set writes that win or lose, puts,
deletes, reads, session loss with ephemeral nodes, reconnects, closes, deliveries — runs on both
stores; every result (value, version, error) and every client's queue of notifications must be
the same after every step.

One difference is allowed and stated: ZooKeeper deletes a lost session's ephemeral nodes in one
transaction, in no specified order, so the notifications of one session loss are compared as a
set (and then lined up, so that the rest of the run is compared exactly).
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statechan.stores.metadata import (
    MetadataClient,
    MetadataStore,
    Notification,
    SessionEvent,
    Stat,
    Store,
    StoreError,
)

pytest.importorskip("kazoo", reason="the zk extra (kazoo) is not installed")

PATHS = (
    "/service_unit_state/tenant/ns/0x00000000_0x80000000",
    "/service_unit_state/tenant/ns/0x80000000_0xffffffff",
    "/service_unit_state/tenant/other/0x00000000_0xffffffff",
    "/loadbalance/brokers/broker-1:8080",
    "/loadbalance/brokers/broker-2:8080",
    "/loadbalance/leader",
)
PARENTS = ("/", "/service_unit_state/tenant", "/loadbalance", "/loadbalance/brokers")
CLIENTS = 3


@dataclass(frozen=True)
class Op:
    kind: str
    client: int
    path: str = ""
    data: bytes = b""
    version: int | None = None
    ephemeral: bool = False

    def __str__(self) -> str:
        args = [f"c{self.client}", self.path, repr(self.data) if self.data else "", str(self.version or "")]
        return f"{self.kind}({', '.join(a for a in args if a)}{', ephemeral' if self.ephemeral else ''})"


clients = st.integers(min_value=0, max_value=CLIENTS - 1)
paths = st.sampled_from(PATHS)
data = st.sampled_from([b"a", b"b", b'{"state":"Owned"}'])
versions = st.one_of(st.none(), st.integers(min_value=-1, max_value=2))
ops = st.one_of(
    st.builds(Op, st.just("create"), clients, paths, data, ephemeral=st.booleans()),
    st.builds(Op, st.just("set"), clients, paths, data, versions),
    st.builds(Op, st.just("put"), clients, paths, data, versions, st.booleans()),
    st.builds(Op, st.just("delete"), clients, paths, version=versions),
    st.builds(Op, st.just("get"), clients, paths),
    st.builds(Op, st.just("children"), clients, st.sampled_from(PARENTS)),
    st.builds(Op, st.just("deliver"), clients),
    st.builds(Op, st.just("lose-session"), clients),
    st.builds(Op, st.just("reconnect"), clients),
    st.builds(Op, st.just("close"), clients),
)


def _norm(result: object) -> object:
    """What may be compared across stores (session ids, zxids and times differ by nature)."""
    if isinstance(result, Stat):
        return ("stat", result.version, result.ephemeral_owner is not None)
    if isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], Stat):
        return (result[0], _norm(result[1]))
    if isinstance(result, Notification):
        return (result.event.name, result.path)
    if isinstance(result, SessionEvent):
        return result.name
    return result


def apply(client: MetadataClient, op: Op) -> object:
    try:
        if op.kind == "create":
            return _norm(client.create(op.path, op.data, op.ephemeral))
        if op.kind == "set":
            return _norm(client.set(op.path, op.data, op.version))
        if op.kind == "put":
            return _norm(client.put(op.path, op.data, op.version, op.ephemeral))
        if op.kind == "delete":
            client.delete(op.path, op.version)
            return "deleted"
        if op.kind == "get":
            return _norm(client.get(op.path))
        if op.kind == "children":
            return client.children(op.path)
        if op.kind == "deliver":
            return _norm(client.deliver_next())
        if op.kind == "lose-session":
            client.expire_session()
        elif op.kind == "reconnect":
            client.reconnect()
        elif op.kind == "close":
            client.close()
        return None
    except StoreError as exc:
        return ("error", type(exc).__name__)


def queue(client: MetadataClient) -> list[object]:
    return [_norm(event) for event in client._queue]


def dump(store: Store) -> dict[str, object]:
    return {path: _norm(node) for path, node in store.dump().items()}


@settings(max_examples=max(20, settings().max_examples // 5))
@given(st.lists(ops, min_size=1, max_size=30))
def test_the_in_process_store_answers_and_notifies_as_zookeeper_does(zookeeper: str, run: list[Op]) -> None:
    from statechan.stores.zookeeper import ZooKeeperStore

    real = ZooKeeperStore(zookeeper)
    try:
        compare(real, run)
    finally:
        real.remove()


def compare(real: Store, run: list[Op]) -> None:
    memory: Store = MetadataStore()
    mine = [memory.connect(f"c{i}") for i in range(CLIENTS)]
    theirs = [real.connect(f"c{i}") for i in range(CLIENTS)]
    for step, op in enumerate(run):
        where = f"step {step}: {op}"
        before = [len(c._queue) for c in theirs]
        expected, got = apply(mine[op.client], op), apply(theirs[op.client], op)
        assert got == expected, where
        for i, (m, z) in enumerate(zip(mine, theirs, strict=True)):
            if op.kind in ("lose-session", "close") and i != op.client:
                # one transaction, no specified order: compare as a set, then line ZooKeeper's up
                new_m, new_z = queue(m)[before[i] :], queue(z)[before[i] :]
                assert sorted(map(str, new_z)) == sorted(map(str, new_m)), f"{where}: c{i}'s notifications"
                head = list(z._queue)[: before[i]]
                tail = sorted(list(z._queue)[before[i] :], key=lambda e: new_m.index(_norm(e)))
                z._queue.clear()
                z._queue.extend(head + tail)
            assert queue(z) == queue(m), f"{where}: c{i}'s queue"
            assert (z.connected, z.closed) == (m.connected, m.closed), f"{where}: c{i}'s session"
    assert dump(real) == dump(memory)
