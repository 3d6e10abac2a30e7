"""Fuzz of the session-trace reader (`loadgen/sessions/formats.py read_sessions`) over the shipped samples: Weka
sessions (JSON lines), TraceLab rounds and an OpenTelemetry export."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loadgen.replay.formats import DatasetError
from loadgen.sessions.formats import read_sessions
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
FORMATS = {"agent.weka.jsonl": "weka", "agent.tracelab.jsonl": "tracelab", "agent.otel.json": "otel"}
WEKA = [json.loads(line) for line in (DATA / "agent.weka.jsonl").read_text().splitlines() if line.strip()]
TRACELAB = [json.loads(line) for line in (DATA / "agent.tracelab.jsonl").read_text().splitlines() if line.strip()]
OTEL = json.loads((DATA / "agent.otel.json").read_text())


def _read(test: str, path: Path, format: str, mutation: Mutation | None = None) -> None:
    """Read as the format is told from the content, and as it is named (`--dataset-format`)."""
    outcome(test, lambda: read_sessions(path), DatasetError, path, mutation)
    outcome(test, lambda: read_sessions(path, format), DatasetError, path, mutation)


@fuzz(400)
@given(st.sampled_from(["agent.weka.jsonl", "agent.tracelab.jsonl"]), st.data())
def test_session_lines_mutated_are_read_or_refused_naming_file_and_field(fuzz_dir: Path, name: str,
                                                                         data: st.DataObject) -> None:
    """Weka sessions or TraceLab rounds with one value, key or list changed anywhere (a request, a subagent, a
    tool) are read, or refused with a DatasetError naming the file (and the line or session, and the field)."""
    mutation = data.draw(mutations(WEKA if name == "agent.weka.jsonl" else TRACELAB))
    rows = mutation.document
    test = "sessions: weka and tracelab, structure"
    path = write(fuzz_dir, name, to_json_lines(rows) if isinstance(rows, list) else to_json(rows), test)
    _read(test, path, FORMATS[name], mutation)


@fuzz(400)
@given(st.data())
def test_otel_export_mutated_is_read_or_refused_naming_file_and_field(fuzz_dir: Path, data: st.DataObject) -> None:
    """An OTLP export with one value, key or list changed anywhere (a span, its times, its attributes, the
    messages in them) is read, or refused with a DatasetError naming the file and the field."""
    mutation = data.draw(mutations(OTEL))
    test = "sessions: otel, structure"
    path = write(fuzz_dir, "agent.otel.json", to_json(mutation.document, indent=1), test)
    _read(test, path, "otel", mutation)


@fuzz(300)
@given(st.data())
def test_weka_directory_mutated_is_read_or_refused_naming_the_file(fuzz_dir: Path, data: st.DataObject) -> None:
    """A directory of Weka sessions, a `.json` file each, one of them changed: read, or refused naming that file."""
    test = "sessions: weka directory, structure"
    mutation = data.draw(mutations(WEKA[:3]))
    sessions = mutation.document if isinstance(mutation.document, list) else [mutation.document]
    folder = write(fuzz_dir, "weka", b"", test)
    folder.unlink()
    folder.mkdir()
    for index, session in enumerate(sessions):
        (folder / f"{index:03d}.json").write_text(to_json(session, indent=1))
    if not sessions:
        (folder / "000.json").write_text("[]")
    try:
        read_sessions(folder, "weka")
    except DatasetError as exc:
        named = [p for p in folder.iterdir() if str(p) in str(exc)] or [folder] * (str(folder) in str(exc))
        assert named, f"the refusal names no file of {folder}: {exc}"
        outcome(test, lambda: read_sessions(named[0] if named[0].is_file() else folder, "weka"), DatasetError,
                named[0], mutation)
        return
    outcome(test, lambda: read_sessions(folder), DatasetError, folder, mutation)


@fuzz(400)
@given(st.sampled_from(list(FORMATS)), st.data())
def test_session_bytes_mutated_are_read_or_refused_naming_the_file(fuzz_dir: Path, name: str,
                                                                   data: st.DataObject) -> None:
    """Any shipped session trace cut, flipped, with garbage or bad UTF-8 inserted: read, or refused naming the file."""
    path = write(fuzz_dir, name, data.draw(byte_mutations((DATA / name).read_bytes())), "sessions: bytes")
    _read("sessions: bytes", path, FORMATS[name])


@fuzz(100)
@given(st.sampled_from(list(FORMATS)), st.data())
def test_bench_sweep_given_a_mutated_session_trace_says_one_line(fuzz_dir: Path, cli, name: str,
                                                                 data: st.DataObject) -> None:
    """`bench sweep --dataset TRACE` reads the sessions before anything starts: a mutated trace ends the command
    with one line of error naming the file (or, read, with the next refusal: `--workers 0`), never a traceback."""
    test = "sessions: bench sweep"
    mutation = data.draw(mutations({"agent.weka.jsonl": WEKA, "agent.tracelab.jsonl": TRACELAB}.get(name, OTEL)))
    rows = mutation.document
    text = to_json_lines(rows) if name.endswith(".jsonl") and isinstance(rows, list) else to_json(rows)
    path = write(fuzz_dir, name, text, test)
    result = cli("sweep", "--dataset", str(path), "--dataset-format", FORMATS[name], "--concurrency", "1",
                 "--workers", "0", "--out", str(fuzz_dir / "runs"))
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    said = result.output.strip()
    assert result.exit_code == 2 and said.startswith("error:") and "\n" not in said, said[:500]
    read = "--workers 0" in said
    assert read or path.name in said, said[:300]
    CASES[(test, "read" if read else "refused")] += 1


@pytest.mark.parametrize(("name", "line"), [
    ("round.jsonl", {"session_id": "a", "round_index": 0, "input_tokens_total": 2**40, "prefix_tokens": 0,
                     "output_tokens": 3, "tools": []}),
    ("weka.jsonl", {"id": "s", "block_size": 2**40, "requests": [{"t": 0, "in": 5, "out": 4}]}),
    ("weka-in.jsonl", {"id": "s", "requests": [{"t": 0, "in": 2**62, "out": 4}]}),
])
def test_a_count_past_any_context_is_refused_before_its_blocks_are_built(tmp_path: Path, name: str,
                                                                         line: dict[str, object]) -> None:
    """A TraceLab round of 2^40 tokens became 2^34 block ids held in memory (the fuzz run was killed at 22 GB): a
    count past 2^24 is refused naming the field, before anything is built."""
    path = tmp_path / name
    path.write_text(json.dumps(line) + "\n")
    with pytest.raises(DatasetError, match="must be .*at most 16,777,216|from 1 to 16,777,216") as caught:
        read_sessions(path)
    assert str(path) in str(caught.value)
