"""The options every measuring command takes (`bench sweep`, `bench capacity`): engines, workload, bounds,
output, repeats, resume. Declared once here; `measure_command` gives a command all of them as typer sees
them, and hands them to it as one `MeasureFlags`."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import typer


@dataclass(frozen=True)
class MeasureFlags:
    engine: list[str] | None = None
    base_url: str | None = None
    model: str | None = None
    engine_arg: list[str] | None = None
    port: int | None = None
    replicas: int | None = None
    router_policy: str | None = None
    replica_metrics: str | None = None
    through_ui: bool = False
    ui_python: str | None = None
    engine_file: list[Path] | None = None
    api_key_env: str | None = None
    scenario: str | None = None
    duration: float | None = None
    requests: int | None = None
    warmup: int | None = None
    input_tokens: str | None = None
    output_tokens: str | None = None
    shared_prefix: str | None = None
    turns: int | None = None
    api: str | None = None
    seed: int | None = None
    request_timeout: float | None = None
    on_throttle: str | None = None
    tokenizer: Path | None = None
    dataset: Path | None = None
    dataset_format: str | None = None
    dataset_sample: int | None = None
    dataset_turns: str | None = None
    max_input_tokens: int | None = None
    time_scale: float | None = None
    trace_window: str | None = None
    keep_text: bool = False
    strict_openai: bool = False
    workers: int | None = None
    ray: str | None = None
    out: Path = Path("runs")
    report: bool = True
    repeats: int | None = None
    resume: list[Path] | None = None

    def given(self) -> list[str]:
        """The options given on the command line (a default is not a choice), as --flag names."""
        defaults = MeasureFlags()
        return [f"--{f.name.replace('_', '-')}" for f in fields(self)
                if getattr(self, f.name) != getattr(defaults, f.name) and f.name not in ("resume", "report", "out")]


OPTIONS: dict[str, tuple[Any, Any]] = {
    "engine": (list[str], typer.Option(None, help="Engine kind (default: reference), repeatable to compare engines "
                                                  "on the same workload: see `bench engines`.")),
    "base_url": (str, typer.Option(None, help="Endpoint base URL, ending in /v1.")),
    "model": (str, typer.Option(None, help="Model: for endpoint, the name the server lists; for reference, a .gguf "
                                           "file, a safetensors directory, dummy:<preset> or default (SmolLM2-135M).")),
    "engine_arg": (list[str], typer.Option(None, help="KEY=VALUE passed to a launched engine as --KEY VALUE "
                                                      "(repeatable), e.g. batching=static.")),
    "port": (int, typer.Option(None, help="Port for a launched engine (default: a free one).")),
    "replicas": (int, typer.Option(None, help="Launch this many replicas of a local engine behind vllm-router "
                                              "(pip install vllm-router; or $BENCH_VLLM_ROUTER).")),
    "router_policy": (str, typer.Option(None, help="The router's policy with --replicas: round_robin (default), "
                                                   "cache_aware, power_of_two, random, consistent_hash.")),
    "replica_metrics": (str, typer.Option(None, help="--engine endpoint behind a gateway: URL,... of each replica "
                                                     "(pod) whose Prometheus /metrics to sample, e.g. "
                                                     "http://10.0.0.7:8000/metrics.")),
    "through_ui": (bool, typer.Option(False, help="Measure each engine twice: direct, then through Open WebUI's "
                                                  "chat API in front of it, side by side (`--engine openwebui` "
                                                  "does this for the reference engine).")),
    "ui_python": (str, typer.Option(None, help="The Python of Open WebUI's own environment (default: "
                                               "$BENCH_OPENWEBUI, the environment's folder).")),
    "engine_file": (list[Path], typer.Option(None, help="Engine spec in YAML (engine, model, flags); repeatable.")),
    "api_key_env": (str, typer.Option(None, help="NAME of the environment variable holding the API key.")),
    "scenario": (str, typer.Option(None, help="Scenario file, or the name of a shipped one (default: chat).")),
    "duration": (float, typer.Option(None, help="Seconds per level.")),
    "requests": (int, typer.Option(None, help="Requests per level (with --duration: whichever ends first).")),
    "warmup": (int, typer.Option(None, help="Warm-up requests per level (default: one per user).")),
    "input_tokens": (str, typer.Option(None, help="Prompt length: N | uniform:MIN:MAX | normal:MEAN:STD[:MIN:MAX] | "
                                                  "lognormal:MEAN:STD[:MIN:MAX].")),
    "output_tokens": (str, typer.Option(None, help="Output length, same forms as --input-tokens.")),
    "shared_prefix": (str, typer.Option(None, help="GROUPS:TOKENS: each group shares a system prompt.")),
    "turns": (int, typer.Option(None, help="Multi-turn chat: each user holds conversations of this many turns, "
                                           "every turn sending the conversation so far (1 = single requests).")),
    "api": (str, typer.Option(None, help="chat or completions.")),
    "seed": (int, typer.Option(None, help="Seed of the request stream.")),
    "request_timeout": (float, typer.Option(None, help="Seconds before a request counts as timed out.")),
    "on_throttle": (str, typer.Option(None, help="fail or retry: what a 429 does to a request (retry waits as "
                                                 "Retry-After asks, within --request-timeout). Default: retry when "
                                                 "a sweep measures an endpoint, else fail.")),
    "tokenizer": (Path, typer.Option(None, help="A tokenizer.json to build prompts of exact token counts.")),
    "dataset": (Path, typer.Option(None, help="Replay requests from a file: logged prompts (JSONL: {\"prompt\"} or "
                                              "{\"messages\"} a line), ShareGPT conversations, or an arrival trace "
                                              "(Mooncake JSONL, Azure CSV). Only lengths, timings and hashes are "
                                              "recorded, never the text.")),
    "dataset_format": (str, typer.Option(None, help="jsonl, sharegpt, mooncake or azure (default: told from "
                                                    "the content).")),
    "dataset_sample": (int, typer.Option(None, help="Replay this many of the dataset's requests, sampled with "
                                                    "--seed.")),
    "dataset_turns": (str, typer.Option(None, help="Conversations: replay up to N user turns of each, or all "
                                                   "(default: the first turn only). --turns N does the same.")),
    "max_input_tokens": (int, typer.Option(None, help="Leave out dataset requests with longer prompts.")),
    "time_scale": (float, typer.Option(None, help="A trace: multiply its timestamps (0.5 replays it twice as "
                                                  "fast).")),
    "trace_window": (str, typer.Option(None, help="A trace: replay START:END seconds of it.")),
    "keep_text": (bool, typer.Option(False, help="Store prompts and answers in requests.jsonl (for debugging; "
                                                 "the report says so).")),
    "strict_openai": (bool, typer.Option(False, help="Send only OpenAI's published fields (for providers).")),
    "workers": (int, typer.Option(None, help="Split each level's users (or its arrival schedule) across this many "
                                             "client processes (with --ray: Ray actors); one summary, every "
                                             "worker's own check on itself.")),
    "ray": (str, typer.Option(None, help="Run the client workers as Ray actors on the cluster at ADDRESS (auto, "
                                         "HOST:PORT or ray://HOST:PORT); pip install 'llm-selfhost-bench[ray]'.")),
    "out": (Path, typer.Option(Path("runs"), help="Directory that holds the run directories.")),
    "report": (bool, typer.Option(True, help="Write the decision report (HTML, Markdown, JSON) at the end.")),
    "repeats": (int, typer.Option(None, help="Run each level (a search: the whole search) this many times, in "
                                             "rounds; figures then carry 95 % intervals.")),
    "resume": (list[Path], typer.Option(None, help="Go on with an interrupted run: its finished levels are kept, "
                                                   "the rest runs (repeatable, one run directory per engine).")),
}


def measure_command(command: Callable[..., Any]) -> Callable[..., Any]:
    """`command(flags: MeasureFlags, **its_own_options)` -> a typer command taking every shared option too."""
    own = [p for p in inspect.signature(command, eval_str=True).parameters.values() if p.name != "flags"]
    shared = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=annotation)
              for name, (annotation, option) in OPTIONS.items()]

    @functools.wraps(command)
    def run(**values: Any) -> Any:
        flags = MeasureFlags(**{name: values.pop(name) for name in OPTIONS})
        return command(flags, **values)

    own = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own]
    run.__signature__ = inspect.Signature([*shared, *own])  # type: ignore[attr-defined]
    run.__annotations__ = {}
    return run
