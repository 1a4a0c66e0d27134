"""A :class:`~statechan.sequence.SequenceDiagram` drawn as SVG: lifelines across, time down.

Each group (a run's step, a story's entry) is a band of rows: its heading in the gutter on the
left (step number, time, action), one row per event — an arrow between two lifelines with a
short label, or a mark on one — and the event in full in the log column on the right. A broken
invariant turns its step's band red and adds the invariant's statement under it. Lifelines are
dashed while their broker is down and gold while it leads.

The SVG is plain markup with no script or external reference, so it can be embedded in a page or
saved as a file. Its elements carry their meaning in ``class`` and ``data-*`` attributes (the
step, the offset, the lifelines an arrow joins) for the pages' scripts and the browser tests.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from html import escape

from statechan.sequence import CHANNEL, Breach, Event, Group, Kind, Lane, Mark, SequenceDiagram

GUTTER = 300
"""The step column: number, time, heading."""
ROW = 22
HEAD = 56
"""The lifelines' heads, drawn once above the body (the page keeps them in view)."""
LANE_GAP = {Lane.CLIENTS: 130, Lane.BROKER: 165, Lane.CHANNEL: 165}
"""Space before a lifeline of each lane (from the previous one)."""
LOG = 470
"""The log column, right of the channel."""
CHAR = 6.2
"""The average width of a character at the diagram's 11 px (to cut labels to fit)."""
BREACH_LINE = 15
FONT = "DejaVu Sans, Liberation Sans, Arial, sans-serif"

COLOURS = {
    Kind.WRITE: "#1565c0",
    Kind.DELIVER: "#78909c",
    Kind.REQUEST: "#6a1b9a",
    Kind.ANSWER: "#2e7d32",
    Kind.MARK: "#37474f",
}
REFUSED = "#c62828"
MARK_GLYPHS = {
    Mark.CRASH: ("✕", "#c62828"),
    Mark.RESTART: ("↻", "#2e7d32"),
    Mark.SHUTDOWN: ("■", "#6d4c41"),
    Mark.SESSION_LOST: ("⚡", "#ef6c00"),
    Mark.SESSION_EXPIRED: ("⌛", "#ef6c00"),
    Mark.RECONNECT: ("⚭", "#2e7d32"),
    Mark.RESIGN: ("☆", "#b8860b"),
    Mark.LEADER: ("★", "#b8860b"),
    Mark.COMPACTION: ("⇊", "#5d4037"),
    Mark.REGISTERED: ("+", "#455a64"),
    Mark.UNREGISTERED: ("−", "#455a64"),
    Mark.UNATTRIBUTED: ("◆", "#1565c0"),
}


@dataclass
class _Placed:
    group: Group
    top: int
    rows: list[int] = field(default_factory=list)
    """The centre line of each event's row."""
    breach_top: int = 0
    bottom: int = 0
    breach_lines: list[tuple[str, bool]] = field(default_factory=list)
    """The breach text, wrapped: (line, whether it is a heading)."""


@dataclass
class Rendered:
    """The heads and the body as two SVG documents of the same width (the page pins the heads)."""

    head: str
    body: str
    width: int
    height: int

    def whole(self) -> str:
        """Heads and body in one SVG document (to save as a file or embed in a report)."""
        return (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{self.width}" height="{HEAD + self.height}" '
            f'viewBox="0 0 {self.width} {HEAD + self.height}">'
            f'<g font-family="{FONT}" font-size="12">{_inner(self.head)}</g>'
            f'<svg y="{HEAD}" font-family="{FONT}" font-size="11">{_inner(self.body)}</svg></svg>'
        )


def _inner(document: str) -> str:
    return document[document.index(">") + 1 : document.rindex("</svg>")]


def _fit(text: str, width: float) -> str:
    most = max(4, int(width / CHAR))
    return text if len(text) <= most else text[: most - 1] + "…"


