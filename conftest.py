"""Test-wide set-up: the Hypothesis profile (``HYPOTHESIS_PROFILE``, default ``ci``) and one real
ZooKeeper server for the whole run, started on first use and stopped at the end (tests that need
it are skipped with the reason when it cannot be installed or started)."""

from __future__ import annotations

import os

# the suite runs the pure-Python kernel, whatever is built (tests patch its modules' functions, which
# a compiled module calls directly); tests/test_compiled.py runs the compiled one in its own interpreters
os.environ.setdefault("STATECHAN_KERNEL", "pure")

from collections.abc import Callable, Iterator
from typing import Any

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


SHARED_SET_UP = {
    "tests/test_spark_cluster.py": "a Spark standalone cluster (a master, two workers) and a Spark Connect server",
}
"""Test files whose tests share a set-up too costly to make twice (what it is): each runs whole on
one xdist worker, so the set-up is made once, not once a worker (and again each time the worker's
tests of the file are interleaved with another file's). The files with a local Spark session or a
browser stay spread: held whole as well, the suite was no faster (16:53 against 16:21 with this file
alone, one run each on a 2-core machine)."""


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup`` with the groups above, by file. (pytest 9 keeps xdist's ``xdist_group``
    suffix out of the node ids that xdist's own grouping reads, so its markers group nothing.) The
    units go out largest first: the grouped files start at once, the single tests fill in after."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling  # type: ignore[import-untyped]

    class ByFile(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return path if path in SHARED_SET_UP else nodeid

    return ByFile(config, log)
