"""The compact search on several cores: worker processes expand the states they hold, and the
search merges their expansions in this process in the order one process would take them.

The workers are forked when a level first holds :data:`HANDOVER` states (the levels before are
expanded in this process): each takes every other state of that level from the memory it shares
with this process at the fork, and the keys of every state found so far with it.

What crosses between processes is small: a worker sends each expansion with its steps' keys,
verdicts and coverage, never the successor states; the merge answers with the states it kept (by
parent and position) and where each goes next. A kept state stays in the worker that made it —
unless that worker holds more than its share of the next level, when it writes the excess to a
file the lighter worker reads (states pickled, in chunks, as the levels on disk are). So a state is
pickled only to even the load, and the search is the one :func:`~statechan.checker.compact.search`
makes in one process: the same states, in the same order, with the same verdict and counterexample.

The visited set (64-bit keys) and the parent links stay in this process: at 16 to 40 bytes a
state they are not what limits a machine, and one table answers every question the merge asks in
order (new or known, and the reduction's cycle proviso) without a round trip per step."""

from __future__ import annotations

import contextlib
import heapq
import multiprocessing
from array import array
from collections import Counter
from collections.abc import Iterator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any

from statechan.checker.frontier import LevelFile, Source
from statechan.checker.table import FingerprintTable, key64

if TYPE_CHECKING:
    from statechan.checker import _Expander, _Expansion, _Step

HANDOVER = 1_000
"""The size of the first level the workers expand. A level of a few hundred states is expanded in
this process in less time than starting the workers and the round trips of a level take."""

STREAMED = 32
"""Expansions a worker sends at a time (the merge starts on them while it makes the next)."""

_Item = tuple[int, Any, Any, Any]
"""A queued state: its index, the state, its budgets spent, its observation (or None)."""


