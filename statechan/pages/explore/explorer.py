"""What an explorer server was given — a bound, the saved runs it may open — and what it worked
out from them for the server's life: the walks asked for, the checker's verdict on the bound, its
state graph. Nothing here knows HTTP (:mod:`statechan.pages.explore.app` serves it)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from statechan.bounds import Bounds
from statechan.cluster.config import StoreKind, Variant
from statechan.pages.explore.walk import Start, Walk, begin, extend, follow

if TYPE_CHECKING:
    from statechan.checker import CheckResult

GRAPH_LIMIT = 3_000
"""The largest state graph drawn unless asked for more (``--graph-limit``): a few thousand states
is what a page can lay out and a person can look at."""
GRAPH_LIMIT_MAX = 50_000
"""The most ``--graph-limit`` allows: past it the picture is no help and the page takes minutes."""
COUNTEREXAMPLE_SECONDS = 120.0
"""How long the search for the bound's counterexample may take before the page says it stopped."""
WALKS_KEPT = 512
"""Walks kept (by start and path): a step from a page extends a kept walk instead of replaying it."""


@dataclass(frozen=True)
class Bound:
    """The bound the server explores (``statechan check``'s options) and how its search runs."""

    bounds: Bounds
    store: StoreKind
    variant: str | Variant
    variant_name: str
    invariants: tuple[str, ...]
    symmetry: bool = True
    por: bool = True

    def describe(self) -> str:
        return f"{self.variant_name} on {self.store.value}: {self.bounds.describe()}"

    def command(self) -> str:
        """The ``statechan check`` command for this bound."""
        parts = ["statechan check", *self.bounds.options()]
        if self.variant_name != "current":
            parts += ["--variant", self.variant_name]
        if self.store is not StoreKind.system_topic:
            parts += ["--store", self.store.value]
        return " ".join(parts)


@dataclass
class SavedRun:
    """A run file the server was given: its start (None when it cannot be opened, with why)."""

    number: int
    path: Path
    start: Start | None = None
    error: str | None = None

    @property
    def name(self) -> str:
        return self.path.name


@dataclass
class GraphResult:
    """The bound's state graph (the checker's search with its graph kept), or why it is not drawn."""

    result: CheckResult | None
    refused: str | None = None


