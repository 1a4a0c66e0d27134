"""A model checker's explored state graph (``check(..., keep_graph=True)``) drawn as SVG: one row
per depth (breadth-first, so a state's row is its shortest distance from the start), each state a
dot linking to the explorer at that state, the counterexample's path in red down the left edge.

The checker's graph holds a state once per symmetry class (brokers renamed) and, with
partial-order reduction, only the states the reduced search visits; edges are the transitions it
took, an edge to a state met before included (drawn fainter than the edge that found it).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from html import escape
from typing import TYPE_CHECKING

from statechan.pages.explore.picture import short_text

if TYPE_CHECKING:
    from statechan.checker import CheckResult, Node
    from statechan.cluster.actions import Action

GAP_X = 18
GAP_Y = 64
MARGIN_X = 110
"""Room on the left for each row's depth and size."""
MARGIN_Y = 30
RADIUS = 6


@dataclass(frozen=True)
class Drawn:
    svg: str
    width: int
    height: int
    path: list[int]
    """The counterexample's states, from the start (empty: none)."""
    depths: int


def path_nodes(result: CheckResult) -> list[int]:
    """The states the counterexample passes through, from the start (the checker records the step
    that found each state, so the path is followed along the successors it lists)."""
    if not result.path or not result.nodes:
        return []
    nodes = result.nodes
    path = [0]
    picks = list(result.picks)
    for action in result.path:
        here = nodes[path[-1]]
        found = next(
            ((j, p) for j, a, p in here.successors if a == action and tuple(picks[: len(p)]) == tuple(p)), None
        )
        if found is None:
            break
        path.append(found[0])
        picks = picks[len(found[1]) :]
    return path


def steps_to(nodes: list[Node], node: int) -> list[tuple[Action, tuple[int, ...]]]:
    """The actions (and placement picks) from the start to ``node``, along the steps that found each state."""
    steps = []
    while node > 0:
        here = nodes[node]
        assert here.action is not None  # every state but the start was found by a step
        steps.append((here.action, here.picks))
        node = here.parent
    return steps[::-1]


def draw(result: CheckResult, link: str = "state/{}") -> Drawn:
    """The graph as SVG; each state links to ``link`` with its number."""
    nodes = result.nodes
    rows: dict[int, list[int]] = {}
    for i, node in enumerate(nodes):
        rows.setdefault(node.depth, []).append(i)
    path = path_nodes(result)
    on_path = set(path)
    x: dict[int, float] = {}
    widest = max((len(r) for r in rows.values()), default=1)
    width = MARGIN_X + (widest + 2) * GAP_X + 40
    span = widest * GAP_X
    for depth in sorted(rows):
        row = rows[depth]
        # the counterexample's states down the left edge; the others under their parents, in the
        # order the search found them, each row spread across the width
        row.sort(key=lambda i: (x.get(nodes[i].parent, 0.0), i))
        rest = [i for i in row if i not in on_path]
        left = MARGIN_X + (2 * GAP_X if path else 0)
        for slot, i in enumerate(rest):
            x[i] = left + (slot + 0.5) * span / len(rest)
        for i in row:
            if i in on_path:
                x[i] = MARGIN_X + GAP_X / 2
    y = {i: MARGIN_Y + node.depth * GAP_Y for i, node in enumerate(nodes)}
    height = MARGIN_Y * 2 + max(rows, default=0) * GAP_Y
    path_edges = set(itertools.pairwise(path))
    broken_end = path[-1] if path and result.violation is not None else None
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="state-graph" width="{width:.0f}" height="{height}" '
        f'viewBox="0 0 {width:.0f} {height}" font-family="DejaVu Sans, Arial, sans-serif" font-size="11">'
    ]
    for depth in sorted(rows):
        parts.append(
            f'<text x="8" y="{MARGIN_Y + depth * GAP_Y + 4}" fill="#607d8b">depth {depth}'
            f'<tspan x="8" dy="13" fill="#90a4ae">{len(rows[depth]):,} state(s)</tspan></text>'
        )
    faint, found, red = [], [], []
    for i, node in enumerate(nodes):
        for j, _, _ in node.successors:
            line = f'<line x1="{x[i]:.0f}" y1="{y[i]}" x2="{x[j]:.0f}" y2="{y[j]}"/>'
            if (i, j) in path_edges:
                red.append(line.replace("<line ", f'<line data-from="{i}" data-to="{j}" '))
            elif nodes[j].parent == i:
                found.append(line)
            else:
                faint.append(line)
    parts.append(f'<g class="edges other" stroke="#cfd8dc" stroke-width="0.6">{"".join(faint)}</g>')
    parts.append(f'<g class="edges found" stroke="#90a4ae" stroke-width="1">{"".join(found)}</g>')
    parts.append(f'<g class="edges path" stroke="#c62828" stroke-width="3">{"".join(red)}</g>')
    parts.append('<g class="states">')
    for i, node in enumerate(nodes):
        classes = ["state"]
        fill, stroke = "#eceff1", "#78909c"
        if node.settled:
            classes.append("settled")
            fill, stroke = "#a5d6a7", "#2e7d32"
        if not node.expanded:
            classes.append("frontier")
        if node.timers_cut:
            classes.append("cut")
        if i in on_path:
            classes.append("on-path")
            fill, stroke = "#ef9a9a", "#c62828"
        if i == broken_end:
            classes.append("broken")
            fill, stroke = "#c62828", "#7f0000"
        if i == 0:
            classes.append("root")
            stroke = "#1565c0"
        said = f"state {i}, depth {node.depth}: {node.label or '(no view holds anything)'}"
        if node.settled:
            said += " — settled"
        if i == broken_end:
            said += f" — breaks {result.violation}"
        if node.action is not None:
            said += f" — reached by {node.action.describe()}"
        radius = RADIUS + (2 if i in (0, broken_end) else 0)
        parts.append(
            f'<a class="{" ".join(classes)}" href="{escape(link.format(i))}" data-state="{i}">'
            f"<title>{escape(short_text(said))}</title>"
            f'<circle cx="{x[i]:.0f}" cy="{y[i]}" r="{radius}" fill="{fill}" stroke="{stroke}" stroke-width="1.5"/></a>'
        )
    parts.append("</g></svg>")
    return Drawn("".join(parts), int(width), height, path, len(rows))
