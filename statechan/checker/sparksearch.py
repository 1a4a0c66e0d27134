"""The compact search on Spark: each breadth-first level one Spark job, the states spread over the
executors by fingerprint.

A level's states live in a run folder (``level-D/part-P``: pickled chunks, as the compact search's
levels on disk), partition P holding the states whose 64-bit key is P modulo the partitions. One
job per level:

1. each task expands its partition's states with the search's own expander (the protocol's pure
   step, symmetry, the invariants: checked on the executors), writing each state's edges
   (``edges-D``) for the liveness check. Up to :data:`SHARED_VISITED` states in all, the task
   reads every partition's visited keys, so it expands as one process does (states seen before
   neither checked again nor sent, the reduction decided in the expansion);
2. past that, each task knows its own partition's states only, and with the partial-order
   reduction the keys of the candidate ample deliveries go to the partitions that hold them,
   which answer which were seen before (the cycle proviso needs it), and the answers come back to
   the expanding partition, which decides each state's reduction as one process does;
3. the successors go to the partition of their key, which keeps each new key's lexicographically
   least path — the one breadth-first search in one process finds first — drops the keys it
   has seen (``visited-D/part-P.npy``: sorted 64-bit keys, the partition's visited set), and
   writes the new level and the new visited set.

Levels of up to :data:`SMALL_LEVEL` states run several to a task instead (a job's fixed cost is
more than their work). Keys come from :func:`stable_fingerprints`: the same in every process.

A state carries its path (each step's position in its parent's expansion), not its parent: the
least path to a state is the one the compact search records, so a counterexample is rebuilt on the
driver by stepping again from the initial state (:meth:`statechan.checker._Expander.branch`), and
the first violation in the compact search's order is the least path among the level's broken steps.
The driver then holds only the run's totals.

A run folder is also the checkpoint: ``checkpoint.pickle`` is rewritten after each level, and a run
started again on the same folder (``resume``) goes on from the last complete level. Every file is
written under a temporary name and renamed, so a task Spark runs again (a lost executor) writes the
same files. The folder must be one path the driver and every executor see (on a cluster of several
machines, a shared filesystem).

Liveness ("every state can settle") is checked on the driver after a complete search, from the
edges the executors wrote: the compact search's check on its flat arrays (4 bytes an edge and 40
to 120 bytes a state on the driver). ``liveness=False`` leaves it out for bounds whose graph does
not fit one machine, and the verdict says so."""

from __future__ import annotations

import os
import pickle
import shutil
import struct
import tempfile
import time
import uuid
from array import array
from collections import Counter
from collections.abc import Callable, Container, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from hashlib import blake2b
from pathlib import Path
from typing import TYPE_CHECKING, Any

from statechan.bounds import Bounds
from statechan.checker.checkpoint import CheckpointError, run_signature
from statechan.checker.compact import EXPANDED, SETTLED, TIMERS_CUT, Level, LevelReport, projected_total
from statechan.checker.frontier import LevelFile
from statechan.checker.table import FingerprintTable, key64
from statechan.cluster.config import StoreKind, Variant

if TYPE_CHECKING:
    from statechan.checker import CheckResult, _Expander, _Expansion
    from statechan.cluster.actions import Action
    from statechan.cluster.state import Canon, ClusterState

CHECKPOINT = "checkpoint.pickle"
_POSITION = struct.Struct(">H")
"""A step's position in a path: big-endian, so paths compare as the positions do."""

SMALL_LEVEL = 2_000
"""Levels of at most this many states are searched in one task (see :func:`_whole_level`)."""
SHARED_VISITED = 25_000_000
"""Up to this many states in all (200 MB of keys), every expanding task reads the whole visited set
(:class:`_Visited`): no state seen before is checked again or sent, and the reduction's proviso is
decided without asking; past it, each partition knows its own states only."""

LIVENESS_NOT_CHECKED = (
    "liveness not checked (--no-liveness): no run was shown to reach a settled state from every state"
)


class CheckpointMismatch(CheckpointError):
    """A run folder holds a run of another bound, store, variant or option: it cannot be resumed."""


@dataclass(frozen=True)
class SparkRun:
    """What every task needs: how to build the search's expander, and where the run's files are."""

    bounds: Bounds
    store: StoreKind
    variant: str | Variant
    symmetry: bool
    ids: tuple[str, ...]
    por: bool
    folder: str
    partitions: int

    def signature(self) -> tuple[Any, ...]:
        """What a resumed run must share with the checkpoint it resumes."""
        return run_signature(self.bounds, self.store, self.variant, self.symmetry, self.ids, self.por)

    def expander(self) -> _Expander:
        """The search's expander, with fingerprints every process computes alike
        (:func:`stable_fingerprints`), built once per Python worker (and per run signature)."""
        key = self.signature()
        found = _EXPANDERS.get(key)
        if found is None:
            from statechan.checker import _expander

            found = _EXPANDERS[key] = stable_fingerprints(
                _expander(self.bounds, self.store, self.variant, self.symmetry, list(self.ids), False, False, self.por)
            )
        return found

    def path(self, kind: str, depth: int, part: int | None = None) -> Path:
        folder = Path(self.folder) / f"{kind}-{depth}"
        return folder if part is None else folder / f"part-{part:05d}"


