"""The compact search on several cores: this process and forked workers each expand part of every
level, and this process merges the expansions in the order one process would take them.

The workers are forked when a level first holds :data:`HANDOVER` states (the levels before are
expanded in this process alone): with ``count`` processes in all, each (this one included) takes
every ``count``-th state of that level, a worker from the memory it shares with this process at
the fork, with the keys of every state found so far.

What crosses between processes is small: a worker sends each expansion with its steps' keys,
verdicts and coverage, never the successor states; the merge answers with the states it kept (by
parent and position) and where each goes next. A kept state stays in the process that made it —
unless that process holds more than its share of the next level, when it writes the excess to a
file a lighter one reads (states pickled, in chunks, as the levels on disk are). So a state is
pickled only to even the load, and the search is the one :func:`~statechan.checker.compact.search`
makes in one process: the same states, in the same order, with the same verdict and counterexample.

This process expands its own share between merging the others' expansions: whenever the merge
waits for a worker that has nothing to send yet, it expands its next state instead of idling, and
it empties the workers' pipes every few of its own expansions so that no worker waits long on a full
pipe (up to :data:`AHEAD` expansions a worker: what is held here stays bounded). Its share is
smaller, since the merge is its work too: each level's shares are set from how fast each process
expanded its states in the level before and how long the merge took (:func:`share_out`; the clock
decides only where a state is expanded, never what is found).

The visited set (64-bit keys) and the parent links stay in this process: at 16 to 40 bytes a
state they are not what limits a machine, and one table answers every question the merge asks in
order (new or known, and the reduction's cycle proviso) without a round trip per step."""

from __future__ import annotations

import contextlib
import heapq
import math
import multiprocessing
import shutil
import time
from array import array
from collections import Counter, deque
from collections.abc import Callable, Generator, Iterator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any

from statechan.checker.frontier import LevelFile, Parts, Source, packed_spent, unpacked_spent
from statechan.checker.table import FingerprintTable, key64

if TYPE_CHECKING:
    from statechan.checker import _Expander, _Expansion, _Step

HANDOVER = 128
"""The size of the first level expanded on several cores. The first levels of a search hold a few
states each: one process expands them before a fork would have paid for itself (at the default
bound, whose levels hold at most 82 states, it never would: forking at 64 states, two processes
took 1.15x the time of one)."""

STREAMED = 16
"""Expansions a worker sends at a time (the merge starts on them while it makes the next)."""

MERGE_WEIGHT = 0.8
"""This process's share of the first level it shares out against a worker's (1): it also merges
every expansion. From then on each level's shares follow the level before (:func:`share_out`)."""

AHEAD = 4_096
"""Expansions of a process this one holds ahead of the merge, at most: its own (made while it waits
for a worker; their successor states are held until the merge keeps or drops them) and each
worker's (read from its pipe; past that the pipe fills and the worker waits)."""

DRAIN_EVERY = 8
"""This process's own expansions between two looks at the workers' pipes (a look is a system
call; a pipe holds a few of a worker's chunks)."""

_Pair = tuple[int, "_Expansion"]


