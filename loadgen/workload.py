"""What a workload looks like, validated: length distributions, shared prefixes, the API to call.

These are pydantic models because they come from YAML and the command line; an error names the field
and what it accepts. Sampling lives here too, seeded, so the same seed gives the same lengths.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from loadgen.sessions.detect import SESSION_FORMATS, is_session_path

DistKind = Literal["fixed", "uniform", "normal", "lognormal"]
LENGTH_SPEC_HELP = "N | uniform:MIN:MAX | normal:MEAN:STD[:MIN:MAX] | lognormal:MEAN:STD[:MIN:MAX]"


class LengthDistribution(BaseModel):
    """Token lengths: fixed, uniform in [min, max], or normal / lognormal with the given mean and
    standard deviation of the lengths themselves, clipped to [min, max]."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    dist: DistKind = "fixed"
    value: int | None = Field(default=None, ge=1)
    mean: float | None = Field(default=None, gt=0)
    std: float | None = Field(default=None, ge=0)
    min: int = Field(default=1, ge=1)
    max: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _check_fields(self) -> LengthDistribution:
        needs = {"fixed": ["value"], "uniform": ["max"], "normal": ["mean", "std"], "lognormal": ["mean", "std"]}
        missing = [name for name in needs[self.dist] if getattr(self, name) is None]
        if missing:
            raise ValueError(f"dist '{self.dist}' needs field(s) {', '.join(missing)}")
        if self.max is not None and self.max < self.min:
            raise ValueError(f"max ({self.max}) must be >= min ({self.min})")
        return self

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.dist == "fixed":
            assert self.value is not None
            return np.full(n, self.value, dtype=np.int64)
        if self.dist == "uniform":
            return rng.integers(self.min, (self.max or self.min) + 1, size=n)
        assert self.mean is not None and self.std is not None
        if self.dist == "normal":
            raw = rng.normal(self.mean, self.std, size=n)
        else:
            sigma2 = math.log1p((self.std / self.mean) ** 2)
            raw = rng.lognormal(math.log(self.mean) - sigma2 / 2, math.sqrt(sigma2), size=n)
        upper = self.max if self.max is not None else np.inf
        return np.clip(np.rint(raw), self.min, upper).astype(np.int64)

    def mean_tokens(self) -> float:
        """The nominal mean (before clipping), for reports."""
        if self.dist == "fixed":
            return float(self.value or 0)
        if self.dist == "uniform":
            return (self.min + (self.max or self.min)) / 2
        return float(self.mean or 0)

    def describe(self) -> str:
        if self.dist == "fixed":
            return str(self.value)
        if self.dist == "uniform":
            return f"uniform[{self.min}, {self.max}]"
        bounds = f" in [{self.min}, {self.max if self.max is not None else 'inf'}]"
        return f"{self.dist}(mean {self.mean:g}, std {self.std:g}){bounds}"


def parse_length_spec(text: str) -> LengthDistribution:
    """Parse the command-line form (see LENGTH_SPEC_HELP); raise ValueError with the accepted forms."""
    parts = text.strip().split(":")
    try:
        if len(parts) == 1:
            return LengthDistribution(dist="fixed", value=int(parts[0]))
        kind, numbers = parts[0], [float(p) for p in parts[1:]]
        if kind == "uniform" and len(numbers) == 2:
            return LengthDistribution(dist="uniform", min=int(numbers[0]), max=int(numbers[1]))
        if kind in ("normal", "lognormal") and len(numbers) in (2, 4):
            bounds = {"min": int(numbers[2]), "max": int(numbers[3])} if len(numbers) == 4 else {}
            return LengthDistribution(dist=kind, mean=numbers[0], std=numbers[1], **bounds)
    except ValueError as exc:
        raise ValueError(f"bad length '{text}': {_first_error(exc)}; accepted: {LENGTH_SPEC_HELP}") from None
    raise ValueError(f"bad length '{text}'; accepted: {LENGTH_SPEC_HELP}")


def _first_error(exc: ValueError) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        first = errors()[0]
        return str(first.get("msg", exc))
    return str(exc)


class SharedPrefix(BaseModel):
    """G groups, each with its own system prompt of `tokens` tokens, followed by a unique question."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    groups: int = Field(ge=1)
    tokens: int = Field(ge=1)


class MultiTurn(BaseModel):
    """Chat conversations of `turns` turns. Each turn sends the conversation so far, the server's own
    answers included, plus a new user message of `input_tokens`; a prefix cache sees the history again."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    turns: int = Field(ge=2, le=1000)


