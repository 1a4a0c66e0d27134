"""``statechan balance recommend``: which load-balance settings to trust on an operator's cluster.

The candidates are the operator's own settings and, for each combination the lab models, the
settings that matter changed one at a time (a grid over single settings around the operator's
``broker.conf``). Each runs over held-out seeds on the operator's cluster (and recorded load);
the table ranks them by the balance they reach (the median late spread of broker load), with the
moves they cost, both with their range over seeds. The trade-off is the frontier of candidates
no other beats on both. The recommendation is the candidate within :data:`TOLERANCE` of the best
balance with the fewest moves; its ``broker.conf`` lines are the changes from the operator's. A
dry run of it on the recorded state lists the moves it would make now, with the balance before
and after (as Kafka Cruise Control's proposals do).
"""

from __future__ import annotations

import html
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict

from statechan.balance.conf import OperatorCluster, OperatorConf, strategy_lines
from statechan.balance.lab import LabConfig, setup
from statechan.balance.load import (
    MB,
    NUM_LONG_SAMPLES,
    Reporter,
    max_usage,
    served,
    topic_bundles,
    usages,
)
from statechan.balance.placement import make_placement, modular_select
from statechan.balance.settings import BASELINE, STRATEGIES, BalancerConfig, ShedderKind
from statechan.balance.shedders import TransferShedder, make_shedder
from statechan.balance.sweep import Cell, Row, show

TOLERANCE = 0.05
"""A candidate within 5 % of the best median late spread counts as balancing as well."""

VARIATIONS: dict[str, list[tuple[str, object]]] = {
    "threshold": [
        ("threshold_shedder_pct", 5.0),
        ("threshold_shedder_pct", 20.0),
        ("history_percentage", 0.5),
        ("grace_period_min", 60),
    ],
    "lruww": [("average_usage_difference_pct", 5.0), ("average_usage_difference_pct", 20.0)],
    "transfer": [("target_std", 0.1), ("target_std", 0.05), ("condition_hit_count_threshold", 1)],
    "memory": [("memory_weight", 0.0), ("direct_memory_weight", 0.0)],
}
"""The settings that matter, per strategy, each tried alone around the operator's value."""


class Candidate(BaseModel):
    """One setting of the load balancer to try."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    strategy: str
    balancer: BalancerConfig
    lines: tuple[str, ...]
    """The ``broker.conf`` lines that turn the operator's settings into these."""


def candidates(conf: OperatorConf, strategies: Sequence[str] | None = None) -> list[Candidate]:
    """The operator's settings, then each combination with the operator's settings and with each
    setting in :data:`VARIATIONS` changed alone; the no-shedding baseline last."""
    base = conf.balancer
    names = list(strategies) if strategies else ["threshold+lltmr", "threshold+lruww", "transfer+extensible"]
    out: list[Candidate] = []
    current = conf.strategy
    seen: set[tuple[str, str]] = set()

    def add(name: str, strategy: str, balancer: BalancerConfig) -> None:
        key = (strategy, balancer.model_dump_json())
        if key in seen:
            return
        seen.add(key)
        lines: list[str] = []
        shedder, placement = STRATEGIES.get(strategy, (conf.shedder, conf.placement))
        if (shedder, placement) != (conf.shedder, conf.placement):
            mine = set(strategy_lines(conf.shedder, conf.placement))
            lines.extend(line for line in strategy_lines(shedder, placement) if line not in mine)
        lines.extend(balancer.pulsar_lines(against=base))
        out.append(Candidate(name=name, strategy=strategy, balancer=balancer, lines=tuple(dict.fromkeys(lines))))

    add(f"current ({current})", current if current in STRATEGIES else "threshold+lltmr", base)
    for strategy in names:
        add(strategy, strategy, base)
        shedder, placement = STRATEGIES[strategy]
        groups = ["threshold"] if shedder is ShedderKind.threshold else []
        groups += ["lruww"] if placement.name == "least_resource_usage_with_weight" else []
        groups += ["transfer"] if shedder is ShedderKind.transfer else []
        groups += ["memory"]
        for group in groups:
            for name, value in VARIATIONS[group]:
                if getattr(base, name) == value:
                    continue
                if group == "memory" and getattr(base, name) == 0:
                    continue
                changed = base.model_copy(update={name: value})
                alias = BalancerConfig.model_fields[name].alias
                add(f"{strategy}, {alias}={value}", strategy, changed)
    add("no shedding (baseline)", BASELINE, base.model_copy(update={"shedding_enabled": False}))
    return out


