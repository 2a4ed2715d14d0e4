"""README and docs/ stay true: every relative link and every results JSON they name exists, every command in
README's command table parses (and its `--help` exits 0), README stays short, and no page speaks of how the work
was organised.

    python -m pytest -q tests/test_docs.py
"""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from core.__main__ import build_parser

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
# A table row whose first cell is a command: | `python ...` | what it does |
COMMAND_ROW = re.compile(r"^\| `(python [^`]+)` \|", re.M)
# "session" is the engine's word for one request's state; any other use tells the order of the work
WORK_ORDER = re.compile(r"(?<!decoding )(?<!engine )\bsessions?\b", re.I)


def _text(page: Path) -> str:
    return page.read_text(encoding="utf-8")


def _relative_links(page: Path) -> list[str]:
    return [t for t in LINK.findall(_text(page)) if not re.match(r"[a-z]+:|#", t)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_exists(page):
    missing = [t for t in _relative_links(page) if not (page.parent / t.split("#")[0]).exists()]
    assert not missing, f"{page.name} links to files that do not exist: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_results_json_named_exists(page):
    results = ROOT / "assets" / "results"
    named = set()
    for name in re.findall(r"assets/results/([\w\-.{},]+\.json)", _text(page)):
        named |= _expand(name)
    for link in _relative_links(page):  # a link into results/ by a relative path (docs/ use ../assets/results/...)
        if "assets/results/" in link:
            named.add(link.split("assets/results/")[1])
    missing = sorted(n for n in named if not (results / n).exists())
    assert not missing, f"{page.name} names results that are not in assets/results/: {missing}"


def _expand(name: str) -> set[str]:
    """bench_forms_{world,photos}.json -> both names (the pages write families of files that way)."""
    match = re.search(r"\{([^}]+)\}", name)
    if not match:
        return {name}
    return set().union(*(_expand(name[: match.start()] + part + name[match.end():]) for part in match[1].split(",")))


def test_readme_is_a_newcomers_page():
    lines = _text(ROOT / "README.md").splitlines()
    assert len(lines) <= 300, f"README.md has {len(lines)} lines; details belong in docs/"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_no_word_of_how_the_work_was_organised(page):
    hits = [line for line in _text(page).splitlines() if WORK_ORDER.search(line)]
    assert not hits, f"{page.name} speaks of sessions: {hits[:3]}"


def _table_commands() -> list[str]:
    commands = COMMAND_ROW.findall(_text(ROOT / "README.md"))
    assert len(commands) >= 10, "README's command table is missing or unreadable"
    return commands


def _subcommands(args: list[str]) -> list[str]:
    """The leading words of `args` that name (nested) subcommands of `python -m core`: ["reap", "prune"]."""
    parser, names = build_parser(), []
    for word in args:
        choices = next((a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction)), {})
        if word not in choices:
            break
        parser = choices[word]
        names.append(word)
    return names


@pytest.mark.parametrize("command", _table_commands())
def test_every_command_in_readmes_table_parses(command, capsys):
    argv = shlex.split(command)
    assert argv[0] == "python"
    if argv[1:3] == ["-m", "core"]:
        args = argv[3:]
        build_parser().parse_args(args)  # the whole line, options and values: argparse exits 2 on anything unknown
        for depth in range(1, len(_subcommands(args)) + 1):
            with pytest.raises(SystemExit) as stop:
                build_parser().parse_args([*_subcommands(args)[:depth], "--help"])
            assert stop.value.code == 0
        return
    entry = argv[1:3] if argv[1] == "-m" else argv[1:2]
    run = subprocess.run([sys.executable, *entry, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, f"{' '.join(entry)} --help failed: {run.stderr[-800:]}"
    assert "usage:" in run.stdout