def _text(x: float, y: float, text: str, cls: str = "", anchor: str = "start", width: float | None = None) -> str:
    shown = text if width is None else _fit(text, width)
    title = f"<title>{escape(text)}</title>" if shown != text else ""
    klass = f' class="{cls}"' if cls else ""
    return f'<text x="{x:.0f}" y="{y:.0f}" text-anchor="{anchor}"{klass}>{title}{escape(shown)}</text>'


def lane_positions(diagram: SequenceDiagram) -> dict[str, int]:
    """Each lifeline's x."""
    x = GUTTER - 40
    positions = {}
    for line in diagram.lifelines:
        x += LANE_GAP[line.lane]
        positions[line.id] = x
    return positions


def _breach_lines(breaches: list[Breach], width: float) -> list[tuple[str, bool]]:
    lines: list[tuple[str, bool]] = []
    most = max(20, int(width / 7.3))  # bold DejaVu Sans at 11 px: about 7 px a character
    for found in breaches:
        head = f"✗ {found.invariant}" + (f" — {found.statement}" if found.statement else "")
        lines += [(line, True) for line in textwrap.wrap(head, most)]
        lines += [(line, False) for line in textwrap.wrap(found.detail, most)]
    return lines


def _layout(diagram: SequenceDiagram, width: int) -> list[_Placed]:
    placed = []
    y = 4
    for group in diagram.groups:
        spot = _Placed(group, y)
        rows = max(1, len(group.events)) + (1 if group.error else 0)
        spot.rows = [y + ROW // 2 + ROW * i + 2 for i in range(len(group.events))]
        y += rows * ROW + 4
        if group.breaches:
            spot.breach_lines = _breach_lines(group.breaches, width - GUTTER - 40)
            spot.breach_top = y
            y += len(spot.breach_lines) * BREACH_LINE + 14
        spot.bottom = y
        placed.append(spot)
    return placed


def render(diagram: SequenceDiagram, anchor: str = "broken") -> Rendered:
    """The diagram as SVG: the heads and the body. ``anchor``: the id of the first broken step
    (unique on a page of several diagrams)."""
    x = lane_positions(diagram)
    channel_x = max(x.values())
    log_x = channel_x + 26
    width = log_x + LOG
    placed = _layout(diagram, width)
    height = (placed[-1].bottom if placed else 0) + 12
    body = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="sequence" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="{FONT}" font-size="11">',
        _defs(),
    ]
    body += ['<g class="bands">', *(_band(spot, width, i) for i, spot in enumerate(placed)), "</g>"]
    body += _lifelines(diagram, x, placed, height)
    seq = 0
    first_broken = True
    named = {b.offset for _, b in diagram.breaches if b.offset is not None}
    for spot in placed:
        group = spot.group
        attrs = _group_attrs(group)
        marked = ""
        if (group.breaches or group.focus) and first_broken:
            marked, first_broken = f' id="{escape(anchor)}"', False
        body.append(f'<g class="{attrs[0]}"{attrs[1]}{marked}>')
        body.append(_gutter(spot))
        for event, y in zip(group.events, spot.rows, strict=True):
            body.append(_event(event, y, x, log_x, seq, group, event.offset in named))
            seq += 1
        if group.error:
            y = spot.top + ROW * max(1, len(group.events)) + ROW // 2 + 2
            body.append(_text(GUTTER + 10, y + 4, f"cannot run: {group.error}", "error", width=width - GUTTER - 20))
        if group.breaches:
            body.append(_breach_box(spot, width))
        body.append("</g>")
    body.append("</svg>")
    return Rendered(_heads(diagram, x, width), "".join(body), width, height)


def _group_attrs(group: Group) -> tuple[str, str]:
    classes = ["step"]
    if group.breaches:
        classes.append("broken")
    elif group.focus:
        classes.append("focus")
    if group.loop:
        classes.append("loop")
    step = "" if group.number is None else f' data-step="{group.number}"'
    return " ".join(classes), step + f' data-heading="{escape(group.heading)}"'


