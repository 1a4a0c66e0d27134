"""Pulsar's fixed channel bugs that the model can put back, each with the bound at which the
model checker finds it: one table that the tests, the hunts and the docs all read; and beside it
the fixes proposed upstream (docs/upstream/), each with a bound where its finding breaks an
invariant and the fixed variant is clean (:data:`UPSTREAM_FIXES`).

A :class:`KnownBug` names a variant of :data:`statechan.cluster.config.VARIANTS` (its key is the
PR that fixed the bug), the catalogue entry of ``../shared/reference/pulsar-channel-bugs.md``, the
invariants its counterexample may break, and the smallest bound found where ``statechan check
--variant N`` breaks one of them while the current protocol (all switches off) is clean:
:meth:`KnownBug.command` is that command line.
"""

from __future__ import annotations

from dataclasses import dataclass

from statechan.checker import Bounds, CheckResult, check
from statechan.cluster.config import StoreKind
from statechan.invariants.catalogue import checked_ids


def check_options(
    store: StoreKind, bounds: Bounds, skip: tuple[str, ...] = (), also: tuple[str, ...] = ()
) -> list[str]:
    """The ``statechan check`` options of a search (those that differ from the defaults)."""
    named = [*(arg for i in skip for arg in ("--skip", i)), *(arg for h in also for arg in ("--also", h))]
    return [*(["--store", store.value] if store is not StoreKind.system_topic else []), *bounds.options(), *named]


@dataclass(frozen=True)
class KnownBug:
    variant: str
    """Its key in ``VARIANTS``: the number of the PR that fixed it."""
    catalogue: str
    """Its entry in the bug catalogue (``B30``)."""
    title: str
    breaks: tuple[str, ...]
    """The invariants its shortest counterexample may break (the first one found ends the search)."""
    bounds: Bounds
    store: StoreKind = StoreKind.system_topic
    skip: tuple[str, ...] = ()
    """Invariants left out at this bound: findings of the current protocol (docs/findings.md)."""
    small: bool = True
    """Both searches (the variant's and the current protocol's) take seconds: run by ``make test``."""

    @property
    def pr(self) -> int:
        return int(self.variant)

    def invariants(self) -> list[str]:
        return checked_ids(self.skip)

    def check(self, variant: str | None = None, por: bool = True) -> CheckResult:
        """The checker at this bug's bound, on its variant (or on ``variant``: ``current``)."""
        return check(self.bounds, self.store, variant or self.variant, invariants=self.invariants(), por=por)

    def options(self) -> list[str]:
        """The command-line options of this bug's search (those that differ from the defaults)."""
        return check_options(self.store, self.bounds, self.skip)

    def command(self) -> str:
        return " ".join(["statechan check --variant", self.variant, *self.options()])