def cells(
    found: Sequence[Candidate], cluster: OperatorCluster, seeds: Sequence[int], hours: float | None = None
) -> list[Cell]:
    """Every candidate on the operator's cluster, once per seed."""
    out = []
    for candidate in found:
        shedder, placement = STRATEGIES[candidate.strategy]
        for seed in seeds:
            update: dict[str, object] = {"seed": seed}
            if hours is not None:
                update["hours"] = hours
            lab = LabConfig(
                workload=cluster.workload.model_copy(update=update),
                shedder=shedder,
                placement=placement,
                balancer=candidate.balancer,
                cluster=cluster.spec,
            )
            out.append(
                Cell(
                    strategy=candidate.strategy,
                    setting=candidate.name,
                    workload_name=cluster.spec.name,
                    lab=lab,
                    group=candidate.name,
                )
            )
    return out


@dataclass
class Ranked:
    """One candidate's results over the seeds."""

    candidate: Candidate
    spread: list[float]
    moves_per_hour: list[float]
    peak: list[float]
    moved_3plus: list[float]
    splits: list[float]
    frontier: bool = False
    chosen: bool = False

    @property
    def balance(self) -> float:
        return statistics.median(self.spread)

    @property
    def cost(self) -> float:
        return statistics.median(self.moves_per_hour)


@dataclass
class Recommendation:
    ranked: list[Ranked]
    chosen: Ranked
    current: Ranked
    notes: list[str] = field(default_factory=list)

    def table(self) -> list[Row]:
        rows: list[Row] = []
        for rank, r in enumerate(self.ranked, 1):
            mark = "recommended" if r.chosen else ("frontier" if r.frontier else "")
            rows.append(
                {
                    "rank": rank,
                    "candidate": r.candidate.name,
                    "late spread of broker load": show(r.spread, 3),
                    "late peak": show(r.peak, 3),
                    "moves/h": show(r.moves_per_hour, 1),
                    "bundles moved 3+": show(r.moved_3plus, 0),
                    "splits": show(r.splits, 0),
                    "": mark,
                }
            )
        return rows

    def trade_off(self) -> str:
        best = self.ranked[0]
        c, cur = self.chosen, self.current
        parts = [
            f"Best balance: {best.candidate.name} (late spread {best.balance:.3f}, {best.cost:.1f} moves/h).",
            f"Recommended: {c.candidate.name}: late spread {c.balance:.3f} against {cur.balance:.3f} now "
            f"({_pct(c.balance, cur.balance)}), {c.cost:.1f} moves/h against {cur.cost:.1f} "
            f"({_pct(c.cost, cur.cost)}).",
        ]
        frontier = [r for r in self.ranked if r.frontier]
        if len(frontier) > 1:
            steps = ", ".join(f"{r.candidate.name} ({r.balance:.3f} at {r.cost:.1f}/h)" for r in frontier)
            parts.append(f"The frontier (none beats these on both): {steps}.")
        return " ".join(parts)


def _pct(new: float, old: float) -> str:
    if old == 0:
        return "no change" if new == 0 else "from 0"
    change = 100.0 * (new - old) / old
    return f"{change:+.0f} %"


def rank(found: Sequence[Candidate], rows: Sequence[Row]) -> Recommendation:
    """Rank the candidates by their median late spread, mark the frontier, choose one."""
    by: dict[str, list[Row]] = {}
    for row in rows:
        by.setdefault(str(row["group"]), []).append(row)
    ranked: list[Ranked] = []
    for candidate in found:
        runs = by.get(candidate.name, [])
        if not runs:
            continue
        ranked.append(
            Ranked(
                candidate,
                [float(r["late_spread"] or 0) for r in runs],
                [float(r["moves_per_hour"] or 0) for r in runs],
                [float(r["late_peak"] or 0) for r in runs],
                [float(r["moved_3plus"] or 0) for r in runs],
                [float(r["splits"] or 0) for r in runs],
            )
        )
    if not ranked:
        raise ValueError("no candidate ran")
    for r in ranked:
        r.frontier = not any(
            (o.balance <= r.balance and o.cost <= r.cost) and (o.balance < r.balance or o.cost < r.cost) for o in ranked
        )
    ranked.sort(key=lambda r: (r.balance, r.cost))
    best = ranked[0].balance
    eligible = [r for r in ranked if r.balance <= best * (1 + TOLERANCE) and r.candidate.strategy != BASELINE]
    chosen = min(eligible or ranked, key=lambda r: (r.cost, r.balance))
    chosen.chosen = True
    current = next(r for r in ranked if r.candidate.name.startswith("current"))
    return Recommendation(ranked, chosen, current)


# -- the dry run -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Proposal:
    """A move the chosen settings would make now."""

    bundle: str
    source: str
    destination: str
    throughput_mb: float
    msg_rate: float
    transfer: bool


@dataclass
class DryRun:
    proposals: list[Proposal]
    before: dict[str, float]
    after: dict[str, float]
    recorded: bool