class Workers(Source):
    """This process and ``count - 1`` forked workers, each holding part of every level."""

    merges_reduction = True

    def __init__(
        self,
        expander: _Expander,
        count: int,
        folder: Path,
        keep: int,
        level: LevelFile | Parts,
        known: FingerprintTable,
    ) -> None:
        """Forks ``count - 1`` workers that take over ``level`` (the next level to expand, written in
        this process) with this one, each every ``count``-th state of it, knowing the states of
        ``known`` (every state found so far, this process's visited table); returns once each has
        read its share (``level`` may then go)."""
        context = multiprocessing.get_context("fork")
        self.count = count
        self.table = known
        self.bound = len(known)
        """States of the levels before the one being expanded (their indices are below it)."""
        level.close()  # every item in memory or in the file before a worker reads it
        self.pipes: list[Connection] = []
        self.processes = []
        for w in range(1, count):
            mine, theirs = context.Pipe()
            process = context.Process(
                target=_work,
                args=(theirs, expander, w, count, folder, keep, level, known),
                daemon=True,
                name=f"statechan-search-{w}",
            )
            process.start()
            theirs.close()
            self.pipes.append(mine)
            self.processes.append(process)
        self.share = _Share(expander, 0, folder, keep, self._known)
        try:
            self.share.take(level, count)
            for pipe in self.pipes:
                _answer(pipe)
        except BaseException:  # no search holds these workers yet: they go with the error
            for process in self.processes:
                process.terminate()
                process.join()
            self.share.remove()
            raise
        self.kept: list[list[tuple[int, int, int]]] = [[] for _ in range(count)]
        """For each process, the states it made that the merge kept: (parent, position, index)."""
        self.incoming: list[list[str]] = [[] for _ in range(count)]
        """For each process, the level files others wrote for it, to read with the next level."""
        self.found = array("Q")
        """The keys of the states this level found: every worker learns them (it then checks no state
        the search already holds, as one process does not)."""
        self._busy = False
        """A level is being expanded (a worker may be mid-way: stopping it cannot wait)."""
        self.producer: dict[int, int] = {}
        """The process that expanded each state of the current level."""
        self._ready: list[deque[_Pair]] = [deque() for _ in range(count)]
        """Each process's expansions received (or, for this one, made) and not yet merged."""
        self._open: list[bool] = [False] * count
        """Which processes may still send expansions this level."""
        self._own: Generator[_Pair, None, None] = _nothing()
        self._timed: list[tuple[int, float]] = [(0, 0.0)] * count
        """Each process's expansions this level and the seconds it spent making them."""
        self._waited = 0.0
        """Seconds this process waited on a worker this level, with nothing of its own left to do."""
        self._started = 0.0
        self._queued = level.items
        self._merged = 0

    def _known(self, key: bytes) -> bool:
        """Whether a key is a state of the levels up to the one being expanded (what a worker knows)."""
        index = self.table.get(key64(key))
        return 0 <= index < self.bound

    @property
    def queued(self) -> int:
        return self._queued

    @property
    def waiting(self) -> int:
        return self._queued - self._merged + sum(len(k) for k in self.kept)

    def level(self, depth: int) -> Iterator[tuple[int, _Expansion]]:
        self._merged = 0
        self._busy = True
        self._timed = [(0, 0.0)] * self.count
        self._waited = 0.0
        self._started = time.perf_counter()
        self.bound = len(self.table)
        for w, pipe in enumerate(self.pipes, start=1):
            pipe.send(("expand", depth, self.incoming[w]))
        self._own = self.share.expand(depth, self.incoming[0])
        self.incoming = [[] for _ in range(self.count)]
        self._open = [True] * self.count
        merged = heapq.merge(*(self._stream(w) for w in range(self.count)), key=lambda pair: pair[0])
        for index, expansion in merged:
            self._merged += 1
            yield index, expansion
        self._busy = False

    def _stream(self, w: int) -> Iterator[_Pair]:
        """Process ``w``'s expansions of this level, in the order of the states' indices."""
        ready = self._ready[w]
        while True:
            while not ready:
                if not self._open[w]:
                    return
                self._pull(w)
            index, expansion = ready.popleft()
            self.producer[index] = w
            yield index, expansion

    def _pull(self, w: int) -> None:
        """Wait for more of process ``w``'s expansions: this process's next one is made here; while
        a worker has sent nothing, this process expands its own share ahead (up to :data:`AHEAD`)."""
        if w == 0:
            self._expand_own()
            return
        ready = self._ready[w]
        while not ready and self._open[w]:
            if self._open[0] and len(self._ready[0]) < AHEAD:
                self._expand_own()  # (which looks at the pipes every few expansions)
            else:
                started = time.perf_counter()
                self._receive(w)
                self._waited += time.perf_counter() - started

    def _expand_own(self) -> None:
        started = time.perf_counter()
        pair = next(self._own, None)
        made, seconds = self._timed[0]
        if pair is None:
            self._open[0] = False
            self._timed[0] = (made, seconds + time.perf_counter() - started)
            return
        self._ready[0].append(pair)
        self._timed[0] = (made + 1, seconds + time.perf_counter() - started)
        if self._timed[0][0] % DRAIN_EVERY:  # (its own expansions this level)
            return
        for w, pipe in enumerate(self.pipes, start=1):  # a worker's pipe fills only past AHEAD
            while self._open[w] and len(self._ready[w]) < AHEAD and pipe.poll():
                self._receive(w)

    def _receive(self, w: int) -> None:
        kind, made = _answer(self.pipes[w - 1])
        if kind == "done":
            self._open[w] = False
            self._timed[w] = made  # (its expansions, the seconds it spent on them)
        else:
            self._ready[w].extend(made)

    def keep(self, index: int, step: _Step, target: int, key: int) -> None:
        self.kept[self.producer[index]].append((index, step.position, target))
        self.found.append(key)

    def end_level(self) -> None:
        total = sum(len(k) for k in self.kept)
        merging = time.perf_counter() - self._started - self._waited - self._timed[0][1]
        shares = share_out(total, self._timed, merging / max(1, self._merged))
        # each process keeps what it made up to its share; the excess goes to the one furthest below its own
        counts = [len(k) for k in self.kept]
        moves: list[dict[int, int]] = [{} for _ in range(self.count)]
        for w in range(self.count):
            excess = counts[w] - shares[w]
            if excess <= 0:
                continue
            for target_index in sorted((t for _, _, t in self.kept[w]), reverse=True)[:excess]:
                lightest = min(range(self.count), key=lambda v: counts[v] - shares[v])
                moves[w][target_index] = lightest
                counts[lightest] += 1
                counts[w] -= 1
        found = self.found.tobytes()
        self.found = array("Q")
        for w, pipe in enumerate(self.pipes, start=1):
            pipe.send(("keep", self.kept[w], moves[w], found))
        answers = [self.share.keep(self.kept[0], moves[0])]  # while the workers keep theirs
        answers += [_answer(pipe) for pipe in self.pipes]
        for written, disk in answers:
            self.disk_peak = max(self.disk_peak, disk)
            for destination, path in written:
                self.incoming[destination].append(path)  # read with the next level
        self._queued = total
        self.kept = [[] for _ in range(self.count)]
        self.producer = {}

    def save(self, into: Path) -> list[Path]:
        for w, pipe in enumerate(self.pipes, start=1):
            pipe.send(("save", str(into / f"part-{w}")))
        paths = self.share.save(into / "part-0")  # while the workers save theirs
        for pipe in self.pipes:
            paths += _answer(pipe)
        for w, incoming in enumerate(self.incoming):  # written for process w by the others
            for n, path in enumerate(incoming):
                paths.append(into / f"part-{w}-from-{n}")
                shutil.copyfile(path, paths[-1])
        return paths

    def close(self) -> None:
        self._own.close()  # (its level files are removed below)
        if self._busy:  # stopped mid-level (a violation, a bound): the workers' work is not wanted
            for process in self.processes:
                process.terminate()
        for pipe in self.pipes:
            with contextlib.suppress(BrokenPipeError, OSError):
                pipe.send(("stop",))
        for process in self.processes:
            process.join(timeout=5)
            if process.is_alive():
                process.terminate()
                process.join()
        self.share.remove()