class Workers(Source):
    """``count`` forked worker processes, each holding part of every level."""

    merges_reduction = True

    def __init__(
        self, expander: _Expander, count: int, folder: Path, keep: int, level: LevelFile, known: FingerprintTable
    ) -> None:
        """Forks ``count`` workers that take over ``level`` (the next level to expand, written in
        this process), each every ``count``-th state of it, knowing the states of ``known`` (every
        state found so far); returns once each has read its share (``level`` may then go)."""
        context = multiprocessing.get_context("fork")
        self.count = count
        self.pipes: list[Connection] = []
        self.processes = []
        for w in range(count):
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
        for pipe in self.pipes:
            _answer(pipe)
        self.kept: list[list[tuple[int, int, int]]] = [[] for _ in range(count)]
        """For each worker, the states it made that the merge kept: (parent, position, index)."""
        self.incoming: list[list[str]] = [[] for _ in range(count)]
        """For each worker, the level files other workers wrote for it, to read with the next level."""
        self.found = array("Q")
        """The keys of the states this level found: every worker learns them (it then checks no state
        the search already holds, as one process does not)."""
        self._busy = False
        """A level is being expanded (a worker may be mid-way: stopping it cannot wait)."""
        self.producer: dict[int, int] = {}
        """The worker that expanded each state of the current level."""
        self._queued = level.items
        self._merged = 0

    @property
    def queued(self) -> int:
        return self._queued

    @property
    def waiting(self) -> int:
        return self._queued - self._merged + sum(len(k) for k in self.kept)

    def level(self, depth: int) -> Iterator[tuple[int, _Expansion]]:
        self._merged = 0
        self._busy = True
        for w, pipe in enumerate(self.pipes):
            pipe.send(("expand", depth, self.incoming[w]))
        self.incoming = [[] for _ in range(self.count)]
        # each worker streams its expansions in chunks as it makes them: the merge goes on meanwhile
        merged = heapq.merge(*(self._stream(w) for w in range(self.count)), key=lambda pair: pair[0])
        for index, expansion in merged:
            self._merged += 1
            yield index, expansion
        self._busy = False

    def _stream(self, w: int) -> Iterator[tuple[int, _Expansion]]:
        """Worker ``w``'s expansions of this level, in the order of the states' indices."""
        while True:
            kind, made = _answer(self.pipes[w])
            if kind == "done":
                return
            for index, expansion in made:
                self.producer[index] = w
                yield index, expansion

    def keep(self, index: int, step: _Step, target: int, key: int) -> None:
        self.kept[self.producer[index]].append((index, step.position, target))
        self.found.append(key)

    def end_level(self) -> None:
        total = sum(len(k) for k in self.kept)
        share = -(-total // self.count)
        # each worker keeps what it made up to its share; the excess goes to the lightest worker
        counts = [len(k) for k in self.kept]
        moves: list[dict[int, int]] = [{} for _ in range(self.count)]
        for w in range(self.count):
            excess = counts[w] - share
            if excess <= 0:
                continue
            for target_index in sorted((t for _, _, t in self.kept[w]), reverse=True)[:excess]:
                lightest = min(range(self.count), key=counts.__getitem__)
                moves[w][target_index] = lightest
                counts[lightest] += 1
                counts[w] -= 1
        found = self.found.tobytes()
        self.found = array("Q")
        for w, pipe in enumerate(self.pipes):
            pipe.send(("keep", self.kept[w], moves[w], found))
        for pipe in self.pipes:
            written, disk = _answer(pipe)
            self.disk_peak = max(self.disk_peak, disk)
            for destination, path in written:
                self.incoming[destination].append(path)  # read with the next level
        self._queued = total
        self.kept = [[] for _ in range(self.count)]

    def close(self) -> None:
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


class _Undecided(Exception):
    """The reduction's proviso depends on what other workers found this level."""


class WorkerFailed(RuntimeError):
    """A worker process raised: the search cannot go on without its part of the level."""


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
    level_file: LevelFile,
    confirmed: FingerprintTable,
) -> None:
    """``confirmed``: the keys of every state the search holds from earlier levels (this process's
    copy of the search's table at the fork, then what each level found)."""
    budget_kinds = list(expander.budget)

    def pack(item: tuple[Any, ...]) -> tuple[Any, ...]:
        index, state, spent, _ = item[:4]
        if isinstance(spent, Counter):  # (a state the search's process put on disk has its tuple already)
            spent = tuple(spent.get(k, 0) for k in budget_kinds)
        return (index, state, spent, None, *item[4:])

    def known(key: bytes) -> bool:
        return key64(key) in confirmed

    def earlier(key: bytes) -> int | None:
        """The depth of a state met again in an expansion: one of the levels before, if the worker
        knows it; else it was first met in this expansion, and whether another worker met it this
        level first (so it is one level deeper, and the proviso holds) only the merge can tell."""
        if key64(key) in confirmed:
            return -1
        raise _Undecided

    share = LevelFile(folder / f"w{me}-start", keep, pack)
    for n, item in enumerate(level_file.read()):
        if n % count == me:
            share.append(item)
    holding: list[LevelFile] = [share]
    pipe.send(None)  # read: the search may remove the level's file
    made = LevelFile(folder / f"w{me}-made", keep, pack)
    level = 0
    while True:
        command = pipe.recv()
        if command[0] == "stop":
            for file in [*holding, made]:
                file.remove()
            return
        if command[0] == "expand":
            level = command[1]
            holding += [LevelFile.written(Path(path)) for path in command[2]]
            made = LevelFile(folder / f"w{me}-made-{level}", keep, pack)
            out: list[tuple[int, _Expansion]] = []
            streams = [file.read() for file in holding]
            for index, state, spent, observed in heapq.merge(*streams, key=lambda item: item[0]):
                if not isinstance(spent, Counter):
                    spent = Counter({k: n for k, n in zip(budget_kinds, spent, strict=True) if n})
                expander.blockers = Counter()
                try:
                    # one process's expansion, reduction included: the worker knows every state of
                    # the levels before (the proviso's "known"), and says when that is not enough
                    expansion = expander.expand((state, spent, observed), level, known, None, set(), depth_of=earlier)
                except _Undecided:
                    expander.blockers = Counter()
                    expansion = expander.expand((state, spent, observed), level, known, None, set(), exact=False)
                    expansion.undecided = True
                expansion.blockers = expander.blockers
                for step in expansion.steps:
                    if step.state is not None:
                        made.append((index, step.state, step.spent, None, step.position))
                    step.state, step.spent, step.obs = None, None, None
                out.append((index, expansion))
                if len(out) >= STREAMED:
                    pipe.send(("chunk", out))
                    out = []
            for file in holding:
                file.remove()
            holding = []
            pipe.send(("chunk", out))
            pipe.send(("done", None))
        elif command[0] == "keep":
            kept, moves = command[1], command[2]
            for key in array("Q", command[3]):
                confirmed.add(key, 0)
            wanted = {(parent, position): target for parent, position, target in kept}
            mine = LevelFile(folder / f"w{me}-level-{level + 1}", keep, pack)
            sent: dict[int, LevelFile] = {}
            for parent, state, spent, _, position in made.read():
                target = wanted.get((parent, position))
                if target is None:
                    continue
                if not isinstance(spent, Counter):
                    spent = Counter({k: n for k, n in zip(budget_kinds, spent, strict=True) if n})
                destination = moves.get(target, me)
                if destination == me:
                    mine.append((target, state, spent, None))
                    continue
                if destination not in sent:
                    sent[destination] = LevelFile(folder / f"w{me}-to-{destination}-{level + 1}", 0, pack)
                sent[destination].append((target, state, spent, None))
            disk = made.bytes + mine.bytes + sum(f.bytes for f in sent.values())
            made.remove()
            mine.close()
            for file in sent.values():
                file.close()
            holding = [mine]
            pipe.send(([(d, str(f.path)) for d, f in sent.items()], disk))