def _defs() -> str:
    markers = []
    for name, colour in [
        ("write", COLOURS[Kind.WRITE]),
        ("deliver", COLOURS[Kind.DELIVER]),
        ("request", COLOURS[Kind.REQUEST]),
        ("answer", COLOURS[Kind.ANSWER]),
        ("refused", REFUSED),
    ]:
        markers.append(
            f'<marker id="head-{name}" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
            f'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="{colour}"/></marker>'
        )
    style = (
        "text{paint-order:stroke;stroke:#fff;stroke-width:3px;stroke-linejoin:round}"
        ".gutter text,.breach text{stroke:none}"
        ".band.odd{fill:#fff}.band.even{fill:#f5f7f9}.band.broken{fill:#ffe3e3}.band.focus{fill:#fff4d6}"
        ".step.loop .num{fill:#6a1b9a}"
        ".num{font-weight:bold}.time{fill:#607d8b}.heading{fill:#263238}"
        ".log{fill:#37474f;stroke:none}.log.refused{fill:#c62828}.error{fill:#c62828;font-weight:bold}"
        ".breach .title{font-weight:bold;fill:#b71c1c}.breach .said{fill:#4e342e}"
        ".event:hover .log{font-weight:bold}"
    )
    return f"<defs>{''.join(markers)}</defs><style>{style}</style>"


def _band(spot: _Placed, width: int, index: int) -> str:
    """The step's background across the whole width: shaded every other step, red when broken,
    amber when asked for; a bar in the gutter's edge says the same."""
    group = spot.group
    kind = "broken" if group.breaches else "focus" if group.focus else "even" if index % 2 else "odd"
    height = spot.bottom - spot.top
    bar = {"broken": "#c62828", "focus": "#f9a825"}.get(kind)
    edge = "" if bar is None else f'<rect x="0" y="{spot.top - 2}" width="5" height="{height}" fill="{bar}"/>'
    return f'<rect class="band {kind}" x="0" y="{spot.top - 2}" width="{width}" height="{height}"/>{edge}'


def _gutter(spot: _Placed) -> str:
    group = spot.group
    y = spot.top + ROW // 2 + 6
    number = "" if group.number is None else str(group.number)
    if group.loop:
        number = f"↺{number}"
    return (
        '<g class="gutter">'
        + _text(30, y, number, "num", "end")
        + _text(36, y, _seconds(group.time_ms), "time")
        + _text(100, y, group.heading, "heading", width=GUTTER - 108)
        + "</g>"
    )


def _seconds(ms: int) -> str:
    return f"t+{ms / 1000:.1f}s" if ms < 100_000_000 else f"t+{ms / 3_600_000:.1f}h"