def share_out(total: int, timed: list[tuple[int, float]], merging: float) -> list[int]:
    """How many of ``total`` states each process takes (this one first) so that all finish together:
    ``timed`` gives each one's expansions of the level before and the seconds they took, ``merging``
    this process's seconds of merging a state. Where a process expanded nothing, the fixed weights
    (:data:`MERGE_WEIGHT` against 1) stand in. The shares add up to at least ``total``."""
    if any(made == 0 or seconds <= 0 for made, seconds in timed):
        weights = [MERGE_WEIGHT] + [1.0] * (len(timed) - 1)
        return [math.ceil(total * weight / sum(weights)) for weight in weights]
    rates = [made / seconds for made, seconds in timed]
    merge = merging * total  # this process's merge of the whole next level
    together = (total + merge * rates[0]) / sum(rates)  # the seconds each process then works
    own = min(total, max(0.0, (together - merge) * rates[0]))
    rest = (total - own) / sum(rates[1:])
    return [math.ceil(own)] + [math.ceil(rest * rate) for rate in rates[1:]]


def _nothing() -> Generator[_Pair, None, None]:
    """No expansions (this process's share before the first level)."""
    yield from ()


class _Undecided(Exception):
    """The reduction's proviso depends on what other processes found this level."""


class WorkerFailed(RuntimeError):
    """A worker process raised: the search cannot go on without its part of the level."""


