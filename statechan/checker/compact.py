"""The compact breadth-first search: memory that does not grow with the size of a state.

What the in-memory search keeps as Python objects per state (a node with its parent, action,
depth and successors; a dict from fingerprint to node), this search keeps in flat arrays:

- the visited set: 64-bit fingerprints (the state's key — fingerprint and budgets left — folded
  by :func:`~statechan.checker.table.key64`) in an open-addressing table, 16 bytes a slot;
- for each state, by its index (the order the search found it): its parent's index, the
  position of the step that found it in the parent's expansion, and three flags (settled,
  expanded, timers cut) — 13 bytes;
- the transitions, as each state's first edge and the successors' indices (4 bytes an edge), for
  the liveness check ("every state can settle") after the search;
- each breadth-first level's states on disk (:class:`~statechan.checker.frontier.LevelFile`),
  read back a chunk at a time when the level is expanded.

A counterexample is rebuilt by stepping again from the initial state along the recorded
positions (:meth:`statechan.checker._Expander.branch`), each state checked against its
fingerprint. States get their indices in the order the in-memory search gives its nodes, and a
step's position names the very step that search records, so both report the same states,
transitions, verdict and shortest counterexample (``tests/test_search_compact.py``)."""

from __future__ import annotations

import bisect
import gc
import itertools
import shutil
import tempfile
import time
from array import array
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from statechan.checker.frontier import LevelFile, Parts, Source, packed_spent, unpacked_spent
from statechan.checker.table import FingerprintTable, key64
from statechan.cluster.actions import Action
from statechan.cluster.state import ClusterState
from statechan.collector import fewer
from statechan.kernel import interpreted
from statechan.observation import Observation

if TYPE_CHECKING:
    from statechan.checker import CheckResult, Progress, Visitor, _Expander, _Expansion, _Step

SETTLED, EXPANDED, TIMERS_CUT = 1, 2, 4
"""A state's flags."""


@dataclass(frozen=True)
class Level:
    """One breadth-first level, reported when every state of it is known."""

    depth: int
    states: int
    """States at this depth."""
    total: int
    """States known so far (this level included)."""
    growth: float
    """This level's states over the previous level's (0 for the first)."""
    projected: int | None
    """The total the search would reach if the growth factor kept falling as it has over the last
    levels (None while it is not falling: no end in sight yet)."""
    seconds: float
    resident_mb: float
    disk_mb: float


LevelReport = Callable[[Level], None]


def projected_total(levels: Sequence[int]) -> int | None:
    """The states a search will have found, extrapolating its levels: the growth factor from level
    to level, falling by the average fall over the last three levels, until the levels shrink to
    nothing (a bell in log scale: the no-fault bounds' levels rise, peak and shrink so). None where
    the factor is not falling (no end can be projected yet); the total so far when the last
    level is empty."""
    total = sum(levels)
    if not levels or levels[-1] == 0:
        return total
    ratios = [b / a for a, b in itertools.pairwise(levels) if a > 0]
    if len(ratios) < 4:
        return None
    recent = ratios[-4:]
    fall = (recent[0] - recent[-1]) / (len(recent) - 1)
    if fall <= 0.005:
        return None
    size, ratio = float(levels[-1]), ratios[-1]
    for _ in range(10_000):
        ratio -= fall
        if ratio <= 0:
            break
        size *= ratio
        if size < 1:
            break
        total += int(size)
    return total


def peak_resident_mb() -> float:
    """The process's peak resident memory so far (Linux reports kilobytes, macOS bytes)."""
    import resource
    import sys

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024


class _Stop(Exception):
    """The search ends (a violation, or a bound)."""


