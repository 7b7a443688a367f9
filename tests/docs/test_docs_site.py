"""The documentation holds together: every page of the site's navigation exists and every page is
in it, every relative link of the README and of ``docs/`` points at a file that exists, every
``jobgate …`` command line of their shell examples is one the command line accepts, the README's
performance table is the guide's, and the README's "Your first job" runs as written."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import click
import pytest
import yaml

from jobgate.cli import cli
from jobgate.cli.root import COMMANDS

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
PAGES = sorted(DOCS.rglob("*.md"))
FENCE = re.compile(r"^([ \t]*)```(\w*)[^\n]*\n(.*?)^\1```[ \t]*$", re.M | re.S)
SHELL_OPERATORS = {"&&", "||", ";", "|", "&", ">", ">>", "<", "2>", "2>&1", "$(", ")"}


def nav_pages(node: Any) -> Iterator[str]:
    if isinstance(node, str):
        if node.endswith(".md"):
            yield node
    elif isinstance(node, list):
        for item in node:
            yield from nav_pages(item)
    elif isinstance(node, dict):
        for value in node.values():
            yield from nav_pages(value)


def test_every_page_of_the_navigation_exists_and_every_page_is_in_it() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    assert config["docs_dir"] == "docs" and config["theme"]["name"] == "material" and config["strict"] is True
    listed = list(nav_pages(config["nav"]))
    assert len(listed) == len(set(listed)), "a page is listed twice"
    for page in listed:
        assert (DOCS / page).is_file(), f"mkdocs.yml lists {page}, which is not in docs/"
    unlisted = {p.relative_to(DOCS).as_posix() for p in PAGES} - set(listed)
    assert not unlisted, f"pages missing from mkdocs.yml's nav: {sorted(unlisted)}"
    assert {"index.md", "guide/governance.md", "architecture.md", "adr/README.md"} <= set(listed)


def prose(text: str) -> str:
    """The text without code blocks and code spans: what Markdown reads links from."""
    text = FENCE.sub("", text)
    return re.sub(r"(`+)(?!`).*?(?<!`)\1(?!`)", "", text, flags=re.S)


def relative_links(text: str) -> list[str]:
    text = prose(text)
    inline = re.findall(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)", text)
    references = re.findall(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", text, re.M)
    return [t for t in inline + references if not re.match(r"[a-z][a-z0-9+.-]*:", t) and not t.startswith("#")]


@pytest.mark.parametrize("page", [README, *PAGES], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_points_at_a_file_that_exists(page: Path) -> None:
    links = relative_links(page.read_text(encoding="utf-8"))
    for link in links:
        target = (page.parent / link.split("#", 1)[0]).resolve()
        assert target.exists(), f"{page.relative_to(ROOT)} links to {link}, which does not exist"
        if page != README:  # the site holds only docs/: a link out of it is broken there
            assert DOCS in target.parents, f"{page.relative_to(ROOT)} links out of docs/: {link}"
    if page == README:
        assert {"docs/guide/governance.md", "docs/guide/deployment.md", "deploy/"} <= set(links)


def test_the_readme_links_every_guide_page() -> None:
    links = set(relative_links(README.read_text(encoding="utf-8")))
    guide = {f"docs/guide/{p.name}" for p in (DOCS / "guide").glob("*.md")}
    assert guide <= links, f"guide pages the README does not link: {sorted(guide - links)}"


def shell_lines(text: str) -> Iterator[str]:
    """The lines of sh/console blocks, with continuations joined and a console prompt dropped."""
    for match in FENCE.finditer(text):
        if match.group(2) not in ("sh", "console", "bash", "shell"):
            continue
        joined = re.sub(r"\\\n\s*", " ", match.group(3))
        heredoc = None  # a here-document's body is a file's text, not commands
        for line in joined.splitlines():
            if heredoc is not None:
                heredoc = None if line.strip() == heredoc else heredoc
                continue
            opened = re.search(r"<<-?\s*['\"]?(\w+)", line)
            heredoc = opened.group(1) if opened else None
            yield line.strip().removeprefix("$ ")


def resolve(args: list[str]) -> list[str]:
    """The command path ``jobgate ARGS`` names, parsed as the command line parses it: a command,
    an option or a sub-command it does not have, a bad value or a missing argument raises a
    ``click.ClickException``. Nothing runs, and files named need not exist on this machine."""
    with mock.patch.object(click.Path, "convert", lambda self, value, param, ctx: value):
        ctx = cli.make_context("jobgate", list(args))
        command: click.Command = cli
        rest = [*getattr(ctx, "_protected_args", []), *ctx.args]
        path = []
        while isinstance(command, click.Group):
            name, sub, rest = command.resolve_command(ctx, rest)
            assert name is not None and sub is not None
            path.append(name)
            ctx = sub.make_context(name, rest, parent=ctx)
            command = sub
            rest = [*getattr(ctx, "_protected_args", []), *ctx.args]
    return path


def command_lines(page: Path) -> list[list[str]]:
    """Every ``jobgate …`` of the page's shell examples: at a line's start, after ``&&``, ``;`` or
    ``|``, in ``$(…)``, or after ``NAME=value``; without the shell's operators and redirections."""
    found = []
    for line in shell_lines(page.read_text(encoding="utf-8")):
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.commenters = "#"
        lexer.whitespace_split = True
        segment: list[str] = []
        for token in [*lexer, ";"]:
            if token and set(token) <= set("();<>|&"):
                if segment and token.startswith((">", "<")) and segment[-1].isdigit():
                    segment.pop()  # the 2 of 2>&1
                while segment and re.match(r"[A-Za-z_]\w*=", segment[0]):
                    segment.pop(0)  # NAME=value, and the NAME=$ of NAME=$(…)
                if segment and (segment[0] == "jobgate" or segment[0].endswith("/bin/jobgate")):
                    found.append(segment[1:])
                segment = [] if not token.startswith((">", "<")) else ["<redirected>"]
            else:
                segment.append(token)
    return found


