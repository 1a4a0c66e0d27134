"""The layers depend only downward (docs/architecture.md): the library never imports the test
side, and the invariant catalogue loads neither the simulator nor a store."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

LIBRARY = Path(__file__).resolve().parent.parent / "statechan"


def _imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            names.add(node.module)
    return names


@pytest.mark.parametrize("path", sorted(LIBRARY.rglob("*.py")), ids=lambda p: str(p.relative_to(LIBRARY)))
def test_the_library_does_not_import_the_test_side(path: Path) -> None:
    test_side = sorted(name for name in _imported(path) if name.split(".")[0] in {"properties", "tests"})
    assert not test_side, f"{path.name} imports {', '.join(test_side)}"


@pytest.mark.parametrize(
    ("module", "must_not_load"),
    [
        ("statechan.invariants.catalogue", ("statechan.cluster.sim", "statechan.stores", "properties", "pyspark")),
        ("statechan.cluster.config", ("statechan.cluster.sim", "statechan.stores")),
        ("statechan.resolver", ("statechan.cluster", "statechan.stores", "statechan.invariants", "pyspark")),
    ],
)
def test_a_layer_loads_nothing_above_it(module: str, must_not_load: tuple[str, ...]) -> None:
    script = (
        f"import sys, {module}\nprint('\\n'.join(sorted(m for m in sys.modules if m.startswith({must_not_load!r}))))"
    )
    loaded = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.split()
    assert loaded == [], f"importing {module} loads {', '.join(loaded)}"
