"""Fuzz of `bench import`'s readers (`bench/imports/`: vllm, guidellm, aiperf) over their samples: the vLLM files
tests/bench/test_import.py writes in vLLM's shape (per-request and aggregate), and the files guidellm 0.8.1 and
aiperf 0.13.0 wrote themselves (tests/bench/data/peers). The command's own layer is checked too: a mutated file
given to `bench import` ends in a run directory or in one line of error, never a traceback."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.imports import ImportFileError, read_levels
from tests.bench.test_import import aggregate_file, detailed_file
from tests.fuzz.mutations import CASES, ODD_TEXT, byte_mutations, fuzz, mutations, outcome, to_json, write

PEERS = Path(__file__).parents[1] / "bench" / "data" / "peers"


def _vllm_samples() -> dict[str, object]:
    with tempfile.TemporaryDirectory() as folder:
        return {name: json.loads(make(Path(folder) / name).read_text())
                for name, make in (("vllm-detailed.json", detailed_file), ("vllm-aggregate.json", aggregate_file))}


def _guidellm_sample() -> object:
    """guidellm's file with its first two benchmarks (of the strategies it ran), and without its per-request
    samples (163 KB of them, which it reads none of): every field the reader reads is kept."""
    raw = json.loads((PEERS / "guidellm-0.8.1-benchmarks.json").read_text())
    raw["benchmarks"] = raw["benchmarks"][:2]
    for benchmark in raw["benchmarks"]:
        benchmark.pop("requests", None)
    return raw


SAMPLES = {**_vllm_samples(), "guidellm.json": _guidellm_sample(),
           "aiperf.json": json.loads((PEERS / "aiperf-0.13.0-profile_export_aiperf.json").read_text())}
TOOLS = {"vllm-detailed.json": "vllm", "vllm-aggregate.json": "vllm", "guidellm.json": "guidellm",
         "aiperf.json": "aiperf"}


@fuzz(600)
@given(st.sampled_from(list(SAMPLES)), st.data())
def test_result_files_mutated_are_read_or_refused_naming_file_and_field(fuzz_dir: Path, name: str,
                                                                        data: st.DataObject) -> None:
    """A vLLM, guidellm or aiperf result file with one value, key or list changed anywhere is read as levels, or
    refused with an ImportFileError naming the file and the field."""
    mutation = data.draw(mutations(SAMPLES[name]))
    test = "imports: structure"
    path = write(fuzz_dir, name, to_json(mutation.document, indent=1), test)
    outcome(test, lambda: read_levels(TOOLS[name], [path]), ImportFileError, path, mutation)


@fuzz(300)
@given(st.sampled_from(list(SAMPLES)), st.data())
def test_result_bytes_mutated_are_read_or_refused_naming_the_file(fuzz_dir: Path, name: str,
                                                                  data: st.DataObject) -> None:
    """A result file cut, flipped, with garbage or bad UTF-8 inserted: read, or refused naming the file."""
    test = "imports: bytes"
    path = write(fuzz_dir, name, data.draw(byte_mutations(to_json(SAMPLES[name], indent=1).encode())), test)
    outcome(test, lambda: read_levels(TOOLS[name], [path]), ImportFileError, path)


@fuzz(150)
@given(st.sampled_from(list(SAMPLES)), st.data())
def test_bench_import_of_a_mutated_file_makes_a_run_or_says_one_line(fuzz_dir: Path, cli, name: str,
                                                                     data: st.DataObject) -> None:
    """`bench import` of a mutated file: a run directory that `read_run` reads (exit 0), or exit 2 with one line
    of error naming the file; never a traceback (what is read goes on into run.json, the summaries and the
    history, so a value the reader let through must not break them)."""
    test = "imports: bench import"
    mutation = data.draw(mutations(SAMPLES[name]))
    path = write(fuzz_dir, name, to_json(mutation.document, indent=1), test)
    out = fuzz_dir / f"runs-{path.stem}"
    result = cli("import", str(path), "--from", TOOLS[name], "--out", str(out))
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    if result.exit_code == 0:
        from bench.run.rundir import read_run

        (run_dir,) = [p for p in out.iterdir() if p.is_dir() and not p.name.startswith(".")]
        assert read_run(run_dir).summaries
        CASES[(test, "read")] += 1
        return
    said = result.output.strip()
    assert result.exit_code == 2 and said.startswith("error:") and "\n" not in said, said[:500]
    assert path.name in said.replace("\n", "")
    CASES[(test, "refused")] += 1


NAMES = {"vllm-aggregate.json": [("backend",), ("model_id",)], "guidellm.json": [
    ("benchmarks", 0, "config", "backend", "model"), ("metadata", "guidellm_version")],
    "aiperf.json": [("aiperf_version",), ("input_config", "models", "items", 0, "name")]}


ODD_NAMES = [*ODD_TEXT, 7, 1.5, True, [], {}]


@pytest.mark.parametrize("value", ODD_NAMES, ids=[f"{type(v).__name__}{i}" for i, v in enumerate(ODD_NAMES)])
def test_every_odd_name_a_file_gives_is_imported_or_refused_in_one_line(tmp_path: Path, cli, value: object) -> None:
    """Each name the files give (engine, model, tool version) set to each odd value (a lone surrogate, 100,000
    characters, markup, a path, a number, a list): `bench import` makes a run or says one line, each time."""
    for name, places in NAMES.items():
        for place in places:
            document = json.loads(json.dumps(SAMPLES[name]))
            parent = document
            for key in place[:-1]:
                parent = parent[key]
            parent[place[-1]] = value
            path = tmp_path / f"{len(list(tmp_path.iterdir())):03d}-{name}"
            path.write_text(to_json(document))
            result = cli("import", str(path), "--from", TOOLS[name], "--out", str(tmp_path / "runs"))
            assert result.exception is None or isinstance(result.exception, SystemExit), (place, result.exception)
            said = result.output.strip()
            assert result.exit_code == 0 or (said.startswith("error:") and "\n" not in said), (place, said[:300])
