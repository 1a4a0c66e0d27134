"""Historical bugs as proof: for each variant that puts a fixed Pulsar bug back, the bench machine
and budget that find it, and the invariant it must break.

``python -m properties.hunts --write docs`` hunts every bug with shrinking and writes
``docs/counterexamples.md`` (table and timelines) and ``docs/counterexamples/<variant>.json``
(the shrunk runs, replayable with ``statechan replay``). The tests hunt without shrinking (the
``ci`` budget) and replay the saved runs.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from hypothesis import Phase
from hypothesis.stateful import run_state_machine_as_test

from properties.bench import ChannelMachine, InvariantBroken, MetadataStoreBench, SyncerBench, SystemTopicBench
from properties.profiles import fixed
from statechan.cluster import SimConfig
from statechan.cluster.config import VARIANTS


@dataclass(frozen=True)
class Hunt:
    variant: str
    """The variant's name in ``statechan.cluster.config.VARIANTS`` (its PR number)."""
    bug: str
    machine: type[ChannelMachine]
    expect: tuple[str, ...]
    """The invariants that show the bug (any one of them)."""
    max_examples: int = 3000
    steps: int = 30
    brokers: int | None = None
    """Brokers, if not the machine's."""
    tombstone_delay_s: int | None = None
    """The channel's tombstone delay, if not Pulsar's hour (a bug that needs the monitor to see an
    old record)."""
    checker_only: str = ""
    """Why the bench's hunt cannot tell this bug from the current protocol (then its saved run is
    the model checker's, kept on the page as written, and no hunt runs for it)."""

    @property
    def config(self) -> SimConfig:
        update: dict[str, object] = {"variant": VARIANTS[self.variant]}
        if self.brokers is not None:
            update["brokers"] = self.brokers
        if self.tombstone_delay_s is not None:
            channel = self.machine.config.channel.model_copy(update={"tombstone_delay_s": self.tombstone_delay_s})
            update["channel"] = channel
        return self.machine.config.model_copy(update=update)

    @property
    def flags(self) -> str:
        return VARIANTS[self.variant].label()


