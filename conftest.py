"""Test-wide set-up: the Hypothesis profile (``HYPOTHESIS_PROFILE``, default ``ci``) and one real
ZooKeeper server for the whole run, started on first use and stopped at the end (tests that need
it are skipped with the reason when it cannot be installed or started)."""

from __future__ import annotations

import os

# the suite runs the pure-Python kernel, whatever is built (tests patch its modules' functions, which
# a compiled module calls directly); tests/test_compiled.py runs the compiled one in its own interpreters
os.environ.setdefault("STATECHAN_KERNEL", "pure")

from collections.abc import Callable, Iterator

import pytest

from properties import profiles
from statechan.clock import ManualClock
from statechan.stores.metadata import MetadataStore, Store

profiles.load()


@pytest.fixture(scope="session")
def zookeeper() -> Iterator[str]:
    """The server's connect string (``127.0.0.1:PORT``)."""
    pytest.importorskip("kazoo", reason="the zk extra (kazoo) is not installed")
    from tests.zookeeper import ZooKeeperUnavailable, zookeeper_server

    try:
        with zookeeper_server() as hosts:
            yield hosts
    except ZooKeeperUnavailable as exc:
        pytest.skip(f"no real ZooKeeper: {exc}")


@pytest.fixture(params=["in-process", "zookeeper"])
def new_store(request: pytest.FixtureRequest) -> Iterator[Callable[[], Store]]:
    """Makes metadata stores: the in-process one, then (a second run of the test) a real
    ZooKeeper's, each under a fresh root that is removed afterwards."""
    if request.param == "in-process":
        yield lambda: MetadataStore(ManualClock())
        return
    hosts = request.getfixturevalue("zookeeper")
    from statechan.stores.zookeeper import ZooKeeperStore

    made: list[ZooKeeperStore] = []

    def make() -> Store:
        made.append(ZooKeeperStore(hosts, ManualClock()))
        return made[-1]

    yield make
    for store in made:
        store.remove()


def _spark_cluster_first(item: pytest.Item) -> int:
    group = item.get_closest_marker("xdist_group")
    return 0 if group is not None and group.args[:1] == ("spark-cluster",) else 1


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The standalone Spark cluster's tests first: they run as one group on one xdist worker
    (``--dist loadgroup``) and are the longest group, so started first they run beside the rest
    instead of after it. Every worker collects the same order (the sort is stable)."""
    items.sort(key=_spark_cluster_first)
