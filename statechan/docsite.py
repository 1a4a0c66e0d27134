"""The documentation site's generated parts (``make docs``, ``mkdocs.yml``'s ``hooks``).

Two jobs, so that nothing on the site is kept by hand twice:

- :func:`cli_reference` writes the command-line reference from the typer commands themselves
  (their docstrings, usage, arguments and options with types, ranges and defaults), so it cannot
  drift from ``statechan --help``;
- the MkDocs hooks (:func:`on_files`, :func:`on_page_markdown`) put the repository's pages that
  live outside ``docs/`` on the site (``README.md`` as the home page, ``CHANGELOG.md``,
  ``traces/README.md``) together with every repository file a page links to (a model file, a
  saved run, a schema), and rewrite links so that the same Markdown works on the site and when
  read in the repository: ``docs/`` is the site's root, every other path keeps its place.

Only the hooks import MkDocs, and only when MkDocs calls them.
"""

from __future__ import annotations

import html
import posixpath
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mkdocs.config.defaults import MkDocsConfig
    from mkdocs.structure.files import Files
    from mkdocs.structure.pages import Page

CLI_PAGE = "reference/cli.md"
"""Where the command-line reference appears on the site."""

OUTSIDE_PAGES = {"README.md": "index.md", "CHANGELOG.md": "changelog.md"}
"""Repository pages outside ``docs/`` that the site shows under another name (any other keeps its path)."""

EXTRA_PAGES = ("traces/README.md",)
"""Repository pages outside ``docs/`` that the site shows whether or not a page links to them."""

_LINK = re.compile(r"(\]\()([^)\s]+)(\))")
_FENCE = re.compile(r"^(```|~~~)")


# -- the command-line reference -------------------------------------------------------------------


def _cell(text: str) -> str:
    """Text for a Markdown table cell: one line; pipes, brackets and angle brackets escaped (typer's
    ``[default: …]`` would read as a reference link, ``<path>`` as HTML)."""
    text = " ".join(text.split())
    for char in "\\|[]<>*_`":
        text = text.replace(char, "\\" + char)
    return text


def _code(text: str) -> str:
    """Text as inline code inside a table cell (HTML, so that a ``|`` in ``<spark|local>`` cannot
    split the cell)."""
    escaped = html.escape(" ".join(text.split()), quote=False).replace("|", "&#124;")
    return f"<code>{escaped}</code>"


def _paragraphs(text: str) -> str:
    """A docstring's help as Markdown paragraphs (typer keeps the docstring's line breaks)."""
    blocks = [" ".join(block.split()) for block in re.split(r"\n\s*\n", text.strip())]
    return "\n\n".join(block for block in blocks if block)


def _commands(command: Any, ctx: Any, path: list[str]) -> Iterator[tuple[list[str], Any, Any]]:
    """Every command under ``command`` (itself first), depth first, in the order ``--help`` lists them."""
    yield path, command, ctx
    if hasattr(command, "list_commands"):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is None or getattr(sub, "hidden", False):
                continue
            yield from _commands(sub, type(ctx)(sub, info_name=name, parent=ctx), [*path, name])


def cli_reference(app: Any = None, program: str = "statechan") -> str:
    """The Markdown reference of every ``statechan`` command, from the typer app itself."""
    import typer.main

    if app is None:
        from statechan.cli import app
    root = typer.main.get_command(app)
    context_class = root.context_class
    lines = [
        "# Command-line reference",
        "",
        "<!-- generated from the typer commands by statechan.docsite.cli_reference; do not edit by hand -->",
        "",
        f"Every command of `{program}`, as `{program} COMMAND --help` prints it (each also takes `--help`).",
        "Which extra each command needs is in [Getting started](../getting-started.md#what-to-install).",
        "",
    ]
    for path, command, ctx in _commands(root, context_class(root, info_name=program), [program]):
        name = " ".join(path)
        level = "#" * min(len(path) + 1, 4)
        lines += [f"{level} `{name}`", ""]
        if command.help:
            lines += [_paragraphs(command.help), ""]
        # typer 0.29 writes an argument as {name}; --help's other spelling is NAME
        pieces = re.sub(r"\{(\w+)\}", lambda m: m.group(1).upper(), " ".join(command.collect_usage_pieces(ctx)))
        lines += ["```text", f"{name} {pieces}".rstrip(), "```", ""]
        rows = []
        for param in command.get_params(ctx):
            if getattr(param, "hidden", False) or param.name == "help":
                continue
            record = param.get_help_record(ctx)
            if record is None:
                continue
            names, text = record
            kind = "argument" if getattr(param, "param_type_name", "") == "argument" else "option"
            rows.append(f"| {_code(names)} | {kind} | {_cell(text)} |")
        if rows:
            lines += ["| name | kind | what it does |", "|---|---|---|", *rows, ""]
        if hasattr(command, "list_commands"):
            subs = [n for n in command.list_commands(ctx) if not getattr(command.get_command(ctx, n), "hidden", False)]
            if subs:
                lines += ["Commands: " + ", ".join(f"`{n}`" for n in subs) + ".", ""]
    return "\n".join(lines).rstrip() + "\n"