HUNTS: tuple[Hunt, ...] = (
    Hunt(
        "20110",
        "lagging reader refuses a version jump after compaction",
        SystemTopicBench,
        ("compaction-equivalence", "views-converge"),
    ),
    Hunt(
        "19546",
        "reader starting from a compacted topic refuses a mid-flow first record",
        SystemTopicBench,
        ("compaction-equivalence", "views-converge"),
    ),
    Hunt("25379", "restarted broker ignores an Assigning addressed to it", SystemTopicBench, ("in-flight-acted-on",)),
    Hunt(
        "26520",
        "clean-up races an assignment to a disabled broker",
        SystemTopicBench,
        ("departure-complete", "orphan-cleaned", "lookup-answers-live-owner"),
    ),
    Hunt("25946", "syncer loses deletions", SyncerBench, ("syncer-equivalence",)),
    Hunt(
        "24186",
        "metadata-store retry writes two values at one version",
        MetadataStoreBench,
        ("one-value-per-version", "version-monotonic"),
    ),
    Hunt(
        "24478",
        "broker without a session answers lookups from a stale view",
        SystemTopicBench,
        ("lookup-answers-live-owner", "single-owner"),
        checker_only="every run the bench's budget finds breaks the current protocol's own single-owner finding "
        "too (a split during a session loss, docs/findings.md); at its bound (no admin operations) the checker "
        "tells them apart",
    ),
    Hunt(
        "21721",
        "the leader's monitor tombstones healthy Owned bundles",
        SystemTopicBench,
        ("no-spurious-takeover",),
        tombstone_delay_s=30,
    ),
    Hunt(
        "23064",
        "clean-up overrides an Owned bundle whose source is dead",
        SystemTopicBench,
        ("no-spurious-takeover",),
    ),
    Hunt("21811", "lookups answer an inactive owner", SystemTopicBench, ("lookup-answers-live-owner",)),
    Hunt(
        "23359",
        "a broker whose registry node goes does not register again",
        SystemTopicBench,
        ("registered-while-running",),
    ),
    Hunt(
        "24932",
        "a broker does not register again when its session comes back",
        SystemTopicBench,
        ("registered-while-running",),
    ),
    Hunt("23516", "the election stays empty", SystemTopicBench, ("leader-elected", "leader-unique"), brokers=1),
    Hunt("21894", "the elected leader's id matches no broker", SystemTopicBench, ("leader-elected",)),
    Hunt("20677", "a lookup racing an assignment hangs", SystemTopicBench, ("lookup-not-stranded",)),
    Hunt(
        "22743",
        "a Deleted or forced Free waits for the monitor's tombstone",
        SystemTopicBench,
        ("semi-terminal-tombstoned",),
    ),
    Hunt(
        "22379",
        "an unload reported done on an assignment's Owned",
        SystemTopicBench,
        ("unload-completion-matches",),
        brokers=2,
        checker_only="since a departing broker cleans up while still registered and leaves once its clean-up "
        "is over, the bench's budget no longer reaches it on two brokers; the checker finds it at its bound "
        "(a transfer whose destination shuts down, 9 steps)",
    ),
    Hunt(
        "22859",
        "a forced unload never reported done",
        SystemTopicBench,
        ("unload-not-stranded",),
        brokers=2,
        checker_only="since a departing broker cleans up while still registered, the bench's budget no longer "
        "reaches it on two brokers (3,000 examples); the checker finds it at its bound (a transfer issued during "
        "the bundle's split, 23 steps)",
    ),
    Hunt(
        "23349",
        "a shutdown with no broker to take over writes nothing",
        SystemTopicBench,
        ("departure-complete", "orphan-cleaned"),
        brokers=2,
        checker_only="the bench's budget does not reach it on two brokers (3,000 examples: the last broker's "
        "shutdown while the other's session is lost and the bundle in flight); the checker finds it at its bound "
        "(10 steps)",
    ),
    Hunt("25132", "a stale Unstable state stops the clean-up", SystemTopicBench, ("orphan-cleaned",)),
    Hunt("22899", "a cold registry cache defers a lookup of a live owner", SystemTopicBench, ("lookup-not-stranded",)),
)


@contextlib.contextmanager
def _without_local_constants() -> Iterator[None]:
    """Hypothesis draws some values (about 5 %) from constants it reads in the project's loaded
    modules, so a derandomized run's draws depend on which modules the process has imported: a
    hunt run alone and the same hunt in the whole test run went different ways. A hunt draws
    without them, so it finds the same run wherever it runs. (Hypothesis's internals: where they
    are not as expected, the hunt runs as it is.)"""
    try:
        from hypothesis.internal.conjecture import providers
    except ImportError:  # pragma: no cover - another Hypothesis layout
        yield
        return
    original = getattr(providers, "_get_local_constants", None)
    cache = getattr(providers, "CONSTANTS_CACHE", None)
    if original is None or cache is None or not hasattr(providers, "Constants"):  # pragma: no cover
        yield
        return
    none = providers.Constants()
    providers._get_local_constants = lambda: none
    cache.cache.clear()  # the permitted constants cached so far may hold local ones
    try:
        yield
    finally:
        providers._get_local_constants = original
        cache.cache.clear()


def hunt(h: Hunt, shrink: bool = True, max_examples: int | None = None) -> InvariantBroken | None:
    """Run the bench on the bug's variant (derandomized: a fixed seed); the failure, or None."""
    machine = type(f"Bug{h.variant}", (h.machine,), {"config": h.config, "looks_for": h.expect})
    phases = [Phase.generate, Phase.shrink] if shrink else [Phase.generate]
    try:
        with _without_local_constants():
            run_state_machine_as_test(
                machine,
                settings=fixed(
                    max_examples=max_examples or h.max_examples,
                    stateful_step_count=h.steps,
                    phases=phases,
                    report_multiple_bugs=False,
                ),
            )
    except InvariantBroken as failure:
        return failure
    return None