def _event(event: Event, y: int, x: dict[str, int], log_x: int, seq: int, group: Group, named: bool) -> str:
    """One row; ``named``: the record a breach names (ringed in red)."""
    refused = event.ok is False
    colour = REFUSED if refused else COLOURS[event.kind]
    classes = f"event {event.kind.value}{' refused' if refused else ''}{' named' if named else ''}"
    attrs = [f'class="{classes}"', f'data-seq="{seq}"', f'data-source="{escape(event.source)}"']
    if event.target is not None:
        attrs.append(f'data-target="{escape(event.target)}"')
    if event.offset is not None:
        attrs.append(f'data-offset="{event.offset}"')
    if group.number is not None:
        attrs.append(f'data-step="{group.number}"')
    if event.mark is not None:
        attrs.append(f'data-mark="{event.mark.value}"')
    parts = [f"<g {' '.join(attrs)}><title>{escape(event.detail)}</title>"]
    if named:  # the record the broken invariant names
        parts.append(
            f'<rect x="{log_x - 6}" y="{y - ROW // 2 + 1}" width="{LOG - 2}" height="{ROW - 2}" rx="3" '
            'fill="none" stroke="#c62828" stroke-width="1.5"/>'
        )
    if event.target is None:
        glyph, mark_colour = MARK_GLYPHS[event.mark or Mark.UNATTRIBUTED]
        cx = x[event.source]
        parts.append(f'<circle cx="{cx}" cy="{y}" r="8" fill="#fff" stroke="{mark_colour}" stroke-width="1.5"/>')
        parts.append(
            f'<text x="{cx}" y="{y + 4}" text-anchor="middle" font-size="11" fill="{mark_colour}" '
            f'style="stroke:none">{escape(glyph)}</text>'
        )
        left = event.source == CHANNEL  # the log column is right of the channel
        label = _text(
            cx - 12 if left else cx + 12,
            y + 4,
            event.label,
            "",
            "end" if left else "start",
            width=LANE_GAP[Lane.BROKER] - 30,
        )
        parts.append(label.replace("<text ", f'<text fill="{mark_colour}" ', 1))
    else:
        x1, x2 = x[event.source], x[event.target]
        step = 1 if x2 > x1 else -1
        dash = ' stroke-dasharray="5,3"' if event.kind in (Kind.DELIVER, Kind.ANSWER) or refused else ""
        name = "refused" if refused else event.kind.value
        parts.append(
            f'<line x1="{x1 + 3 * step}" y1="{y}" x2="{x2 - 3 * step}" y2="{y}" stroke="{colour}" '
            f'stroke-width="{1.2 if event.kind is Kind.DELIVER else 1.8}"{dash} marker-end="url(#head-{name})"/>'
        )
        mid = (x1 + x2) / 2
        glyph = " ✗" if refused else (" ✓" if event.ok and event.kind is Kind.WRITE else "")
        parts.append(
            _text(mid, y - 4, event.label + glyph, "", "middle", width=abs(x2 - x1) + 40).replace(
                "<text ", f'<text fill="{colour}" ', 1
            )
        )
    parts.append(_text(log_x, y + 4, event.detail, "log refused" if refused else "log", width=LOG - 8))
    parts.append("</g>")
    return "".join(parts)


def _breach_box(spot: _Placed, width: int) -> str:
    top = spot.breach_top
    height = len(spot.breach_lines) * BREACH_LINE + 8
    parts = [
        '<g class="breach">',
        f'<rect x="{GUTTER - 4}" y="{top - 2}" width="{width - GUTTER - 8}" height="{height}" rx="4" '
        'fill="#fff" stroke="#c62828" stroke-width="1.5"/>',
    ]
    for i, (line, heading) in enumerate(spot.breach_lines):
        parts.append(_text(GUTTER + 6, top + 12 + i * BREACH_LINE, line, "title" if heading else "said"))
    parts.append("</g>")
    return "".join(parts)