@dataclass
class Explorer:
    bound: Bound
    runs: list[SavedRun] = field(default_factory=list)
    graph_limit: int = GRAPH_LIMIT
    lock: threading.RLock = field(default_factory=threading.RLock)
    """One page's work at a time: the model's caches are not shared between threads."""
    _walks: OrderedDict[tuple[str, tuple[str, ...]], Walk] = field(default_factory=OrderedDict)
    _start: Start | None = None
    _counterexample: CheckResult | None = None
    _counterexample_start: Start | None = None
    _graph: GraphResult | None = None

    # -- starts ----------------------------------------------------------------------------------------
    @property
    def start(self) -> Start:
        """The bound's initial state (the model checker's root)."""
        if self._start is None:
            from statechan.checker import checker_config

            bound = self.bound
            config = checker_config(bound.bounds, bound.store, bound.variant).model_copy(update={"trace_views": True})
            self._start = Start(
                "bound", f"the initial state of {bound.describe()}", config, bound.bounds, bound.invariants
            )
        return self._start

    def start_of(self, key: str) -> Start:
        """A start by its key (``bound``, ``counterexample``, ``run-N``); ``KeyError`` if none."""
        if key == "bound":
            return self.start
        if key == "counterexample":
            start = self.counterexample_start()
            if start is None:
                raise KeyError(key)
            return start
        if key.startswith("run-") and key[4:].isdigit():
            number = int(key[4:])
            if number < len(self.runs):
                start = self.open_run(number).start
                if start is not None:
                    return start
        raise KeyError(key)

    def open_run(self, number: int) -> SavedRun:
        """The run, loaded and followed on first use (its file is read once, then kept)."""
        from statechan.cluster.runfile import RunFileError, load_saved_run

        saved = self.runs[number]
        if saved.start is None and saved.error is None:
            try:
                config, actions, note, picks = load_saved_run(saved.path)
            except RunFileError as exc:
                saved.error = str(exc)
                return saved
            config = config.model_copy(update={"trace_views": True})
            start = Start(f"run-{number}", saved.name, config, None, self.bound.invariants, note)
            tokens, problem = follow(start, actions, picks)
            saved.start = Start(start.key, start.title, config, None, start.invariants, note, tuple(tokens), problem)
        return saved

    # -- walks -------------------------------------------------------------------------------------------
    def walk(self, start: Start, tokens: Sequence[str]) -> Walk:
        """The walk along ``tokens`` from ``start`` (``WalkError`` naming a move that cannot be
        taken); from the longest walk kept that it extends."""
        key = (start.key, tuple(tokens))
        known = self._walks.get(key)
        if known is not None:
            self._walks.move_to_end(key)
            return known
        base: Walk | None = None
        for cut in range(len(tokens) - 1, -1, -1):
            base = self._walks.get((start.key, tuple(tokens[:cut])))
            if base is not None:
                break
        if base is None:
            base = Walk(start, [begin(start)])
            self._keep((start.key, ()), base)
        walk = extend(base, tokens[len(base.stops) - 1 :])
        self._keep(key, walk)
        return walk

    def _keep(self, key: tuple[str, tuple[str, ...]], walk: Walk) -> None:
        self._walks[key] = walk
        while len(self._walks) > WALKS_KEPT:
            self._walks.popitem(last=False)

    # -- the checker -------------------------------------------------------------------------------------
    def counterexample(self) -> CheckResult:
        """The model checker's verdict on the bound (searched once, then kept)."""
        if self._counterexample is None:
            graph = self._graph.result if self._graph is not None else None
            if graph is not None and (graph.complete or not graph.ok):
                self._counterexample = graph  # the graph's search decided it already
            else:
                self._counterexample = self._search(max_seconds=COUNTEREXAMPLE_SECONDS)
        return self._counterexample

    def _search(self, **limits: Any) -> CheckResult:
        """The model checker's search of the bound (its verdict on safety and liveness; the
        vacuity guard is ``statechan check``'s business)."""
        from statechan.checker import check

        bound = self.bound
        return check(
            bound.bounds,
            bound.store,
            bound.variant,
            symmetry=bound.symmetry,
            invariants=bound.invariants,
            por=bound.por,
            vacuity=False,
            **limits,
        )

    def counterexample_start(self) -> Start | None:
        """The bound's start with the counterexample's path to follow (None: the search found none)."""
        result = self.counterexample()
        if not result.path and result.violation is None:
            return None
        if self._counterexample_start is None:
            base = self.start
            tokens, problem = follow(base, result.path, result.picks)
            what = result.violation or result.liveness or ""
            self._counterexample_start = Start(
                "counterexample",
                f"the checker's counterexample for {self.bound.describe()}",
                base.config,
                base.bounds,
                base.invariants,
                what,
                tuple(tokens),
                problem,
            )
        return self._counterexample_start

    def graph(self) -> GraphResult:
        """The bound's state graph, searched with its graph kept up to :attr:`graph_limit` states."""
        if self._graph is None:
            bound = self.bound
            result = self._search(keep_graph=True, max_states=self.graph_limit + 1)
            if result.states > self.graph_limit:
                self._graph = GraphResult(
                    None,
                    f"The state graph of {bound.describe()} has more than {self.graph_limit:,} states "
                    f"(the search stopped at {result.states:,}); a page cannot lay that out. Explore a smaller "
                    "bound, or start the explorer with --graph-limit N to draw up to N states "
                    f"(at most {GRAPH_LIMIT_MAX:,}; slow to lay out and to look at).",
                )
            else:
                self._graph = GraphResult(result)
        return self._graph


def run_files(paths: Iterable[Path]) -> list[Path]:
    """The run files among ``paths``: each file as given, each folder's ``*.json`` (sorted)."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found.extend(sorted(p for p in path.glob("*.json") if p.is_file()))
        else:
            found.append(path)
    return list(dict.fromkeys(found))
