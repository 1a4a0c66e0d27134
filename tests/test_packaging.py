"""Packaging as a user meets it: a wheel built from the tree installs in a fresh virtualenv with the
core alone, the library imports and the command line runs there, and a command whose extra is
missing exits 2 naming the extra to install. The extras in ``pyproject.toml`` and the map of
modules to extras in ``statechan.extras`` are held together."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from statechan.extras import EXTRAS, extra_for, missing_extra_message

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "traces" / "sample.jsonl"
HEAVY = ("pyspark", "pyarrow", "pandas", "numpy", "matplotlib", "kazoo", "duckdb", "hypothesis", "mkdocs")


def _extras() -> dict[str, list[str]]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    extras: dict[str, list[str]] = data["project"]["optional-dependencies"]
    return extras


def _name(requirement: str) -> str:
    """A requirement's distribution name, normalised (``pyspark[sql]>=4`` -> ``pyspark``)."""
    found = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert found is not None, requirement
    return re.sub(r"[-_.]+", "-", found.group(0)).lower()


def test_every_extra_is_mapped_and_brings_its_modules() -> None:
    """Each extra a user can install (all but dev) has its modules in statechan.extras, and each
    of those modules comes from a distribution that extra lists (checked against what is installed
    here, where make test installs every extra)."""
    extras = _extras()
    assert set(EXTRAS) == set(extras) - {"dev"}
    owners = importlib.metadata.packages_distributions()
    for extra, modules in EXTRAS.items():
        listed = {_name(r) for r in extras[extra]}
        for module in modules:
            dists = {_name(d) for d in owners.get(module, [])}
            assert dists & listed, f"{module} (from {sorted(dists) or 'nothing installed'}) is not in extra {extra}"


def test_core_dependencies_are_light() -> None:
    core = {
        _name(r)
        for r in tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    }
    assert core == {"pydantic", "networkx", "transitions", "typer", "rich", "immutables"}


@pytest.mark.parametrize(
    ("module", "argv", "extra"),
    [
        ("pyspark.sql", ["audit", "x.jsonl"], "spark"),
        ("pyarrow", ["traces", "show", "x.parquet"], "spark"),
        ("numpy", ["traces", "generate", "x.parquet"], "spark"),
        ("numpy", ["balance", "run"], "balance"),
        ("kazoo.client", ["capture", "zk"], "zk"),
        ("hypothesis", [], "hypothesis"),
        ("typer", [], None),
    ],
)
def test_extra_for(module: str, argv: list[str], extra: str | None) -> None:
    assert extra_for(module, argv) == extra


def test_the_message_names_the_command_and_the_extra() -> None:
    message = missing_extra_message("pyspark", ["audit", "trace.jsonl", "--report", "r.json"])
    assert message == (
        "statechan audit: needs the 'spark' extra (pyspark is not installed); "
        "install it with: pip install 'statechan[spark]'"
    )
    assert missing_extra_message("kazoo", ["capture", "zk", "--hosts", "h:1"]) is not None
    assert "statechan capture zk:" in (missing_extra_message("kazoo", ["capture", "zk"]) or "")
    assert missing_extra_message("nosuchmodule", ["audit"]) is None


@pytest.fixture(scope="module")
def core_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv holding the wheel built from this tree and the core's dependencies only
    (pip's cache makes the second time fast)."""
    work = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(work), str(ROOT)],
        check=True,
        capture_output=True,
    )
    (wheel,) = work.glob("statechan-*.whl")
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", str(wheel)],
        check=True,
        capture_output=True,
    )
    return venv


def _run(venv: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(venv / "bin" / "statechan"), *args], capture_output=True, text=True, cwd=cwd, check=False, timeout=300
    )


def test_the_core_alone_installs_imports_and_runs(core_venv: Path, tmp_path: Path) -> None:
    python = str(core_venv / "bin" / "python")
    script = (
        "import importlib.util, json, statechan, sys;"
        f"print(json.dumps([statechan.__version__, [m for m in {HEAVY!r} if importlib.util.find_spec(m)]]))"
    )
    done = subprocess.run([python, "-c", script], capture_output=True, text=True, check=True, cwd=tmp_path)
    version, heavy = __import__("json").loads(done.stdout)
    assert version == importlib.metadata.version("statechan")
    assert heavy == [], f"the core venv has {heavy}: the test would prove nothing"
    helped = _run(core_venv, "resolve", "--help", cwd=tmp_path)
    assert helped.returncode == 0, helped.stderr
    assert "Usage" in helped.stdout
    answer = _run(
        core_venv,
        "resolve",
        "--prev",
        '{"state":"Owned","dstBroker":"b1","versionId":1}',
        "--new",
        '{"state":"Owned","dstBroker":"b2","versionId":4}',
        "--storage",
        "metadata-store",
        cwd=tmp_path,
    )
    assert answer.returncode in (0, 1), answer.stderr
    assert "version-gap-rejected" in answer.stdout
    models = _run(core_venv, "models", cwd=tmp_path)  # the built-in model files ship inside the wheel
    assert models.returncode == 0, models.stderr
    assert "pulsar-4" in models.stdout
    local = _run(
        core_venv, "audit", str(SAMPLE), "--engine", "local", "--report", str(tmp_path / "r.json"), cwd=tmp_path
    )
    assert local.returncode == 0, local.stderr


@pytest.mark.parametrize(
    ("args", "extra"),
    [
        (["audit", "{sample}"], "spark"),
        (["traces", "generate", "{tmp}/t.parquet", "-n", "10"], "spark"),
        (["balance"], "balance"),
        (["capture", "zk", "--hosts", "127.0.0.1:9", "--out", "{tmp}/z.jsonl", "--timeout", "1"], "zk"),
        (["simulate", "--hours", "0.01", "--zookeeper", "127.0.0.1:9"], "zk"),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, list) else value,
)
def test_a_missing_extra_exits_2_naming_it(core_venv: Path, tmp_path: Path, args: list[str], extra: str) -> None:
    argv = [a.format(sample=SAMPLE, tmp=tmp_path) for a in args]
    done = _run(core_venv, *argv, cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"pip install 'statechan[{extra}]'" in done.stderr
    assert "Traceback" not in done.stderr