DatasetFormat = Literal["jsonl", "sharegpt", "mooncake", "azure", "weka", "tracelab", "otel"]
TRACE_FORMATS = ("mooncake", "azure")


def _length(spec: str) -> LengthDistribution:
    return parse_length_spec(spec)


class AgentWorkload(BaseModel):
    """Agent sessions drawn for teams without traces (`loadgen.sessions.synthetic`): each session a task
    prompt after a shared system and tools prompt, then `steps` calls, each sending the context so far plus
    its previous answer and a tool's result, after waiting for the tool. After a step a subagent starts
    with `subagent_probability`: a fresh context of its own `subagent_steps` calls, whose result the
    parent's next call waits for. Lengths and waits take the length syntax (N, uniform:MIN:MAX, ...)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    sessions: int = Field(default=64, ge=1)  # distinct sessions drawn (users then take them in turn)
    steps: LengthDistribution = _length("uniform:4:12")
    shared_prefix_tokens: int = Field(default=1024, ge=0)
    task_tokens: LengthDistribution = _length("lognormal:300:200:32:2000")
    tool_result_tokens: LengthDistribution = _length("lognormal:400:300:16:4000")
    output_tokens: LengthDistribution = _length("lognormal:120:80:8:1024")
    tool_wait_ms: LengthDistribution = _length("lognormal:800:600:10:10000")
    subagent_probability: float = Field(default=0.1, ge=0, le=1)
    subagent_steps: LengthDistribution = _length("uniform:2:5")

    @model_validator(mode="before")
    @classmethod
    def _lengths_from_text(cls, raw: object) -> object:
        """A length may be written as on the command line: `steps: uniform:4:12`."""
        if not isinstance(raw, dict):
            return raw
        return {k: parse_length_spec(str(v)) if isinstance(v, (str, int)) and k in _AGENT_LENGTHS else v
                for k, v in raw.items()}


_AGENT_LENGTHS = {"steps", "task_tokens", "tool_result_tokens", "output_tokens", "tool_wait_ms", "subagent_steps"}


class DatasetSettings(BaseModel):
    """Requests replayed from a file (`loadgen.replay`): logged prompts, conversations or an arrival trace.

    `path` is the file (relative paths from the scenario file's directory); `format` is detected from the
    content when not given. `sample` keeps that many requests (seeded), `max_input_tokens` drops longer
    ones. `turns`: for conversations, replay up to that many user turns of each one (`all`: every turn);
    none means single-turn (the first user turn). Traces: `time_scale` multiplies the timestamps (0.5 replays
    twice as fast), `window` keeps [start, end) seconds of it, and `block_tokens` is the size of one
    `hash_ids` block (512 in Mooncake's traces)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    format: DatasetFormat | None = None
    sample: int | None = Field(default=None, ge=1)
    max_input_tokens: int | None = Field(default=None, ge=1)
    turns: int | Literal["all"] | None = None
    time_scale: float = Field(default=1.0, gt=0)
    window: tuple[float, float] | None = None
    block_tokens: int = Field(default=512, ge=1)

    @model_validator(mode="after")
    def _check(self) -> DatasetSettings:
        if isinstance(self.turns, int) and self.turns < 1:
            raise ValueError(f"turns must be a whole number >= 1 or 'all', got {self.turns}")
        if self.window is not None and not 0 <= self.window[0] < self.window[1]:
            raise ValueError(f"window must be START:END seconds with 0 <= START < END, got {self.window}")
        return self

    @property
    def multi_turn(self) -> bool:
        return self.turns == "all" or (isinstance(self.turns, int) and self.turns > 1)

    @property
    def is_sessions(self) -> bool:
        """A session dataset (weka, tracelab, otel): told from the format named, else from the file."""
        if self.format is not None:
            return self.format in SESSION_FORMATS
        return is_session_path(self.path)  # from the file's head only


class AdapterSettings(BaseModel):
    """Traffic across LoRA adapters (`loadgen.adapters`): each request asks for one as its model.

    `names`: adapters the engine serves, asked for by name; `dir`: a folder of PEFT adapters, each subfolder one
    (named by the folder); `modules`: NAME -> PATH of more adapters. The adapters of `dir` and `modules` are
    passed to an engine bench starts; the traffic asks for `names`, else all of those. `mix`: uniform, zipf:S or
    weights:...; `counts`: a sweep dimension, each level run with the first N adapters and with the base model
    alone (0), at the same load. Relative paths are from the scenario file's directory."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    names: list[str] = Field(default_factory=list)
    dir: str | None = None
    modules: dict[str, str] = Field(default_factory=dict)
    mix: str = "uniform"
    counts: list[int] | None = None

    @model_validator(mode="after")
    def _check(self) -> AdapterSettings:
        if not self.names and self.dir is None and not self.modules:
            raise ValueError("adapters: give names, dir or modules (which adapters the traffic asks for)")
        if self.counts is not None and (not self.counts or any(n < 0 for n in self.counts)):
            raise ValueError(f"adapters.counts: expected whole numbers >= 0 (0: the base model alone), got "
                             f"{self.counts}")
        return self


class StructuredSettings(BaseModel):
    """Answers asked in a shape, and judged (`loadgen.structured`): `response_format` json_object (any JSON object)
    or json_schema (the JSON Schema in the file `json_schema`, sent with `strict`); `tools`, a JSON file of OpenAI
    tool definitions, offered with `tool_choice` auto, required or one tool's name. Relative paths are from the
    scenario file's directory. A shaped answer ends when its shape is complete, so `ignore_eos` is not sent with
    it: max_tokens must leave room for the whole answer (one cut short is counted invalid, as cut)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    response_format: Literal["json_object", "json_schema"] | None = None
    json_schema: str | None = None
    strict: bool = True
    tools: str | None = None
    tool_choice: str = "auto"

    @model_validator(mode="after")
    def _check(self) -> StructuredSettings:
        if self.response_format is None and self.tools is None:
            raise ValueError("structured: give response_format (json_object or json_schema) and/or tools (a file)")
        if (self.response_format == "json_schema") != (self.json_schema is not None):
            raise ValueError("structured: response_format json_schema goes with json_schema (a schema file), and "
                             "json_schema with response_format json_schema")
        if self.tools is None and self.tool_choice != "auto":
            raise ValueError("structured: tool_choice needs tools (a file of tool definitions)")
        return self


class Workload(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    api: Literal["chat", "completions"] = "chat"
    input_tokens: LengthDistribution = LengthDistribution(dist="fixed", value=256)
    output_tokens: LengthDistribution = LengthDistribution(dist="fixed", value=128)
    shared_prefix: SharedPrefix | None = None
    multi_turn: MultiTurn | None = None
    seed: int = 0
    temperature: float | None = Field(default=0.0, ge=0)
    ignore_eos: bool = True
    dataset: DatasetSettings | None = None
    agent: AgentWorkload | None = None  # synthetic agent sessions instead of single requests
    keep_text: bool = False  # store prompts and answers in the records (off: lengths, timings, hashes only)
    fingerprint_answers: bool = False  # hash every answer (runs compared answer by answer, the text not kept)
    logprobs: bool = False  # ask for logprobs: the first token's fingerprint kept (not every server returns them)
    adapters: AdapterSettings | None = None  # traffic across LoRA adapters
    structured: StructuredSettings | None = None  # answers asked in a shape (JSON, a schema, tool calls), judged

    @model_validator(mode="after")
    def _multi_turn_is_chat(self) -> Workload:
        if (self.multi_turn is not None or (self.dataset and self.dataset.multi_turn)) and self.api != "chat":
            raise ValueError("multi_turn needs api: chat (a conversation is a list of messages)")
        if self.dataset is not None and (self.multi_turn is not None or self.shared_prefix is not None):
            raise ValueError("a dataset brings its own prompts: drop multi_turn / shared_prefix (for conversations "
                             "use dataset.turns)")
        if self.agent is not None and (self.dataset is not None or self.multi_turn or self.shared_prefix):
            raise ValueError("workload.agent draws its own sessions: drop dataset / multi_turn / shared_prefix")
        if self.is_sessions and self.api != "chat":
            raise ValueError("agent sessions need api: chat")
        if self.is_sessions and self.structured is not None:
            raise ValueError("structured: agent sessions are sent as recorded (drop structured, or measure shaped "
                             "answers with single requests)")
        if self.is_sessions and self.adapters is not None:
            raise ValueError("adapters: agent sessions ask the base model only, for now (drop adapters, or measure "
                             "the adapters with single requests)")
        return self

    @property
    def is_sessions(self) -> bool:
        """Agent sessions: a session dataset, or the synthetic agent workload."""
        return self.agent is not None or (self.dataset is not None and self.dataset.is_sessions)
