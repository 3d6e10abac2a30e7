"""Fuzz of the dataset reader (`loadgen/replay/formats.py read_dataset`) over the shipped samples: logged prompts,
the quality eval set (JSONL with answers and graders), ShareGPT conversations, Mooncake and Azure traces."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from loadgen.replay.formats import DatasetError, read_dataset
from tests.fuzz.mutations import (
    CASES,
    Mutation,
    byte_mutations,
    fuzz,
    mutations,
    outcome,
    to_json,
    to_json_lines,
    write,
)

DATA = Path(__file__).parents[2] / "scenarios" / "data"
JSON_LINES = {"prompts.jsonl": "jsonl", "quality.jsonl": "jsonl", "trace.mooncake.jsonl": "mooncake"}


def _lines(name: str) -> list[object]:
    return [json.loads(line) for line in (DATA / name).read_text().splitlines() if line.strip()]


SAMPLES = {name: _lines(name) for name in JSON_LINES}
SHAREGPT = json.loads((DATA / "conversations.sharegpt.json").read_text())
AZURE = list(csv.reader(io.StringIO((DATA / "trace.azure.csv").read_text())))
EVAL_HEAD = SAMPLES["quality.jsonl"][:40]  # a slice of the eval set: every grader and category in it


def _read(test: str, path: Path, format: str | None, mutation: Mutation | None = None) -> None:
    """Read as the format is told from the content, and as it is named (`--dataset-format`)."""
    outcome(test, lambda: read_dataset(path), DatasetError, path, mutation)
    if format is not None:
        outcome(test, lambda: read_dataset(path, format), DatasetError, path, mutation)  # type: ignore[arg-type]


@fuzz(400)
@given(st.sampled_from(["prompts.jsonl", "trace.mooncake.jsonl", "quality.jsonl"]), st.data())
def test_json_lines_mutated_are_read_or_refused_naming_file_and_field(fuzz_dir: Path, name: str,
                                                                      data: st.DataObject) -> None:
    """A JSONL dataset (prompts, the eval set, a Mooncake trace) with one value, key or list changed anywhere is
    read, or refused with a DatasetError naming the file (and the line and field)."""
    sample = EVAL_HEAD if name == "quality.jsonl" else SAMPLES[name]
    mutation = data.draw(mutations(sample))
    rows = mutation.document
    test = "datasets: json lines, structure"
    path = write(fuzz_dir, name, to_json_lines(rows) if isinstance(rows, list) else to_json(rows), test)
    _read(test, path, JSON_LINES[name], mutation)


@fuzz(400)
@given(st.data())
def test_sharegpt_mutated_is_read_or_refused_naming_file_and_field(fuzz_dir: Path, data: st.DataObject) -> None:
    """ShareGPT conversations with one value, key or list changed anywhere: read, or refused naming the file."""
    mutation = data.draw(mutations(SHAREGPT))
    test = "datasets: sharegpt, structure"
    path = write(fuzz_dir, "conversations.sharegpt.json", to_json(mutation.document, indent=1), test)
    _read(test, path, "sharegpt", mutation)


@fuzz(400)
@given(st.data())
def test_azure_trace_mutated_is_read_or_refused_naming_file_and_field(fuzz_dir: Path, data: st.DataObject) -> None:
    """An Azure CSV trace with a cell, a row or the header changed: read, or refused naming the file."""
    mutation = data.draw(mutations(AZURE))
    rows = mutation.document if isinstance(mutation.document, list) else [[mutation.document]]
    text = io.StringIO()
    writer = csv.writer(text)
    for row in rows:
        writer.writerow(row if isinstance(row, list) else [row])
    test = "datasets: azure csv, structure"
    path = write(fuzz_dir, "trace.azure.csv", text.getvalue(), test)
    _read(test, path, "azure", mutation)


@fuzz(400)
@given(st.sampled_from(["prompts.jsonl", "trace.mooncake.jsonl", "conversations.sharegpt.json", "trace.azure.csv",
                        "quality.jsonl"]), st.data())
def test_dataset_bytes_mutated_are_read_or_refused_naming_the_file(fuzz_dir: Path, name: str,
                                                                   data: st.DataObject) -> None:
    """Any shipped dataset cut, flipped, with garbage or bad UTF-8 inserted: read, or refused naming the file."""
    raw = (DATA / name).read_bytes()
    if name == "quality.jsonl":
        raw = b"".join(raw.splitlines(keepends=True)[:40])
    path = write(fuzz_dir, name, data.draw(byte_mutations(raw)), "datasets: bytes")
    format = JSON_LINES.get(name) or ("sharegpt" if name.endswith(".json") else "azure")
    _read("datasets: bytes", path, format)


@fuzz(150)
@given(st.sampled_from(["prompts.jsonl", "trace.mooncake.jsonl", "quality.jsonl", "conversations.sharegpt.json"]),
       st.data())
def test_bench_sweep_given_a_mutated_dataset_says_one_line(fuzz_dir: Path, cli, name: str,
                                                           data: st.DataObject) -> None:
    """`bench sweep --dataset FILE` reads and prepares the dataset before anything starts: a mutated one ends the
    command with one line of error naming the file (or, read, with the next refusal: `--workers 0`), never a
    traceback."""
    test = "datasets: bench sweep"
    sample = SHAREGPT if name.endswith(".json") else EVAL_HEAD if name == "quality.jsonl" else SAMPLES[name]
    mutation = data.draw(mutations(sample))
    rows = mutation.document
    text = to_json(rows) if name.endswith(".json") or not isinstance(rows, list) else to_json_lines(rows)
    path = write(fuzz_dir, name, text, test)
    result = cli("sweep", "--dataset", str(path), "--workers", "0", "--out", str(fuzz_dir / "runs"))
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    said = result.output.strip()
    assert result.exit_code == 2 and said.startswith("error:") and "\n" not in said, said[:500]
    read = "--workers 0" in said
    assert read or path.name in said, said[:300]
    CASES[(test, "read" if read else "refused")] += 1
