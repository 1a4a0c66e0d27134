"""The optional compiled kernel (``make compiled``): chosen only when built from the sources as
they are, and giving the checker the same results as the pure-Python modules.

The pure path is what the rest of the suite runs on a clean clone (no build). The comparison
needs a build: ``build/compiled`` when it is current (the whole kernel: ``make compiled`` runs this
file after building), otherwise the cluster state alone compiled here into a temporary folder
(about 20 s of one core, so that ``make test`` stays short; the finder then runs that one module
compiled and the rest in Python). Skipped with the reason when mypyc or a C compiler is missing,
or when ``STATECHAN_SKIP_COMPILE=1``. Each kernel runs in its own interpreter.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
import subprocess
import sys
import sysconfig
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from statechan import kernel
from statechan.checker import Bounds, checker_config
from statechan.cluster import protocol
from statechan.cluster.config import SimConfig, StoreKind
from statechan.cluster.state import _CACHES, Broker, ClusterState, Cold, Syncer, Topic

ROOT = Path(__file__).resolve().parent.parent


# -- choosing the kernel ---------------------------------------------------------------------------
def _fake_build(folder: Path, sources: dict[str, str], suffix: str | None = None) -> Path:
    (folder / "lib").mkdir(parents=True)
    manifest = {
        "suffix": suffix or sysconfig.get_config_var("EXT_SUFFIX"),
        "extensions": {"statechan.cluster.state": "lib/state.so"},
        "sources": sources,
    }
    (folder / "lib" / "state.so").write_bytes(b"")
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def _digest(module: str) -> str:
    return hashlib.sha256((ROOT / (module.replace(".", "/") + ".py")).read_bytes()).hexdigest()


def test_a_build_is_used_only_when_every_source_it_was_compiled_from_is_unchanged(tmp_path: Path) -> None:
    assert "no compiled build" in str(kernel.unusable(tmp_path / "none"))
    current = _fake_build(tmp_path / "current", {"statechan.cluster.state": _digest("statechan.cluster.state")})
    assert kernel.unusable(current) is None
    stale = _fake_build(tmp_path / "stale", {"statechan.cluster.state": "0" * 64})
    assert "statechan/cluster/state.py changed since the compiled build" in str(kernel.unusable(stale))
    other = _fake_build(
        tmp_path / "other", {"statechan.cluster.state": _digest("statechan.cluster.state")}, suffix=".cpython-39.so"
    )
    assert "another Python" in str(kernel.unusable(other))
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "manifest.json").write_text("{")
    assert "unreadable" in str(kernel.unusable(tmp_path / "broken"))


def _kernel_in_new_interpreter(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    code = "import statechan, statechan.cluster.state as s; print(statechan.kernel.active(), s.__file__)"
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        check=False,
    )


def test_asking_for_the_compiled_kernel_without_a_usable_build_fails_with_the_reason(tmp_path: Path) -> None:
    done = _kernel_in_new_interpreter({"STATECHAN_KERNEL": "compiled", "STATECHAN_KERNEL_DIR": str(tmp_path)})
    assert done.returncode != 0
    assert f"STATECHAN_KERNEL=compiled: no compiled build in {tmp_path} (make compiled)" in done.stderr
    done = _kernel_in_new_interpreter({"STATECHAN_KERNEL": "fast"})
    assert done.returncode != 0
    assert "STATECHAN_KERNEL='fast': expected one of auto, pure, compiled" in done.stderr
    done = _kernel_in_new_interpreter({"STATECHAN_KERNEL": "auto", "STATECHAN_KERNEL_DIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["pure", str(ROOT / "statechan" / "cluster" / "state.py")]


# -- the records' drafts and copies (hand-written, so the compiled build can have them) ---------------
def _fields(record: Any) -> dict[str, Any]:
    return {name: value for name, value in record.__getstate__()[1].items() if name not in _CACHES}


def _states() -> list[ClusterState]:
    """States that hold every kind of record: a run of the metadata-store cluster with the syncer."""
    config = SimConfig(brokers=3, store=StoreKind.both)
    setup = protocol.setup(config)
    state = protocol.init(setup, trace=False).state
    seen = [state]
    for _ in range(40):
        actions = list(protocol.enabled(state, setup, frozenset()))
        if not actions:
            break
        state = protocol.outcomes(state, actions[len(seen) % len(actions)], setup)[0].state
        seen.append(state)
    return seen


def test_a_draft_copies_every_field_of_its_record_and_empties_its_caches() -> None:
    """A field a draft forgot would be lost by the next step that touched the record."""
    checked: set[str] = set()
    for state in _states():
        records: list[Any] = [state, state.topic, state.store, state.cold, *state.brokers]
        records += [b.view for b in state.brokers] + [b.client for b in state.brokers]
        if state.syncer is not None:
            records.append(state.syncer)
        for record in records:
            draft = record.thaw()
            assert draft is not record
            assert type(draft) is type(record)
            assert _fields(draft) == _fields(record), type(record).__name__
            assert draft._tok == -1
            checked.add(type(record).__name__)
            # an unpickled copy (how records go to a checker's workers) pickles to the same bytes
            assert pickle.dumps(pickle.loads(pickle.dumps(record))) == pickle.dumps(record), type(record).__name__
    assert {"ClusterState", "Topic", "Store", "Cold", "Broker", "View", "Client", "Syncer"} <= checked
    for cls in (ClusterState, Topic, Cold, Broker, Syncer):
        assert "thaw" in vars(cls), f"{cls.__name__} has no draft of its own"


# -- the compiled kernel against the pure one ------------------------------------------------------
CASES = [
    ("default bound, system topic", {}, "system-topic", "current", {}),
    ("default bound, no reductions", {}, "system-topic", "current", {"symmetry": False, "por": False}),
    ("metadata store", {}, "metadata-store", "current", {}),
    ("both stores and the syncer", {"admin": 0, "ticks": 1}, "both", "current", {}),
    ("bug 25379", {"crashes": 1, "restarts": 1}, "system-topic", "25379", {}),
    ("bug 20110", {"compactions": 1}, "system-topic", "20110", {}),
    ("bug 25379, two processes", {"crashes": 1, "restarts": 1}, "system-topic", "25379", {"workers": 2}),
]
"""Small bounds over every store, with and without the reductions, two historical bugs, and one of
them on two processes (the search's process and a forked worker share its expander's records)."""

_RUN_CASES = """
import json, sys
import statechan
from statechan.checker import Bounds, check
from statechan.cluster.config import StoreKind
found = []
for name, bounds, store, variant, options in json.loads(sys.argv[1]):
    r = check(Bounds(**bounds), StoreKind(store), variant, **options)
    coverage = sorted((f"{a}>{b}", sorted(c.items())) for (a, b), c in r.coverage.items())
    found.append([name, r.states, r.transitions, r.depth, r.complete, r.violation, r.liveness,
                  [str(a) for a in r.path], r.picks, coverage])
