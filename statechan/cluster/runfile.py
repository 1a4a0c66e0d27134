"""Saved runs: a configuration and its list of actions, as JSON, replayable exactly."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from pydantic import ValidationError

from statechan.cluster.actions import Action, BadActionError, action_from_json
from statechan.cluster.config import SimConfig, StoreKind
from statechan.cluster.sim import Cluster
from statechan.model import ModelError, load_model, read_text_file
from statechan.states import StorageType

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
    """A saved run, checked through: any file gives a run that can be replayed or a
    :class:`RunFileError` naming the file, the part and the problem (never another exception)."""
    try:
        data = json.loads(read_text_file(path, "statechan run"))
    except json.JSONDecodeError as exc:
        raise RunFileError(f"{path}: not JSON: {exc}") from None
    except RecursionError:
        raise RunFileError(f"{path}: not a statechan run: JSON nested deeper than the parser's limit") from None
    except ValueError as exc:  # unreadable, not a regular file, not UTF-8, an integer of too many digits
        raise RunFileError(str(exc) if str(exc).startswith(str(path)) else f"{path}: {exc}") from None
    if not isinstance(data, dict):
        raise RunFileError(f'{path}: not a statechan run (expected an object with "format": "{RUN_FORMAT}")')
    _check_format(path, data.get("format"))
    try:
        config = SimConfig.model_validate(data.get("config", {}))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = f" {first['loc']}:" if first["loc"] else ""  # none for a rule over several fields
        raise RunFileError(f"{path}: config:{where} {first['msg']}") from None
    _check_fits(path, config)
    raw_actions = data.get("actions", [])
    if not isinstance(raw_actions, list):
        raise RunFileError(f"{path}: actions: expected a list of actions, got {type(raw_actions).__name__}")
    actions = []
    for i, raw in enumerate(raw_actions):
        try:
            actions.append(action_from_json(raw, f"{path}: actions[{i}]"))
        except BadActionError as exc:
            raise RunFileError(_one_line(str(exc))) from None
    picks = data.get("picks")
    if picks is not None and (
        not isinstance(picks, list) or not all(type(p) is int and 0 <= p <= MAX_PICK for p in picks)
    ):
        raise RunFileError(f"{path}: picks: expected a list of candidate indexes (integers 0 to {MAX_PICK})")
    note = data.get("note", "")
    return SavedRun(config, actions, note if isinstance(note, str) else json.dumps(note), picks)


MAX_PICK = 1_000
"""A placement choice is an index among the brokers; no run has more candidates."""


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _check_format(path: str | Path, written: object) -> None:
    """The file's format is this version's; an older or newer one says so, and what to do."""
    if written == RUN_FORMAT:
        return
    prefix = RUN_FORMAT.rsplit("/", 1)[0] + "/"
    if isinstance(written, str) and written.startswith(prefix):
        version = written.removeprefix(prefix)
        current = RUN_FORMAT.removeprefix(prefix)
        older = re.fullmatch(r"[0-9]{1,9}", version) is not None and int(version) < int(current)
        raise RunFileError(
            f"{path}: a run saved in format {written!r}, {'older' if older else 'other'} than this statechan's "
            f"{RUN_FORMAT!r}: replay it with the statechan that saved it, or save it again with this one "
            "(the note in the file says which command made it)"
        )
    raise RunFileError(f'{path}: not a statechan run (expected "format": "{RUN_FORMAT}", found {written!r})')


def _check_fits(path: str | Path, config: SimConfig) -> None:
    """The run's model exists and has a resolver and the tables its store needs (the cluster's
    size is the configuration's own rule)."""
    try:
        model = load_model(config.variant.model)
    except ModelError as exc:
        raise RunFileError(f"{path}: config.variant.model: {exc}") from None
    needed = [config.storage] + ([StorageType.MetadataStore] if config.store is StoreKind.both else [])
    missing = [s.value for s in needed if s not in model.storages]
    if not model.has_resolver or missing:
        why = "is graph-only (no resolver)" if not model.has_resolver else f"has no {', '.join(missing)} table"
        raise RunFileError(f"{path}: config.variant.model: model {model.name} {why}; this run needs one")


def replay(config: SimConfig, actions: list[Action], picks: Sequence[int] | None = None) -> Cluster:
    """A fresh cluster with ``config`` after ``actions`` (raises ``ValueError`` at a step that cannot run)."""
    cluster = Cluster(config, picks=picks)
    for i, action in enumerate(actions):
        try:
            cluster.step(action)
        except ValueError as exc:
            raise ValueError(f"step {i + 1} ({action.describe()}) cannot run: {exc}") from None
    return cluster
