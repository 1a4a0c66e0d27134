"""``Cluster.drain`` takes the same steps in the same order as a scan of every broker before each
step (deliveries and notifications first, then the syncer, then tasks), whatever it skips."""

from __future__ import annotations

import contextlib
import random

import pytest

from statechan.cluster import Cluster, SimConfig, StoreKind
from statechan.cluster.actions import Action, RunTask

FAULTS = ("lookup", "transfer", "split", "unload", "crash", "restart", "lose-session", "reconnect", "tick")


def _rescanning_drain(cluster: Cluster) -> None:
    """The definition: before each step, list all the work and take the first delivery or
    notification, else the first task."""
    while work := cluster.work_actions():
        deliveries = [a for a in work if not isinstance(a, RunTask)]
        cluster.step(deliveries[0] if deliveries else work[0])


def _run(store: StoreKind, seed: int, drain: bool) -> list[Action]:
    cluster = Cluster(SimConfig(brokers=5, bundles_per_namespace=4, store=store, seed=seed))
    rng = random.Random(seed)
    for _ in range(40):
        actions = [a for a in cluster.enabled_actions() if a.kind in FAULTS]
        if not actions:
            break
        with contextlib.suppress(ValueError):
            cluster.step(rng.choice(actions))
        if drain:
            cluster.drain()
        else:
            _rescanning_drain(cluster)
    return cluster.history


@pytest.mark.parametrize("store", [StoreKind.system_topic, StoreKind.metadata_store, StoreKind.both])
def test_drain_takes_the_steps_a_full_rescan_takes(store: StoreKind) -> None:
    for seed in range(3):
        history = _run(store, seed, drain=True)
        assert len(history) > 100
        assert history == _run(store, seed, drain=False)
