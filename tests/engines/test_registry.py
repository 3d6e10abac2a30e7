"""From a kind's registry entry to the command line it runs: the command lines themselves (as they were when
six calls led to them), and the three calls that lead there now: the entry, `launch_local`, the kind."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from engines import process, registry
from engines.engine_file import EngineFile
from engines.launch import ProcessSpec, free_port
from engines.registry import ENGINES, make_launcher


class Started(Exception):
    """Raised where the engine's process would start, with what it would run."""

    def __init__(self, spec: ProcessSpec) -> None:
        super().__init__(spec.name)
        self.spec = spec


@pytest.fixture
def nothing_started(monkeypatch: pytest.MonkeyPatch) -> None:
    """`launch_local` gets as far as the process and no further: `Started` carries its spec instead."""

    @contextmanager
    def run_process(spec: ProcessSpec, log_path: Path) -> Iterator[None]:
        raise Started(spec)
        yield

    monkeypatch.setattr(process, "run_process", run_process)


@pytest.fixture
def no_binaries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No llama-server, ollama or nvidia-smi on PATH, and no engine interpreter in the environment."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty-path"))
    for name in (process.VLLM_PYTHON_ENV, process.SGLANG_PYTHON_ENV):
        monkeypatch.delenv(name, raising=False)


def spec_of(options: EngineFile, run_dir: Path) -> ProcessSpec:
    """What the registry's launcher for `options` would run."""
    with pytest.raises(Started) as started, make_launcher(options)(run_dir):
        pass
    return started.value.spec


def cases(tmp_path: Path) -> dict[str, tuple[EngineFile, list[str]]]:
    """Per local kind: an engine file and the command line it ran before the registry's chain was cut."""
    port = free_port()
    gguf, checkpoint = tmp_path / "tiny.gguf", tmp_path / "SmolLM2-135M"
    gguf.write_bytes(b"GGUF")
    checkpoint.mkdir(exist_ok=True)
    py, at = sys.executable, ["--host", "127.0.0.1", "--port", str(port)]
    return {
        "reference": (EngineFile(engine="reference", model="m.gguf", port=port,
                                 args={"max-num-seqs": 8, "no-prefix-cache": True}),
                      [py, "-m", "engines.reference", "--model", "m.gguf", *at, "--max-num-seqs", "8",
                       "--no-prefix-cache"]),
        "llamacpp": (EngineFile(engine="llamacpp", model=str(gguf), port=port, args={"parallel": 4, "threads": 2}),
                     [py, "-m", "engines.llamacpp_runner", "--model", str(gguf), "--port", str(port), "--parallel",
                      "4", "--ctx-per-slot", "2048", "--threads", "2"]),
        "vllm": (EngineFile(engine="vllm", model=str(checkpoint), port=port,
                            args={"python": "/envs/vllm/bin/python", "max-num-seqs": 16}),
                 ["/envs/vllm/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--model", str(checkpoint),
                  "--served-model-name", "SmolLM2-135M", *at, "--max-num-seqs", "16", "--gpu-memory-utilization",
                  "0.3"]),
        "sglang": (EngineFile(engine="sglang", model="Qwen/Qwen2.5-0.5B-Instruct", port=port,
                              args={"enable-metrics": True}),
                   [py, "-m", "sglang.launch_server", "--model-path", "Qwen/Qwen2.5-0.5B-Instruct",
                    "--served-model-name", "Qwen/Qwen2.5-0.5B-Instruct", *at, "--enable-metrics"]),
        "ollama": (EngineFile(engine="ollama", model="tiny", port=port, args={"binary": "/opt/ollama", "parallel": 2}),
                   ["/opt/ollama", "serve"]),
    }


@pytest.mark.parametrize("kind", ["reference", "llamacpp", "vllm", "sglang", "ollama"])
def test_each_local_kind_runs_the_command_line_it_ran_before(kind, tmp_path, nothing_started, no_binaries) -> None:
    options, command = cases(tmp_path)[kind]
    spec = spec_of(options, tmp_path / "run")
    assert spec.command == command
    assert spec.name == kind
    if kind == "ollama":
        assert spec.env == {"OLLAMA_HOST": f"127.0.0.1:{options.port}", "OLLAMA_NUM_PARALLEL": "2"}


def test_the_reference_engines_model_defaults_to_default(tmp_path, nothing_started) -> None:
    spec = spec_of(EngineFile(engine="reference"), tmp_path)
    assert spec.command[1:5] == ["-m", "engines.reference", "--model", "default"]


# Functions on the way that are not a step from the entry to the command line: make_launcher, which picks
# the entry, and those that compute a part of it (its flags, the interpreter, the model's name).
PARTS = {"make_launcher", "_args", "parse_engine_args", "engine_arg_flags", "engine_python", "checkpoint_model",
         "_package_version", "_lora_flags", "_secrets"}
WATCHED = {registry.__file__, process.__file__}
COMPREHENSIONS = ("<listcomp>", "<dictcomp>", "<setcomp>", "<genexpr>")  # part of the function they are in


def calls_on_the_way(options: EngineFile, run_dir: Path) -> list[str]:
    """The functions of `engines.registry` and `engines.process` that run, in the order each is first
    called, from making the kind's launcher to the point where its process would start."""
    called: list[str] = []

    def watch(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code.co_filename in WATCHED:
            name = frame.f_code.co_qualname if sys.version_info >= (3, 11) else frame.f_code.co_name
            if name not in called and not name.endswith(COMPREHENSIONS):
                called.append(name)

    sys.setprofile(watch)
    try:
        spec_of(options, run_dir)
    finally:
        sys.setprofile(None)
    return [name for name in called if name not in PARTS]


@pytest.mark.skipif(sys.version_info < (3, 11), reason="names functions by their qualified names")
@pytest.mark.parametrize("kind", ["reference", "llamacpp", "vllm", "sglang", "ollama"])
def test_from_a_local_kinds_entry_to_its_command_line_is_three_calls(kind, tmp_path, nothing_started,
                                                                     no_binaries) -> None:
    """The entry (`LocalProcess`, with the launcher it returns), `launch_local`, the kind: the kind builds the
    command line itself. A wrapper or a command function added on the way is one more name here."""
    options, _ = cases(tmp_path)[kind]
    entry = ENGINES[kind]
    assert isinstance(entry, registry.LocalProcess)
    assert calls_on_the_way(options, tmp_path / "run") == [
        "LocalProcess.__call__", "LocalProcess.__call__.<locals>.<lambda>", "launch_local", entry.kind.__name__]
    assert entry.kind.__name__ == f"{kind}_engine"