def _recorded(page: str, variant: str) -> tuple[str, list[str]] | None:
    """The table row and the section ``page`` already holds for ``variant`` (None if it has none)."""
    row = next((line for line in page.splitlines() if line.startswith(f"| [#{variant}]")), None)
    found = re.search(rf"^## #{variant}:.*?(?=^## |\Z)", page, flags=re.MULTILINE | re.DOTALL)
    if row is None or found is None:
        return None
    return row, [*found.group(0).rstrip("\n").split("\n"), ""]


def _write(directory: Path, only: frozenset[str] = frozenset()) -> int:
    """Hunt every bug (or only those named, keeping the others' recorded runs as they are: a hunt
    of an unchanged bug may shrink differently once the protocol has new actions) and write the page."""
    runs = directory / "counterexamples"
    runs.mkdir(parents=True, exist_ok=True)
    page_file = directory / "counterexamples.md"
    old_page = page_file.read_text(encoding="utf-8") if page_file.exists() else ""
    rows, sections = [], []
    missing = 0
    for h in HUNTS:
        kept = _recorded(old_page, h.variant) if (only and h.variant not in only) or h.checker_only else None
        if kept is not None:
            rows.append(kept[0])
            sections += kept[1]
            continue
        started = time.perf_counter()
        failure = hunt(h)
        took = time.perf_counter() - started
        if failure is None:
            missing += 1
            print(f"#{h.variant}: NOT FOUND within {h.max_examples} examples", file=sys.stderr)
            rows.append(f"| #{h.variant} | {h.bug} | `{h.flags}` | not found | — |")
            continue
        run_file = runs / f"{h.variant}.json"
        if failure.run_file is not None:
            shutil.copyfile(failure.run_file, run_file)
        print(f"#{h.variant}: {', '.join(failure.invariants)} in {failure.steps} steps ({took:.0f} s)", file=sys.stderr)
        rows.append(
            f"| [#{h.variant}](https://github.com/apache/pulsar/pull/{h.variant}) | {h.bug} | `{h.flags}` | "
            f"{', '.join(f'`{i}`' for i in failure.invariants)} | {failure.steps} |"
        )
        timeline = str(failure).split("\nsaved:")[0]
        sections += [
            f"## #{h.variant}: {h.bug}",
            "",
            f"Machine `{h.machine.__name__}`, variant `{h.flags}`; replay with "
            f"`statechan replay docs/counterexamples/{h.variant}.json`.",
            "",
            "```text",
            timeline,
            "```",
            "",
        ]
    page = [
        "# Historical bugs found by the bench",
        "",
        "<!-- generated by `python -m properties.hunts --write docs`; do not edit by hand -->",
        "",
        "Each row is a fixed Pulsar bug put back into the model (`--variant` of `statechan simulate`; "
        "`statechan.cluster.config.VARIANTS`), the Hypothesis bench machine run on it with a fixed "
        "seed, and the shrunk counterexample: the invariant it breaks and the number of steps. The "
        "current protocol passes the same machines in the `ci` profile (`properties/test_bench.py`; "
        "what deeper searches find is in [findings.md](findings.md)). "
        "`properties/test_historical_bugs.py` checks, in `make test`, that each bug is still found "
        "within the `ci` budget and that each saved run below still breaks its invariant on the "
        "variant and not on the current protocol.",
        "",
        "| bug | what | variant flags | invariant broken | steps (shrunk) |",
        "|---|---|---|---|---|",
        *rows,
        "",
        *sections,
    ]
    page_file.write_text("\n".join(page), encoding="utf-8")
    return missing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m properties.hunts", description=__doc__)
    parser.add_argument("--write", metavar="DOCS", type=Path, required=True, help="the docs directory")
    parser.add_argument(
        "--only",
        metavar="VARIANT",
        action="append",
        default=[],
        help="hunt only this variant again (repeatable); the others' recorded runs stay",
    )
    args = parser.parse_args(argv)
    unknown = sorted(set(args.only) - {h.variant for h in HUNTS})
    if unknown:
        parser.error(f"--only: no hunt for variant {', '.join(unknown)} (known: {', '.join(h.variant for h in HUNTS)})")
    return 1 if _write(args.write, frozenset(args.only)) else 0


if __name__ == "__main__":
    raise SystemExit(main())