def stable_fingerprints(expander: _Expander) -> _Expander:
    """``expander`` with fingerprints that every process computes alike (:class:`StableFingerprinter`)."""
    from statechan.checker import Fingerprinter

    class StableFingerprinter(Fingerprinter):
        """The search's fingerprint, made the same in every process: the least, over the same
        renamings of the broker ids, of a BLAKE2b digest of the canonical form's text. The search in
        one machine hashes the form with Python's ``hash``, which differs from process to process
        (a string's unless ``PYTHONHASHSEED`` fixes it; ``None``'s, before Python 3.12, always):
        alike in forked workers, not in executors started apart. The same states are told apart
        (the forms are the same), about 0.2 ms a state dearer."""

        def __init__(self, brokers: int, cap: int, symmetry: bool, producers: bool) -> None:
            super().__init__(brokers, cap, symmetry, producers)
            self._held: dict[tuple[int, int], tuple[object, int]] = {}
            """Each record's stable hash in a context, by the record's identity and the context's
            token (the record kept, so its identity is not reused): records are shared from state
            to state, as the search's own hash caches them."""

        def _stable(self, record: Any, context: Canon) -> int:
            held = self._held.get((id(record), context.token))
            if held is not None and held[0] is record:
                return held[1]
            if len(self._held) >= STABLE_HELD:
                self._held.clear()
            text = repr(record.form(context, lambda inner: self._stable(inner, context)))
            hashed = int.from_bytes(blake2b(text.encode(), digest_size=8).digest(), "little", signed=True)
            self._held[(id(record), context.token)] = (record, hashed)
            return hashed

        def canonical(self, state: ClusterState) -> tuple[int, Canon]:
            best: Canon | None = None
            least = 0
            for perm in self.candidates(state) if self.symmetry else [None]:
                context = self.context(state.now, perm)
                hashed = self._stable(state, context)
                if best is None or hashed < least:
                    best, least = context, hashed
            assert best is not None
            return least, best

    old = expander.fingerprint
    expander.fingerprint = StableFingerprinter(2 if old.symmetry else 1, old.cap, old.symmetry, old.producers)
    return expander


STABLE_HELD = 500_000
"""Records whose stable hash a process keeps (then forgets them all, as the fingerprinter forgets
its contexts)."""

_EXPANDERS: dict[tuple[Any, ...], _Expander] = {}
"""A Python worker's expanders, by run signature (workers are reused from task to task)."""


@dataclass
class _Stats:
    """One partition's share of a level: counts, coverage, the reduction, the least broken step."""

    counted: CheckResult
    """Transitions, refused steps and coverage, counted as the compact search counts them."""
    reduced: int = 0
    blockers: Counter[str] = field(default_factory=Counter)
    beyond: bool = False
    broken: tuple[bytes, str, int] | None = None
    """The least (path, violation, key) among the broken steps kept."""
    new: int = 0
    written: int = 0


# -- the files of a run ---------------------------------------------------------------------------
def _write(path: Path, items: Iterable[tuple[Any, ...]]) -> int:
    """Write ``items`` to ``path`` (pickled chunks) under a temporary name, then rename: a task run
    again writes the same file. Returns the bytes written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial_path = path.with_name(f"{path.name}.{uuid.uuid4().hex}.tmp")
    out = LevelFile(partial_path, 0)
    for item in items:
        out.append(item)
    out.close()
    if not partial_path.exists():
        partial_path.touch()
    os.replace(partial_path, path)
    return out.bytes


def _read(path: Path) -> Iterator[tuple[Any, ...]]:
    if not path.exists() or path.stat().st_size == 0:
        return iter(())
    return LevelFile.written(path).read()


def _visited(run: SparkRun, depth: int, part: int) -> Any:
    import numpy as np

    path = run.path("visited", depth, part).with_suffix(".npy")
    return np.load(path) if path.exists() else np.zeros(0, dtype=np.uint64)


def _save_visited(run: SparkRun, depth: int, part: int, keys: Any) -> None:
    import numpy as np

    path = run.path("visited", depth, part).with_suffix(".npy")
    path.parent.mkdir(parents=True, exist_ok=True)
    partial_path = path.with_name(f"{path.stem}.{uuid.uuid4().hex}.tmp.npy")
    np.save(partial_path, keys)
    os.replace(partial_path, path)


def _seen(visited: Any, keys: Any) -> Any:
    """Which of ``keys`` the sorted array ``visited`` holds (a boolean array)."""
    import numpy as np

    if len(visited) == 0:
        return np.zeros(len(keys), dtype=bool)
    at = np.searchsorted(visited, keys)
    return visited[np.minimum(at, len(visited) - 1)] == keys


def _by_key(key: int) -> int:
    """Spark's partition function: a key is a hash already (a partition's own number, for the
    records addressed to one partition)."""
    return key


def _never(key: bytes) -> bool:
    return False


# -- the tasks --------------------------------------------------------------------------------------
class _Visited:
    """Every partition's visited keys up to a level, read by one task (8 bytes a state): what lets
    an expansion skip the states seen before (no second check of their invariants, nothing sent)
    and decide the reduction's proviso itself, as one process does."""

    def __init__(self, run: SparkRun, depth: int) -> None:
        self.count = run.partitions
        self.arrays = [_visited(run, depth, part) for part in range(self.count)]

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, int):
            return False
        keys = self.arrays[key % self.count]
        at = int(keys.searchsorted(key))
        return at < len(keys) and int(keys[at]) == key

    def known(self, key: bytes) -> bool:
        return key64(key) in self


