"""The documentation, as its readers meet it:

- no page of README.md or docs/ tells the project's development history (numbered work sessions,
  reviews, helpers, internal issue numbers): that belongs in CHANGELOG.md and git. Pulsar's own
  issue and pull-request numbers (``#24186``, ``apache/pulsar#24186``, "Pulsar issue 24186") are
  product facts and pass;
- the site builds with ``mkdocs build --strict`` (a broken link, anchor or reference fails);
- every code example on the getting-started, concepts and guides pages runs: Python blocks in
  order in one namespace, shell blocks line by line, each expected to exit 0 unless its line says
  ``# exits N``; a block under ``<!-- not run: REASON -->`` is skipped (the reason is required), and a
  block with ``title="FILE"`` is written to that file for the blocks after it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = sorted([ROOT / "README.md", ROOT / "traces" / "README.md", *DOCS.rglob("*.md")])
EXAMPLE_PAGES = sorted(
    [DOCS / "getting-started.md", *(DOCS / "concepts").glob("*.md"), *(DOCS / "guides").glob("*.md")]
)

HISTORY: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\bsessions?[\s-]+\d+", re.IGNORECASE), "a numbered work session"),
    (re.compile(r"\bsessions? \d+ and \d+", re.IGNORECASE), "numbered work sessions"),
    (
        # "this session's machine", not a ZooKeeper session ("when that session expires")
        re.compile(
            r"\b(this|the previous|the next|an earlier|a later) session\b"
            r"(?!'s node)(?!\s+(expir|is lost|loss|event|id\b))",
            re.IGNORECASE,
        ),
        "a work session",
    ),
    (re.compile(r"\bwork(ing)?[ -]periods?\b", re.IGNORECASE), "a work period"),
    (re.compile(r"\breview(s|ed|er|ers|er's)?\b", re.IGNORECASE), "a code review"),
    (re.compile(r"\bhelpers?\b", re.IGNORECASE), "a development helper"),
    (re.compile(r"\bother developers\b", re.IGNORECASE), "the developers' own work"),
    (re.compile(r"\b(merged|landed) (as|on|in|into|from) (main|the branch|[0-9a-f]{7,})\b", re.IGNORECASE), "a merge"),
)
INTERNAL_ISSUE = re.compile(r"\bissues?\s+#?(\d+)", re.IGNORECASE)
PULSAR_CONTEXT = re.compile(r"(pulsar|github\.com)[\w/.:' -]{0,12}$", re.IGNORECASE)


def history_references(text: str) -> list[tuple[int, str, str]]:
    """Each place ``text`` refers to the development history: (line number, what, the line)."""
    found: list[tuple[int, str, str]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        for pattern, what in HISTORY:
            if pattern.search(line):
                found.append((number, what, line.strip()))
        for match in INTERNAL_ISSUE.finditer(line):
            if not PULSAR_CONTEXT.search(line[: match.start()]):
                found.append((number, f"an internal issue number ({match.group(0)})", line.strip()))
    return found


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("since session 13 the search is sound", ["a numbered work session"]),
        ("the session-16 merges", ["a numbered work session"]),
        ("Session 19 brought the model", ["a numbered work session"]),
        ("measured on this session's slower machine", ["a work session"]),
        ("open (issue 22): the 3x2 bound", ["an internal issue number (issue 22)"]),
        ("Issue 23: the model follows master", ["an internal issue number (Issue 23)"]),
        ("a review found it queued", ["a code review"]),
        ("found by a helper", ["a development helper"]),
        ("#24186 put back, fixed by apache/pulsar#24186", []),
        ("Pulsar issue 24186 and Pulsar's issue #25132", []),
        ("a ZooKeeper session loss; the session 's node; lose-session(b1)", []),
        ("a broker whose session expired in 30 s", []),
        ("When that session expires the node goes; this session expires too", []),
    ],
)
def test_the_history_check_tells_history_from_product(text: str, expected: list[str]) -> None:
    assert [what for _, what, _ in history_references(text)] == expected


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_page_tells_the_development_history(page: Path) -> None:
    found = history_references(page.read_text(encoding="utf-8"))
    where = "\n".join(f"  {page.relative_to(ROOT)}:{n}: {what}: {line[:160]}" for n, what, line in found)
    assert not found, f"development history belongs in CHANGELOG.md or git, not in the docs:\n{where}"


# -- the site ---------------------------------------------------------------------------------------------


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    """``mkdocs build --strict``: a broken link, anchor, cross-reference or nav entry fails; the
    generated pages are on the site."""
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    cli = (site / "reference" / "cli" / "index.html").read_text(encoding="utf-8")
    for command in ("statechan audit", "statechan check", "statechan traces generate", "statechan balance sweep"):
        assert command in cli, f"the command-line reference has no {command}"
    assert "should_reject" in (site / "reference" / "api" / "core" / "index.html").read_text(encoding="utf-8")
    assert (site / "traces" / "index.html").is_file() or (site / "traces" / "README" / "index.html").is_file()
    assert (site / "benchmarks" / "index.html").is_file()


# -- the examples -----------------------------------------------------------------------------------------

FENCE = re.compile(r"^```(\w*)(.*)$")
NOT_RUN = re.compile(r"^<!--\s*not run:\s*(\S.*?)\s*-->$")
TITLE = re.compile(r'title="([^"]+)"')
EXITS = re.compile(r"#\s*exits\s+(\d+)")


@dataclass(frozen=True)
class Block:
    language: str
    code: str
    line: int
    title: str | None
    skip: str | None


def blocks(text: str) -> list[Block]:
    """The fenced code blocks of a Markdown page, with what the line before each says."""
    found: list[Block] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        opened = FENCE.match(lines[index])
        if not opened:
            index += 1
            continue
        start = index
        index += 1
        body: list[str] = []
        while index < len(lines) and lines[index] != "```":
            body.append(lines[index])
            index += 1
        index += 1
        before = lines[start - 1].strip() if start else ""
        skipped = NOT_RUN.match(before)
        titled = TITLE.search(opened.group(2))
        found.append(
            Block(
                opened.group(1),
                "\n".join(body) + "\n",
                start + 1,
                titled.group(1) if titled else None,
                skipped.group(1) if skipped else None,
            )
        )
    return found


def commands(code: str) -> list[str]:
    """A shell block's commands: one a line, ``\\`` continuing one, comments and blanks left out."""
    joined = re.sub(r"\\\n\s*", " ", code)
    return [line for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_blocks_and_commands_parse() -> None:
    page = '<!-- not run: needs a cluster -->\n```sh\nstatechan x\n```\n\n```python title="t.py"\nx = 1\n```\n'
    parsed = blocks(page)
    assert [(b.language, b.skip, b.title) for b in parsed] == [
        ("sh", "needs a cluster", None),
        ("python", None, "t.py"),
    ]
    assert commands("a --b \\\n   --c  # exits 1\n# note\n\nd\n") == ["a --b  --c  # exits 1", "d"]


@pytest.mark.parametrize("page", EXAMPLE_PAGES, ids=lambda p: str(p.relative_to(DOCS)))
def test_the_examples_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each example runs in a fresh folder that holds the repository's models/, traces/ and docs/
    (read-only use), with this environment's ``statechan`` and ``python`` first on the PATH."""
    for name in ("models", "traces", "docs"):
        (tmp_path / name).symlink_to(ROOT / name)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("PYTEST_XDIST_WORKER", None)
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "__docs_example__"}
    ran = 0
    for block in blocks(page.read_text(encoding="utf-8")):
        where = f"{page.relative_to(ROOT)}:{block.line}"
        if block.skip is not None:
            continue
        if block.title is not None:
            (tmp_path / block.title).write_text(block.code, encoding="utf-8")
        elif block.language == "python":
            exec(compile(block.code, where, "exec"), namespace)
            ran += 1
        elif block.language == "sh":
            for command in commands(block.code):
                expected = EXITS.search(command)
                done = subprocess.run(
                    ["bash", "-c", command], cwd=tmp_path, env=env, capture_output=True, text=True, check=False
                )
                assert done.returncode == (int(expected.group(1)) if expected else 0), (
                    f"{where}: {command}\nexit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
                )
                ran += 1
    assert ran, f"{page.relative_to(ROOT)} has no example that runs"
