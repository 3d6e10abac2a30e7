"""Hostile files are data: another tool's result files whose names hold HTML, rich markup, Markdown and `../`,
imported, put in the history and reported; and a run directory someone else wrote whose run.json names files
outside it, or whose copies were changed. Each test performs the attack and checks that nothing obeyed it."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

from tests.bench.test_import import aggregate_file, detailed_file

PEERS = Path(__file__).parent / "data" / "peers"
PEER_MODEL = "SmolLM2-135M-Instruct.Q4_1"  # the model the shipped guidellm and aiperf samples name
HOSTILE = {  # one name per tool: HTML that runs, an attribute broken out of, rich markup, Markdown, a table's `|`
    "vllm": "<img src=x onerror=alert(1)>[/x]",
    "guidellm": "<script>alert(1)</script>[bold]",
    "aiperf": '"><svg onload=alert(1)>|[link](javascript:alert(1))\n| x |',
}
BENIGN = {"vllm": "model-a", "guidellm": "model-b", "aiperf": "model-c"}


class Tags(HTMLParser):
    """Every element and attribute a browser would build from a page, and its text."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.handlers: list[tuple[str, str]] = []  # (element, on* attribute): script that runs
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.handlers += [(tag, name) for name, _ in attrs if name.startswith("on")]

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parsed(page: Path) -> Tags:
    tags = Tags()
    tags.feed(page.read_text())
    return tags


def peer_file(tool: str, model: str, path: Path) -> Path:
    """The shipped sample of `tool` with its model renamed `model` (JSON-escaped, as the tool would write it)."""
    sample = "guidellm-0.8.1-benchmarks.json" if tool == "guidellm" else "aiperf-0.13.0-profile_export_aiperf.json"
    text = (PEERS / sample).read_text()
    assert PEER_MODEL in text
    path.write_text(text.replace(json.dumps(PEER_MODEL), json.dumps(model)))
    return path


def vllm_file(path: Path, model: str, backend: str = "vllm", detailed: bool = True) -> Path:
    (detailed_file if detailed else aggregate_file)(path)
    raw = json.loads(path.read_text())
    path.write_text(json.dumps({**raw, "model_id": model, "backend": backend}))
    return path


def import_three(cli, names: dict[str, str], folder: Path, out: Path) -> list[Path]:
    folder.mkdir(parents=True)
    files = {"vllm": vllm_file(folder / "c4.json", names["vllm"]),
             "guidellm": peer_file("guidellm", names["guidellm"], folder / "benchmarks.json"),
             "aiperf": peer_file("aiperf", names["aiperf"], folder / "profile_export_aiperf.json")}
    for tool, path in files.items():
        result = cli("import", str(path), "--from", tool, "--out", str(out))
        assert result.exit_code == 0, result.output
    return sorted(p for p in out.iterdir() if not p.name.startswith("."))


def test_hostile_model_names_in_the_history_stay_text_on_its_page_and_in_its_table(tmp_path: Path, cli) -> None:
    pages = {}
    for kind, names in (("benign", BENIGN), ("hostile", HOSTILE)):
        out = tmp_path / kind / "runs"
        import_three(cli, names, tmp_path / kind / "files", out)
        said = cli("history", "--runs", str(out))
        assert said.exit_code == 0, said.output  # rich markup in a name neither crashes the table nor restyles it
        for name in names.values():
            assert name.split("\n")[0] in said.output
        pages[kind] = parsed(out / ".history" / "history.html")
    benign, hostile = pages["benign"], pages["hostile"]
    assert "script" not in hostile.tags and "svg" not in hostile.tags
    assert hostile.handlers == [] == benign.handlers  # no onerror / onload came from the data
    assert sorted(hostile.tags) == sorted(benign.tags)  # the same page, element for element
    text = "".join(hostile.text)
    assert "<script>alert(1)</script>" in text and "<img src=x onerror=alert(1)>" in text  # shown, as text


def markdown_tables(markdown: str) -> list[list[str]]:
    """Each table's rows, as lines (a row is a line that starts with `|`)."""
    tables, current = [], []
    for line in markdown.splitlines():
        if line.startswith("|"):
            current.append(line)
        elif current:
            tables.append(current)
            current = []
    return tables + ([current] if current else [])


def cells(row: str) -> int:
    """A Markdown row's cells: its `|` that are not escaped, less one."""
    return sum(1 for i, char in enumerate(row) if char == "|" and (i == 0 or row[i - 1] != "\\")) - 1