def _expansions(
    run: SparkRun, depth: int, part: int, visited: _Visited | None = None
) -> Iterator[tuple[bytes, int, int, _Expansion]]:
    """Partition ``part``'s states of level ``depth``, each expanded: (path, key, settled flag,
    expansion). Knowing every state seen before (``visited``), as one process expands: a successor
    seen before carries no state and is not checked again (unless its step gave answers), the
    expansion stops at a broken step, and the reduction is decided in it. Else every step is
    taken and each distinct successor checked, the reduction's candidates flagged for later."""
    expander = run.expander()
    kinds = list(expander.budget)
    known = _never if visited is None else visited.known

    def depth_of(key: bytes) -> int | None:
        # seen before: a level up to this one, not the next (the proviso fails); else not known here
        return -1 if known(key) else None

    for key, path, state, spent_counts, settled_flag in _read(run.path("level", depth, part)):
        spent = Counter({k: n for k, n in zip(kinds, spent_counts, strict=True) if n})
        if visited is None:
            expansion = expander.expand((state, spent, None), depth, known, None, set(), exact=False)
        else:
            expansion = expander.expand((state, spent, None), depth, known, None, set(), depth_of=depth_of)
        for step in expansion.steps:
            step.obs = None
            if step.spent is not None:
                step.spent = tuple(step.spent.get(k, 0) for k in kinds)  # type: ignore[assignment]
        yield path, key, settled_flag, expansion


def _expand_and_ask(run: SparkRun, depth: int, part: int, _: Iterable[Any]) -> Iterator[tuple[int, int]]:
    """With the reduction: expand, keep the expansions on disk, and ask the partitions that hold
    the candidate ample deliveries' successors whether they were seen before: (key, asking partition)."""
    expander = run.expander()
    expander.blockers = Counter()
    asked: set[int] = set()

    def kept() -> Iterator[tuple[Any, ...]]:
        for path, key, settled_flag, expansion in _expansions(run, depth, part):
            for step in expansion.steps:
                if step.ample:
                    asked.add(key64(step.key))
            yield path, key, settled_flag, expansion
        yield ("blockers", expander.blockers)

    _write(run.path("expanded", depth, part), kept())
    for key in asked:
        yield key, part


def _answer(run: SparkRun, depth: int, part: int, asks: Iterable[tuple[int, int]]) -> Iterator[tuple[int, int]]:
    """The asked keys this partition has seen (at this level's depth or before), back to the
    partitions that asked: (asking partition, key)."""
    import numpy as np

    pairs = list(asks)
    if not pairs:
        return
    keys = np.fromiter((k for k, _ in pairs), dtype=np.uint64, count=len(pairs))
    seen = _seen(_visited(run, depth, part), keys)
    for (key, asker), old in zip(pairs, seen.tolist(), strict=True):
        if old:
            yield asker, key


def _decide(
    run: SparkRun, depth: int, part: int, answers: Iterable[tuple[int, int]]
) -> Iterator[tuple[int, tuple[Any, ...]]]:
    """The reduced expansions of partition ``part`` (the answers say which candidates' successors
    were seen before), then what :func:`_emit` sends on."""
    old = {key for _, key in answers}
    blockers: Counter[str] = Counter()

    def expansions() -> Iterator[tuple[bytes, int, int, _Expansion]]:
        for item in _read(run.path("expanded", depth, part)):
            if item[0] == "blockers":
                blockers.update(item[1])
                continue
            path, key, settled_flag, expansion = item
            yield path, key, settled_flag, expansion

    yield from _emit(run, depth, part, expansions(), old, blockers)


def _expand_all(run: SparkRun, depth: int, part: int, _: Iterable[Any]) -> Iterator[tuple[int, tuple[Any, ...]]]:
    """Without the reduction, knowing only this partition's states: expand and send on."""
    expander = run.expander()
    expander.blockers = Counter()
    yield from _emit(run, depth, part, _expansions(run, depth, part), set(), expander.blockers)


def _expand_knowing(
    run: SparkRun, depth: int, part: int, visited: _Visited | None = None
) -> Iterator[tuple[int, tuple[Any, ...]]]:
    """Knowing every state seen up to this level (``visited``, else read here): expand, decide the
    reduction here, send on the successors not seen before."""
    visited = visited if visited is not None else _Visited(run, depth)
    expander = run.expander()
    expander.blockers = Counter()
    expander.reduced = 0
    yield from _emit(run, depth, part, _expansions(run, depth, part, visited), visited, expander.blockers, True)


