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
from statechan.traces import ReadStats, read_trace
from statechan.values import ServiceUnitStateData
from tests.zookeeper import ZooKeeperUnavailable, _free_port, zookeeper_server

pytest.importorskip("kazoo", reason="the zk extra (kazoo) is not installed")

runner = CliRunner()


@pytest.fixture(scope="module")
def zk() -> Iterator[str]:
    try:
        with zookeeper_server() as hosts:
            yield hosts
    except ZooKeeperUnavailable as exc:
        pytest.skip(f"no real ZooKeeper: {exc}")


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
