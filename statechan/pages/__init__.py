"""Self-contained HTML pages: a run (or a key's story) as a sequence diagram, and an audit's report.

Every page is one file with its CSS, its script and its SVG inline; its Content-Security-Policy
forbids every fetch, so it opens the same from a disk, an attachment or a CI artefact, with no
network. The diagrams are :mod:`statechan.diagram`'s; the lifeline heads stay pinned at the top
of the window while the steps scroll under them.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING

from statechan.diagram import MARK_GLYPHS, render
from statechan.sequence import AuditStories, Breach, Mark, SequenceDiagram, statements

if TYPE_CHECKING:
    from statechan.audit import AuditReport

POLICY = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:"
"""Nothing but the page itself: no request leaves it."""

STYLE = """
body{font-family:'DejaVu Sans','Liberation Sans',Arial,sans-serif;font-size:14px;color:#263238;margin:0 0 40px 0}
header,.prose{padding:0 20px;max-width:1200px}
h1{font-size:20px;margin:16px 0 4px}h2{font-size:17px;margin:18px 0 6px}
.subtitle{color:#546e7a;margin:0 0 10px;overflow-wrap:anywhere}
dl.facts{display:grid;grid-template-columns:max-content auto;gap:2px 14px;margin:8px 0}
dl.facts dt{color:#607d8b}dl.facts dd{margin:0}
.verdict{font-size:15px;margin:10px 0}.verdict.broken{color:#b71c1c}.verdict.clean{color:#2e7d32}
.verdict a{color:inherit}
.pin{position:sticky;top:0;z-index:2;background:#fff;box-shadow:0 2px 3px rgba(0,0,0,.08)}
.diagram{margin:8px 0 0 0}.diagram svg{display:block}
.legend{margin:6px 0;color:#455a64;font-size:13px}.legend span{margin-right:16px;white-space:nowrap}
.omitted{color:#607d8b;font-style:italic;padding:0 20px}
pre{background:#f5f7f9;padding:10px;overflow-x:auto;font-size:12px}
table.counts{border-collapse:collapse;margin:8px 0}
table.counts td,table.counts th{border-bottom:1px solid #e0e0e0;padding:4px 10px;text-align:left;vertical-align:top}
table.counts td.n{text-align:right;font-variant-numeric:tabular-nums}
table.counts tr.hit td.n{color:#b71c1c;font-weight:bold}
.statement{color:#78909c;font-size:12px;max-width:340px}
ul.examples{margin:0;padding-left:16px}ul.examples li{margin:2px 0;overflow-wrap:anywhere}
section.story{display:none;border-top:3px solid #c62828;margin-top:24px}
section.story:target,section.story.shown{display:block}
.back{font-size:13px}
.event{cursor:default}.event.picked .log{font-weight:bold;fill:#000}
"""

SCRIPT = """
(function(){
  function centre(el){ if(el){ el.scrollIntoView({block:'center'}); } }
  document.querySelectorAll('a.to-broken').forEach(function(a){
    a.addEventListener('click', function(ev){
      var root = a.closest('section') || document;
      var target = root.querySelector('#broken, .step.broken');
      if(target){ ev.preventDefault(); centre(target); }
    });
  });
  document.querySelectorAll('.event').forEach(function(e){
    e.addEventListener('click', function(){ e.classList.toggle('picked'); });
  });
  function openStory(){
    var id = location.hash.slice(1);
    document.querySelectorAll('section.story.shown').forEach(function(s){ s.classList.remove('shown'); });
    var s = id ? document.getElementById(id) : null;
    if(s && s.classList.contains('story')){
      s.classList.add('shown');
      centre(s.querySelector('.step.broken') || s);
    }
  }
  window.addEventListener('hashchange', openStory);
  openStory();
})();
"""


def _page(title: str, body: str) -> str:
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{POLICY}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{STYLE}</style></head>"
        f"<body>{body}<script>{SCRIPT}</script></body></html>\n"
    )


def _facts(facts: Sequence[tuple[str, str]]) -> str:
    if not facts:
        return ""
    rows = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in facts)
    return f'<dl class="facts">{rows}</dl>'


def _legend(diagram: SequenceDiagram) -> str:
    marks = sorted({e.mark for g in diagram.groups for e in g.events if e.mark is not None}, key=lambda m: m.value)
    items = [
        '<span style="color:#1565c0">━▶ record written (✓ accepted, ✗ refused by the resolver)</span>',
        '<span style="color:#78909c">┅▶ delivered to a broker\'s view</span>',
    ]
    if any(line.id == "clients" for line in diagram.lifelines):
        items += [
            '<span style="color:#6a1b9a">━▶ lookup or admin request</span>',
            '<span style="color:#2e7d32">┅▶ lookup answer</span>',
        ]
    items += [f"<span>{escape(MARK_GLYPHS[m][0])} {escape(_MARK_NAMES[m])}</span>" for m in marks]
    items.append('<span style="color:#b8860b">gold lifeline: the leader</span>')
    items.append('<span style="color:#9e9e9e">dashed lifeline: the broker is down</span>')
    keys = " ".join(f"<span>{escape(tag)} = {escape(key)}</span>" for tag, key in diagram.keys.items())
    return f'<div class="legend">{" ".join(items)}</div>' + (f'<div class="legend">{keys}</div>' if keys else "")


_MARK_NAMES = {
    Mark.CRASH: "crash",
    Mark.RESTART: "restart",
    Mark.SHUTDOWN: "graceful shutdown",
    Mark.SESSION_LOST: "metadata session lost",
    Mark.SESSION_EXPIRED: "session expired",
    Mark.RECONNECT: "session re-established",
    Mark.RESIGN: "leader resigns",
    Mark.LEADER: "elected leader",
    Mark.COMPACTION: "topic compacted",
    Mark.REGISTERED: "registered",
    Mark.UNREGISTERED: "unregistered",
    Mark.UNATTRIBUTED: "record whose writer the trace does not name",
}


def _verdict(diagram: SequenceDiagram) -> str:
    """What the checks found (a run's), or which entry is asked about (a story's)."""
    found = diagram.breaches
    if not found:
        focus = next((g for g in diagram.groups if g.focus), None)
        if focus is not None:
            return f'<p class="verdict"><a class="to-broken" href="#broken">the entry {escape(focus.heading)}</a></p>'
        return '<p class="verdict clean">no invariant broken</p>' if diagram.checked else ""
    group, first = found[0]
    where = f"step {group.number}" if group.number is not None else group.heading
    if group.number is None and group.heading == "start":
        where = "the starting state"
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    return (
        f'<p class="verdict broken">broken: <a class="to-broken" href="#broken">{escape(first.invariant)} at '
        f"{escape(where)}</a>{more}</p>"
    )


def _diagram(diagram: SequenceDiagram, anchor: str = "broken") -> str:
    drawn = render(diagram, anchor)
    omitted = f'<p class="omitted">{escape(diagram.omitted)}</p>' if diagram.omitted else ""
    return f'<div class="diagram"><div class="pin">{drawn.head}</div>{drawn.body}</div>{omitted}'


def diagram_block(diagram: SequenceDiagram, anchor: str = "broken") -> str:
    """A diagram's legend and its picture (heads pinned), for a page that is not the diagram's own
    (the explorer's); the page's style must include :data:`STYLE`."""
    return f'<div class="prose">{_legend(diagram)}</div>{_diagram(diagram, anchor)}'


def diagram_page(diagram: SequenceDiagram) -> str:
    """A run, a counterexample or a key's story on a page of its own."""
    text = ""
    if diagram.text:
        text = (
            f"<details class='prose'><summary>The same run as text</summary><pre>{escape(diagram.text)}</pre></details>"
        )
    subtitle = f'<p class="subtitle">{escape(diagram.subtitle)}</p>' if diagram.subtitle else ""
    body = (
        f"<header><h1>{escape(diagram.title)}</h1>{subtitle}{_facts(diagram.facts)}{_verdict(diagram)}"
        f"{_legend(diagram)}</header>{_diagram(diagram)}{text}"
    )
    return _page(diagram.title, body)


def audit_page(report: AuditReport, stories: AuditStories) -> str:
    """The audit's counts per invariant, each example linked to its key's story (drawn below it,
    shown when its link is followed)."""
    rejected = sum(report.rejected.values())
    facts = [
        ("traces", ", ".join(report.inputs)),
        (
            "records",
            f"{report.records:,} ({report.channel_records:,} channel, {report.view_records:,} view, "
            f"{report.registry_records:,} registry, {report.leader_records:,} leader; "
            f"{report.malformed:,} malformed)",
        ),
        ("bundles", f"{report.bundles:,} in {report.namespaces:,} namespace(s)"),
        (
            "resolver",
            f"{report.accepted:,} accepted, {rejected:,} refused"
            + (f" ({', '.join(f'{r} {n:,}' for r, n in report.rejected.items())})" if rejected else ""),
        ),
        ("storage, model", f"{report.settings.get('storage', '')}, {report.settings.get('model', '')}"),
        ("engine", f"{report.engine}, {report.elapsed_s:.1f} s"),
    ]
    total = report.violation_count
    verdict = (
        f'<p class="verdict broken">{total:,} violation(s) of {sum(1 for s in report.violations.values() if s.count)} '
        "invariant(s); follow an example to its key's story</p>"
        if total
        else '<p class="verdict clean">no violation</p>'
    )
    rows = []
    known = statements()
    for invariant, summary in report.violations.items():
        items = []
        for example in summary.examples:
            where = "" if example.offset is None else f" @ {example.offset}"
            said = f"{example.key or ''}{where}"
            anchor = None
            if example.key is not None and example.offset is not None:
                anchor = stories.by_example.get((example.key, example.offset))
            link = (
                f'<a class="example" href="#{anchor}" data-key="{escape(example.key or "")}" '
                f'data-offset="{example.offset}">{escape(said)}</a>'
                if anchor
                else escape(said)
            )
            items.append(f"<li>{link}: {escape(example.detail)}</li>")
        if summary.count > len(summary.examples):
            items.append(f"<li>… {summary.count - len(summary.examples):,} more not kept (--examples)</li>")
        examples = f'<ul class="examples">{"".join(items)}</ul>' if items else ""
        rows.append(
            f'<tr class="{"hit" if summary.count else "clean"}" data-invariant="{escape(invariant)}">'
            f"<td>{escape(invariant)}<div class='statement'>{escape(known.get(invariant, ''))}</div></td>"
            f"<td class='n'>{summary.count:,}</td><td>{examples}</td></tr>"
        )
    skipped = "".join(f"<li>{escape(s.check)}: {escape(s.reason)}</li>" for s in report.skipped)
    counted = ", ".join(f"{k} {v:,}" for k, v in report.counted.items())
    sections = [
        f'<section class="story" id="{s.anchor}" data-key="{escape(s.key)}" data-offset="{s.offset}">'
        f'<div class="prose"><h2>{escape(s.key)} around offset {s.offset:,}</h2>'
        f"{''.join(_said(b) for b in s.breaches)}"
        '<p class="back"><a href="#counts">back to the counts</a> · '
        '<a class="to-broken" href="#">to the example</a></p>'
        f"{_legend(s.diagram)}</div>{_diagram(s.diagram, f'{s.anchor}-example')}</section>"
        for s in stories.stories
    ]
    body = (
        f"<header><h1>Audit of {escape(', '.join(report.inputs))}</h1>{_facts(facts)}{verdict}</header>"
        f'<div class="prose"><h2 id="counts">Violations per invariant</h2>'
        f'<table class="counts"><tr><th>invariant</th><th>count</th><th>examples</th></tr>{"".join(rows)}</table>'
        f"<p>counted (not violations): {escape(counted)}</p>"
        + (f"<p>skipped:</p><ul>{skipped}</ul>" if skipped else "")
        + "</div>"
        + "".join(sections)
    )
    return _page(f"Audit of {', '.join(report.inputs)}", body)


def audit_report_page(report: AuditReport) -> str:
    """:func:`audit_page` for a report, its examples' stories read from the traces it audited
    with the resolver it used."""
    from statechan.sequence import audit_stories
    from statechan.states import StorageType

    examples = {i: [(e.key, e.offset, e.detail) for e in s.examples] for i, s in report.violations.items()}
    storage = StorageType(report.settings.get("storage", StorageType.SystemTopic.value))
    stories = audit_stories(report.inputs, examples, storage, report.settings.get("model"))
    return audit_page(report, stories)


def _said(found: Breach) -> str:
    statement = f" — {escape(found.statement)}" if found.statement else ""
    return f'<p class="verdict broken"><b>{escape(found.invariant)}</b>{statement}<br>{escape(found.detail)}</p>'


def write_page(path: str | Path, html: str) -> None:
    """Write a page whole or not at all (a failed write leaves no half page)."""
    from statechan.traces import write_text_atomically

    write_text_atomically(path, html)