print(statechan.kernel.active())
print(json.dumps(found))
"""


SUITE_BUILD = ("statechan/cluster/state.py",)
"""What the suite compiles when no current build exists: the records, their drafts and canonical
hashes (the module whose compiled form differs most from Python: slots, pickling, final fields)."""


def _compiled_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if kernel.unusable(kernel.BUILD) is None:
        return kernel.BUILD
    if os.environ.get("STATECHAN_SKIP_COMPILE") == "1":
        pytest.skip("STATECHAN_SKIP_COMPILE=1 and no current build in build/compiled (make compiled)")
    try:
        import mypyc  # noqa: F401
    except ImportError:
        pytest.skip("mypyc is not installed (pip install mypy)")
    if shutil.which(sysconfig.get_config_var("CC").split()[0] if sysconfig.get_config_var("CC") else "cc") is None:
        pytest.skip("no C compiler for the compiled kernel")
    out = tmp_path_factory.mktemp("compiled")
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "build_compiled.py"),
            "--out",
            str(out),
            "--modules",
            *SUITE_BUILD,
            "--opt-level",
            "0",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out


def _run(kernel_name: str, build: Path) -> list[Any]:
    done = subprocess.run(
        [sys.executable, "-c", _RUN_CASES, json.dumps(CASES)],
        cwd=ROOT,
        env={
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "STATECHAN_KERNEL": kernel_name,
            "STATECHAN_KERNEL_DIR": str(build),
        },
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    ran, found = done.stdout.strip().splitlines()[-2:]
    assert ran == kernel_name
    return json.loads(found)  # type: ignore[no-any-return]


@pytest.mark.slow
def test_the_compiled_kernel_gives_the_checker_the_same_results_as_the_pure_one(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    build = _compiled_build(tmp_path_factory)
    pure, compiled = _run("pure", build), _run("compiled", build)
    assert [case[0] for case in pure] == [case[0] for case in CASES]
    for ours, theirs in zip(pure, compiled, strict=True):
        assert ours == theirs, ours[0]
    by_name = {case[0]: case for case in pure}
    assert by_name["default bound, system topic"][1] > 500  # searches, not empty ones
    assert by_name["both stores and the syncer"][1] > 500
    assert by_name["bug 25379"][5] is not None
    assert by_name["bug 20110"][5] is not None
    assert by_name["metadata store"][5] is None
    assert Bounds().brokers == 2  # the default bound the first cases name


# -- what the checker works out once and shares, against working it out again ---------------------
SHORTCUT_RUNS = [
    ("system-topic", "current", {"crashes": 1, "restarts": 1}, 1200),
    ("metadata-store", "current", {"session_losses": 1}, 1200),
    ("metadata-store", "24186", {"lookups": 2, "admin": 0, "ticks": 1}, 1200),
    ("system-topic", "21721", {"admin": 0, "ticks": 3, "tombstone_delay_s": 30}, 1200),
    ("system-topic", "22379", {"admin_kinds": ("transfer",), "shutdowns": 1, "ticks": 0}, 6000),
]
"""Runs whose steps crash, restart and lose sessions, and three historical bugs that break the
step invariants (version-monotonic, no-spurious-takeover, unload-completion-matches)."""


def _steps(store: str, variant: str, bounds: dict[str, Any], limit: int = 1200) -> list[tuple[Any, Any]]:
    """Up to ``limit`` (state, successor) pairs, breadth first from the root of ``bounds`` (each
    distinct state expanded once, as the checker does)."""
    from statechan.checker import _expander
    from statechan.invariants.catalogue import simulation_ids

    expander = _expander(Bounds(**bounds), StoreKind(store), variant, True, simulation_ids(), False)
    queue: list[tuple[Any, Counter[str]]] = [(expander.root, Counter())]
    pairs: list[tuple[Any, Any]] = []
    seen: set[bytes] = set()
    while queue and len(pairs) < limit:
        state, spent = queue.pop(0)
        for _, _, child, child_spent in expander.branches(state, spent):
            pairs.append((state, child))
            key = expander.key_of(child, child_spent)
            if key not in seen:
                seen.add(key)
                queue.append((child, child_spent))
    return pairs


@pytest.mark.parametrize(
    ("store", "variant", "bounds", "limit"), SHORTCUT_RUNS, ids=[f"{s}-{v}" for s, v, _, _ in SHORTCUT_RUNS]
)
def test_what_the_checker_skips_or_takes_from_a_parent_is_what_working_it_out_again_gives(
    store: str, variant: str, bounds: dict[str, Any], limit: int
) -> None:
    """The step invariants skipped where the parts they read are the very records of the parent
    (``check_step``), the changes read off the brokers' records, a successor's observation that
    takes its parent's channel, and the records' cached signatures: each equals its long way."""
    from statechan.invariants import catalogue
    from statechan.observation import Observation

    setup = protocol.setup(checker_config(Bounds(**bounds), StoreKind(store), variant))
    steps = [inv for inv in catalogue.CATALOGUE.values() if inv.action_check is not None]
    found = 0
    pairs = _steps(store, variant, bounds, limit)
    assert len(pairs) >= 250
    for state, child in pairs:
        before = Observation(state, setup)
        before.channel  # noqa: B018 - worked out, so the successor takes it
        after = before.successor(child)
        plain_before, plain_after = before.replace(), Observation(child, setup).replace()
        assert dict(after.channel) == dict(plain_after.channel)
        # the long way: every step invariant on observations that take no shortcut
        every = [v for inv in steps for v in inv.action_check(plain_before, plain_after)]  # type: ignore[misc]
        quick = catalogue.check_step(before, after, [inv.id for inv in steps])
        assert [str(v) for v in quick] == [str(v) for v in every]
        found += len(every)
        changes, plain = catalogue._Changes(before, after), catalogue._Changes(plain_before, plain_after)
        assert changes.channel == plain.channel
        assert changes.views == plain.views
        unchanged = {"channel", "views", "unloads"} - catalogue.changed_parts(before, after)
        running = [b for b in state.brokers if b.alive and child.brokers[b.id].alive]
        running = [b for b in running if b.incarnation == child.brokers[b.id].incarnation]
        if "channel" in unchanged:
            assert dict(plain_before.channel) == dict(plain_after.channel)
        if "views" in unchanged:
            assert all(plain_before.views[b.id] == plain_after.views[b.id] for b in running)
        if "unloads" in unchanged:
            assert all(b.unloads == child.brokers[b.id].unloads for b in running)
        for broker in child.brokers:
            fresh = broker.thaw()
            assert fresh.signature(True) == broker.signature(True)
            assert fresh.serving() == broker.serving() == frozenset(broker.view.owned.keys()) or not broker.alive
    if variant != "current":
        assert found, "the bug's run breaks a step invariant within the steps taken"