KNOWN_BUGS: tuple[KnownBug, ...] = (
    KnownBug(
        "20110",
        "B2",
        "a lagging reader refuses a version jump after compaction",
        ("views-converge",),
        Bounds(compactions=1, depth=9),
    ),
    KnownBug(
        "25379",
        "B11",
        "a restarted broker ignores an Assigning addressed to it",
        ("in-flight-acted-on",),
        Bounds(crashes=1, restarts=1, admin=0),
    ),
    KnownBug(
        "26520",
        "B9",
        "clean-up overrides once and never looks again; assignments after disable",
        ("departure-complete", "orphan-cleaned", "lookup-answers-live-owner"),
        Bounds(shutdowns=1, admin=0, ticks=3),
    ),
    KnownBug(
        "24478",
        "B14",
        "a broker without a session answers lookups from its stale view",
        ("lookup-answers-live-owner", "single-owner"),
        Bounds(session_losses=1, admin=0),
    ),
    KnownBug(
        "24186",
        "B13",
        "a lost compare-and-set is retried without the resolver",
        ("one-value-per-version", "version-monotonic"),
        Bounds(lookups=2, admin=0, ticks=1),
        store=StoreKind.metadata_store,
    ),
    KnownBug(
        "21721",
        "B30",
        "the leader's monitor tombstones healthy Owned bundles",
        ("no-spurious-takeover",),
        Bounds(admin=0, ticks=3, tombstone_delay_s=30),
    ),
    KnownBug(
        "23064",
        "B7",
        "clean-up overrides bundles whose source is dead but whose owner is alive",
        ("no-spurious-takeover",),
        Bounds(crashes=1, ticks=3),
    ),
    KnownBug(
        "21811",
        "B6",
        "lookups answer an inactive owner; unplaceable orphans are left as they are",
        ("lookup-answers-live-owner",),
        Bounds(lookups=2, admin=0, crashes=1, ticks=1),
    ),
    KnownBug(
        "23359",
        "B16",
        "a broker whose registry node is deleted does not register again",
        ("registered-while-running",),
        Bounds(brokers=1, lookups=0, admin=0, crashes=1, restarts=1),
    ),
    KnownBug(
        "24932",
        "B16",
        "a broker does not register again when its session is re-established",
        ("registered-while-running",),
        Bounds(brokers=1, lookups=0, admin=0, session_losses=1),
    ),
    KnownBug(
        "23516",
        "B36",
        "the election stays empty after the sessions come back",
        ("leader-elected",),
        Bounds(brokers=1, lookups=0, admin=0, session_losses=1),
    ),
    KnownBug(
        "21894",
        "B37",
        "the elected leader's id matches no broker id",
        ("leader-elected",),
        Bounds(lookups=0, admin=0),
    ),
    KnownBug(
        "20677",
        "B35",
        "a lookup racing an assignment hangs until its timeout",
        ("lookup-not-stranded",),
        Bounds(lookups=2, admin=0),
    ),
    KnownBug(
        "22743",
        "B21",
        "a Deleted split parent or a forced Free lingers until the monitor's tombstone delay",
        ("semi-terminal-tombstoned",),
        Bounds(admin_kinds=("split",)),
    ),
    KnownBug(
        "22379",
        "B22",
        "an unload is reported done on a record it did not cause",
        ("unload-completion-matches",),
        Bounds(admin_kinds=("transfer",), shutdowns=1, ticks=0),
    ),
    KnownBug(
        "22899",
        "B33",
        "a lookup's owner check on a cold registry cache defers on a live owner",
        ("lookup-not-stranded",),
        Bounds(lookups=2, admin=0),
    ),
    KnownBug(
        "25946",
        "B15",
        "the syncer loses deletions",
        ("syncer-equivalence",),
        Bounds(admin_kinds=("unload",), ticks=3, tombstone_delay_s=30),
        store=StoreKind.both,
        small=False,
    ),
    KnownBug(
        "23349",
        "B8",
        "a graceful shutdown with no broker to take its bundles writes nothing",
        ("departure-complete",),
        Bounds(admin=0, session_losses=1, shutdowns=1, ticks=3),
        small=False,
    ),
    KnownBug(
        "22859",
        "B34",
        "a forced unload is never reported done",
        ("unload-not-stranded",),
        Bounds(admin=2, ticks=0),
    ),
    KnownBug(
        "25132",
        "B20",
        "a stale Unstable metadata state stops the monitor and the clean-up",
        ("orphan-cleaned",),
        Bounds(admin=0, session_losses=1, crashes=1, ticks=9),
        small=False,
    ),
)
"""Every bug variant the checker finds, with its bound (``VARIANTS`` holds two more whose
counterexamples need the history invariants or a bigger bound: see docs/bench.md)."""