def _balance(load: np.ndarray) -> dict[str, float]:
    return {
        "std": round(float(load.std()), 4),
        "spread": round(float(load.max() - load.min()), 4),
        "peak": round(float(load.max()), 4),
    }


def dry_run(config: LabConfig) -> DryRun:
    """One shedding cycle of ``config`` on the cluster as recorded (or as the workload starts):
    every broker's report taken now with ample history (the long-term averages are the current
    rates), the TransferShedder's hit count already past its threshold. Balance before and after
    is the lab's model of the brokers' usage, for the owners before and after the moves."""
    cfg = config.balancer
    s = setup(config)
    w = s.workload
    topic_bundle = topic_bundles(s.traffic, s.bundles)
    bt = s.traffic.at(0, topic_bundle, len(s.bundles))
    reporter = Reporter(cfg, w.brokers, len(s.bundles), config.manager)
    load_now = served(bt, s.owner, w.brokers)
    usage = usages(w, s.capacity, load_now, 0)
    spec = config.cluster
    if spec is not None:
        for i, b in enumerate(spec.brokers):
            if b.name in spec.recorded_usage:
                usage[i] = spec.recorded_usage[b.name]
    reporter.observe(0, usage, load_now, bt, s.owner)
    data = reporter.data
    data.long_rate[:] = bt.rate
    data.long_throughput[:] = bt.throughput
    data.short_rate[:] = bt.rate
    data.short_throughput[:] = bt.throughput
    reporter.long_samples[:] = NUM_LONG_SAMPLES
    shedder = make_shedder(config.shedder if cfg.shedding_enabled else ShedderKind.none)
    if isinstance(shedder, TransferShedder):
        shedder.hit_count = cfg.condition_hit_count_threshold
    placement = make_placement(config.placement, config.pulsar_2_10_overload)
    rng = np.random.default_rng([w.seed, 6])
    owner = s.owner.copy()
    everyone = list(range(w.brokers))
    proposals: list[Proposal] = []
    for move in shedder.find(data, cfg, owner):
        if int(owner[move.bundle]) != move.source:
            continue
        destination = move.destination
        if destination is None:
            if config.placement.name == "extensible":
                destination = placement.select(everyone, move.bundle, data, cfg, rng)
            else:
                mates = owner[(s.bundles.namespace == s.bundles.namespace[move.bundle]) & s.bundles.alive]
                counts = np.bincount(mates[mates >= 0], minlength=w.brokers)
                destination = modular_select(placement, everyone, [int(c) for c in counts], move.bundle, data, cfg, rng)
        if destination is None or destination == move.source:
            continue
        owner[move.bundle] = destination
        data.preallocated.setdefault(destination, set()).add(move.bundle)
        proposals.append(
            Proposal(
                s.bundles.key(move.bundle),
                s.broker_names[move.source],
                s.broker_names[destination],
                round(float(bt.throughput[move.bundle]) / MB, 2),
                round(float(bt.rate[move.bundle]), 1),
                move.destination is not None,
            )
        )
    before = max_usage(usages(w, s.capacity, load_now, 0))
    after = max_usage(usages(w, s.capacity, served(bt, owner, w.brokers), 0))
    return DryRun(proposals, _balance(before), _balance(after), bool(spec is not None and spec.recorded))


# -- pictures ----------------------------------------------------------------------------------


