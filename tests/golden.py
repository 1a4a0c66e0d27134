"""Seeded runs of the simulator written down step by step, to show a change of the implementation
changed no behaviour: each step's action, the trace records it wrote and the observation after it,
normalized (brokers by name, values as Pulsar's JSON) and chained into a digest kept every few steps.

``tests/data/golden-runs.json.gz`` was first recorded by this module on statechan 479cd15, the last
commit whose simulator stepped a mutable object graph (``python -m tests.golden record`` with that
checkout first on ``PYTHONPATH``); ``tests/test_golden.py`` replays the same runs on this one and
requires the same digests. The normalization reads either implementation's observation. A change of
behaviour made on purpose is recorded again (``python -m tests.golden record``, which names the
commit it ran on and the runs whose digests changed); the file names the commit it was recorded on.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import random
import sys
from pathlib import Path
from typing import Any

GOLDEN = Path(__file__).resolve().parent / "data" / "golden-runs.json.gz"
EVERY = 25
"""A checkpoint of the chained digest every this many steps (and at a run's end)."""
WALK_STEPS = 120
SIM_MS = 3_600_000


def _name(broker: Any) -> Any:
    if isinstance(broker, int):
        return f"broker-{broker + 1}:8080"
    return broker


def _value(value: Any) -> Any:
    if value is None:
        return None
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json", by_alias=True)
    return value.json()


def observation(obs: Any) -> dict[str, Any]:
    """An observation, normalized: brokers by name, values as Pulsar's JSON, sets sorted."""

    def names(brokers: Any) -> list[Any]:
        return sorted(_name(b) for b in brokers)

    leader = obs.leader
    if isinstance(leader, tuple):
        leader = ("http://" if leader[1] else "") + _name(leader[0])
    return {
        "time": obs.time,
        "views": {
            _name(b): [[k, _value(v)] for k, v in view.items()]
            for b, view in sorted(obs.views.items(), key=lambda kv: _name(kv[0]))
        },
        "serving": {_name(b): sorted(s) for b, s in obs.serving.items()},
        "started": names(obs.started),
        "connected": names(obs.connected),
        "registered": names(obs.registered),
        "unregistered_at": {_name(b): t for b, t in obs.unregistered_at.items()},
        "leader": leader,
        "leader_since": obs.leader_since,
        "acting": names(obs.acting_leaders),
        "answers": [list(a.__dict__.values()) for a in obs.answers],
        "bundles": sorted(obs.bundles),
        "quiescent": obs.quiescent,
        "syncer_differences": obs.syncer_differences,
        "overdue": obs.timers_overdue,
        "departed": names(obs.departed),
        "failed": sorted(obs.failed_splits),
        "channel": {k: _value(v) for k, v in sorted(obs.channel.items())},
        "born": dict(sorted(obs.born.items())),
        "deleted": sorted(obs.deleted),
        "incarnations": {_name(b): n for b, n in obs.incarnations.items()},
        "lookups": {_name(b): dict(sorted(p.items())) for b, p in obs.pending_lookups.items()},
        "unloads": {
            _name(b): {k: [_name(s), _name(d)] for k, (s, d) in sorted(u.items())}
            for b, u in obs.pending_unloads.items()
        },
        "positions": {_name(b): p for b, p in obs.positions.items()},
        "registered_since": {_name(b): t for b, t in obs.registered_since.items()},
    }


class Chain:
    """A digest chained over a run's steps, kept every :data:`EVERY` steps."""

    def __init__(self) -> None:
        self.digest = hashlib.sha256()
        self.kept: list[str] = []
        self.steps = 0

    def step(self, *parts: Any) -> None:
        self.digest.update(json.dumps(parts, sort_keys=True, default=str).encode())
        self.steps += 1
        if self.steps % EVERY == 0:
            self.kept.append(self.digest.hexdigest()[:16])

    def end(self) -> list[str]:
        return [*self.kept, self.digest.hexdigest()[:16]]


def walk(store: str, variant: str, seed: int) -> list[str]:
    """A seeded random walk over every enabled action (faults included)."""
    from statechan.cluster import Cluster, SimConfig, StoreKind
    from statechan.cluster.config import VARIANTS

    config = SimConfig(
        brokers=3,
        bundles_per_namespace=2,
        store=StoreKind(store),
        variant=VARIANTS[variant],
        seed=seed,
        timely_delivery_ms=None if seed % 2 else 1000,
        channel={"tombstone_delay_s": 60},
    )
    cluster = Cluster(config)
    rng = random.Random(seed)
    chain = Chain()
    chain.step("start", cluster.trace, observation(cluster.observe()))
    for _ in range(WALK_STEPS):
        actions = cluster.enabled_actions()
        if not actions:
            break
        action = actions[rng.randrange(len(actions))]
        mark = len(cluster.trace)
        try:
            cluster.step(action)
        except ValueError as exc:
            chain.step(action.describe(), "refused", str(exc))
            continue
        chain.step(action.describe(), cluster.trace[mark:], observation(cluster.observe()))
    return chain.end()


def simulation(store: str, seed: int) -> list[str]:
    """A seeded simulated hour with every fault, its observation checked after every step."""
    from statechan.cluster import SimConfig, StoreKind
    from statechan.cluster.runner import Simulation, Workload

    config = SimConfig(brokers=4, bundles_per_namespace=6, namespaces=2, store=StoreKind(store), seed=seed)
    workload = Workload(
        crashes_per_hour=4,
        session_losses_per_hour=4,
        splits_per_hour=6,
        shutdowns_per_hour=2,
        leader_changes_per_hour=3,
        transfers_per_hour=200,
        unloads_per_hour=60,
        settle_ms=600_000,
    )
    run = Simulation(config, workload)
    chain = Chain()
    seen = [0]

    def look(cluster: Any) -> list[str]:
        chain.step(cluster.history[-1].describe(), cluster.trace[seen[0] :], observation(cluster.observe()))
        seen[0] = len(cluster.trace)
        return []

    run.run(SIM_MS, check=look)
    return chain.end()


def runs() -> dict[str, tuple[str, ...]]:
    """Every recorded run, by name: what to call to make it again."""
    from statechan.cluster.config import VARIANTS

    out: dict[str, tuple[str, ...]] = {}
    for store in ("system-topic", "metadata-store", "both"):
        for variant in VARIANTS:
            out[f"walk {store} {variant}"] = ("walk", store, variant, "1")
        out[f"simulation {store}"] = ("simulation", store, "2")
    return out


def make(spec: tuple[str, ...]) -> list[str]:
    if spec[0] == "walk":
        return walk(spec[1], spec[2], int(spec[3]))
    return simulation(spec[1], int(spec[2]))


def load() -> dict[str, list[str]]:
    with gzip.open(GOLDEN, "rt", encoding="utf-8") as stream:
        recorded: dict[str, list[str]] = json.load(stream)["runs"]
    return recorded


def _commit() -> str:
    import subprocess

    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False)
    return done.stdout.strip() or "unknown"


if __name__ == "__main__" and sys.argv[1:] == ["record"]:
    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    before = load() if GOLDEN.exists() else {}
    found = {name: make(spec) for name, spec in runs().items()}
    with gzip.open(GOLDEN, "wt", encoding="utf-8") as out:
        json.dump({"recorded": f"statechan {_commit()}", "every": EVERY, "runs": found}, out, indent=0, sort_keys=True)
    changed = sorted(name for name in found if before.get(name) != found[name])
    print(f"{len(found)} runs written to {GOLDEN}; changed: {', '.join(changed) or 'none'}")
