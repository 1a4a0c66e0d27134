"""``statechan explore``: a local web app over the model (docs/explore.md).

Start from a bound's initial state (the model checker's root), a saved run or the checker's
counterexample; step by choosing among the enabled actions (each placement a choice of its own);
see the state as Pulsar's people draw it, every invariant's verdict, and the path as a sequence
diagram; open the bound's state graph. :mod:`.walk` walks the model, :mod:`.picture` draws a
state, :mod:`.graph` draws the checker's graph, :mod:`.explorer` keeps what a server was given,
:mod:`.app` serves it (Flask, an optional dependency: ``pip install 'statechan[explore]'``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from statechan.pages.explore.explorer import GRAPH_LIMIT, Bound, Explorer, SavedRun, run_files

if TYPE_CHECKING:
    from statechan.bounds import Bounds
    from statechan.cluster.config import StoreKind, Variant
    from statechan.pages.explore.app import ServeError, Server, bind, serve

__all__ = ["GRAPH_LIMIT", "Bound", "Explorer", "SavedRun", "ServeError", "Server", "bind", "open_explorer", "serve"]


def open_explorer(
    bounds: Bounds,
    store: StoreKind,
    variant: str | Variant,
    variant_name: str,
    invariants: Sequence[str],
    runs: Iterable[Path] = (),
    *,
    graph_limit: int = GRAPH_LIMIT,
    symmetry: bool = True,
    por: bool = True,
) -> Explorer:
    """An explorer of the bound with the saved runs among ``runs`` (files, or folders of
    ``*.json``), each opened now: one that cannot be says why in its ``error``."""
    bound = Bound(bounds, store, variant, variant_name, tuple(invariants), symmetry, por)
    explorer = Explorer(bound, [SavedRun(i, p) for i, p in enumerate(run_files(runs))], graph_limit)
    for saved in explorer.runs:
        explorer.open_run(saved.number)
    return explorer


def __getattr__(name: str) -> object:
    """The server's names, imported when first asked for (Flask loads with them)."""
    if name in ("bind", "serve", "Server", "ServeError", "create_app"):
        from statechan.pages.explore import app

        return getattr(app, name)
    raise AttributeError(f"module 'statechan.pages.explore' has no attribute {name!r}")
