"""Which optional extra brings which module, so that a command whose extra is missing says which
to install instead of failing with an import error.

The core (``pip install statechan``) is the library and the whole command line: pydantic,
networkx, transitions, typer, rich and immutables. Everything heavier is an extra, imported only inside the
functions that use it; ``pyproject.toml`` lists each extra's packages, and ``tests/test_packaging.py``
holds that list and this map together.
"""

from __future__ import annotations

from collections.abc import Sequence

EXTRAS: dict[str, tuple[str, ...]] = {
    "spark": ("pyspark", "pyarrow", "pandas"),
    "zk": ("kazoo",),
    "balance": ("numpy", "matplotlib", "yaml"),
    "bench": ("duckdb",),
    "hypothesis": ("hypothesis", "pytest"),
    "docs": ("mkdocs", "mkdocstrings", "material"),
}
"""Each extra and the top-level modules it brings (import names, not distribution names)."""

COMMAND_EXTRAS: dict[str, str] = {
    "audit": "spark",
    "traces generate": "spark",
    "capture zk": "zk",
    "simulate --zookeeper": "zk",
    "balance": "balance",
    "balance --sweep": "spark",
    "demo": "spark",
}
"""The commands that need an extra (beyond the core), for the README and the getting-started page.
``audit --engine local`` on JSON Lines needs none; any Parquet trace needs ``spark``'s pyarrow."""


GROUPS = frozenset({"traces", "capture"})
"""Commands whose next word is a subcommand."""


def extra_for(module: str, argv: Sequence[str] = ()) -> str | None:
    """The extra that brings ``module`` (a dotted import name), or None if no extra does. numpy
    comes with two extras: the load-balance lab's (``balance``), and the trace generator's, which
    has it through ``spark`` (pandas); ``argv`` (the command line's words) tells which was meant."""
    top = module.split(".", 1)[0]
    if top == "numpy" and argv and argv[0] != "balance":
        return "spark"
    return next((extra for extra, modules in EXTRAS.items() if top in modules), None)


def missing_extra_message(module: str, argv: Sequence[str] = (), program: str = "statechan") -> str | None:
    """The one line a command prints when ``module`` is not installed, naming the extra to
    install; None when no extra brings that module (a broken installation, not a missing extra)."""
    extra = extra_for(module, argv)
    if extra is None:
        return None
    words = list(argv[:2] if argv[:1] and argv[0] in GROUPS else argv[:1])
    command = " ".join([program, *(w for w in words if not w.startswith("-"))])
    return (
        f"{command}: needs the '{extra}' extra ({module.split('.', 1)[0]} is not installed); "
        f"install it with: pip install 'statechan[{extra}]'"
    )