# -- links between the repository's pages and the site --------------------------------------------


def site_path(repo_path: str) -> str:
    """Where a repository file appears on the site: ``docs/`` is the root, a few pages are renamed,
    everything else keeps its path."""
    if repo_path.startswith("docs/"):
        return repo_path.removeprefix("docs/")
    return OUTSIDE_PAGES.get(repo_path, repo_path)


def _targets(markdown: str) -> Iterator[str]:
    """The link targets of a page, outside fenced code."""
    fenced = False
    for line in markdown.splitlines():
        if _FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if not fenced:
            for match in _LINK.finditer(line):
                yield match.group(2)


def _resolve(page: str, target: str, root: Path) -> str | None:
    """The repository path a relative link of ``page`` (a repository path) points at, or None for
    an absolute URL, an anchor alone, or a path that leaves the repository."""
    if not target or "://" in target or target.startswith(("#", "/", "mailto:")):
        return None
    path = target.split("#", 1)[0]
    if not path:
        return None
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(page), path))
    if resolved.startswith("../") or resolved == "..":
        return None
    if (root / resolved).is_dir() and (root / resolved / "README.md").is_file():
        resolved = posixpath.join(resolved, "README.md")
    return resolved


def rewrite_links(markdown: str, page: str, root: Path) -> str:
    """``markdown`` of the repository page ``page`` with every relative link pointing where its
    target appears on the site (links inside ``docs/`` between ``docs/`` pages are unchanged)."""
    here = posixpath.dirname(site_path(page))
    out: list[str] = []
    fenced = False

    def swap(match: re.Match[str]) -> str:
        target = match.group(2)
        resolved = _resolve(page, target, root)
        if resolved is None:
            return match.group(0)
        anchor = target[len(target.split("#", 1)[0]) :]
        moved = posixpath.relpath(site_path(resolved), here or ".")
        return f"{match.group(1)}{moved}{anchor}{match.group(3)}"

    for line in markdown.splitlines(keepends=True):
        if _FENCE.match(line.lstrip()):
            fenced = not fenced
        out.append(line if fenced or _FENCE.match(line.lstrip()) else _LINK.sub(swap, line))
    return "".join(out)


def outside_files(root: Path, pages: Iterable[str]) -> dict[str, str]:
    """Repository files outside ``docs/`` that the site must carry: the renamed and extra pages,
    and every file a carried page links to (followed through the Markdown pages it adds),
    as {repository path: site path}."""
    wanted = [p for p in (*OUTSIDE_PAGES, *EXTRA_PAGES) if (root / p).is_file()]
    queue = [*pages, *wanted]
    found = dict.fromkeys(wanted)
    seen: set[str] = set()
    while queue:
        page = queue.pop()
        if page in seen or not page.endswith(".md") or not (root / page).is_file():
            continue
        seen.add(page)
        for target in _targets((root / page).read_text(encoding="utf-8")):
            resolved = _resolve(page, target, root)
            if resolved is None or resolved.startswith("docs/") or not (root / resolved).is_file():
                continue
            if resolved not in found:
                found[resolved] = None
                queue.append(resolved)
    return {path: site_path(path) for path in sorted(found)}


# -- MkDocs hooks -----------------------------------------------------------------------------------


def _root(config: MkDocsConfig) -> Path:
    return Path(config.docs_dir).resolve().parent


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Adds the command-line reference and the repository's files outside ``docs/``."""
    from mkdocs.structure.files import File

    root = _root(config)
    pages = [f"docs/{f.src_uri}" for f in files if f.src_uri.endswith(".md")]
    for repo_path, uri in outside_files(root, pages).items():
        if files.get_file_from_path(uri) is None:
            files.append(File.generated(config, uri, abs_src_path=str(root / repo_path)))
    files.append(File.generated(config, CLI_PAGE, content=cli_reference()))
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Points every relative link where its target appears on the site."""
    root = _root(config)
    source = page.file.abs_src_path
    if source is None:  # a generated page: its links are written for the site already
        return markdown
    repo_path = Path(source).resolve().relative_to(root).as_posix()
    return rewrite_links(markdown, repo_path, root)