def _reduce(expansion: _Expansion, old: Container[int], blockers: Counter[str]) -> bool:
    """One process's reduction, decided where the expansion was made: the first candidate delivery
    whose successor is not one this or an earlier level found (the proviso) nor met earlier in the
    same expansion is the state's only step — unless a step before it broke an invariant (the
    search stops there)."""
    earlier: set[int] = set()
    for step in expansion.steps:
        if step.refused:
            continue
        key = key64(step.key)
        if step.broken:
            return False
        if step.ample:
            if key not in old and key not in earlier:
                expansion.steps = [step]
                return True
            blockers["proviso"] += 1
        earlier.add(key)
    return False


def _emit(
    run: SparkRun,
    depth: int,
    part: int,
    expansions: Iterable[tuple[bytes, int, int, _Expansion]],
    old: Container[int],
    blockers: Counter[str],
    decided: bool = False,
) -> Iterator[tuple[int, tuple[Any, ...]]]:
    """Each kept step's successor to the partition of its key (with its path), each state's edges
    to ``edges-D`` (for the liveness check), and the partition's counts to its own number
    (``decided``: the expansions were reduced where they were made, else here)."""
    from statechan.checker import CheckResult, _counted

    stats = _Stats(CheckResult(run.bounds, run.store, run.variant))
    out: list[tuple[int, tuple[Any, ...]]] = []

    def edges() -> Iterator[tuple[Any, ...]]:
        for path, key, settled_flag, expansion in expansions:
            if expansion.beyond:
                stats.beyond = True
                yield path, key, settled_flag, b""
                continue
            if expansion.reduced or (run.por and not decided and _reduce(expansion, old, blockers)):
                stats.reduced += 1
            flags = settled_flag | EXPANDED | (TIMERS_CUT if expansion.timers_cut else 0)
            children = array("Q")
            for step in expansion.steps:
                if not _counted(stats.counted, step):
                    continue
                child_key = key64(step.key)
                children.append(child_key)
                child_path = path + _POSITION.pack(step.position)
                if step.broken and (stats.broken is None or child_path < stats.broken[0]):
                    stats.broken = (child_path, "; ".join(str(v) for v in step.broken[:3]), child_key)
                if step.state is not None:
                    flag = SETTLED if step.settled else 0
                    out.append((child_key, ("C", child_path, step.state, step.spent, flag)))
            yield path, key, flags, children.tobytes()

    _write(run.path("edges", depth, part), edges())
    stats.blockers = blockers
    yield from out
    yield part, ("S", stats)


def _dedup(run: SparkRun, depth: int, part: int, items: Iterable[tuple[int, tuple[Any, ...]]]) -> Iterator[_Stats]:
    """Partition ``part`` of the next level: each successor key's least path, the keys seen before
    dropped; the new states and the grown visited set written; the counts sent to the driver."""
    import numpy as np

    best: dict[int, tuple[Any, ...]] = {}
    stats: list[_Stats] = []
    for key, record in items:
        if record[0] == "S":
            stats.append(record[1])
            continue
        found = best.get(key)
        if found is None or record[1] < found[1]:
            best[key] = record
    visited = _visited(run, depth, part)
    keys = np.fromiter(best, dtype=np.uint64, count=len(best))
    new = keys[~_seen(visited, keys)]
    written = _write(run.path("level", depth + 1, part), ((key, *best[key][1:]) for key in new.tolist()))
    _save_visited(run, depth + 1, part, np.union1d(visited, new))
    mine = _Stats(_blank(run), new=len(new), written=written)
    for other in stats:
        _add(mine, other)
    yield mine


def _whole_level(run: SparkRun, depth: int, _: int) -> list[_Stats]:
    """A small level in one task: the stages of :func:`spark_search`'s job, each partition in turn,
    what they would send each other passed in memory (a job's fixed cost, a few hundred
    milliseconds a stage, is more than a small level's work)."""
    parts = range(run.partitions)
    visited = _Visited(run, depth)
    sent = [item for q in parts for item in _expand_knowing(run, depth, q, visited)]
    received: dict[int, list[tuple[int, tuple[Any, ...]]]] = {p: [] for p in parts}
    for key, record in sent:
        received[key % run.partitions].append((key, record))
    return [stats for p in parts for stats in _dedup(run, depth, p, received[p])]


def _small_levels(run: SparkRun, depth: int, small: int, room: int, _: int) -> list[list[_Stats]]:
    """Levels from ``depth`` on in one task (:func:`_whole_level` each), while they stay at most
    ``small`` states, break nothing, and the run has ``room`` for more states: each level's
    partitions' counts. The driver checkpoints each level as if it had been a job of its own."""
    done: list[list[_Stats]] = []
    while True:
        parts = _whole_level(run, depth, 0)
        done.append(parts)
        new = sum(stats.new for stats in parts)
        room -= new
        if new == 0 or new > small or room <= 0 or any(stats.broken for stats in parts):
            return done
        depth += 1


def _blank(run: SparkRun) -> CheckResult:
    from statechan.checker import CheckResult

    return CheckResult(run.bounds, run.store, run.variant)