def search(
    result: CheckResult,
    expander: _Expander,
    ids: list[str],
    *,
    max_states: int,
    max_seconds: float | None,
    max_memory_mb: int | None,
    visitor: Visitor | None,
    progress: Progress | None,
    progress_every_s: float,
    on_level: LevelReport | None = None,
    spill_dir: Path | None = None,
    keep: int | None = None,
    workers: int = 1,
    checkpoint: Path | None = None,
    resume: bool = False,
    signature: tuple[Any, ...] = (),
    checkpoint_every_s: float = 600.0,
    note: Callable[[str], None] | None = None,
) -> None:
    """Explore ``expander``'s bounded space breadth first into ``result`` (counts, coverage,
    verdict, counterexample, liveness), keeping only fingerprints and flat arrays in memory, and
    each level's states past the first ``keep`` (:data:`~statechan.checker.frontier.KEEP`) on disk.
    With ``workers`` > 1 the states of each level from the first of at least
    :data:`~statechan.checker.parallel.HANDOVER` states on are expanded in that many processes
    (:class:`~statechan.checker.parallel.Workers`) and merged here in the order one process takes them.

    With ``checkpoint`` (a folder), a level's end is saved there when ``checkpoint_every_s`` have
    passed since the last (:mod:`~statechan.checker.checkpoint`; ``signature`` names the run), and
    ``resume`` goes on from the newest one saved (``max_seconds`` counts the time before it too);
    ``note`` is told of each."""
    from statechan.checker import FingerprintCollision, _counted, frontier, resident_mb, settled
    from statechan.checker import checkpoint as points
    from statechan.invariants.catalogue import check as check_invariants

    if checkpoint is not None and not resume:
        points.fresh(checkpoint)
    if checkpoint is not None and note is not None and (problem := points.repeatable_hashing()) is not None:
        note(
            f"only this process can resume its checkpoints: {problem} (another process hashes otherwise; "
            f"PYTHONHASHSEED={points.SEED} and setarch -R make it repeatable, as statechan check does)"
        )

    keep = frontier.KEEP if keep is None else keep
    bounds = expander.bounds
    started = time.perf_counter()
    last_report = started
    root = expander.root
    folded: dict[int, bytes] | None = {} if expander.values is not None else None
    table = FingerprintTable()
    parents = array("q")
    positions = array("i")
    flags = array("B")
    first_edge = array("q")
    """Each expanded state's first edge in ``edges`` (the edges of state i run to first_edge[i+1])."""
    edges = array("I")
    level_starts = [0]
    """The index of each level's first state."""

    def fold(key: bytes) -> int:
        k = key64(key)
        if folded is not None and folded.setdefault(k, key) != key:
            raise FingerprintCollision(f"two different keys fold to the 64-bit fingerprint {k:016x}")
        return k

    def depth_of(key: bytes) -> int | None:
        index = table.get(fold(key))
        return None if index < 0 else bisect.bisect_right(level_starts, index) - 1

    def known(key: bytes) -> bool:
        return table.get(fold(key)) >= 0

    def rebuild(index: int) -> tuple[list[Action], list[int], ClusterState, Counter[str]]:
        """The run from the initial state to state ``index``, stepped again along the recorded
        positions (each state checked against the table: the run is the one the search took)."""
        chain: list[int] = []
        while index > 0:
            chain.append(index)
            index = parents[index]
        state, spent = root, Counter[str]()
        actions: list[Action] = []
        picks: list[int] = []
        for at in reversed(chain):
            action, made, state, spent = expander.branch(state, spent, positions[at])
            if table.get(fold(expander.key_of(state, spent))) != at:
                raise RuntimeError(f"rebuilding the run to state {at}: step {action.describe()} led elsewhere")
            actions.append(action)
            picks.extend(made)
        return actions, picks, state, spent

    def fail(index: int, broken: Sequence[object], step: tuple[Action, tuple[int, ...]] | None = None) -> None:
        result.violation = "; ".join(str(v) for v in broken[:3])
        path, picks, _, _ = rebuild(index)
        if step is not None:
            path, picks = [*path, step[0]], [*picks, *step[1]]
        result.path, result.picks = path, picks

    def reduce_merged(expansion: _Expansion, depth: int) -> bool:
        """The reduction applied where a worker's expansion is merged, as one process applies it
        while expanding: the first delivery the worker found ample whose successor is new or one
        level deeper is the state's only successor, unless a step before it ends the search."""
        fresh: set[int] = set()
        for step in expansion.steps:
            if step.refused:
                continue
            k = fold(step.key)
            target = table.get(k)
            new = target < 0 and k not in fresh
            if step.broken and (new or step.own_checks):
                return False  # the search stops at this step (one process stops before reducing)
            if step.ample:
                if new or target >= level_starts[-1]:
                    expansion.steps = [step]
                    return True
                if expansion.blockers is not None:
                    expansion.blockers["proviso"] += 1
            if new:
                fresh.add(k)
        return False

    if spill_dir is not None:
        Path(spill_dir).mkdir(parents=True, exist_ok=True)  # a folder named on the command line may be new
    folder = Path(tempfile.mkdtemp(prefix="statechan-search-", dir=spill_dir))
    disk_peak = 0
    sources: list[Source] = []
    collector = fewer()  # statechan.collector: put back when the search ends
    resumes = 0
    last_saved = started

    def save_point(depth: int, source: Source) -> None:
        point = points.Saved(
            signature=signature,
            hashing=points.hashing_probe(),
            depth=depth,
            level_starts=list(level_starts),
            slots=0,  # (the table's and the parts' are filled in as they are written)
            size=0,
            queued=source.queued,
            parts=[],
            transitions=result.transitions,
            refused=result.refused,
            reached=result.depth,
            beyond="" if result.complete else result.stopped,
            coverage=result.coverage,
            reduced=expander.reduced,
            blockers=expander.blockers,
            seconds=time.perf_counter() - started,
            disk_peak=max(disk_peak, source.disk_peak),
            resumed=resumes,
        )
        arrays = dict(zip(points.ARRAYS, (parents, positions, flags, first_edge, edges), strict=True))
        assert checkpoint is not None
        try:
            points.save(checkpoint, point, table, arrays, source.save)
        except OSError as exc:  # (a full disk, say): the search goes on, the last checkpoint stands
            if note is not None:
                note(f"no checkpoint at depth {depth}: {exc}")
            return
        if note is not None:
            note(f"checkpoint at depth {depth}: {len(parents):,} states, in {checkpoint}")

    try:
        # with workers, the first levels are expanded here all the same: a level of a few hundred
        # states is over before forked processes would pay for their start and their round trips;
        # the workers take over the first level of at least parallel.HANDOVER states
        local = Local(expander, folder, keep, known, depth_of, visitor)
        source: Source = local
        sources.append(source)
        if resume:
            assert checkpoint is not None
            into, saved = points.load(checkpoint, signature)
            table = points.table_of(into, saved)
            parents, positions, flags, first_edge, edges = points.arrays_of(into, saved).values()
            level_starts[:] = saved.level_starts
            result.transitions, result.refused, result.depth = saved.transitions, saved.refused, saved.reached
            result.coverage, expander.reduced, expander.blockers = saved.coverage, saved.reduced, saved.blockers
            if saved.beyond:
                result.complete, result.stopped = False, saved.beyond
            started -= saved.seconds
            last_saved = started + saved.seconds
            disk_peak, resumes, depth = saved.disk_peak, saved.resumed + 1, saved.depth
            local.following = Parts([into / name for name in saved.parts], saved.queued)
            _same_keys(local.following, expander, fold, table, checkpoint)
            if note is not None:
                note(f"resuming from {checkpoint}: {len(parents):,} states, depth {depth}, {saved.queued:,} waiting")
        else:
            if visitor is not None:
                visitor(root, dict(expander.budget))
            root_obs = Observation(root, expander.setup)
            table.add(fold(expander.key_of(root, Counter())), 0)
            parents.append(-1)
            positions.append(-1)
            flags.append(SETTLED if settled(root_obs, expander.agree) else 0)
            broken_at_start = check_invariants(root_obs, ids)
            if broken_at_start:
                fail(0, broken_at_start)
                raise _Stop
            source.start((0, root, Counter[str](), root_obs))
            depth = 0
        while source.queued:
            if workers > 1 and source is local:
                from statechan.checker import parallel

                if source.queued >= parallel.HANDOVER:
                    source = parallel.Workers(expander, workers, folder, keep, local.following, table)
                    local.close()  # the workers have read their shares of the level
                    sources.append(source)
            level_starts.append(len(parents))  # where the next level's states begin
            for index, expansion in source.level(depth):
                while len(first_edge) < index:
                    first_edge.append(len(edges))  # states not expanded (the depth bound): no edges
                first_edge.append(len(edges))
                if expansion.beyond:
                    result.complete = False
                    result.stopped = result.stopped or f"depth bound {bounds.depth}"
                    continue
                flags[index] |= EXPANDED | (TIMERS_CUT if expansion.timers_cut else 0)
                if source.merges_reduction and result.por:
                    if expansion.reduced or (expansion.undecided and reduce_merged(expansion, depth)):
                        expander.reduced += 1
                    if expansion.blockers:
                        expander.blockers.update(expansion.blockers)
                for step in expansion.steps:
                    if not _counted(result, step):
                        continue
                    k = fold(step.key)
                    target = table.get(k)
                    if target < 0:
                        target = len(parents)
                        table.add(k, target)
                        parents.append(index)
                        positions.append(step.position)
                        flags.append(SETTLED if step.settled else 0)
                        result.depth = max(result.depth, depth + 1)
                        edges.append(target)
                        if step.broken:
                            fail(target, step.broken)
                            raise _Stop
                        source.keep(index, step, target, k)
                        continue
                    edges.append(target)
                    if step.own_checks and step.broken:
                        fail(index, step.broken, (step.action, step.picks))
                        raise _Stop
                if len(parents) >= max_states:
                    result.complete = False
                    result.stopped = f"state bound {max_states:,}"
                    raise _Stop
                if max_memory_mb is not None and index % 256 == 0 and resident_mb() > max_memory_mb:
                    result.complete = False
                    result.stopped = f"memory bound {max_memory_mb:,} MiB"
                    raise _Stop
                now = time.perf_counter()
                if max_seconds is not None and now - started > max_seconds:
                    result.complete = False
                    result.stopped = f"time bound {max_seconds:g} s"
                    raise _Stop
                if progress is not None and now - last_report >= progress_every_s:
                    progress(len(parents), source.waiting, depth, now - started)
                    last_report = now
            source.end_level()
            depth += 1
            if checkpoint is not None and source.queued and time.perf_counter() - last_saved >= checkpoint_every_s:
                save_point(depth, source)
                last_saved = time.perf_counter()
            if on_level is not None and source.queued:
                sizes = _sizes(level_starts, len(parents))
                growth = sizes[-1] / sizes[-2] if len(sizes) > 1 and sizes[-2] else 0.0
                on_level(
                    Level(
                        depth,
                        sizes[-1],
                        len(parents),
                        growth,
                        projected_total(sizes),
                        time.perf_counter() - started,
                        resident_mb(),
                        source.disk_peak / 2**20,
                    )
                )
    except _Stop:
        pass
    finally:
        gc.set_threshold(*collector)
        for source in sources:
            disk_peak = max(disk_peak, source.disk_peak)
            source.close()
        shutil.rmtree(folder, ignore_errors=True)
        result.states = len(parents)
        result.seconds = time.perf_counter() - started
        result.reduced, result.por_blockers = expander.reduced, expander.blockers
        result.levels = _sizes(level_starts, len(parents))
        result.disk_mb = disk_peak / 2**20
        result.memory_mb = (
            table.nbytes / 2**20
            + sum(a.itemsize * len(a) for a in (parents, positions, flags, first_edge, edges)) / 2**20
        )
    if result.violation is None and result.complete:
        while len(first_edge) <= len(parents):
            first_edge.append(len(edges))
        _liveness(result, flags, first_edge, edges, rebuild, expander)
    result.peak_memory_mb = peak_resident_mb()