@dataclass(frozen=True)
class UpstreamFix:
    """A fix proposed upstream (docs/upstream/NN-*.md) checked at a bound where its finding breaks
    an invariant: the search of ``broken`` (the current protocol, or master as it is) finds a
    counterexample there, and the search of ``variant`` (the fix switched on) is complete and clean."""

    report: str
    """The report's number (``05``: docs/upstream/05-*.md)."""
    finding: int
    """Its finding in docs/findings.md."""
    title: str
    variant: str
    """The fixed variant's key in ``VARIANTS`` (``fix-05``)."""
    breaks: tuple[str, ...]
    """The invariants the broken variant's counterexample may break at this bound."""
    bounds: Bounds
    broken: str = "current"
    """The variant that breaks at this bound: ``current``, or ``master-03`` (the model's guard removed)."""
    store: StoreKind = StoreKind.system_topic
    skip: tuple[str, ...] = ()
    """Left out of both searches: another documented finding at this bound, or what the fix gives up."""
    hazards: tuple[str, ...] = ()
    """Hazard entries of the catalogue checked too (``--also``)."""
    small: bool = True
    """Both searches take seconds: run by ``make test``; else run by hand (figures in the report)."""
    gives_up: tuple[str, ...] = ()
    """Flows of the model the fix stops walking by design, which a vacuity guard may name (fix 03/08:
    a split parent's tombstone waits for the monitor's delay, past any small bound)."""

    def invariants(self) -> list[str]:
        return checked_ids(self.skip, self.hazards)

    def holds(self, result: CheckResult) -> bool:
        """No invariant broken and every state can settle; no flow left unwalked but those given up."""
        unwalked = {gap.flow for gap in getattr(result, "never_reached", ())}
        return result.violation is None and result.liveness is None and unwalked <= set(self.gives_up)

    def check(self, variant: str | None = None, por: bool = True) -> CheckResult:
        """The checker at this bound on the fixed variant (or on ``variant``: the broken one)."""
        return check(self.bounds, self.store, variant or self.variant, invariants=self.invariants(), por=por)

    def options(self) -> list[str]:
        return check_options(self.store, self.bounds, self.skip, self.hazards)

    def command(self, variant: str | None = None) -> str:
        return " ".join(["statechan check --variant", variant or self.variant, *self.options()])


_UNTIMELY_ARTEFACTS = ("single-owner", "no-spurious-takeover", "lookup-answers-live-owner")
"""What a bound without the timing assumption breaks before any finding: the monitor overrides a state
its broker has not read yet (docs/findings.md, "Assumptions of the bench")."""
_KEPT_DELETED = ("semi-terminal-tombstoned",)
"""What fix 03/08 gives up by design: a split parent's Deleted stays until the tombstone delay."""

UPSTREAM_FIXES: tuple[UpstreamFix, ...] = (
    UpstreamFix(
        "01",
        1,
        "a reader behind the compaction horizon misses a deletion",
        "fix-01",
        ("views-converge",),
        Bounds(admin_kinds=("unload",), compactions=1, ticks=3, tombstone_delay_s=30, timely_delivery_ms=None),
        skip=_UNTIMELY_ARTEFACTS,
    ),
    UpstreamFix(
        "02",
        2,
        "a restarted broker ignores its previous incarnation's Releasing",
        "fix-02",
        ("release-acted-on",),
        Bounds(crashes=1, restarts=1, admin_kinds=("unload",), ticks=0),
        hazards=("release-acted-on",),
    ),
    UpstreamFix(
        "02",
        2,
        "a restarted broker leaves its previous incarnation's Deleted for the monitor",
        "fix-02",
        ("release-acted-on",),
        Bounds(crashes=1, restarts=1, admin_kinds=("split",), ticks=1),
        small=False,
        hazards=("release-acted-on",),
    ),
    UpstreamFix(
        "03",
        3,
        "a lookup's assignment re-creates a split parent (master: no namespace check)",
        "fix-03",
        ("single-owner",),
        Bounds(lookups=2, admin_kinds=("split",)),
        broken="master-03",
        skip=_KEPT_DELETED,
        gives_up=("tombstone",),
    ),
    UpstreamFix(
        "04",
        4,
        "a restarted owner registers again after the leader's clean-up handed its bundle over",
        "fix-04",
        ("single-owner",),
        Bounds(admin=0, crashes=1, restarts=1, ticks=3),
    ),
    UpstreamFix(
        "05",
        5,
        "a departing destination's clean-up completes a transfer without the live source",
        "fix-05",
        ("single-owner",),
        Bounds(brokers=3, admin_kinds=("transfer",), shutdowns=1, ticks=0),
        small=False,
    ),
    UpstreamFix(
        "07",
        7,
        "the monitor hands a restarted broker's split over (with finding 4's window at the same bound)",
        "fix-04-07",
        ("single-owner",),
        Bounds(crashes=1, restarts=1, admin_kinds=("split",), ticks=3),
        small=False,
    ),
    UpstreamFix(
        "08",
        8,
        "a create prepared before a split lands after the parent's node is deleted",
        "fix-08",
        ("single-owner",),
        Bounds(lookups=2, admin_kinds=("split",)),
        store=StoreKind.metadata_store,
        skip=_KEPT_DELETED,
        small=False,
        gives_up=("tombstone",),
    ),
    UpstreamFix(
        "10",
        10,
        "a lookup deferred on an assignment waits for its timeout when the store skips the Owned",
        "fix-10",
        ("lookup-not-stranded",),
        Bounds(admin_kinds=("split",), crashes=1, ticks=3),
        store=StoreKind.metadata_store,
    ),
)
"""Each upstream report's fix at a bound where its finding breaks an invariant (docs/upstream/README.md).
Findings 4's split form and 5, 7, 8 and 9 are also replayed from their saved runs and scenarios with
the fix on (tests/test_upstream_fixes.py)."""