def _least(a: tuple[bytes, str, int] | None, b: tuple[bytes, str, int] | None) -> tuple[bytes, str, int] | None:
    if a is None:
        return b
    if b is None:
        return a
    return a if a[0] <= b[0] else b


def _add(into: _Stats, other: _Stats) -> None:
    """Add ``other``'s counts, coverage and reduction into ``into``; keep the least broken step."""
    a, b = into.counted, other.counted
    a.transitions += b.transitions
    a.refused += b.refused
    for pair, counts in b.coverage.items():
        a.coverage.setdefault(pair, Counter()).update(counts)
    into.reduced += other.reduced
    into.blockers.update(other.blockers)
    into.beyond = into.beyond or other.beyond
    into.broken = _least(into.broken, other.broken)
    into.new += other.new
    into.written += other.written


def _count_up_to(run: SparkRun, depth: int, limit: bytes, part: int, _: Iterable[Any]) -> Iterator[int]:
    """How many of partition ``part``'s states at ``depth`` the compact search would have found by
    the time it met the step whose path is ``limit`` (those with a path up to it)."""
    yield sum(1 for item in _read(run.path("level", depth, part)) if item[1] <= limit)


# -- the driver ---------------------------------------------------------------------------------------
@dataclass
class _Checkpoint:
    """The run's totals after its last complete level (what a resumed run starts from)."""

    signature: tuple[Any, ...]
    partitions: int
    depth: int
    levels: list[int]
    transitions: int = 0
    refused: int = 0
    coverage: dict[tuple[str, str], Counter[str]] = field(default_factory=dict)
    reduced: int = 0
    blockers: Counter[str] = field(default_factory=Counter)
    beyond: bool = False
    seconds: float = 0.0
    disk_peak: int = 0


def spark_search(
    result: CheckResult,
    run_args: tuple[Bounds, StoreKind, str | Variant, bool, list[str], bool],
    spark: Any,
    *,
    folder: Path,
    resume: bool,
    partitions: int | None,
    max_states: int,
    max_seconds: float | None,
    liveness: bool = True,
    on_level: LevelReport | None = None,
    note: Callable[[str], None] | None = None,
    small_level: int = SMALL_LEVEL,
    shared_visited: int = SHARED_VISITED,
) -> None:
    """Search ``result``'s bound breadth first on ``spark``, one job per level, with the run's files
    and checkpoint in ``folder`` (resumed from it with ``resume``); fills ``result`` as the compact
    search does (states, transitions, coverage, levels, verdict, shortest counterexample, liveness)."""
    bounds, store, variant, symmetry, ids, por = run_args
    say = note or (lambda _: None)
    sc = spark.sparkContext
    started = time.perf_counter()
    saved = _load(folder) if resume else None
    count = saved.partitions if saved is not None else partitions or max(2, 2 * sc.defaultParallelism)
    run = SparkRun(bounds, store, variant, symmetry, tuple(ids), por, str(folder.resolve()), count)
    expander = run.expander()
    if saved is not None:
        if saved.signature != run.signature():
            raise CheckpointMismatch(
                f"{folder} holds a run of another bound, store, variant or option set; resume it with "
                "the options it was started with, or start afresh in another folder"
            )
        found = [n for n in saved.levels if n]
        say(f"resuming from {folder}: {sum(found):,} states in {len(found)} levels")
        point = saved
    else:
        started_point = _start(run, result)
        if started_point is None:
            return
        point = started_point
        _save(folder, point)
    before = point.seconds
    stop = ""
    broken: tuple[bytes, str, int] | None = None
    while point.levels[-1] > 0 and not stop and broken is None:
        start = point.depth
        sc.setJobDescription(f"statechan check: level {start} ({point.levels[-1]:,} states)")
        if point.levels[-1] <= small_level:
            room = max_states - sum(point.levels)
            batches = sc.parallelize([0], 1).map(partial(_small_levels, run, start, small_level, room)).first()
        else:
            batches = [_level_job(sc, run, start, sum(point.levels) <= shared_visited)]
        for parts in batches:
            depth = point.depth
            total = _Stats(_blank(run))
            for stats in parts:
                _add(total, stats)
            point.transitions += total.counted.transitions
            point.refused += total.counted.refused
            for pair, counts in total.counted.coverage.items():
                point.coverage.setdefault(pair, Counter()).update(counts)
            point.reduced += total.reduced
            point.blockers.update(total.blockers)
            point.beyond = point.beyond or total.beyond
            if total.broken is not None:
                broken = total.broken
                break
            point.depth += 1
            point.levels.append(total.new)
            point.seconds = before + time.perf_counter() - started
            point.disk_peak = max(point.disk_peak, _disk(folder))
            _save(folder, point)
            for kind in ("level", "visited", "expanded"):
                shutil.rmtree(run.path(kind, depth), ignore_errors=True)
            states = sum(point.levels)
            if on_level is not None and total.new:
                sizes = point.levels
                growth = sizes[-1] / sizes[-2] if sizes[-2] else 0.0
                on_level(
                    Level(
                        point.depth,
                        total.new,
                        states,
                        growth,
                        projected_total(sizes),
                        point.seconds,
                        _resident(),
                        point.disk_peak / 2**20,
                    )
                )
            if total.new and states >= max_states:
                stop = f"state bound {max_states:,}"
                break
            if total.new and max_seconds is not None and point.seconds > max_seconds:
                stop = f"time bound {max_seconds:g} s"
                break
    result.transitions, result.refused, result.coverage = point.transitions, point.refused, point.coverage
    result.reduced, result.por_blockers = point.reduced, point.blockers
    result.seconds = before + time.perf_counter() - started
    result.disk_mb = point.disk_peak / 2**20
    levels = [n for n in point.levels if n] or [1]
    result.levels = levels
    result.states = sum(levels)
    result.depth = len(levels) - 1
    if broken is not None:
        path, violation, key = broken
        depth = point.depth
        # the states the compact search holds when it meets this step: every level before, and of
        # the next one those whose least path comes before the broken step's (or is it)
        found = (
            sc.parallelize(range(count), count)
            .mapPartitionsWithIndex(partial(_count_via_index, run, depth + 1, path))
            .sum()
        )
        result.states = sum(point.levels) + found
        result.levels = [*point.levels, found] if found else list(point.levels)
        result.depth = depth + 1 if found else depth
        result.violation = violation
        result.path, result.picks = _rebuild_checked(run, path, key)
        result.complete = True
        return
    if stop:
        result.complete, result.stopped = False, stop
        return
    if point.beyond:
        result.complete, result.stopped = False, f"depth bound {bounds.depth}"
    if liveness and result.complete:
        say(f"checking that every state can settle, on the driver ({result.states:,} states' edges)")
        _liveness(result, run, expander, len(point.levels) - 1)


