"""Saved runs: a configuration and its list of actions, as JSON, replayable exactly."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from pydantic import ValidationError

from statechan.cluster.actions import Action, BadActionError, action_from_json
from statechan.cluster.config import SimConfig
from statechan.cluster.sim import Cluster

RUN_FORMAT = "statechan-run/1"


class RunFileError(ValueError):
    """A run file that cannot be replayed; the message names the file and the problem."""


class SavedRun(NamedTuple):
    config: SimConfig
    actions: list[Action]
    note: str
    picks: list[int] | None
    """Placement's choices, when the run took them from its caller (the model checker's runs)."""


def save_run(
    path: str | Path,
    config: SimConfig,
    actions: list[Action],
    note: str = "",
    picks: Sequence[int] | None = None,
) -> None:
    data: dict[str, object] = {
        "format": RUN_FORMAT,
        "note": note,
        "config": config.model_dump(mode="json"),
        "actions": [a.to_json() for a in actions],
    }
    if picks is not None:
        data["picks"] = list(picks)
    Path(path).write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")


def load_run(path: str | Path) -> tuple[SimConfig, list[Action], str]:
    """A saved run's config, actions and note (see :func:`load_saved_run` for its picks too)."""
    saved = load_saved_run(path)
    return saved.config, saved.actions, saved.note


def load_saved_run(path: str | Path) -> SavedRun:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise RunFileError(f"{path}: cannot read: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise RunFileError(f"{path}: not JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != RUN_FORMAT:
        raise RunFileError(f'{path}: not a statechan run (expected "format": "{RUN_FORMAT}")')
    try:
        config = SimConfig.model_validate(data.get("config", {}))
    except ValidationError as exc:
        raise RunFileError(f"{path}: config: {exc.errors()[0]['loc']}: {exc.errors()[0]['msg']}") from None
    actions = []
    for i, raw in enumerate(data.get("actions", [])):
        try:
            actions.append(action_from_json(raw, f"{path}: actions[{i}]"))
        except BadActionError as exc:
            raise RunFileError(str(exc)) from None
    picks = data.get("picks")
    if picks is not None and (not isinstance(picks, list) or not all(isinstance(p, int) and p >= 0 for p in picks)):
        raise RunFileError(f"{path}: picks: expected a list of candidate indexes (integers >= 0)")
    return SavedRun(config, actions, str(data.get("note", "")), picks)


def replay(config: SimConfig, actions: list[Action], picks: Sequence[int] | None = None) -> Cluster:
    """A fresh cluster with ``config`` after ``actions`` (raises ``ValueError`` at a step that cannot run)."""
    cluster = Cluster(config, picks=picks)
    for i, action in enumerate(actions):
        try:
            cluster.step(action)
        except ValueError as exc:
            raise ValueError(f"step {i + 1} ({action.describe()}) cannot run: {exc}") from None
    return cluster
