"""The layers depend only downward (docs/architecture.md): no module of the library imports one of
a layer above it, no two modules import each other through any chain (module-level or inside a
function), and the library never imports the test side."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import networkx as nx
import pytest

LIBRARY = Path(__file__).resolve().parent.parent / "statechan"

LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("core", ("statechan.states", "statechan.values", "statechan.model", "statechan.resolver", "statechan.keys")),
    ("packaging", ("statechan.extras", "statechan.kernel", "statechan.collector")),
    ("clock", ("statechan.clock",)),
    ("derived views of the core", ("statechan.graph",)),
    ("stores", ("statechan.stores",)),
    ("trace format", ("statechan.traces", "statechan.tracegen", "statechan.capture")),
    ("protocol and cluster state", ("statechan.cluster.config", "statechan.cluster.actions")),
    ("placement", ("statechan.cluster.placement",)),
    ("the cluster's state", ("statechan.cluster.state",)),
    ("the protocol", ("statechan.cluster.protocol",)),
    ("invariants", ("statechan.observation", "statechan.invariants")),
    ("bounds and vacuity", ("statechan.bounds", "statechan.vacuity")),
    ("the simulator", ("statechan.cluster",)),
    ("measurement and local servers", ("statechan.benchharness", "statechan.sparkservers")),
    ("engines", ("statechan.checker", "statechan.audit", "statechan.balance", "statechan.known_bugs")),
    ("tools", ("statechan.mutate", "statechan.explain", "statechan.sequence", "statechan.diagram")),
    ("pages and docs", ("statechan.pages", "statechan.docs", "statechan.bench")),
    ("what the command line shows", ("statechan.render",)),
    ("demo", ("statechan.demo",)),
    ("command line", ("statechan.cli", "statechan.__main__", "statechan.balance.cli")),
    ("package", ("statechan",)),
]
"""Each module's layer: the longest prefix that names it decides (``statechan.cluster`` alone is the
simulator's package, whose protocol and state modules sit lower)."""


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in LIBRARY.rglob("*.py"):
        parts = path.relative_to(LIBRARY.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


MODULES = _modules()


def _imported(path: Path) -> set[str]:
    """The library modules ``path`` imports anywhere in it (``from a import b`` names ``a.b`` when
    that is a module, else ``a``)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            submodules = {f"{node.module}.{alias.name}" for alias in node.names} & MODULES.keys()
            names.update(submodules)
            if len(submodules) < len(node.names):
                names.add(node.module)
    return names


def layer(module: str) -> int:
    best, rank = -1, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, rank = len(prefix), index
    if rank < 0:
        raise AssertionError(f"{module} has no layer: add it to LAYERS (and to docs/architecture.md)")
    return rank


def _graph() -> nx.DiGraph:
    graph = nx.DiGraph()
    for name, path in MODULES.items():
        graph.add_node(name)
        for target in _imported(path) & MODULES.keys():
            if target != name and not name.startswith(target + ".") and not target.startswith(name + "."):
                graph.add_edge(name, target)
    return graph


@pytest.mark.parametrize("path", sorted(LIBRARY.rglob("*.py")), ids=lambda p: str(p.relative_to(LIBRARY)))
def test_the_library_does_not_import_the_test_side(path: Path) -> None:
    test_side = sorted(name for name in _imported(path) if name.split(".")[0] in {"properties", "tests"})
    assert not test_side, f"{path.name} imports {', '.join(test_side)}"


def test_no_two_modules_import_each_other_through_any_chain() -> None:
    cycles = [" -> ".join([*cycle, cycle[0]]) for cycle in nx.simple_cycles(_graph())]
    assert cycles == []


def test_every_import_goes_to_the_same_layer_or_one_below() -> None:
    upward = [
        f"{module} ({LAYERS[layer(module)][0]}) imports {target} ({LAYERS[layer(target)][0]})"
        for module, target in _graph().edges
        if layer(target) > layer(module)
    ]
    assert upward == []


@pytest.mark.parametrize(
    ("module", "must_not_load"),
    [
        ("statechan.invariants.catalogue", ("statechan.cluster.sim", "statechan.checker", "properties", "pyspark")),
        ("statechan.cluster.config", ("statechan.cluster.sim", "statechan.cluster.protocol", "statechan.stores")),
        ("statechan.resolver", ("statechan.cluster", "statechan.stores", "statechan.invariants", "pyspark")),
        ("statechan.cluster.protocol", ("statechan.cluster.sim", "statechan.invariants", "pyspark")),
    ],
)
def test_a_layer_loads_nothing_above_it(module: str, must_not_load: tuple[str, ...]) -> None:
    """What a module loads when imported alone (lazy imports included, as far as importing runs them)."""
    script = (
        f"import sys, {module}\nprint('\\n'.join(sorted(m for m in sys.modules if m.startswith({must_not_load!r}))))"
    )
    loaded = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.split()
    assert loaded == [], f"importing {module} loads {', '.join(loaded)}"
