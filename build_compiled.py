"""The optional compiled kernel: the checker's hot modules compiled with mypyc into build/compiled.

``make compiled`` runs it. The Python sources stay the one source of truth: nothing is written beside
them. The extension modules go to ``build/compiled/lib`` with a manifest naming each module, its
extension file and the SHA-256 of the source it was compiled from; :mod:`statechan.kernel` loads
them at import only when every listed source is unchanged (otherwise the pure-Python modules run,
with a warning), and ``STATECHAN_KERNEL=pure`` turns them off.

Usage: ``python build_compiled.py [--out build/compiled] [--jobs N]``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import sysconfig
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent

KERNEL = (
    "statechan/cluster/state.py",
    "statechan/cluster/protocol.py",
    "statechan/observation.py",
    "statechan/invariants/catalogue.py",
    "statechan/checker/__init__.py",
    "statechan/checker/compact.py",
    "statechan/checker/table.py",
)
"""The compiled modules, one shared library: the cluster state (its records, drafts and canonical
hashes), the protocol's step, the observation and the invariants the checker evaluates on every
state and step, the checker's expansion, fingerprints and reduction, and its compact search loop
and visited set. A class that must stay a
Python class (one whose instances keep a ``__dict__``, pickle to a worker, or derive from a built-in
exception) is marked :func:`statechan.kernel.interpreted`."""

MYPY_CONFIG = """[mypy]
strict = True
python_version = 3.11
plugins = pydantic.mypy
ignore_missing_imports = True
"""
"""Type-checking options for the compile (the project's own, without its list of files)."""


def module_name(dotted: str) -> str:
    """The module a source file is (a package's ``__init__`` is the package)."""
    return dotted.removesuffix(".__init__")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def build(out: Path, jobs: int, kernel: tuple[str, ...] = KERNEL, opt_level: str = "3") -> dict[str, object]:
    """Compiles ``kernel`` (:data:`KERNEL`) into ``out``/lib and writes ``out``/manifest.json; returns the manifest.
    ``opt_level``: the C compiler's (0 compiles several times faster into a slower kernel that
    behaves the same: what the test suite's comparison needs)."""
    from mypyc.build import mypycify
    from setuptools import Distribution  # type: ignore[import-untyped]

    work = out / "work"
    lib = out / "lib"
    shutil.rmtree(lib, ignore_errors=True)
    (out / "manifest.json").unlink(missing_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    config = work / "mypy.ini"
    config.write_text(MYPY_CONFIG)
    started = time.monotonic()
    previous = Path.cwd()
    os.chdir(ROOT)  # mypyc names modules by their paths from here
    try:
        os.environ["MYPY_CACHE_DIR"] = str(work / "mypy_cache")
        modules = mypycify(
            [*kernel, "--config-file", str(config)], opt_level=opt_level, target_dir=str(work / "c"), multi_file=False
        )
        dist = Distribution({"name": "statechan-kernel", "ext_modules": modules})
        command = dist.get_command_obj("build_ext")
        command.build_lib = str(lib)
        command.build_temp = str(work / "obj")
        command.parallel = jobs
        command.ensure_finalized()
        command.run()
    finally:
        os.chdir(previous)
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    extensions = {}
    for extension in modules:
        path = lib / (extension.name.replace(".", "/") + suffix)
        if not path.exists():
            raise SystemExit(f"the compile did not make {path}")
        extensions[module_name(extension.name)] = str(path.relative_to(out))
    manifest: dict[str, object] = {
        "python": sys.implementation.cache_tag,
        "suffix": suffix,
        "extensions": extensions,
        "sources": {module_name(source[:-3].replace("/", ".")): sha256(ROOT / source) for source in kernel},
        "seconds": round(time.monotonic() - started, 1),
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python build_compiled.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "compiled", help="where (build/compiled)")
    parser.add_argument("--modules", nargs="+", default=list(KERNEL), help="the source files to compile")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="C compiles at a time")
    parser.add_argument("--opt-level", choices=("0", "1", "2", "3"), default="3", help="the C compiler's (3)")
    args = parser.parse_args(argv)
    manifest = build(args.out.resolve(), args.jobs, tuple(args.modules), args.opt_level)
    print(f"compiled {len(manifest['sources'])} modules in {manifest['seconds']} s into {args.out}")  # type: ignore[arg-type]
    return 0


if __name__ == "__main__":
    sys.exit(main())