class _Share:
    """One process's part of each level: the states it holds, expanded when asked, and the states
    it made that the merge kept, held for the next level (or written for another process)."""

    def __init__(self, expander: _Expander, me: int, folder: Path, keep: int, known: Callable[[bytes], bool]) -> None:
        """``known``: whether a key is a state of the levels up to the one being expanded."""
        self.expander, self.me, self.folder, self.keep_held, self.known = expander, me, folder, keep, known
        self.budget_kinds = list(expander.budget)
        self.holding: list[LevelFile] = []
        self.made = LevelFile(folder / f"w{me}-made", keep, self.pack)
        self.depth = 0

    def pack(self, item: tuple[Any, ...]) -> tuple[Any, ...]:
        """An item as it goes to disk: budgets spent as a tuple, no observation."""
        index, state, spent, _ = item[:4]
        return (index, state, packed_spent(spent, self.budget_kinds), None, *item[4:])

    def _earlier(self, key: bytes) -> int | None:
        """The depth of a state met again in an expansion: one of the levels before, if known; else
        it was first met in this expansion, and whether another process met it this level first
        (so it is one level deeper, and the proviso holds) only the merge can tell."""
        if self.known(key):
            return -1
        raise _Undecided

    def take(self, level: LevelFile | Parts, count: int) -> None:
        """Every ``count``-th state of ``level`` from the ``me``-th on."""
        share = LevelFile(self.folder / f"w{self.me}-start", self.keep_held, self.pack)
        for n, item in enumerate(level.read()):
            if n % count == self.me:
                share.append(item)
        self.holding = [share]

    def expand(self, depth: int, incoming: list[str]) -> Generator[_Pair, None, None]:
        """Each state held, expanded in the order of their indices (with those other processes
        wrote for this one), as one process expands it, reduction included: the levels before
        decide the reduction's proviso, and where they do not the state is expanded fully with its
        ample candidates flagged for the merge."""
        expander = self.expander
        self.depth = depth
        self.holding += [LevelFile.written(Path(path)) for path in incoming]
        self.made = LevelFile(self.folder / f"w{self.me}-made-{depth}", self.keep_held, self.pack)
        streams = [file.read() for file in self.holding]
        for index, state, spent, observed in heapq.merge(*streams, key=lambda item: item[0]):
            item = (state, unpacked_spent(spent, self.budget_kinds), observed)
            # what the expander counts of its own (reduced states, the reduction's blockers) is the
            # merge's in the search's process: an expansion here reports its share with itself
            counted = expander.blockers, expander.reduced
            expander.blockers = Counter()
            try:
                expansion = expander.expand(item, depth, self.known, None, set(), depth_of=self._earlier)
            except _Undecided:
                expander.blockers = Counter()
                expansion = expander.expand(item, depth, self.known, None, set(), exact=False)
                expansion.undecided = True
            expansion.blockers = expander.blockers
            expander.blockers, expander.reduced = counted
            for step in expansion.steps:
                if step.state is not None:
                    self.made.append((index, step.state, step.spent, step.obs, step.position))
                step.state, step.spent, step.obs = None, None, None
            yield index, expansion
        for file in self.holding:
            file.remove()
        self.holding = []

    def keep(self, kept: list[tuple[int, int, int]], moves: dict[int, int]) -> tuple[list[tuple[int, str]], int]:
        """Hold the states the merge kept (``kept``: parent, position, index) for the next level,
        but write those ``moves`` sends elsewhere to a file for their process; the files written
        (process, path) and the bytes on disk."""
        wanted = {(parent, position): target for parent, position, target in kept}
        mine = LevelFile(self.folder / f"w{self.me}-level-{self.depth + 1}", self.keep_held, self.pack)
        sent: dict[int, LevelFile] = {}
        for parent, state, spent, observed, position in self.made.read():
            target = wanted.get((parent, position))
            if target is None:
                continue
            destination = moves.get(target, self.me)
            if destination == self.me:
                mine.append((target, state, spent, observed))
                continue
            if destination not in sent:
                path = self.folder / f"w{self.me}-to-{destination}-{self.depth + 1}"
                sent[destination] = LevelFile(path, 0, self.pack)
            sent[destination].append((target, state, spent, None))
        disk = self.made.bytes + mine.bytes + sum(f.bytes for f in sent.values())
        self.made.remove()
        mine.close()
        for file in sent.values():
            file.close()
        self.holding = [mine]
        return [(d, str(f.path)) for d, f in sent.items()], disk

    def save(self, path: Path) -> list[Path]:
        """Copy the states held for the next level to level files named after ``path``."""
        paths = [path.with_name(f"{path.name}-{n}") for n in range(len(self.holding))]
        for file, copy in zip(self.holding, paths, strict=True):
            file.copy_to(copy)
        return paths

    def remove(self) -> None:
        for file in [*self.holding, self.made]:
            file.remove()


