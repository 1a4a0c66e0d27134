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