def test_a_report_of_hostile_names_escapes_them_in_markdown_and_html(tmp_path: Path, cli) -> None:
    model, backend = "<img src=x onerror=alert(1)>", "<b>x</b>|[y](http://evil.example)"
    path = vllm_file(tmp_path / "c4.json", model, backend)
    assert cli("import", str(path), "--from", "vllm", "--out", str(tmp_path / "runs")).exit_code == 0
    (run_dir,) = [p for p in (tmp_path / "runs").iterdir() if not p.name.startswith(".")]
    result = cli("report", str(run_dir), "--gpu-price", "2", "--provider", "llama-3.1-8b", "--out",
                 str(tmp_path / "report.html"))
    assert result.exit_code == 0, result.output
    markdown = (tmp_path / "report.md").read_text()
    assert "<img" not in markdown and "<b>" not in markdown and "[y](http://evil" not in markdown
    assert "&lt;img src=x onerror=alert(1)&gt;" in markdown  # the name, shown as text
    assert "&lt;b&gt;x&lt;/b&gt;\\|\\[y\\](http://evil.example)" in markdown
    for table in markdown_tables(markdown):
        assert {cells(row) for row in table} == {cells(table[0])}, table  # no row broken by a `|` from the data
    html = parsed(tmp_path / "report.html")
    assert html.handlers == [] and "script" not in html.tags and "b" not in html.tags
    assert model in "".join(html.text)


def test_a_backend_name_with_dot_dots_makes_a_run_directory_inside_out(tmp_path: Path, cli) -> None:
    out = tmp_path / "a" / "b" / "runs"
    out.mkdir(parents=True)
    path = vllm_file(tmp_path / "c4.json", "m", backend="x/../../../../escaped")  # unchecked: tmp_path/escaped...
    before = set(tmp_path.rglob("*"))
    result = cli("import", str(path), "--from", "vllm", "--out", str(out))
    assert result.exit_code == 0, result.output
    made = set(tmp_path.rglob("*")) - before
    assert made and all(p.is_relative_to(out) for p in made), sorted(made)
    (run_dir,) = [p for p in out.iterdir() if not p.name.startswith(".")]
    assert run_dir.parent == out and run_dir.name.endswith("-vllm-x-escaped-imported")
    assert json.loads((run_dir / "run.json").read_text())["engine"]["name"] == "x/../../../../escaped"  # kept as data


def imported_run(tmp_path: Path, cli) -> Path:
    path = vllm_file(tmp_path / "c4.json", "m")
    assert cli("import", str(path), "--from", "vllm", "--out", str(tmp_path / "runs")).exit_code == 0
    (run_dir,) = [p for p in (tmp_path / "runs").iterdir() if not p.name.startswith(".")]
    return run_dir


def report(cli, run_dir: Path, tmp_path: Path):
    return cli("report", str(run_dir), "--gpu-price", "2", "--provider", "llama-3.1-8b", "--out",
               str(tmp_path / "out" / "report.html"))


def test_a_foreign_run_json_naming_a_file_outside_the_run_directory_is_refused(tmp_path: Path, cli) -> None:
    run_dir = imported_run(tmp_path, cli)
    secret = vllm_file(tmp_path / "secret.json", "read-from-outside")  # a file the report must never read
    info = json.loads((run_dir / "run.json").read_text())
    for name in ("../../secret.json", str(secret), "..", ""):
        info["imported"]["files"][0]["name"] = name
        (run_dir / "run.json").write_text(json.dumps(info))
        said = report(cli, run_dir, tmp_path)
        assert said.exit_code == 2, (name, said.output)
        assert "imported.files name" in said.output and "is not a plain file name inside" in said.output
        assert not (tmp_path / "out" / "report.md").exists()
    # a link inside imported/ that points out of it is no plain file either
    (run_dir / "imported" / "link.json").symlink_to(secret)
    info["imported"]["files"][0]["name"] = "link.json"
    (run_dir / "run.json").write_text(json.dumps(info))
    said = report(cli, run_dir, tmp_path)
    assert said.exit_code == 2 and "is not a plain file name inside" in said.output


def test_a_changed_copy_of_an_imported_file_is_refused_naming_it(tmp_path: Path, cli) -> None:
    run_dir = imported_run(tmp_path, cli)
    (copy,) = (run_dir / "imported").iterdir()
    assert report(cli, run_dir, tmp_path).exit_code == 0
    raw = json.loads(copy.read_text())
    copy.write_text(json.dumps({**raw, "output_throughput": raw["output_throughput"] * 10}))  # ten times faster
    said = report(cli, run_dir, tmp_path)
    assert said.exit_code == 2
    assert str(copy) in said.output.replace("\n", "") and "sha256" in said.output
    exported = cli("export", str(run_dir), "--format", "csv", "--out", str(tmp_path / "export"))
    assert exported.exit_code != 0 and "sha256" in exported.output


def test_rich_markup_in_a_name_is_printed_as_given_in_terminal_tables(tmp_path: Path, cli) -> None:
    run_dir = imported_run(tmp_path, cli)
    info = json.loads((run_dir / "run.json").read_text())
    info["imported"]["engine"] = "[/x][bold]e"  # an unmatched closing tag: rich's markup would raise
    (run_dir / "run.json").write_text(json.dumps(info))
    for command in (("summarize", str(run_dir)), ("compare", str(run_dir), str(run_dir))):
        said = cli(*command)
        assert said.exit_code == 0, said.output
        assert "[/x][bold]e" in said.output
