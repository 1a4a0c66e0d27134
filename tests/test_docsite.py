"""The site's generated parts: the command-line reference holds every command and option the typer
app has, and links are rewritten so that one Markdown page works in the repository and on the site."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer.main

from statechan.cli import app
from statechan.docsite import cli_reference, outside_files, rewrite_links, site_path

ROOT = Path(__file__).resolve().parent.parent


def _walk(command: Any, ctx: Any, path: list[str]) -> list[tuple[str, list[str]]]:
    """Every command's path and its options' first names (typer's click objects are untyped here)."""
    params = [p for p in command.get_params(ctx) if p.name != "help"]
    found = [(" ".join(path), [p.opts[0] for p in params])]
    if hasattr(command, "list_commands"):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            found += _walk(sub, type(ctx)(sub, info_name=name, parent=ctx), [*path, name])
    return found


def test_the_cli_reference_has_every_command_and_option() -> None:
    page = cli_reference()
    root = typer.main.get_command(app)
    commands = _walk(root, root.context_class(root, info_name="statechan"), ["statechan"])
    assert len(commands) > 15
    for name, options in commands:
        section = page.split(f"`{name}`\n", 1)
        assert len(section) == 2, f"no section for {name}"
        body = section[1].split("\n#", 1)[0]
        for option in options:
            assert option.lstrip("-") in body, f"{name}: {option} missing"
    assert "[default: pulsar-4]" not in page  # escaped, so Markdown does not read it as a link
    assert "\\[default: pulsar-4\\]" in page


def test_site_paths() -> None:
    assert site_path("docs/guides/audit.md") == "guides/audit.md"
    assert site_path("README.md") == "index.md"
    assert site_path("CHANGELOG.md") == "changelog.md"
    assert site_path("traces/README.md") == "traces/README.md"


def test_links_work_on_the_site_as_in_the_repository() -> None:
    readme = "See [the bench](docs/bench.md#running-it), [traces](traces/README.md) and [x](https://e.org/a.md).\n"
    assert rewrite_links(readme, "README.md", ROOT) == (
        "See [the bench](bench.md#running-it), [traces](traces/README.md) and [x](https://e.org/a.md).\n"
    )
    fenced = "```\n[not](../x.md)\n```\n"
    page = "[model](../models/equivalent/pulsar-4.toml) [up](upstream/) [same](checker.md)\n" + fenced
    assert rewrite_links(page, "docs/bench.md", ROOT) == (
        "[model](models/equivalent/pulsar-4.toml) [up](upstream/README.md) [same](checker.md)\n" + fenced
    )
    traces = "[benchmarks](../docs/benchmarks.md#trace-generator) [schema](trace.schema.json)\n"
    assert rewrite_links(traces, "traces/README.md", ROOT) == (
        "[benchmarks](../benchmarks.md#trace-generator) [schema](trace.schema.json)\n"
    )


def test_the_site_carries_the_repository_files_its_pages_link_to() -> None:
    carried = outside_files(ROOT, ["docs/bench.md"])
    assert carried["README.md"] == "index.md"
    assert carried["traces/README.md"] == "traces/README.md"
    assert carried["models/equivalent/pulsar-4.toml"] == "models/equivalent/pulsar-4.toml"
    assert not [path for path in carried if path.startswith("docs/")]