def _level_job(sc: Any, run: SparkRun, depth: int, shared: bool) -> list[_Stats]:
    """One level as one Spark job: expand, then deduplicate by key; each partition's counts. With
    ``shared``, each expanding task reads every partition's visited keys (:class:`_Visited`); else
    it knows its own states only, and with the reduction the candidates' successors are asked of
    the partitions that hold them, whose answers come back to the expanding partition."""
    count = run.partitions
    frontier = sc.parallelize(range(count), count)
    if shared:
        sent = frontier.mapPartitionsWithIndex(partial(_expand_knowing_via_index, run, depth))
    elif run.por:
        asks = frontier.mapPartitionsWithIndex(partial(_expand_via_index, run, depth))
        answers = asks.partitionBy(count, _by_key).mapPartitionsWithIndex(partial(_answer_via_index, run, depth))
        sent = answers.partitionBy(count, _by_key).mapPartitionsWithIndex(partial(_decide_via_index, run, depth))
    else:
        sent = frontier.mapPartitionsWithIndex(partial(_expand_all_via_index, run, depth))
    found: list[_Stats] = (
        sent.partitionBy(count, _by_key).mapPartitionsWithIndex(partial(_dedup_via_index, run, depth)).collect()
    )
    return found


def _start(run: SparkRun, result: CheckResult) -> _Checkpoint | None:
    """The run's files for the initial state, or None and the verdict if it breaks an invariant."""
    broken = _root(run)
    if broken:
        result.states, result.levels = 1, [1]
        result.violation = broken
        return None
    return _Checkpoint(run.signature(), run.partitions, 0, [1])


def _root(run: SparkRun) -> str:
    """Level 0 and its visited set: the initial state, in the partition of its key. Returns what
    the initial state breaks ("" when nothing)."""
    import numpy as np

    from statechan.checker import settled
    from statechan.invariants.catalogue import check as check_invariants
    from statechan.observation import Observation

    expander = run.expander()
    root = expander.root
    observed = Observation(root, expander.setup)
    broken = check_invariants(observed, list(run.ids))
    key = key64(expander.key_of(root, Counter()))
    flag = SETTLED if settled(observed, expander.agree) else 0
    spent = tuple(0 for _ in expander.budget)
    for part in range(run.partitions):
        mine = key % run.partitions == part
        _write(run.path("level", 0, part), [(key, b"", root, spent, flag)] if mine else [])
        _save_visited(run, 0, part, np.array([key] if mine else [], dtype=np.uint64))
    return "; ".join(str(v) for v in broken[:3])


def _save(folder: Path, point: _Checkpoint) -> None:
    partial_path = folder / f"{CHECKPOINT}.tmp"
    partial_path.write_bytes(pickle.dumps(point, protocol=pickle.HIGHEST_PROTOCOL))
    os.replace(partial_path, folder / CHECKPOINT)


def _load(folder: Path) -> _Checkpoint:
    path = folder / CHECKPOINT
    if not path.is_file():
        raise CheckpointMismatch(f"{folder} holds no checkpoint ({CHECKPOINT}): nothing to resume")
    point = pickle.loads(path.read_bytes())
    if not isinstance(point, _Checkpoint):
        raise CheckpointMismatch(f"{path} is not a checkpoint of this search")
    return point


