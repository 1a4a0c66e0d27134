"""Against a real ZooKeeper server (skipped, with the reason, when the server cannot be installed
or started): `statechan capture zk` (what it captures audits clean; a node that is not a value is
kept as malformed; an unreachable server is one line and exit status 2), and the persistent
recursive watch that reports every change in order."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from statechan.audit import audit
from statechan.cli import app
from statechan.states import ServiceUnitState as S
from statechan.traces import ChannelRecord, ReadStats, RegistryRecord, read_trace
from statechan.values import ServiceUnitStateData
from tests.zookeeper import _free_port

pytest.importorskip("kazoo", reason="the zk extra (kazoo) is not installed")

runner = CliRunner()


@pytest.fixture
def zk(zookeeper: str) -> str:
    return zookeeper


@pytest.fixture
def client(zk: str) -> Iterator[Any]:
    from kazoo.client import KazooClient

    kazoo = KazooClient(hosts=zk, timeout=10.0)
    kazoo.start(timeout=10.0)
    kazoo.delete("/service_unit_state", recursive=True)
    kazoo.delete("/loadbalance", recursive=True)
    yield kazoo
    kazoo.stop()
    kazoo.close()


BROKERS = ("broker-1:8080", "broker-2:8080")
VALUES = {
    "tenant/ns/0x00000000_0x80000000": ServiceUnitStateData(state=S.Owned, dst_broker=BROKERS[0], version_id=2),
    "tenant/ns/0x80000000_0xffffffff": ServiceUnitStateData(state=S.Owned, dst_broker=BROKERS[1], version_id=5),
    "tenant/other/0x00000000_0xffffffff": ServiceUnitStateData(state=S.Free, source_broker=BROKERS[0], version_id=3),
}


def _populate(client: Any) -> None:
    for broker in BROKERS:
        client.create(f"/loadbalance/brokers/{broker}", b'{"webServiceUrl": "http://x"}', makepath=True)
    for key, value in VALUES.items():
        client.create(f"/service_unit_state/{key}", value.to_json().encode(), makepath=True)


def test_a_capture_holds_every_bundle_and_broker_and_audits_clean(client: Any, zk: str, tmp_path: Path) -> None:
    _populate(client)
    client.set(
        "/service_unit_state/tenant/ns/0x00000000_0x80000000",
        VALUES["tenant/ns/0x00000000_0x80000000"].model_copy(update={"version_id": 3}).to_json().encode(),
    )
    out = tmp_path / "zk.jsonl"
    result = runner.invoke(app, ["capture", "zk", "--hosts", zk, "--out", str(out)])
    assert result.exit_code == 0, result.output
    stats = ReadStats()
    records = list(read_trace(out, stats))
    assert stats.bad == []
    registry = [r for r in records if r.kind == "registry"]
    channel = [r for r in records if r.kind == "channel"]
    assert sorted(r.broker for r in registry) == sorted(BROKERS)
    assert {r.key: r.value.version_id for r in channel if r.value is not None} == {
        "tenant/ns/0x00000000_0x80000000": 3,
        "tenant/ns/0x80000000_0xffffffff": 5,
        "tenant/other/0x00000000_0xffffffff": 3,
    }
    assert channel[-1].key == "tenant/ns/0x00000000_0x80000000"  # the last written, by zxid
    assert [r.offset for r in records] == list(range(len(records)))
    report = audit([out], engine="local")
    assert report.violation_count == 0
    assert report.channel_records == 3
    assert report.registry_records == 2


def test_a_node_that_is_not_a_value_is_kept_as_malformed(client: Any, zk: str, tmp_path: Path) -> None:
    _populate(client)
    client.create("/service_unit_state/tenant/ns/0x00000000_0x40000000", b"{not json", makepath=True)
    out = tmp_path / "zk.jsonl"
    result = runner.invoke(app, ["capture", "zk", "--hosts", zk, "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "1 malformed node(s)" in result.output
    kept = [json.loads(line) for line in (tmp_path / "zk.quarantine.jsonl").read_text().splitlines()]
    assert [k["path"] for k in kept] == ["/service_unit_state/tenant/ns/0x00000000_0x40000000"]
    assert kept[0]["data"] == "{not json"
    assert len(list(read_trace(out))) == len(BROKERS) + len(VALUES)


def test_an_unreachable_zookeeper_is_one_line_and_exit_2(tmp_path: Path) -> None:
    hosts = f"127.0.0.1:{_free_port()}"
    result = runner.invoke(
        app, ["capture", "zk", "--hosts", hosts, "--out", str(tmp_path / "x.jsonl"), "--timeout", "1"]
    )
    assert result.exit_code == 2
    assert f"cannot reach ZooKeeper at {hosts}" in result.output
    assert not (tmp_path / "x.jsonl").exists()


def test_a_recursive_watch_reports_every_change_below_its_path_in_order(client: Any, zk: str) -> None:
    import threading

    from kazoo.client import KazooClient

    from statechan.stores.metadata import NodeEvent
    from statechan.stores.zkwatch import add_recursive_watch

    watcher = KazooClient(hosts=zk, timeout=10.0)
    watcher.start(timeout=10.0)
    seen: list[tuple[NodeEvent, str]] = []
    marker = threading.Event()

    def note(event: NodeEvent, path: str) -> None:
        if path == "/service_unit_state/marker":
            marker.set()
        else:
            seen.append((event, path))

    try:
        client.ensure_path("/service_unit_state")
        add_recursive_watch(watcher, "/service_unit_state", note)
        key = "/service_unit_state/tenant/ns/0x00000000_0xffffffff"
        expected = [
            (NodeEvent.Created, "/service_unit_state/tenant"),
            (NodeEvent.Created, "/service_unit_state/tenant/ns"),
        ]
        client.create(key, b"1", makepath=True)
        expected.append((NodeEvent.Created, key))
        for version in range(2, 6):  # quick successive writes: a one-shot watch would miss some
            client.set(key, str(version).encode())
            expected.append((NodeEvent.Modified, key))
        client.delete(key)
        expected.append((NodeEvent.Deleted, key))
        client.create("/elsewhere", b"")  # outside the watched path
        client.create("/service_unit_state/marker", b"")
        assert marker.wait(10), "the marker's event never came"
        assert seen == expected
    finally:
        watcher.stop()
        watcher.close()


def test_a_simulated_cluster_on_real_zookeeper_captures_and_audits_clean(zk: str, tmp_path: Path) -> None:
    """The channel, the registry and the leader election run unchanged on ZooKeeper through a
    faulty simulated half hour; what `capture zk` then reads is every bundle's last value and
    audits clean."""
    from statechan.cluster import SimConfig, StoreKind
    from statechan.cluster.runner import Simulation, Workload
    from statechan.invariants.catalogue import check
    from statechan.stores.syncer import store_keys
    from statechan.stores.tableview import path_of
    from statechan.stores.zookeeper import ZooKeeperStore

    config = SimConfig(store=StoreKind.metadata_store, brokers=3, bundles_per_namespace=4, seed=3)
    workload = Workload(
        crashes_per_hour=4, session_losses_per_hour=4, splits_per_hour=4, transfers_per_hour=60, settle_ms=600_000
    )
    simulation = Simulation(config, workload, lambda clock: ZooKeeperStore(zk, clock))
    store = simulation.cluster.store
    assert isinstance(store, ZooKeeperStore)
    try:
        summary = simulation.run(1_800_000, check=lambda c: [str(v) for v in check(c.observe())])
        assert summary.violations == []
        assert summary.counters["crash"] + summary.counters["lose-session"] > 0
        out = tmp_path / "zk.jsonl"
        result = runner.invoke(app, ["capture", "zk", "--hosts", f"{zk}{store.root}", "--out", str(out)])
        assert result.exit_code == 0, result.output
        records = list(read_trace(out))
        captured = {r.key: r.value for r in records if r.kind == "channel"}
        expected = {
            key: ServiceUnitStateData.model_validate_json(node[0])
            for key in store_keys(store)
            if (node := store.get(path_of(key))) is not None
        }
        assert captured == expected
        assert len(captured) >= 4
        assert {r.broker for r in records if r.kind == "registry"} == {
            b for b, broker in simulation.cluster.brokers.items() if simulation.cluster.registered(b)
        }
        report = audit([out], engine="local")
        assert report.violation_count == 0
        assert report.malformed == 0
    finally:
        store.remove()


def test_following_records_every_change_the_metadata_store_view_makes(zk: str) -> None:
    import threading

    from statechan.capture import capture_zk
    from statechan.stores.tableview import MetadataStoreTableView
    from statechan.stores.zookeeper import ZooKeeperStore
    from statechan.traces import AnyRecord

    store = ZooKeeperStore(zk)
    writer = MetadataStoreTableView(store.connect("broker-1:8080"), "broker-1:8080")
    writer.start()
    key, other = "tenant/ns/0x00000000_0x80000000", "tenant/ns/0x80000000_0xffffffff"
    assigning = ServiceUnitStateData(state=S.Assigning, dst_broker=BROKERS[0], version_id=1)
    writer.put(key, assigning)
    seen: list[AnyRecord] = []
    snapshot_read, done = threading.Event(), threading.Event()

    def note(record: AnyRecord) -> None:
        seen.append(record)
        snapshot_read.set()
        if record.kind == "channel" and record.key == other:
            done.set()

    captured: list[Any] = []
    follower = threading.Thread(
        target=lambda: captured.append(capture_zk(f"{zk}{store.root}", stop=done.is_set, on_record=note))
    )
    follower.start()
    try:
        assert snapshot_read.wait(30), "the capture never read its snapshot"
        owned = assigning.model_copy(update={"state": S.Owned, "version_id": 2})
        assert writer.put(key, owned).applied
        registrar = store.connect("broker-2:8080")
        registrar.create(f"/loadbalance/brokers/{BROKERS[1]}", b"{}", ephemeral=True)
        assert writer.delete(key).applied
        registrar.close()  # the broker leaves: its registration goes with its session
        writer.put(other, ServiceUnitStateData(state=S.Assigning, dst_broker=BROKERS[0], version_id=1))
        assert done.wait(30), "the last change never came"
    finally:
        done.set()
        follower.join(30)
        store.remove()
    summary: list[tuple[object, ...]] = []
    for r in seen:
        if isinstance(r, ChannelRecord):
            summary.append((r.kind, r.key, None if r.value is None else (r.value.state, r.value.version_id)))
        elif isinstance(r, RegistryRecord):
            summary.append((r.kind, r.broker, r.event))
    assert summary == [
        ("channel", key, (S.Assigning, 1)),
        ("channel", key, (S.Owned, 2)),
        ("registry", BROKERS[1], "registered"),
        ("channel", key, None),
        ("registry", BROKERS[1], "unregistered"),
        ("channel", other, (S.Assigning, 1)),
    ]
    assert [r.offset for r in captured[0].records] == list(range(6))


def test_capture_follow_option_keeps_the_snapshot_and_ends(client: Any, zk: str, tmp_path: Path) -> None:
    _populate(client)
    out = tmp_path / "followed.jsonl"
    result = runner.invoke(app, ["capture", "zk", "--hosts", zk, "--out", str(out), "--follow", "0.3"])
    assert result.exit_code == 0, result.output
    assert "following changes for 0.3 s" in result.output
    assert len(list(read_trace(out))) == len(BROKERS) + len(VALUES)


def test_following_counts_the_writes_it_could_not_see(client: Any, zk: str) -> None:
    """Three writes before the capture reads once: it records the last value and counts the two
    it could not see (a watch delivers that a node changed, not each value)."""
    import queue

    from statechan.capture import Capture, follow, snapshot
    from statechan.stores.metadata import NodeEvent

    _populate(client)
    key = next(iter(VALUES))
    path = f"/service_unit_state/{key}"
    out: Capture = snapshot(client)
    assert out.unseen == {}
    value = VALUES[key]
    for version in (3, 4, 5):  # the node's data versions 1, 2, 3
        client.set(path, value.model_copy(update={"version_id": version}).to_json().encode())
    changes: queue.Queue[tuple[NodeEvent, str]] = queue.Queue()
    changes.put((NodeEvent.Modified, path))
    before = len(out.records)
    follow(client, changes, out, stop=changes.empty)
    new = out.records[before:]
    assert [(r.key, r.value.version_id) for r in new if isinstance(r, ChannelRecord) and r.value] == [(key, 5)]
    assert out.unseen == {path: 2}
    client.delete(path)
    for version in (1, 2, 3):  # made again (data version 0), then written twice
        data = value.model_copy(update={"version_id": version}).to_json().encode()
        if version == 1:
            client.create(path, data)
        else:
            client.set(path, data)
    changes.put((NodeEvent.Deleted, path))
    changes.put((NodeEvent.Created, path))
    follow(client, changes, out, stop=changes.empty)
    assert out.unseen == {path: 2 + 2}  # the creation and the first write after it were not read
    other = "/service_unit_state/tenant/new/0x00000000_0xffffffff"
    client.create(other, value.to_json().encode(), makepath=True)
    changes.put((NodeEvent.Created, other))
    follow(client, changes, out, stop=changes.empty)
    assert other not in out.unseen  # a node made while followed and read at once: nothing missed