def _answer(pipe: Connection) -> Any:
    """A worker's answer, or :class:`WorkerFailed` with its traceback."""
    try:
        answer = pipe.recv()
    except EOFError as exc:
        raise WorkerFailed("a search worker ended without answering") from exc
    if isinstance(answer, tuple) and answer and answer[0] == "failed":
        raise WorkerFailed(f"a search worker failed:\n{answer[1]}")
    return answer


def _work(pipe: Connection, *args: Any) -> None:
    """A worker: holds its part of each level, expands it when asked, keeps what the merge kept
    (:func:`_serve`'s arguments after the pipe)."""
    import traceback

    try:
        _serve(pipe, *args)
    except Exception:  # reported to the search, which stops with it
        pipe.send(("failed", traceback.format_exc()))


def _serve(
    pipe: Connection,
    expander: _Expander,
    me: int,
    count: int,
    folder: Path,
    keep: int,
    level: LevelFile | Parts,
    confirmed: FingerprintTable,
) -> None:
    """``confirmed``: the keys of every state the search holds from earlier levels (this process's
    copy of the search's table at the fork, then what each level found)."""
    share = _Share(expander, me, folder, keep, lambda key: key64(key) in confirmed)
    share.take(level, count)
    pipe.send(None)  # read: the search may remove the level's file
    while True:
        command = pipe.recv()
        if command[0] == "stop":
            share.remove()
            return
        if command[0] == "expand":
            out: list[_Pair] = []
            made, seconds = 0, 0.0
            expansions = share.expand(command[1], command[2])
            while True:
                started = time.perf_counter()  # the expansions' own time, not the sends'
                pair = next(expansions, None)
                seconds += time.perf_counter() - started
                if pair is None:
                    break
                made += 1
                out.append(pair)
                if len(out) >= STREAMED:
                    pipe.send(("chunk", out))
                    out = []
            pipe.send(("chunk", out))
            pipe.send(("done", (made, seconds)))
        elif command[0] == "save":
            pipe.send(share.save(Path(command[1])))
        elif command[0] == "keep":
            for key in array("Q", command[3]):
                confirmed.add(key, 0)
            pipe.send(share.keep(command[1], command[2]))
