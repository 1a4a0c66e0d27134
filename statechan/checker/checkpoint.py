"""Checkpoints of the compact search in one machine: a run stopped (a bound, a signal, a machine
going away) goes on later from its last complete level, as TLC's ``-recover`` does.

A checkpoint is written when a level is complete: the visited table, the per-state arrays (parent,
position, flags, edges), the next level's states (each process's part, copied as its level files
are, without pickling them again) and the run's totals. It goes into a new folder of its own and
only then is ``checkpoint.pickle`` replaced to name it, so a run interrupted while writing one
resumes from the one before.

A resumed run must compute every fingerprint as the run that wrote the checkpoint did. The
search's fingerprints hash the states' canonical forms with Python's ``hash``, which differs from
process to process: a string's unless ``PYTHONHASHSEED`` fixes it, and ``None``'s (before Python
3.12) with the address the interpreter was loaded at. A checkpoint another process resumes
therefore needs a seed and no address randomisation (:func:`repeatable_hashing`): ``statechan
check`` starts itself again so (:func:`restart_repeatably`). A resumed run also re-keys some of the saved states and
finds each in the table at its index before it goes on: a checkpoint of another model or build is
refused, not merged into wrong answers."""

from __future__ import annotations

import contextlib
import ctypes
import os
import pickle
import shutil
import sys
import tempfile
from array import array
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from statechan.checker.table import FingerprintTable

if TYPE_CHECKING:
    from collections.abc import Sequence

    from statechan.bounds import Bounds
    from statechan.cluster.config import StoreKind, Variant

CHECKPOINT = "checkpoint.pickle"
"""The file naming a run folder's newest complete checkpoint."""

ARRAYS = ("parents", "positions", "flags", "first_edge", "edges")
"""The compact search's per-state arrays, each saved to a file of its name."""

ADDR_NO_RANDOMIZE = 0x0040000
"""Linux's personality flag that loads a program at the same addresses every time."""

REPEATABLE = "STATECHAN_REPEATABLE_HASHING"
"""Set in the environment of a process :func:`restart_repeatably` started (it is not started again)."""

SEED = "0"
"""The ``PYTHONHASHSEED`` a run with a checkpoint uses."""


class CheckpointError(ValueError):
    """A checkpoint that cannot be written or resumed here (another run's, another build's, or a
    process whose hashes differ); the message says which and what to do."""


@dataclass
class Saved:
    """A compact search's totals after its last complete level (the arrays and states are files)."""

    signature: tuple[Any, ...]
    """The run's bound, store, variant and options (:func:`statechan.checker.run_signature`)."""
    hashing: tuple[int, int]
    """``hash(None)`` and a string's hash in the process that wrote it (:func:`hashing_probe`)."""
    depth: int
    """The depth of the level the saved states make up (the next to expand)."""
    level_starts: list[int]
    slots: int
    size: int
    queued: int
    parts: list[str]
    """The next level's states: level files, one a process, in this checkpoint's folder."""
    transitions: int = 0
    refused: int = 0
    reached: int = 0
    """The greatest depth a state was found at."""
    beyond: str = ""
    """What the depth bound stopped (``CheckResult.stopped``), if it did."""
    coverage: dict[tuple[str, str], Counter[str]] = field(default_factory=dict)
    reduced: int = 0
    blockers: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0
    disk_peak: int = 0
    resumed: int = 0
    """How many times the run had been resumed when this was written."""
    codes: dict[str, str] = field(default_factory=dict)
    """Each saved array's type code."""


def run_signature(
    bounds: Bounds, store: StoreKind, variant: str | Variant, symmetry: bool, ids: Sequence[str], por: bool
) -> tuple[Any, ...]:
    """What a resumed run must share with the checkpoint it resumes: the bound, store, variant (a
    model's whole definition) and the options that change what is searched."""
    named = variant if isinstance(variant, str) else variant.model_dump_json()
    return (bounds.model_dump_json(), store.value, named, symmetry, tuple(ids), por)


def hashing_probe() -> tuple[int, int]:
    """What tells two processes' hashes apart: ``None``'s and a string's."""
    return hash(None), hash("statechan checkpoint")


