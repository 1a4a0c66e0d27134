"""Pictures of a run: every broker's load over time with the moves marked, as a PNG
(matplotlib, imported here only) and as one self-contained HTML page (inline SVG and a few
lines of script: no network needed to open it)."""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np

from statechan.balance.lab import Result


def png(result: Result, path: Path) -> None:
    """Per-broker load (thin lines), the mean and the maximum, and a tick for each move."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    load = result.load * 100
    hours = np.arange(load.shape[0]) / 60.0
    splits = bool(result.splits)
    rows = 4 if splits else 3
    ratios = (4, 1.3, 1, 1.3) if splits else (4, 1.3, 1)
    fig, axes = plt.subplots(rows, 1, figsize=(11, 7.5 + (1.8 if splits else 0)), sharex=True, height_ratios=ratios)
    top, middle, bottom = axes[0], axes[1], axes[2]
    top.plot(hours, load, color="tab:blue", alpha=0.08, linewidth=0.6)
    top.plot(hours, load.mean(axis=1), color="black", linewidth=1.4, label="mean")
    top.plot(hours, load.max(axis=1), color="tab:red", linewidth=1.0, label="max")
    top.set_ylabel("broker load (max usage, %)")
    top.set_ylim(0, 100)
    top.legend(loc="upper left")
    m = result.measures()
    top.set_title(f"{result.config.label()}: {m['moves']} moves, {m['splits']} splits, late spread {m['late_spread']}")
    middle.plot(hours, result.std() * 100, color="tab:purple", linewidth=0.8, label="std")
    middle.plot(
        hours,
        (result.load.max(axis=1) - result.load.min(axis=1)) * 100,
        color="tab:gray",
        linewidth=0.6,
        label="spread",
    )
    middle.set_ylabel("std, spread (%)")
    middle.legend(loc="upper left", fontsize=8)
    per_hour = np.bincount([e.minute // 60 for e in result.events], minlength=int(np.ceil(result.hours)))
    bottom.bar(np.arange(len(per_hour)) + 0.5, per_hour, width=0.9, color="tab:orange")
    bottom.set_ylabel("moves / h")
    bottom.set_xlabel("hours")
    for e in result.events:
        top.axvline(e.minute / 60.0, ymin=0, ymax=0.03, color="tab:orange", linewidth=0.5)
    for sp in result.splits:
        top.axvline(sp.minute / 60.0, ymin=0.97, ymax=1.0, color="tab:green", linewidth=0.8)
    if splits:
        ns = result.namespace_bundles
        grown = np.flatnonzero(ns[-1] != ns[0])
        ax = axes[3]
        for n in grown[:12]:
            ax.step(hours, ns[:, n], where="post", linewidth=1.0, label=result_namespace(result, int(n)))
        ax.set_ylabel("bundles / namespace")
        if grown.size:
            ax.legend(loc="upper left", fontsize=7, ncol=3)
        bottom.set_xlabel("")
        ax.set_xlabel("hours")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def result_namespace(result: Result, index: int) -> str:
    spec = result.config.cluster
    return spec.namespaces[index].name if spec is not None else f"tenant/ns-{index}"


def html_page(result: Result, path: Path) -> None:
    """An SVG line per broker (hover names it, click keeps it highlighted) and the moves below."""
    load = result.load * 100
    minutes, brokers = load.shape
    width, height, pad = 1000.0, 420.0, 40.0
    sx = (width - 2 * pad) / max(1, minutes - 1)

    def y(v: float) -> float:
        return height - pad - v / 100.0 * (height - 2 * pad)

    step = max(1, minutes // 150)
    lines = []
    for b in range(brokers):
        pts = " ".join(f"{pad + m * sx:.0f},{y(float(load[m, b])):.0f}" for m in range(0, minutes, step))
        moves = sum(1 for e in result.events if b in (e.source, e.destination))
        lines.append(
            f'<polyline class="b" points="{pts}"><title>broker-{b + 1}: {moves} moves in or out</title></polyline>'
        )
    mean = " ".join(f"{pad + m * sx:.1f},{y(float(load[m].mean())):.1f}" for m in range(0, minutes, step))
    split_ticks = "".join(
        f'<line class="sp" x1="{pad + sp.minute * sx:.1f}" x2="{pad + sp.minute * sx:.1f}" '
        f'y1="{pad - 10}" y2="{pad}"><title>minute {sp.minute}: bundle {sp.bundle} split '
        f"({html.escape(sp.reason)}) on broker-{sp.broker + 1}</title></line>"
        for sp in result.splits
    )
    ticks = split_ticks + "".join(
        f'<line class="mv" x1="{pad + e.minute * sx:.1f}" x2="{pad + e.minute * sx:.1f}" '
        f'y1="{height - pad}" y2="{height - pad + 10}"><title>minute {e.minute}: bundle {e.bundle} '
        f"broker-{e.source + 1} to broker-{e.destination + 1}{' (transfer)' if e.transfer else ''}</title></line>"
        for e in result.events
    )
    rows = "".join(
        f"<tr><td>{html.escape(str(k))}</td><td>{html.escape(str(v))}</td></tr>" for k, v in result.measures().items()
    )
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(result.config.label())}</title>
<style>body{{font-family:sans-serif;margin:20px}} .b{{fill:none;stroke:#1f77b4;stroke-opacity:.15;stroke-width:1}}
.b:hover,.b.on{{stroke:#d62728;stroke-opacity:1;stroke-width:2}} .mv{{stroke:#ff7f0e}}
.sp{{stroke:#2ca02c;stroke-width:2}} td{{padding:0 8px}}</style>
</head><body><h2>{html.escape(result.config.label())}</h2>
<p>Each line is one broker's load (maximum usage of CPU, direct memory and bandwidth, %); hover to name it,
click to keep it highlighted. The orange ticks under the axis are the moves, the green ones above it the splits
(hover for the bundle and brokers).</p>
<svg width="{width}" height="{height + 20}" xmlns="http://www.w3.org/2000/svg">
<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" stroke="#444"/>
<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{height - pad}" stroke="#444"/>
<text x="5" y="{pad}">100%</text><text x="5" y="{height - pad}">0%</text>
<text x="{width - pad - 40}" y="{height - 5}">{minutes / 60:.0f} h</text>
{"".join(lines)}<polyline points="{mean}" fill="none" stroke="black" stroke-width="2"><title>mean</title></polyline>
{ticks}</svg><table>{rows}</table>
<script>document.querySelectorAll('.b').forEach(l=>l.addEventListener('click',()=>l.classList.toggle('on')));</script>
</body></html>"""
    path.write_text(page, encoding="utf-8")