def fix_table(fixes: tuple[UpstreamFix, ...] = UPSTREAM_FIXES) -> list[str]:
    """The markdown table of docs/upstream/README.md: each fix's search beside the broken one's, measured now."""
    import time

    rows = [
        "| report | invariant | bound (`statechan check …`) | broken variant | fixed variant | fix holds | run |",
        "|---|---|---|---|---|---|---|",
    ]
    for fix in fixes:
        started = time.perf_counter()
        broken = fix.check(fix.broken)
        broken_s = time.perf_counter() - started
        started = time.perf_counter()
        fixed = fix.check()
        fixed_s = time.perf_counter() - started
        found = (broken.violation or broken.liveness or "nothing").split(" ")[0].rstrip(":")
        clean = fix.holds(fixed) and fixed.complete
        verdict = "clean" if clean else (fixed.violation or fixed.liveness or "stopped")
        held = "yes" if clean and broken.violation is not None else "**no**"
        rows.append(
            f"| [{fix.report}] | `{found}` | `{' '.join(fix.options()) or '(defaults)'}` "
            f"| `{fix.broken}`: {len(broken.path)} steps, {broken.states:,} states, {broken_s:.1f} s "
            f"| `{fix.variant}`: {verdict.split(' ')[0]}, {fixed.states:,} states, {fixed_s:.1f} s | {held} "
            f"| {'make test' if fix.small else 'by hand'} |"
        )
    return rows


def known_bug(variant: str) -> KnownBug:
    for bug in KNOWN_BUGS:
        if bug.variant == variant:
            return bug
    known = ", ".join(b.variant for b in KNOWN_BUGS)
    raise KeyError(f"no known bug {variant!r}; known: {known}")


def table(bugs: tuple[KnownBug, ...] = KNOWN_BUGS) -> list[str]:
    """The markdown table of docs/bench.md: each bug's search and the current protocol's, measured now."""
    import time

    rows = [
        "| variant | PR | catalogue | invariant broken | bound (`statechan check …`) | steps | states | seconds "
        "| current protocol at the bound |",
        "|---|---|---|---|---|---:|---:|---:|---|",
    ]
    for bug in bugs:
        started = time.perf_counter()
        found = bug.check()
        took = time.perf_counter() - started
        current = bug.check("current")
        broken = (found.violation or "not found").split(" ")[0].rstrip(":")
        if not current.ok:
            clean = f"breaks {(current.violation or current.liveness or '').split(' ')[0]}"
        else:
            clean = "clean" if current.within_bound else f"nothing found, stopped at the {current.stopped}"
        rows.append(
            f"| {bug.variant} | [#{bug.pr}](https://github.com/apache/pulsar/pull/{bug.pr}) | {bug.catalogue} "
            f"| `{broken}` | `{' '.join(bug.options()) or '(defaults)'}` | {len(found.path)} | {found.states:,} "
            f"| {took:.1f} | {clean}, {current.states:,} states |"
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m statechan.known_bugs", description="Check every known bug at its bound; print the table."
    )
    parser.add_argument("--all", action="store_true", help="the big bounds too (minutes each)")
    parser.add_argument("--fixes", action="store_true", help="the upstream fixes' table instead")
    args = parser.parse_args(argv)
    if args.fixes:
        fixes = UPSTREAM_FIXES if args.all else tuple(f for f in UPSTREAM_FIXES if f.small)
        print("\n".join(fix_table(fixes)))
        return 0
    bugs = KNOWN_BUGS if args.all else tuple(b for b in KNOWN_BUGS if b.small)
    print("\n".join(table(bugs)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