def _personality(persona: int = 0xFFFFFFFF) -> int | None:
    """Set this process's Linux personality to ``persona`` (the default only reads it); the one
    before, or None where there is none (not Linux, or the call refused)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        found = ctypes.CDLL(None, use_errno=True).personality(ctypes.c_ulong(persona))
    except (OSError, AttributeError):
        return None
    return None if found < 0 else int(found)


def repeatable_hashing() -> str | None:
    """None when another process started alike hashes as this one does; else what is missing."""
    missing = []
    if os.environ.get("PYTHONHASHSEED", "random") == "random":
        missing.append("PYTHONHASHSEED is not set")
    if sys.version_info < (3, 12):
        persona = _personality()
        if persona is None or not persona & ADDR_NO_RANDOMIZE:
            missing.append("address randomisation is on (None's hash follows where Python was loaded)")
    return "; ".join(missing) or None


def restart_repeatably() -> None:
    """Start this program again with hashes another run repeats (``PYTHONHASHSEED`` set and, before
    Python 3.12, no address randomisation), unless they already are or this process was so started;
    returns only when it does not restart."""
    if os.environ.get(REPEATABLE) or repeatable_hashing() is None:
        return
    env = dict(os.environ, PYTHONHASHSEED=os.environ.get("PYTHONHASHSEED", SEED), **{REPEATABLE: "1"})
    if env["PYTHONHASHSEED"] == "random":
        env["PYTHONHASHSEED"] = SEED
    persona = _personality()
    if sys.version_info < (3, 12) and persona is not None and _personality(persona | ADDR_NO_RANDOMIZE) is None:
        return  # not allowed here: the run says what is missing
    sys.stdout.flush()
    sys.stderr.flush()
    # the interpreter's own options kept (sys.orig_argv); a frozen program starts as it started
    again = list(sys.orig_argv) if not getattr(sys, "frozen", False) else [sys.executable, *sys.argv[1:]]
    with contextlib.suppress(OSError):  # not started again: the run says what is missing
        os.execve(sys.executable, again, env)
    if persona is not None:
        _personality(persona)


def save(
    folder: Path,
    point: Saved,
    table: FingerprintTable,
    arrays: dict[str, array[int]],
    write_level: Any,
) -> None:
    """Write a checkpoint into a new folder inside ``folder``, each file flushed to the disk, then
    name it in ``checkpoint.pickle`` and remove every other. ``write_level(into)`` copies the next
    level's states into ``into`` and gives the files' paths."""
    folder.mkdir(parents=True, exist_ok=True)
    into = Path(tempfile.mkdtemp(prefix=f"point-{point.depth}-", dir=folder))
    point.slots, point.size = table.dump(into / "keys", into / "indices")
    for name in ARRAYS:
        with open(into / name, "wb") as out:
            arrays[name].tofile(out)
        point.codes[name] = arrays[name].typecode
    point.parts = [path.name for path in write_level(into)]
    for written in into.iterdir():
        _synced(written)
    _synced(into)
    partial = folder / f"{CHECKPOINT}.tmp"
    partial.write_bytes(pickle.dumps((into.name, point), protocol=pickle.HIGHEST_PROTOCOL))
    _synced(partial)
    os.replace(partial, folder / CHECKPOINT)
    _synced(folder)
    for other in folder.glob("point-*"):
        if other != into:
            shutil.rmtree(other, ignore_errors=True)


def _synced(path: Path) -> None:
    """Flush a file (or a folder's entries) to the disk: a checkpoint outlives the machine going away."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def fresh(folder: Path) -> None:
    """Refuse to start a run in a folder that holds one (resuming it is the way on), or in a path
    that is not a folder."""
    if folder.exists() and not folder.is_dir():
        raise CheckpointError(f"{folder} is not a folder: name a folder for the checkpoints")
    if (folder / CHECKPOINT).exists():
        raise CheckpointError(f"{folder} holds a run already: resume it (--resume), or give another folder")


def load(folder: Path, signature: tuple[Any, ...]) -> tuple[Path, Saved]:
    """The newest checkpoint in ``folder`` (its own folder and totals), if it is this run's and this
    process hashes as the one that wrote it did."""
    path = folder / CHECKPOINT
    if not path.is_file():
        raise CheckpointError(f"{folder} holds no checkpoint ({CHECKPOINT}): nothing to resume")
    try:
        name, point = pickle.loads(path.read_bytes())
    except (pickle.UnpicklingError, ValueError, EOFError, TypeError, AttributeError) as exc:
        raise CheckpointError(f"{path} is not a checkpoint of the compact search ({exc})") from exc
    if not isinstance(point, Saved):
        raise CheckpointError(f"{path} is not a checkpoint of the compact search")
    if point.signature != signature:
        raise CheckpointError(
            f"{folder} holds a run of another bound, store, variant or option set; resume it with "
            "the options it was started with, or start afresh in another folder"
        )
    if point.hashing != hashing_probe():
        raise CheckpointError(
            f"this process hashes differently from the one that wrote {folder}'s checkpoint: "
            f"{repeatable_hashing() or 'another PYTHONHASHSEED'} (statechan check --resume starts itself "
            f"with PYTHONHASHSEED={SEED} and no address randomisation; give the same seed)"
        )
    return folder / name, point


def table_of(into: Path, point: Saved) -> FingerprintTable:
    """The visited table a checkpoint saved."""
    try:
        return FingerprintTable.loaded(into / "keys", into / "indices", point.slots, point.size)
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{into}: {exc}") from exc


def arrays_of(into: Path, point: Saved) -> dict[str, array[int]]:
    """The per-state arrays a checkpoint saved, each checked against the states it counted."""
    found: dict[str, array[int]] = {}
    for name in ARRAYS:
        found[name] = array(point.codes[name])
        try:
            found[name].frombytes((into / name).read_bytes())
        except (OSError, ValueError) as exc:
            raise CheckpointError(f"{into / name}: {exc}") from exc
    states = {len(found[name]) for name in ("parents", "positions", "flags")}
    if states != {point.size} or len(found["first_edge"]) > point.size:
        raise CheckpointError(f"{into}: the saved arrays do not hold the checkpoint's {point.size:,} states")
    return found
