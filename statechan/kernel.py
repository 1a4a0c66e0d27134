"""Which kernel runs: the pure-Python modules, or their optional compiled build.

``make compiled`` compiles the model checker's hot modules (the cluster state and the protocol)
with mypyc into ``build/compiled`` (see ``build_compiled.py``), beside a manifest that names each
module's extension and the SHA-256 of the source it was compiled from. Importing :mod:`statechan`
installs a finder that loads those extensions in place of the modules, but only when the build
exists, was made by this Python, and every source it was compiled from is unchanged: a build
older than its source is never used (a warning says so and the pure modules run). The Python
sources stay the one definition of the model; the compiled modules behave the same
(``tests/test_compiled.py`` runs both and compares the checker's results).

``STATECHAN_KERNEL`` chooses: ``auto`` (the default: compiled where built and current), ``pure``
(never the build), or ``compiled`` (the build, or an error saying why not).
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
import sysconfig
import warnings
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType
from typing import TypeVar

ROOT = Path(__file__).resolve().parent.parent
BUILD = Path(os.environ.get("STATECHAN_KERNEL_DIR") or ROOT / "build" / "compiled")
"""Where ``make compiled`` puts the build (the manifest and ``lib/``); ``STATECHAN_KERNEL_DIR`` names another."""
CHOICES = ("auto", "pure", "compiled")


class KernelError(RuntimeError):
    """``STATECHAN_KERNEL=compiled`` asked for a build that cannot be used."""


class _Finder(importlib.abc.MetaPathFinder):
    """Finds the compiled modules (and mypyc's shared library) in the build; nothing else."""

    def __init__(self, extensions: dict[str, Path]) -> None:
        self.extensions = extensions

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        where = self.extensions.get(fullname)
        if where is None:
            return None
        package = _source(fullname)
        # a compiled package keeps its folder as its path: its other modules load from the sources
        search = [str(package.parent)] if package.name == "__init__.py" else None
        loader = _Loader(fullname, str(where), search)
        return importlib.util.spec_from_file_location(fullname, where, loader=loader, submodule_search_locations=search)


class _Loader(importlib.machinery.ExtensionFileLoader):
    """Loads a compiled module; a compiled package's path is its source folder (where the modules
    that are not compiled are), not the build's."""

    def __init__(self, fullname: str, path: str, search: list[str] | None) -> None:
        super().__init__(fullname, path)
        self.search = search

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        module = super().create_module(spec)
        if self.search is not None:
            module.__path__ = self.search
        return module

    def exec_module(self, module: ModuleType) -> None:
        super().exec_module(module)
        if self.search is not None:
            module.__path__ = self.search


def _source(module: str) -> Path:
    """The source file of a module of the library (a package's is its ``__init__.py``)."""
    base = ROOT / module.replace(".", "/")
    return base / "__init__.py" if base.is_dir() else base.with_suffix(".py")


def _usable(build: Path) -> tuple[dict[str, Path], list[str], str | None]:
    """The build's extensions, the source modules they replace, and why they cannot be used (None: they can)."""
    manifest_path = build / "manifest.json"
    if not manifest_path.exists():
        return {}, [], f"no compiled build in {build} (make compiled)"
    try:
        manifest = json.loads(manifest_path.read_text())
        extensions = {name: build / path for name, path in manifest["extensions"].items()}
        sources: dict[str, str] = manifest["sources"]
        suffix = manifest["suffix"]
    except (OSError, ValueError, KeyError, AttributeError) as error:
        return {}, [], f"the compiled build's manifest {manifest_path} is unreadable ({error}): make compiled"
    if suffix != sysconfig.get_config_var("EXT_SUFFIX"):
        return {}, [], f"the compiled build in {build} is for another Python ({suffix}): make compiled"
    for module, digest in sources.items():
        source = _source(module)
        if not source.exists() or hashlib.sha256(source.read_bytes()).hexdigest() != digest:
            return {}, [], f"{source.relative_to(ROOT)} changed since the compiled build: make compiled"
    missing = [str(path) for path in extensions.values() if not path.exists()]
    if missing:
        return {}, [], f"the compiled build lacks {', '.join(missing)}: make compiled"
    return extensions, list(sources), None


C = TypeVar("C", bound=type)


def interpreted(cls: C) -> C:
    """Keeps a class of a compiled module a regular Python class (the identity at run time: mypyc
    compiles a class whose decorator it does not know as one). For a class whose instances keep a
    ``__dict__`` (an observation's accessors), pickle as Python's do (what a worker sends back), or
    derive from a built-in exception, or whose subclasses are decorated."""
    return cls


_state: dict[str, object] = {"kernel": "pure", "modules": [], "why": "not chosen yet"}


def install(build: Path = BUILD) -> str:
    """Chooses the kernel (see the module's docstring) before any kernel module is imported;
    returns ``"compiled"`` or ``"pure"``. Called once, by ``import statechan``."""
    choice = os.environ.get("STATECHAN_KERNEL", "auto").strip().lower() or "auto"
    if choice not in CHOICES:
        raise KernelError(f"STATECHAN_KERNEL={choice!r}: expected one of {', '.join(CHOICES)}")
    if choice == "pure":
        _state.update(kernel="pure", modules=[], why="STATECHAN_KERNEL=pure")
        return "pure"
    extensions, modules, why = _usable(build)
    if why is None:
        early = [module for module in modules if module in sys.modules]
        if early:
            why = f"{', '.join(early)} imported before the compiled kernel could be chosen"
    if why is not None:
        if choice == "compiled":
            raise KernelError(f"STATECHAN_KERNEL=compiled: {why}")
        if (build / "manifest.json").exists():
            warnings.warn(f"the pure-Python kernel runs: {why}", RuntimeWarning, stacklevel=2)
        _state.update(kernel="pure", modules=[], why=why)
        return "pure"
    sys.meta_path.insert(0, _Finder(extensions))
    _state.update(kernel="compiled", modules=modules, why=f"compiled build in {build}")
    return "compiled"


def unusable(build: Path = BUILD) -> str | None:
    """Why the compiled build cannot be used in a new interpreter (None: it can)."""
    return _usable(build)[2]


def active() -> str:
    """``"compiled"`` or ``"pure"``: the kernel that runs."""
    return str(_state["kernel"])


def describe() -> str:
    """The kernel that runs and why, for people (``statechan check`` and the benchmarks show it)."""
    modules = _state["modules"]
    listed = f": {', '.join(modules)}" if isinstance(modules, list) and modules else ""
    return f"{_state['kernel']} ({_state['why']}){listed}"


install()
