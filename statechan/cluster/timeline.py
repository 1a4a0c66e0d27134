"""Readable timelines: a run replayed step by step, with the records each step wrote and the
invariants that broke — the one counterexample format of the bench, the checker and ``replay``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from statechan.cluster.actions import Action
from statechan.cluster.config import SimConfig
from statechan.cluster.runner import ObservationCheck
from statechan.cluster.sim import Cluster
from statechan.values import ServiceUnitStateData, brief

Checker = Callable[[Cluster], list[str]]


@dataclass
class TimelineStep:
    number: int
    time_ms: int
    action: str
    records: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    error: str | None = None


def _record_text(record: dict[str, object]) -> str:
    kind = record["kind"]
    if kind == "channel":
        value = record.get("value")
        who = f" by {record['producer']}" if record.get("producer") else ""
        if not isinstance(value, dict):
            return f"{record['key']} := tombstone{who}"
        return f"{record['key']} := {brief(ServiceUnitStateData.model_validate(value))}{who}"
    if kind == "registry":
        return f"registry: {record['broker']} {record['event']}"
    if kind == "leader":
        return f"leader: {record['broker']} elected"
    return str(record)


def build_timeline(
    config: SimConfig,
    actions: Sequence[Action],
    check: Checker | None = None,
    stop_at_violation: bool = True,
    final_check: Checker | None = None,
    picks: Sequence[int] | None = None,
) -> list[TimelineStep]:
    """Replay ``actions`` on a fresh cluster, noting each step's writes and broken invariants;
    ``final_check`` (e.g. the history invariants) runs once after the last step."""
    cluster = Cluster(config, picks=picks)
    if isinstance(check, ObservationCheck):
        check.start(cluster)  # the first step's step invariants compare with the starting state
    start = cluster.clock.now_ms()
    steps: list[TimelineStep] = []
    if check is not None:  # the starting state is a state of the run too (#21894 breaks it)
        at_start = check(cluster)
        if at_start:
            steps.append(TimelineStep(0, 0, "start", violations=at_start))
            if stop_at_violation:
                return steps
    for number, action in enumerate(actions, start=1):
        mark = len(cluster.trace)
        step = TimelineStep(number, cluster.clock.now_ms() - start, action.describe())
        try:
            cluster.step(action)
        except ValueError as exc:
            step.error = str(exc)
            steps.append(step)
            break
        step.time_ms = cluster.clock.now_ms() - start
        step.records = [_record_text(r) for r in cluster.trace[mark:] if r["kind"] != "view"]
        if check is not None:
            step.violations = check(cluster)
        steps.append(step)
        if step.violations and stop_at_violation:
            return steps
    if final_check is not None and steps and steps[-1].error is None:
        steps[-1].violations.extend(final_check(cluster))
    return steps


def _quiet(step: TimelineStep) -> bool:
    return not step.records and not step.violations and step.error is None


def format_timeline(steps: Sequence[TimelineStep], title: str = "") -> str:
    """Numbered lines; a run of three or more identical steps that wrote nothing is folded."""
    lines = [title] if title else []
    i = 0
    while i < len(steps):
        step = steps[i]
        j = i
        while j + 1 < len(steps) and _quiet(steps[j + 1]) and steps[j + 1].action == step.action:
            j += 1
        if _quiet(step) and j - i >= 2:
            last = steps[j]
            lines.append(
                f"{step.number:>4}. t+{step.time_ms / 1000:>7.1f}s  {step.action}"
                f"  … {j - i + 1} times, until step {last.number} at t+{last.time_ms / 1000:.1f}s, writing nothing"
            )
            i = j + 1
            continue
        i += 1
        lines.append(f"{step.number:>4}. t+{step.time_ms / 1000:>7.1f}s  {step.action}")
        lines.extend(f"          writes {record}" for record in step.records)
        if step.error:
            lines.append(f"          cannot run: {step.error}")
        lines.extend(f"          BROKEN {violation}" for violation in step.violations)
    return "\n".join(lines)