@interpreted
class Local(Source):
    """Expansions made in this process, from the level's states on disk (or held)."""

    def __init__(
        self,
        expander: _Expander,
        folder: Path,
        keep: int,
        known: Callable[[bytes], bool],
        depth_of: Callable[[bytes], int | None],
        visitor: Visitor | None,
    ) -> None:
        self.expander, self.folder, self.keep_held = expander, folder, keep
        self.known, self.depth_of, self.visitor = known, depth_of, visitor
        self.budget_kinds = list(expander.budget)
        self.appending = LevelFile(folder / "level-0", keep, self.pack)
        """The level file the states found go to (the next level's)."""
        self.current: LevelFile | Parts = self.appending
        self.following: LevelFile | Parts = self.appending
        """The next level: what is appended, or a resumed checkpoint's states."""
        self.done = 0

    def pack(self, item: tuple[Any, ...]) -> tuple[Any, ...]:
        """A queued state as it goes to disk: its budgets spent as a tuple, no observation."""
        index, state, spent, _ = item
        return index, state, packed_spent(spent, self.budget_kinds), None

    @property
    def queued(self) -> int:
        return self.following.items

    @property
    def waiting(self) -> int:
        return self.current.items - self.done + self.following.items

    def start(self, item: tuple[Any, ...]) -> None:
        self.appending.append(item)

    def level(self, depth: int) -> Iterator[tuple[int, _Expansion]]:
        self.current = self.following
        self.following = self.appending = LevelFile(self.folder / f"level-{depth + 1}", self.keep_held, self.pack)
        self.done = 0
        for index, state, spent, observed in self.current.read():
            self.done += 1
            yield (
                index,
                self.expander.expand(
                    (state, unpacked_spent(spent, self.budget_kinds), observed),
                    depth,
                    self.known,
                    self.visitor,
                    set(),
                    depth_of=self.depth_of,
                ),
            )

    def keep(self, index: int, step: _Step, target: int, key: int) -> None:
        assert step.state is not None
        assert step.spent is not None
        self.appending.append((target, step.state, step.spent, step.obs))
        self.disk_peak = max(self.disk_peak, self.current.bytes + self.appending.bytes)

    def end_level(self) -> None:
        self.current.remove()
        self.following.close()
        self.disk_peak = max(self.disk_peak, self.following.bytes)

    def save(self, into: Path) -> list[Path]:
        self.appending.copy_to(into / "part-0")
        return [into / "part-0"]

    def close(self) -> None:
        self.current.remove()
        self.following.remove()