def _lifelines(diagram: SequenceDiagram, x: dict[str, int], placed: list[_Placed], height: int) -> list[str]:
    """Each lifeline as segments: solid while up, dashed while its broker is down, gold while it leads."""
    rows = [(y, e) for spot in placed for e, y in zip(spot.group.events, spot.rows, strict=True)]
    parts = ['<g class="lifelines">']
    leader = diagram.leader_at_start
    lead_from: dict[str, int] = {leader: 0} if leader else {}
    lead_spans: list[tuple[str, int, int]] = []
    down_from: dict[str, int] = {}
    down_spans: list[tuple[str, int, int]] = []
    for y, event in rows:
        if event.mark is None:
            continue
        who = event.source
        if event.mark is Mark.LEADER:
            for other, since in list(lead_from.items()):
                lead_spans.append((other, since, y))
                del lead_from[other]
            lead_from[who] = y
        elif (event.mark is Mark.RESIGN or event.mark.down) and who in lead_from:
            lead_spans.append((who, lead_from.pop(who), y))
        if event.mark.down:
            down_from.setdefault(who, y)
        elif event.mark is Mark.RESTART and who in down_from:
            down_spans.append((who, down_from.pop(who), y))
    lead_spans += [(who, since, height) for who, since in lead_from.items()]
    down_spans += [(who, since, height) for who, since in down_from.items()]
    for line in diagram.lifelines:
        lx = x[line.id]
        colour = {"clients": "#9e9e9e", "broker": "#546e7a", "channel": "#1565c0"}[line.lane.value]
        parts.append(
            f'<g class="lifeline" data-lifeline="{escape(line.id)}" data-lane="{line.lane.value}">'
            f'<line x1="{lx}" y1="0" x2="{lx}" y2="{height}" stroke="{colour}" stroke-width="1.5"/>'
        )
        for who, y1, y2 in down_spans:
            if who == line.id:
                parts.append(
                    f'<line class="down" x1="{lx}" y1="{y1}" x2="{lx}" y2="{y2}" stroke="#fff" stroke-width="3"/>'
                    f'<line x1="{lx}" y1="{y1}" x2="{lx}" y2="{y2}" stroke="#bdbdbd" stroke-width="1.5" '
                    'stroke-dasharray="3,4"/>'
                )
        for who, y1, y2 in lead_spans:
            if who == line.id:
                parts.append(
                    f'<line class="leading" x1="{lx}" y1="{y1}" x2="{lx}" y2="{y2}" stroke="#f9a825" '
                    'stroke-width="5" stroke-opacity="0.55"/>'
                )
        parts.append("</g>")
    parts.append("</g>")
    return parts


def _heads(diagram: SequenceDiagram, x: dict[str, int], width: int) -> str:
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="heads" width="{width}" height="{HEAD}" '
        f'viewBox="0 0 {width} {HEAD}" font-family="{FONT}" font-size="12">',
        f'<rect x="0" y="0" width="{width}" height="{HEAD}" fill="#fff"/>',
        f'<text x="30" y="{HEAD - 10}" text-anchor="end" font-weight="bold" fill="#607d8b">#</text>',
        f'<text x="36" y="{HEAD - 10}" font-weight="bold" fill="#607d8b">time</text>',
        f'<text x="100" y="{HEAD - 10}" font-weight="bold" fill="#607d8b">step</text>',
        f'<text x="{max(x.values()) + 26}" y="{HEAD - 10}" font-weight="bold" fill="#607d8b">'
        "record, verdict, answer</text>",
    ]
    for line in diagram.lifelines:
        lx = x[line.id]
        box = min(LANE_GAP[Lane.BROKER] - 14, max(70, int(len(line.label) * 7.6) + 16))
        fill, stroke = {
            Lane.CLIENTS: ("#f5f5f5", "#9e9e9e"),
            Lane.BROKER: ("#eceff1", "#546e7a"),
            Lane.CHANNEL: ("#e3f2fd", "#1565c0"),
        }[line.lane]
        leads = line.id == diagram.leader_at_start
        flag = ' data-leader="true"' if leads else ""
        edge = ' stroke-width="2.5"' if leads else ""
        label = _text(lx, 23, line.label, "", "middle", width=box - 6).replace("<text ", '<text font-weight="bold" ', 1)
        crown = f'<text x="{lx}" y="46" text-anchor="middle" fill="#b8860b" font-size="11">★ leader</text>'
        parts.append(
            f'<g class="head" data-lifeline="{escape(line.id)}" data-lane="{line.lane.value}"{flag}>'
            f"<title>{escape(line.id)}</title>"
            f'<rect x="{lx - box / 2:.0f}" y="6" width="{box}" height="26" rx="4" '
            f'fill="{fill}" stroke="{stroke}"{edge}/>'
            + label
            + (crown if leads else "")
            + f'<line x1="{lx}" y1="32" x2="{lx}" y2="{HEAD}" stroke="{stroke}" stroke-width="1.5"/></g>'
        )
    parts.append("</svg>")
    return "".join(parts)