def _disk(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def _resident() -> float:
    from statechan.checker import resident_mb

    return resident_mb()


def _positions(path: bytes) -> list[int]:
    return [p for (p,) in _POSITION.iter_unpack(path)]


def _rebuild(expander: _Expander, path: bytes) -> tuple[list[Action], list[int], ClusterState, Counter[str]]:
    """The run along ``path`` from the initial state, stepped again."""
    state, spent = expander.root, Counter[str]()
    actions: list[Action] = []
    picks: list[int] = []
    for position in _positions(path):
        action, made, state, spent = expander.branch(state, spent, position)
        actions.append(action)
        picks.extend(made)
    return actions, picks, state, spent


def _rebuild_checked(run: SparkRun, path: bytes, key: int) -> tuple[list[Action], list[int]]:
    """:func:`_rebuild`, where the state it ends in must have ``key`` (else the search and this run
    disagree, a bug worth stopping for): the counterexample's actions and picks."""
    expander = run.expander()
    actions, picks, state, spent = _rebuild(expander, path)
    if key64(expander.key_of(state, spent)) != key:
        raise RuntimeError(f"rebuilding the run along {_positions(path)}: it ends in another state than the search's")
    return actions, picks


def _liveness(result: CheckResult, run: SparkRun, expander: _Expander, deepest: int) -> None:
    """The compact search's liveness check, on the compact search's arrays built from the edges the
    executors wrote: the states in its order (level by level, by path), each state's parent and
    step position (a run is stepped again from them), flags, and successors' indices."""
    from statechan.checker.compact import _liveness as check_liveness

    table = FingerprintTable()
    parents = array("q")
    positions = array("i")
    flags = array("B")
    before: list[bytes] = []
    """The paths of the level before, in order: a path less its last step is its parent's, and the
    two levels' paths come in the same order, so each parent is found walking them together."""
    before_start = 0
    for depth in range(deepest + 1):
        start, at = len(flags), 0
        paths: list[bytes] = []
        for path, key, flag, _ in _level_edges(run, depth):
            table.add(key, len(flags))
            flags.append(flag)
            paths.append(path)
            if not path:
                parents.append(-1)
                positions.append(-1)
                continue
            while before[at] != path[:-2]:
                at += 1
            parents.append(before_start + at)
            positions.append(_POSITION.unpack(path[-2:])[0])
        before, before_start = paths, start
    del before
    first_edge = array("q")
    edges = array("I")
    for depth in range(deepest + 1):
        for _, _, _, children in _level_edges(run, depth):
            first_edge.append(len(edges))
            for child in array("Q", children):
                index = table.get(child)
                if index < 0:
                    raise RuntimeError(f"an edge leads to a state no level holds ({child:016x})")
                edges.append(index)
    first_edge.append(len(edges))

    def rebuild(index: int) -> tuple[list[Action], list[int], ClusterState, Counter[str]]:
        chain: list[int] = []
        while index > 0:
            chain.append(positions[index])
            index = parents[index]
        return _rebuild(expander, b"".join(_POSITION.pack(position) for position in reversed(chain)))

    held = (flags, parents, positions, first_edge, edges)
    result.memory_mb = (table.nbytes + sum(a.itemsize * len(a) for a in held)) / 2**20
    check_liveness(result, flags, first_edge, edges, rebuild, expander)


def _level_edges(run: SparkRun, depth: int) -> list[tuple[Any, ...]]:
    """Every state of level ``depth`` with its flags and successors, in the compact search's order."""
    folder = run.path("edges", depth)
    records = [item for part in range(run.partitions) for item in _read(folder / f"part-{part:05d}")]
    records.sort(key=lambda item: item[0])
    return records


# Spark calls a partition's function with (index, iterator): these put the index where the tasks above take it.
def _expand_via_index(run: SparkRun, depth: int, index: int, items: Iterable[Any]) -> Iterator[tuple[int, int]]:
    return _expand_and_ask(run, depth, index, items)


def _answer_via_index(
    run: SparkRun, depth: int, index: int, items: Iterable[tuple[int, int]]
) -> Iterator[tuple[int, int]]:
    return _answer(run, depth, index, items)


def _decide_via_index(
    run: SparkRun, depth: int, index: int, items: Iterable[tuple[int, int]]
) -> Iterator[tuple[int, tuple[Any, ...]]]:
    return _decide(run, depth, index, items)


def _expand_all_via_index(
    run: SparkRun, depth: int, index: int, items: Iterable[Any]
) -> Iterator[tuple[int, tuple[Any, ...]]]:
    return _expand_all(run, depth, index, items)


def _expand_knowing_via_index(
    run: SparkRun, depth: int, index: int, items: Iterable[Any]
) -> Iterator[tuple[int, tuple[Any, ...]]]:
    return _expand_knowing(run, depth, index)


def _dedup_via_index(
    run: SparkRun, depth: int, index: int, items: Iterable[tuple[int, tuple[Any, ...]]]
) -> Iterator[_Stats]:
    return _dedup(run, depth, index, items)


def _count_via_index(run: SparkRun, depth: int, limit: bytes, index: int, items: Iterable[Any]) -> Iterator[int]:
    return _count_up_to(run, depth, limit, index, items)


def run_folder(checkpoint: Path | None, spill_dir: Path | None) -> tuple[Path, bool]:
    """The run's folder: ``checkpoint`` (kept afterwards), else a fresh temporary one (removed)."""
    if checkpoint is not None:
        checkpoint.mkdir(parents=True, exist_ok=True)
        return checkpoint, False
    return Path(tempfile.mkdtemp(prefix="statechan-spark-search-", dir=spill_dir)), True


def start_spark(
    master: str | None, conf: dict[str, str] | None = None, note: Callable[[str], None] | None = None
) -> tuple[Any, bool]:
    """A session for the checker (the auditor's: its Python workers run this interpreter), with the
    checker's code sent to the executors when the master is not local (:func:`ship_code`), and
    whether it was started here (to be stopped afterwards) rather than found running in this process."""
    from pyspark.sql import SparkSession

    from statechan.audit import spark_session

    running = SparkSession.getActiveSession() is not None
    spark = spark_session(master or "local[*]", app="statechan-check", driver_memory="2g", conf=conf)
    ship_code(spark, note)
    return spark, not running


def ship_code(spark: Any, note: Callable[[str], None] | None = None) -> None:
    """Send statechan to the executors (the zip named by its SHA-256 that the auditor ships) unless
    they run in this machine's own processes (a local master: they import what the driver imports)."""
    from statechan.audit import code_zip, session_master

    if session_master(spark).startswith("local"):
        return
    bundle = code_zip()
    if note is not None:
        note(f"sending the checker's code to the executors ({bundle.name})")
    spark.addArtifacts(str(bundle), pyfile=True)


def check_on_spark(
    bounds: Bounds | None = None,
    store: StoreKind = StoreKind.system_topic,
    variant: str | Variant = "current",
    symmetry: bool = True,
    max_states: int = 1_000_000,
    max_seconds: float | None = None,
    invariants: Iterable[str] | None = None,
    por: bool = True,
    vacuity: bool = True,
    *,
    spark: Any = None,
    master: str | None = None,
    checkpoint: Path | None = None,
    resume: bool = False,
    partitions: int | None = None,
    liveness: bool = True,
    spill_dir: Path | None = None,
    on_level: LevelReport | None = None,
    note: Callable[[str], None] | None = None,
    small_level: int = SMALL_LEVEL,
    shared_visited: int = SHARED_VISITED,
) -> CheckResult:
    """:func:`statechan.checker.check` with each breadth-first level a Spark job (on ``spark``, or
    a session started on ``master``): the same states, transitions, coverage, verdict and shortest
    counterexample as the compact search. ``checkpoint``: the run's folder, kept (and resumed
    from, with ``resume``); else a temporary one. ``partitions``: how the states are spread (by
    default twice the session's task slots). ``liveness``: check on the driver that every state
    can settle (it holds the graph's edges, as the compact search does). ``small_level``: levels of
    at most this many states run in one task (:func:`_small_levels`). ``shared_visited``: up to
    this many states in all, every expanding task reads the whole visited set (8 bytes a state);
    past it, each partition keeps its own and answers the others' questions."""
    from statechan.checker import CheckResult, Engine, _after_search, _model_fails, _por_applies
    from statechan.cluster.config import VARIANTS
    from statechan.invariants.catalogue import simulation_ids

    bounds = bounds if bounds is not None else Bounds()
    if isinstance(variant, str) and variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; choose from {', '.join(VARIANTS)}")
    if resume and checkpoint is None:
        raise ValueError("resuming needs the run's folder (checkpoint)")
    if partitions is not None and partitions < 1:
        raise ValueError(f"partitions must be at least 1, not {partitions}")
    if checkpoint is not None and not resume and (checkpoint / CHECKPOINT).exists():
        raise CheckpointMismatch(f"{checkpoint} holds a run already: resume it, or give another folder")
    ids = list(invariants) if invariants is not None else simulation_ids()
    por = por and _por_applies(bounds, store)
    result = CheckResult(bounds, store, variant, por=por, engine=Engine.compact)
    if vacuity and _model_fails(result):
        return result
    session, owned = (spark, False) if spark is not None else start_spark(master, note=note)
    if spark is not None:
        ship_code(session, note)
    folder, temporary = run_folder(checkpoint, spill_dir)
    try:
        spark_search(
            result,
            (bounds, store, variant, symmetry, ids, por),
            session,
            folder=folder,
            resume=resume,
            partitions=partitions,
            max_states=max_states,
            max_seconds=max_seconds,
            liveness=liveness,
            on_level=on_level,
            note=note,
            small_level=small_level,
            shared_visited=shared_visited,
        )
    finally:
        if temporary:
            shutil.rmtree(folder, ignore_errors=True)
        if owned:
            session.stop()
    return _after_search(
        result,
        bounds,
        store,
        variant,
        symmetry,
        ids,
        max_states,
        max_seconds,
        None,
        vacuity,
        False,
        False,
        por,
        Engine.compact,
        None,
    )