RESUME_CHECKED = 64
"""Saved states a resumed search fingerprints again before it goes on (each must be in the table
at its index)."""


def _same_keys(
    level: Parts, expander: _Expander, fold: Callable[[bytes], int], table: FingerprintTable, folder: Path
) -> None:
    """Refuse a checkpoint whose states this process fingerprints otherwise (another model, build or
    hash seed): the initial state and the first saved states must be where the table has them."""
    from statechan.checker.checkpoint import CheckpointError

    kinds = list(expander.budget)
    checked = [(0, expander.root, Counter[str]())]
    for index, state, spent, _ in itertools.islice(level.read(), RESUME_CHECKED):
        checked.append((index, state, unpacked_spent(spent, kinds)))
    for index, state, spent in checked:
        if table.get(fold(expander.key_of(state, spent))) != index:
            raise CheckpointError(
                f"{folder}: state {index:,} of the checkpoint fingerprints otherwise in this process (a checkpoint "
                "of another model or build of statechan, or another PYTHONHASHSEED): it cannot be resumed here"
            )


def _sizes(starts: list[int], end: int) -> list[int]:
    """The states in each level, from where each begins (an empty last level left out)."""
    sizes = [b - a for a, b in zip(starts, [*starts[1:], end], strict=True)]
    while len(sizes) > 1 and sizes[-1] == 0:
        sizes.pop()
    return sizes


