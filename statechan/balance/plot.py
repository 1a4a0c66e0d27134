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
    fig, (top, middle, bottom) = plt.subplots(3, 1, figsize=(11, 7.5), sharex=True, height_ratios=(4, 1.3, 1))
    top.plot(hours, load, color="tab:blue", alpha=0.08, linewidth=0.6)
    top.plot(hours, load.mean(axis=1), color="black", linewidth=1.4, label="mean")
    top.plot(hours, load.max(axis=1), color="tab:red", linewidth=1.0, label="max")
    top.set_ylabel("broker load (weighted max usage, %)")
    top.set_ylim(0, 100)
    top.legend(loc="upper left")
    top.set_title(f"{result.config.label()}: {len(result.events)} moves, verdict {result.verdict().value}")
    middle.plot(hours, result.std() * 100, color="tab:purple", linewidth=0.8)
    middle.axhline(result.config.target_std * 100, color="grey", linestyle="--", linewidth=0.8)
    middle.set_ylabel("std (%)")
    per_hour = np.bincount([e.minute // 60 for e in result.events], minlength=int(np.ceil(result.hours)))
    bottom.bar(np.arange(len(per_hour)) + 0.5, per_hour, width=0.9, color="tab:orange")
    bottom.set_ylabel("moves / h")
    bottom.set_xlabel("hours")
    for e in result.events:
        top.axvline(e.minute / 60.0, ymin=0, ymax=0.03, color="tab:orange", linewidth=0.5)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


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
    ticks = "".join(
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
.b:hover,.b.on{{stroke:#d62728;stroke-opacity:1;stroke-width:2}} .mv{{stroke:#ff7f0e}} td{{padding:0 8px}}</style>
</head><body><h2>{html.escape(result.config.label())}</h2>
<p>Each line is one broker's load (weighted maximum usage, %); hover to name it, click to keep it highlighted.
The orange ticks under the axis are the moves (hover for the bundle and brokers).</p>
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