def frontier_png(rec: Recommendation, path: Path) -> None:
    """Moves per hour against late spread, each candidate's median with its range over seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(11, 7))
    strategies = sorted({r.candidate.strategy for r in rec.ranked})
    colours = {s: plt.get_cmap("tab10")(i) for i, s in enumerate(strategies)}
    named: list[str] = []
    for rank_, r in enumerate(rec.ranked, 1):
        x, y = r.cost, r.balance
        xerr = [[x - min(r.moves_per_hour)], [max(r.moves_per_hour) - x]]
        yerr = [[y - min(r.spread)], [max(r.spread) - y]]
        marker = "*" if r.chosen else ("o" if r.frontier else ".")
        size = 16 if r.chosen else (8 if r.frontier else 6)
        ax.errorbar(
            x,
            y,
            xerr=xerr,
            yerr=yerr,
            fmt=marker,
            markersize=size,
            color=colours[r.candidate.strategy],
            alpha=0.9 if r.frontier else 0.35,
            elinewidth=0.8,
            capsize=2,
        )
        if r.frontier or r.chosen or r.candidate.name.startswith("current"):
            ax.annotate(f"{rank_}", (x, y), fontsize=8, xytext=(5, 4), textcoords="offset points")
            named.append(f"{rank_}: {r.candidate.name}{'  (recommended)' if r.chosen else ''}")
    ax.text(
        0.99,
        0.99,
        "\n".join(named),
        transform=ax.transAxes,
        fontsize=7,
        va="top",
        ha="right",
        bbox={"boxstyle": "round", "facecolor": "white", "alpha": 0.85},
    )
    front = sorted((r for r in rec.ranked if r.frontier), key=lambda r: r.cost)
    ax.plot([r.cost for r in front], [r.balance for r in front], color="grey", linestyle="--", linewidth=0.8)
    for s in strategies:
        ax.plot([], [], "o", color=colours[s], label=s)
    ax.legend(loc="lower right", fontsize=8)
    ax.set_xlabel("moves per hour (median, range over seeds)")
    ax.set_ylabel("late spread of broker load (median, range over seeds)")
    ax.set_title(f"Trade-off: recommended {rec.chosen.candidate.name}")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def frontier_html(rec: Recommendation, dry: DryRun | None, path: Path) -> None:
    """The same picture as one self-contained page (inline SVG, hover for each candidate), the
    ranked table, the lines to apply and the dry run's moves."""
    width, height, pad = 900.0, 520.0, 60.0
    xs = [v for r in rec.ranked for v in r.moves_per_hour] or [0.0]
    ys = [v for r in rec.ranked for v in r.spread] or [0.0]
    x0, x1 = 0.0, max(xs) * 1.1 or 1.0
    y0, y1 = min(ys) * 0.9, max(ys) * 1.1 or 1.0

    def px(v: float) -> float:
        return pad + (v - x0) / (x1 - x0) * (width - 2 * pad)

    def py(v: float) -> float:
        return height - pad - (v - y0) / ((y1 - y0) or 1.0) * (height - 2 * pad)

    marks = []
    for r in rec.ranked:
        cx, cy = px(r.cost), py(r.balance)
        colour = "#d62728" if r.chosen else ("#1f77b4" if r.frontier else "#999")
        title = html.escape(f"{r.candidate.name}: late spread {show(r.spread, 3)}, moves/h {show(r.moves_per_hour, 1)}")
        marks.append(
            f'<line x1="{px(min(r.moves_per_hour)):.1f}" x2="{px(max(r.moves_per_hour)):.1f}" '
            f'y1="{cy:.1f}" y2="{cy:.1f}" '
            f'stroke="{colour}" stroke-opacity=".4"/><line x1="{cx:.1f}" x2="{cx:.1f}" y1="{py(min(r.spread)):.1f}" '
            f'y2="{py(max(r.spread)):.1f}" stroke="{colour}" stroke-opacity=".4"/>'
            f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="{7 if r.chosen else 5}" fill="{colour}">'
            f"<title>{title}</title></circle>"
        )
    rows = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row.values()) + "</tr>" for row in rec.table()
    )
    head = "".join(f"<th>{html.escape(k)}</th>" for k in rec.table()[0])
    lines = "\n".join(rec.chosen.candidate.lines) or "(no change)"
    moves = ""
    if dry is not None:
        moves = "".join(
            f"<tr><td>{html.escape(p.bundle)}</td><td>{html.escape(p.source)}</td><td>{html.escape(p.destination)}</td>"
            f"<td>{p.throughput_mb}</td><td>{p.msg_rate}</td><td>{'transfer' if p.transfer else 'unload'}</td></tr>"
            for p in dry.proposals
        )
        moves = (
            f"<h3>Dry run: {len(dry.proposals)} moves now</h3><p>balance before {dry.before}, after {dry.after}</p>"
            "<table><tr><th>bundle</th><th>from</th><th>to</th><th>MB/s</th><th>msg/s</th><th>how</th></tr>"
            f"{moves}</table>"
        )
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>Recommendation</title>
<style>body{{font-family:sans-serif;margin:20px}} td,th{{padding:2px 8px;text-align:left}}
pre{{background:#f4f4f4;padding:8px}}</style>
</head><body><h2>Load-balance recommendation</h2><p>{html.escape(rec.trade_off())}</p>
<svg width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg">
<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" stroke="#444"/>
<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{height - pad}" stroke="#444"/>
<text x="{width / 2 - 80}" y="{height - 20}">moves per hour</text>
<text x="5" y="{pad - 20}">late spread of broker load</text>
<text x="{pad - 10}" y="{height - pad + 16}">{x0:g}</text>
<text x="{width - pad - 20}" y="{height - pad + 16}">{x1:.1f}</text>
<text x="5" y="{height - pad}">{y0:.3f}</text><text x="5" y="{pad}">{y1:.3f}</text>
{"".join(marks)}</svg>
<h3>Candidates</h3><table><tr>{head}</tr>{rows}</table>
<h3>broker.conf lines to apply</h3><pre>{html.escape(lines)}</pre>{moves}
</body></html>"""
    path.write_text(page, encoding="utf-8")
