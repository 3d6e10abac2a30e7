"""The options every measuring command shares (`bench sweep`, `bench capacity`, `bench tune`, `bench quality`):
engines, workload, bounds, output, repeats, resume, as one frozen `MeasureFlags` that flows and inputs read.
Each is declared once, as a field with its default, help, help panel and the name of its value; the command
line (`bench.commands.flags.measure_command`) builds its typer options from these fields. Nothing here knows
typer or rich."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TypeVar

from bench.inputs.flag_text import given_flags

# The panels `bench CMD --help` lists options in (bench.commands.helptext orders them); named here because
# each measuring flag names its own.
ENGINE, WORKLOAD, LOAD, SLO, OUTPUT, ADVANCED = "Engine", "Workload", "Load and bounds", "SLO", "Output", "Advanced"

T = TypeVar("T")


def option(default: T, help: str, panel: str, metavar: str | None = None) -> T:
    """A field of `MeasureFlags`: its default, and how `bench CMD --help` shows it: its help, the panel it is
    listed in and the name of the value it takes (none for a flag)."""
    return field(default=default, metadata={"help": help, "panel": panel, "metavar": metavar})


@dataclass(frozen=True)
class MeasureFlags:
    engine: list[str] | None = option(None, "Engine kind (default: reference), repeatable to compare engines on the "
                                            "same workload: see `bench engines`.", ENGINE, "KIND")
    base_url: str | None = option(None, "Endpoint base URL, ending in /v1.", ENGINE, "URL")
    model: str | None = option(None, "Model: for endpoint, a name the server lists (default: its only one); for "
                                     "reference, a .gguf file, a safetensors directory, dummy:<preset> or default "
                                     "(SmolLM2-135M).",
                                     ENGINE, "MODEL")
    engine_arg: list[str] | None = option(None, "KEY=VALUE passed to a launched engine as --KEY VALUE (repeatable), "
                                                "e.g. batching=static.", ENGINE, "KEY=VALUE")
    port: int | None = option(None, "Port for a launched engine (default: a free one).", ENGINE, "PORT")
    replicas: int | None = option(None, "Launch this many replicas of a local engine behind vllm-router (pip install "
                                        "vllm-router; or $BENCH_VLLM_ROUTER).", ENGINE, "N")
    router_policy: str | None = option(None, "The router's policy with --replicas: round_robin (default), "
                                             "cache_aware, power_of_two, random, consistent_hash.", ENGINE, "POLICY")
    router_arg: list[str] | None = option(None, "KEY=VALUE passed to vllm-router as --KEY VALUE (repeatable), e.g. "
                                                "balance-abs-threshold=4: cache_aware balances by load only past "
                                                "its thresholds (64 requests apart and 1.5x, by default).",
                                                ENGINE, "KEY=VALUE")
    replica_metrics: str | None = option(None, "--engine endpoint behind a gateway: URL,... of each replica (pod) "
                                               "whose Prometheus /metrics to sample, e.g. "
                                               "http://10.0.0.7:8000/metrics.", ENGINE, "URL,URL,...")
    through_ui: bool = option(False, "Measure each engine twice: direct, then through Open WebUI's chat API in front "
                                     "of it, side by side (`--engine openwebui` does this for the reference engine).",
                                     ENGINE)
    ui_python: str | None = option(None, "The Python of Open WebUI's own environment (default: $BENCH_OPENWEBUI, the "
                                         "environment's folder).", ENGINE, "PYTHON")
    engine_file: list[Path] | None = option(None, "Engine spec in YAML (engine, model, flags); repeatable.",
                                                  ENGINE, "FILE")
    api_key_env: str | None = option(None, "NAME of the environment variable holding the API key.", ENGINE, "NAME")
    scenario: str | None = option(None, "Scenario file, or the name of a shipped one (default: chat).",
                                        WORKLOAD, "NAME|FILE")
    duration: float | None = option(None, "Seconds per level.", LOAD, "SECONDS")
    requests: int | None = option(None, "Requests per level (with --duration: whichever ends first).", LOAD, "N")
    warmup: int | None = option(None, "Warm-up requests per level (default: one per user).", LOAD, "N")
    input_tokens: str | None = option(None, "Prompt length: N | uniform:MIN:MAX | normal:MEAN:STD[:MIN:MAX] | "
                                            "lognormal:MEAN:STD[:MIN:MAX].", WORKLOAD, "LENGTHS")
    output_tokens: str | None = option(None, "Output length, same forms as --input-tokens.", WORKLOAD, "LENGTHS")
    shared_prefix: str | None = option(None, "GROUPS:TOKENS: each group shares a system prompt.",
                                             WORKLOAD, "GROUPS:TOKENS")
    turns: int | None = option(None, "Multi-turn chat: each user holds conversations of this many turns, every turn "
                                     "sending the conversation so far (1 = single requests).", WORKLOAD, "N")
    api: str | None = option(None, "chat or completions.", WORKLOAD, "chat|completions")
    seed: int | None = option(None, "Seed of the request stream.", WORKLOAD, "N")
    request_timeout: float | None = option(None, "Seconds before a request counts as timed out.", LOAD, "SECONDS")
    on_throttle: str | None = option(None, "fail or retry: what a 429 does to a request (retry waits as Retry-After "
                                           "asks, within --request-timeout). Default: retry when a sweep measures an "
                                           "endpoint, else fail.", LOAD, "fail|retry")
    tokenizer: Path | None = option(None, "A tokenizer.json to build prompts of exact token counts.", WORKLOAD, "FILE")
    dataset: Path | None = option(None, "Replay requests from a file: logged prompts (JSONL: {\"prompt\"} or "
                                        "{\"messages\"} a line), ShareGPT conversations, an arrival trace (Mooncake "
                                        "JSONL, Azure CSV), or agent sessions (Weka / AgentX JSON or a directory of "
                                        "them, TraceLab JSONL, an OpenTelemetry export of GenAI spans). Only lengths, "
                                        "timings and hashes are recorded, never the text.", WORKLOAD, "FILE|DIR")
    dataset_format: str | None = option(None, "jsonl, sharegpt, mooncake, azure, weka, tracelab or otel (default: "
                                              "told from the content).", WORKLOAD, "FORMAT")
    workload: str | None = option(None, "agent: synthetic agent sessions (the scenario's workload.agent, else its "
                                        "defaults) instead of single requests.", WORKLOAD, "agent")
    sessions: int | None = option(None, "Agent sessions: a level ends when this many sessions have completed "
                                        "(with --duration: whichever comes first).", LOAD, "N")
    max_think_s: float | None = option(None, "Agent sessions: the longest wait between an answer and the agent's "
                                             "next call (default 10 s).", WORKLOAD, "SECONDS")
    dataset_sample: int | None = option(None, "Replay this many of the dataset's requests, sampled with --seed.",
                                              WORKLOAD, "N")
    dataset_turns: str | None = option(None, "Conversations: replay up to N user turns of each, or all (default: the "
                                             "first turn only). --turns N does the same.", WORKLOAD, "N|all")
    max_input_tokens: int | None = option(None, "Leave out dataset requests with longer prompts.", WORKLOAD, "N")
    time_scale: float | None = option(None, "A trace: multiply its timestamps (0.5 replays it twice as fast).",
                                            WORKLOAD, "FACTOR")
    trace_window: str | None = option(None, "A trace: replay START:END seconds of it.", WORKLOAD, "START:END")
    adapters: str | None = option(None, "LoRA adapters the traffic asks for, NAME,NAME,... (the engine serves them; "
                                        "each request names one as its model).", WORKLOAD, "NAME,NAME,...")
    adapters_dir: Path | None = option(None, "A folder of PEFT LoRA adapters, one per subfolder (named by it): passed "
                                             "to the engine bench starts, and asked for by the traffic.",
                                             WORKLOAD, "DIR")
    lora: list[str] | None = option(None, "NAME=PATH: a LoRA adapter (PEFT folder) passed to the engine bench starts "
                                          "(reference, vllm, sglang) and asked for by the traffic (repeatable).",
                                          WORKLOAD, "NAME=PATH")
    adapter_mix: str | None = option(None, "How requests spread over the adapters: uniform (default), zipf:S or "
                                           "weights:W1,W2,... (or NAME=W,...); seeded with --seed.", WORKLOAD, "MIX")
    adapter_counts: str | None = option(None, "A sweep across adapter counts, e.g. 1,4,16: each level with the first "
                                              "N adapters and with the base model alone, at the same load.",
                                              WORKLOAD, "N,N,...")
    keep_text: bool = option(False, "Store prompts and answers in requests.jsonl (for debugging; the report says "
                                    "so).", OUTPUT)
    strict_openai: bool = option(False, "Send only OpenAI's published fields (for providers).", ADVANCED)
    workers: int | None = option(None, "Split each level's users (or its arrival schedule) across this many client "
                                       "processes (with --ray: Ray actors); one summary, every worker's own check on "
                                       "itself.", ADVANCED, "N")
    ray: str | None = option(None, "Run the client workers as Ray actors on the cluster at ADDRESS (auto, HOST:PORT "
                                   "or ray://HOST:PORT); pip install 'llm-selfhost-bench[ray]'.", ADVANCED, "ADDRESS")
    out: Path = option(Path("runs"), "Directory that holds the run directories.", OUTPUT, "DIR")
    report: bool = option(True, "Write the decision report (HTML, Markdown, JSON) at the end.", OUTPUT)
    repeats: int | None = option(None, "Run each level (a search: the whole search) this many times, in rounds; "
                                       "figures then carry 95 % intervals.", LOAD, "N")
    resume: list[Path] | None = option(None, "Go on with an interrupted run: its finished levels are kept, the rest "
                                             "runs (repeatable, one run directory per engine).", OUTPUT, "RUN_DIR")

    def given(self, every: bool = False) -> list[str]:
        """The options given on the command line (a default is not a choice), as --flag names; `every`: the
        output options (--resume, --report, --out) too, which are not settings of what is measured."""
        return given_flags({f.name: (getattr(self, f.name), f.default) for f in fields(self)
                            if every or f.name not in ("resume", "report", "out")})