@pytest.mark.parametrize("page", [README, *PAGES], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_jobgate_command_line_of_the_examples_is_a_real_command(page: Path) -> None:
    lines = command_lines(page)
    if page == README:
        assert ["demo"] in lines and len(lines) >= 7, "the README's quick start or first job lost its commands"
    for args in lines:
        try:
            path = resolve(args)
        except click.ClickException as exc:
            pytest.fail(f"{page.relative_to(ROOT)}: `jobgate {shlex.join(args)}`: {exc.format_message()}")
        assert path[0] in COMMANDS


def table(text: str, header: str) -> list[str]:
    lines = text.splitlines()
    start = lines.index(header)
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append(line)
    return rows


def test_the_readmes_performance_table_is_the_guides() -> None:
    header = "| figure | jobgate SQLite | peers, same run | jobgate PostgreSQL | peers, same run |"
    readme = table(README.read_text(encoding="utf-8"), header)
    assert len(readme) >= 5
    assert readme == table((DOCS / "guide" / "performance.md").read_text(encoding="utf-8"), header)


def first_job_blocks() -> list[tuple[str, str]]:
    """The (language, text) code blocks of the README's "Your first job", in order."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index("\n## Your first job\n") :]
    section = section[: section.index("\n## ", 1)]
    return [(m.group(2), m.group(3)) for m in FENCE.finditer(section)]


def first_job_script() -> str:
    return next(text for lang, text in first_job_blocks() if lang == "sh")


GREET_STILL_APPROVED = "jobgate --json definitions approval greet > greet-approval.json\n"


def python_variant_script() -> str:
    """The Python variant, after the first job: its module written where its first line says,
    then its commands, then the refusal the text promises."""
    blocks = first_job_blocks()
    module = next(text for lang, text in blocks if lang == "python")
    path = module.splitlines()[0].removeprefix("# ").strip()
    commands = [text for lang, text in blocks if lang == "sh"][1]
    refused = "! jobgate submit payout -p account=FR7630001 -p amount=-1 -p day=2026-12-31 2> refused.txt\n"
    folder = path.rpartition("/")[0] or "."
    written = f"mkdir -p {folder}\ncat > {path} <<'PY'\n{module}PY\n"
    return f"{written}{commands}{refused}cat refused.txt\njobgate runs list --job payout\n"


@pytest.mark.slow
def test_the_readmes_first_job_runs_as_written(tmp_path: Path) -> None:
    bin_dir = Path(sys.executable).parent
    assert (bin_dir / "jobgate").exists(), "the jobgate command is not installed beside this Python"
    env = {k: v for k, v in os.environ.items() if k not in {"JOBGATE_DATABASE_URL", "JOBGATE_CONFIG", "PYTHONPATH"}}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    proc = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", first_job_script()],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    assert "COMPLETED" in proc.stdout and "Hello, ada!" in proc.stdout
    assert "[jobgate] attempt 1\ngreeting ada\n" in proc.stdout


@pytest.mark.slow
def test_the_readmes_python_variant_runs_as_written(tmp_path: Path) -> None:
    bin_dir = Path(sys.executable).parent
    env = {k: v for k, v in os.environ.items() if k not in {"JOBGATE_DATABASE_URL", "JOBGATE_CONFIG", "PYTHONPATH"}}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    proc = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", first_job_script() + python_variant_script() + GREET_STILL_APPROVED],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    assert "params.amount: must be at least 0" in proc.stdout
    listed = proc.stdout[proc.stdout.rindex("params.amount") :]
    runs = [line for line in listed.splitlines() if "│ payout" in line]
    assert len(runs) == 1 and "COMPLETED" in runs[0]  # the refused submission stored nothing
    # found by a review: the Python job once went into greet's package, un-approving greet's code
    greet = json.loads((tmp_path / "first-job" / "greet-approval.json").read_text())
    assert greet["matches"] is True, greet
