"""The Hypothesis bench's speed, measured on the test side: ``python -m properties.speed`` runs the
system-topic machine on the current protocol (500 examples of up to 30 steps, derandomized) and the
same number of steps as unchecked seeded random walks, and prints both as JSON. ``statechan.bench``
runs it in a process of its own, so the library never imports the test side."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable

from hypothesis.stateful import run_state_machine_as_test

from properties.bench import SystemTopicBench
from properties.profiles import fixed
from statechan.cluster import Cluster


def _timed(work: Callable[[], None]) -> float:
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


def measure(examples: int = 500, steps_per_example: int = 30) -> dict[str, float | int]:
    """The bench's examples, steps and seconds, and the random walks' seconds for as many steps."""
    seen = {"examples": 0, "steps": 0}

    class Counted(SystemTopicBench):
        def teardown(self) -> None:
            try:
                super().teardown()
            finally:
                seen["examples"] += 1
                seen["steps"] += len(self.cluster.history)

    options = fixed(max_examples=examples, stateful_step_count=steps_per_example)
    seconds = _timed(lambda: run_state_machine_as_test(Counted, settings=options))
    done, steps = seen["examples"], seen["steps"]
    rng = random.Random(3)

    def raw_walks() -> None:
        per_example = max(1, steps // max(1, done))
        for _ in range(done):
            cluster = Cluster(SystemTopicBench.config)
            for _ in range(per_example):
                actions = cluster.enabled_actions()
                if not actions:
                    break
                cluster.step(rng.choice(actions))

    return {"examples": done, "steps": steps, "seconds": seconds, "floor_seconds": _timed(raw_walks)}


if __name__ == "__main__":
    print(json.dumps(measure()))