def _liveness(
    result: CheckResult,
    flags: array[int],
    first_edge: array[int],
    edges: array[int],
    rebuild: Callable[[int], tuple[list[Action], list[int], ClusterState, Counter[str]]],
    expander: _Expander,
) -> None:
    """The in-memory search's liveness check on the flat arrays: every state must reach a
    settled one (or be cut off by the bound); else the shortest path to the first that cannot,
    then its first successors until one repeats (a lasso) or nothing can happen."""
    from statechan.checker import _lasso

    n = len(flags)
    # predecessors, as a reversed adjacency in two flat arrays (counting sort by target)
    starts = array("q", bytes(8 * (n + 1)))
    for target in edges:
        starts[target + 1] += 1
    for i in range(n):
        starts[i + 1] += starts[i]
    fill = array("q", starts)
    preds = array("I", bytes(4 * len(edges)))
    for source in range(n):
        for e in range(first_edge[source], first_edge[source + 1]):
            target = edges[e]
            preds[fill[target]] = source
            fill[target] += 1
    del fill
    good = bytearray(1 if (f & SETTLED) or not (f & EXPANDED) or (f & TIMERS_CUT) else 0 for f in flags)
    todo = deque(i for i in range(n) if good[i])
    while todo:
        j = todo.popleft()
        for p in range(starts[j], starts[j + 1]):
            i = preds[p]
            if not good[i]:
                good[i] = 1
                todo.append(i)
    stuck = good.count(0)
    if not stuck:
        return
    first = good.index(0)  # indices are in breadth-first order: the first is one of the shallowest
    path, picks, state, spent = rebuild(first)
    at = {first: (state, spent)}

    def first_successor(current: int) -> tuple[int, Action, Sequence[int]] | None:
        if first_edge[current] == first_edge[current + 1]:
            return None
        nxt = edges[first_edge[current]]
        # the first edge is the first step the expansion kept: the first step that leads there
        action, made, child, child_spent = _step_to(expander, *at[current], nxt, rebuild)
        at[nxt] = (child, child_spent)
        return nxt, action, made

    _lasso(result, stuck, first, path, picks, first_successor)


def _step_to(
    expander: _Expander,
    state: ClusterState,
    spent: Counter[str],
    target: int,
    rebuild: Callable[[int], tuple[list[Action], list[int], ClusterState, Counter[str]]],
) -> tuple[Action, tuple[int, ...], ClusterState, Counter[str]]:
    """The first step from ``state`` (in expansion order) that leads to state ``target``."""
    _, _, wanted, wanted_spent = rebuild(target)
    goal = expander.key_of(wanted, wanted_spent)
    for action, made, child, child_spent in expander.branches(state, spent):
        if expander.key_of(child, child_spent) == goal:
            return action, made, child, child_spent
    raise RuntimeError(f"no step leads to state {target}")
