"""The records that flow through the load generator and out of it.

`RequestSpec` is what to send; `RequestRecord` is what happened, as raw timestamps only. Every metric is
computed later from records (`loadgen.metrics`), so a run directory can always be re-summarized: its
result is a `LevelSummary` per level, judged against an `SLO`; `ServerView` is a level as the server's own
metrics saw it (`loadgen.telemetry`).
Times in a record are seconds on the level's monotonic clock (0 = the level's start), except
`chunk_times_s`, which are relative to the request's own send time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal, get_args

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from common.accuracy import Accuracy, Validity

Api = Literal["chat", "completions"]
# Why a shaped answer was not valid (loadgen.structured), one word each: a level counts them.
StructureFault = Literal["not_json", "not_object", "schema", "no_tool_call", "unknown_tool", "tool_arguments", "cut"]
STRUCTURE_FAULTS: tuple[str, ...] = get_args(StructureFault)
ToolChoice = str  # auto, required, or the name of one tool offered


@dataclass(frozen=True)
class Grading:
    """How a dataset line's answer is graded (`loadgen.quality.graders`): the grader, the answers it accepts, and
    the category the line is counted under."""

    grader: str
    accepted: tuple[str, ...]
    category: str | None = None


@dataclass(frozen=True)
class SessionPlace:
    """Where a call sits in an agent session (`loadgen.sessions`)."""

    session_id: str  # the trace's id; a later replay of it adds #2, #3
    agent: str  # main, or the subagent's id
    step: int  # from 1, within its agent
    session_requests: int  # the calls the whole session sends (subagents included)
    implied_cached_tokens: int  # of this call's prompt, sent before by its own agent (what the trace implies)


@dataclass(frozen=True)
class Structure:
    """What a request asks the answer's shape to be (judged by `loadgen.structured`). `response_format` and `tools`
    as sent; `label` names them in tables and run.json (file names, never their content)."""

    label: str
    response_format: dict[str, Any] | None = None
    tools: tuple[dict[str, Any], ...] = ()
    tool_choice: ToolChoice = "auto"

    @property
    def schema(self) -> dict[str, Any] | None:
        if self.response_format is None or self.response_format["type"] != "json_schema":
            return None
        return self.response_format["json_schema"]["schema"]

    @property
    def tool_parameters(self) -> dict[str, dict[str, Any]]:
        return {tool["function"]["name"]: tool["function"].get("parameters") or {} for tool in self.tools}

    def body_fields(self) -> dict[str, Any]:
        """The request's fields, OpenAI's shapes."""
        fields: dict[str, Any] = {}
        if self.response_format is not None:
            fields["response_format"] = self.response_format
        if self.tools:
            fields["tools"] = list(self.tools)
            choice = self.tool_choice
            fields["tool_choice"] = choice if choice in ("auto", "required") else \
                {"type": "function", "function": {"name": choice}}
        return fields


@dataclass(frozen=True)
class RequestSpec:
    """One request to send: a prompt (or chat messages) and the output length to ask for."""

    request_id: int
    api: Api
    prompt: str
    max_tokens: int
    system_prompt: str | None = None
    input_tokens_target: int | None = None
    conversation_id: int | None = None
    turn: int | None = None
    history: tuple[tuple[str, str], ...] = ()  # earlier turns of the conversation: (role, content)
    arrival_s: float | None = None  # a trace's own send time, seconds from the trace's start (unscaled)
    dataset_index: int | None = None  # which request of a replayed file: its line, entry or row (from 1)
    prompt_sha256: str | None = None  # of the new user message, so records can be matched without the text
    session: SessionPlace | None = None  # an agent session's call: which session, agent and step
    grading: Grading | None = None  # a graded dataset line: how its answer is judged
    adapter: str | None = None  # the LoRA adapter asked for as its model; None: the endpoint's model
    structure: Structure | None = None  # the answer's shape asked for (JSON, a schema, tool calls), then judged

    def messages(self) -> list[dict[str, str]]:
        head = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        earlier = [{"role": role, "content": content} for role, content in self.history]
        return [*head, *earlier, {"role": "user", "content": self.prompt}]

    def completion_prompt(self) -> str:
        return f"{self.system_prompt}\n\n{self.prompt}" if self.system_prompt else self.prompt


@dataclass
class RequestRecord:
    """What one request did, as measured by the client. One JSON line in `requests.jsonl`.

    `chunk_times_s[i]` is when the i-th chunk carrying generated content arrived, relative to `send_s`;
    `chunk_tokens[i]` is how many tokens that chunk carried (see `token_count_source`).
    `dispatch_s` is when the client began the request, `send_s` when its body was handed to the socket
    (the difference is the client's own send delay); `scheduled_s` is when an open-loop schedule wanted it.
    """

    run_id: str
    engine: str
    level: str
    request_id: int
    send_s: float
    dispatch_s: float | None = None
    scheduled_s: float | None = None
    user: int | None = None
    worker: int | None = None  # the client process that sent it, when a level is split across several
    conversation_id: int | None = None
    turn: int | None = None
    is_warmup: bool = False
    chunk_times_s: list[float] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    end_s: float | None = None
    prompt_tokens: int | None = None
    output_tokens: int = 0
    cached_tokens: int | None = None
    server_output_tokens: int | None = None
    token_count_source: str = "chunks"
    max_tokens: int | None = None
    finish_reason: str | None = None
    ok: bool = False
    error_kind: str | None = None
    error_message: str | None = None
    http_status: int | None = None
    attempts: int = 1  # sends: more than one after a closed kept-alive connection, or a throttled try retried
    throttled_attempts: int = 0  # tries answered 429 (or a rate-limit error event)
    first_send_s: float | None = None  # a throttled request: when its first try was sent
    first_visible_s: float | None = None  # the first chunk of visible content, relative to `send_s`
    reasoning_tokens: int | None = None  # as the server's usage reported them, else counted; None: no reasoning
    connect_ms: float | None = None  # a new connection's set-up (DNS, TCP, TLS); None on a kept-alive one
    dataset_index: int | None = None
    prompt_sha256: str | None = None
    session_id: str | None = None  # agent sessions: the session, the agent (main or a subagent's id), the step
    agent: str | None = None
    step: int | None = None
    session_requests: int | None = None  # the calls its session sends in all
    implied_cached_tokens: int | None = None  # of its prompt, sent before by its own agent
    correct: bool | None = None  # a graded line: whether its answer was right (None: not graded, or it failed)
    category: str | None = None  # a graded line's category
    answer_sha256: str | None = None  # the answer's fingerprint, where it was read (graded, or a quality run)
    first_token_sha256: str | None = None  # its first token's, where the server returned logprobs
    adapter: str | None = None  # the LoRA adapter it asked for (None: the base model)
    # speculative decoding, where the server says per request (llama.cpp's timings.draft_n, draft_n_accepted)
    draft_tokens: int | None = None
    accepted_draft_tokens: int | None = None
    # a shaped answer (loadgen.structured), judged as it ended: valid or not, and why not (never quoting it)
    structure_valid: bool | None = None
    answer_parsed: bool | None = None
    schema_valid: bool | None = None
    tool_call_valid: bool | None = None
    num_tool_calls: int | None = None
    structure_fault: str | None = None
    structure_note: str | None = None
    # The text itself only with `keep_text` (off by default: a team's prompts must not leave in a run directory).
    prompt_text: str | None = None
    output_text: str | None = None
    output_tool_calls: list[dict[str, str]] | None = None  # the tool calls' names and arguments, likewise

    @property
    def ttft_s(self) -> float | None:
        return self.chunk_times_s[0] if self.chunk_times_s else None

    @property
    def retry_wait_s(self) -> float:
        """How long throttling kept the request from being answered: first try -> the try that was answered."""
        return self.send_s - self.first_send_s if self.first_send_s is not None else 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, row: dict[str, Any]) -> RequestRecord:
        known = {k: v for k, v in row.items() if k in cls.__dataclass_fields__}
        return cls(**known)


@dataclass(frozen=True)
class ClientCheck:
    """How the client itself fared during a level: a client that falls behind reads tokens late."""

    loop_lag_p50_ms: float
    loop_lag_p99_ms: float
    loop_lag_max_ms: float
    client_cpu_fraction: float  # process CPU seconds / wall seconds (1.0 = one core busy)
    # Open loop: the share of the wall time some request spent waiting out its last instant in passes of the
    # event loop (busy, but not behind); the CPU check leaves it out.
    waiting_fraction: float = 0.0


@dataclass(frozen=True)
class WorkerRun:
    """One client process's part of a level split across several (`loadgen.pool`): its own check."""

    worker: int
    host: str
    pid: int
    users: int  # closed loop: its users; open loop: its slots of the cap on requests in flight (0: no cap)
    num_records: int
    client: ClientCheck
    clock_offset_ms: float  # its clock minus the driver's, measured over the smallest round trip
    clock_uncertainty_ms: float  # half that round trip: the offset is known to within this
    start_s: float  # from asking for the worker to its being ready for the level
    starved_s: float = 0.0  # time its users waited for requests the driver had not yet sent it
    wall_s: float = 0.0  # its measured part
    nice: int = 0  # its scheduling priority (above 0: other work on its cores comes first)

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> WorkerRun:
        known = {k: v for k, v in raw.items() if k in cls.__dataclass_fields__}
        return cls(**{**known, "client": ClientCheck(**known["client"])})


@dataclass(frozen=True)
class BusyProcess:
    """A process outside the run, and the CPU it used while a level ran."""

    pid: int
    name: str
    cpu_s: float


@dataclass(frozen=True)
class MachineLoad:
    """What else the machine did while a level ran (`loadgen.machine`): the CPU seconds processes outside the
    run used, and the seconds the hypervisor gave this machine's cores to someone else (steal)."""

    wall_s: float
    others_cpu_s: float
    steal_s: float
    busiest: list[BusyProcess] = field(default_factory=list)  # the outside processes that used the most

    @property
    def others_cores(self) -> float:
        return self.others_cpu_s / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def steal_cores(self) -> float:
        return self.steal_s / self.wall_s if self.wall_s > 0 else 0.0

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> MachineLoad:
        return cls(raw["wall_s"], raw["others_cpu_s"], raw["steal_s"],
                   [BusyProcess(**p) for p in raw.get("busiest") or []])


def worst_check(checks: list[ClientCheck]) -> ClientCheck:
    """Several processes' checks as one figure each: the worst of theirs (the summary's judgement is still
    made per process)."""
    return ClientCheck(*(max(getattr(c, f.name) for c in checks) for f in fields(ClientCheck)))


class SLO(BaseModel):
    """Latency targets a request must meet to count toward goodput. Missing ones are not checked. An agent
    workload's two are a level's p95s (a session is not a request): `session_s`, a completed session's
    duration, and `step_ttft_ms`, the TTFT of the worst step bucket."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ttft_ms: float | None = Field(default=None, gt=0)
    ttfvt_ms: float | None = Field(default=None, gt=0)  # to the first visible word (after any reasoning)
    tpot_ms: float | None = Field(default=None, gt=0)
    e2e_ms: float | None = Field(default=None, gt=0)
    session_s: float | None = Field(default=None, gt=0)
    step_ttft_ms: float | None = Field(default=None, gt=0)


@dataclass(frozen=True)
class Distribution:
    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None

    @classmethod
    def of(cls, values: list[float] | np.ndarray, overwrite: bool = False) -> Distribution:
        """`overwrite`: `values` is the caller's to spend: the percentiles are found in it, not in a copy."""
        array = np.asarray(values, dtype=float)
        if array.size == 0:
            return cls()
        mean = float(array.mean())  # before the percentiles reorder a spent array
        p50, p90, p95, p99 = np.percentile(array, [50, 90, 95, 99], overwrite_input=overwrite)
        return cls(mean, float(p50), float(p90), float(p95), float(p99))


@dataclass(frozen=True)
class UsageTotals:
    """A level's tokens as asked, as counted by the client and as the server reported them (the bill)."""

    num_requests: int = 0
    num_with_usage: int = 0  # requests whose answer carried a usage object
    asked_output_tokens: int = 0  # the max_tokens sent
    counted_output_tokens: int = 0  # the tokens that arrived, as the client counted them
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    completion_tokens: int = 0  # reasoning included, as providers bill it
    reasoning_tokens: int | None = None  # None: no request reported or streamed reasoning
    num_with_cached_count: int = 0  # requests whose usage said how many prompt tokens were cached

    @property
    def cache_hit_rate(self) -> float | None:
        """Cached prompt tokens over prompt tokens; None when the server never said."""
        if not self.num_with_cached_count or not self.prompt_tokens:
            return None
        return self.cached_prompt_tokens / self.prompt_tokens

    @property
    def reasoning_share(self) -> float | None:
        if self.reasoning_tokens is None or not self.completion_tokens:
            return None
        return self.reasoning_tokens / self.completion_tokens


@dataclass(frozen=True)
class RequestCounts:
    """How a level's requests ended."""

    num_requests: int
    num_ok: int
    num_failed: int
    failure_rate: float
    failures_by_kind: dict[str, int]
    num_usage_mismatch: int = 0  # answers whose chunks did not map one-to-one onto the server's token count
    num_short_outputs: int = 0  # answers shorter than asked
    num_resent: int = 0  # requests sent again after meeting a kept-alive connection the server had closed
    num_throttled: int = 0  # requests answered 429 (or a rate-limit event) at least once
    throttle_rate: float = 0.0  # num_throttled / num_requests
    num_throttled_attempts: int = 0


@dataclass(frozen=True)
class Throughput:
    """What a level carried: over its steady window (closed loop: every user active), and over the whole run."""

    window_s: float
    is_steady_window: bool
    request_per_s: float
    output_tokens_per_s: float
    total_tokens_per_s: float
    run_request_per_s: float
    run_output_tokens_per_s: float
    goodput_request_per_s: float  # ok requests meeting every SLO
    slo_attainment: float  # the share of all requests that met every SLO
    mean_in_flight: float  # the concurrency the client really held


@dataclass(frozen=True)
class Latency:
    """A level's latencies (loadgen.metrics defines each), in milliseconds."""

    ttft_ms: Distribution
    itl_ms: Distribution
    icl_ms: Distribution
    tpot_ms: Distribution
    e2e_ms: Distribution
    ttft_from_schedule_ms: Distribution = field(default_factory=Distribution)
    e2e_from_schedule_ms: Distribution = field(default_factory=Distribution)
    schedule_lag_ms: Distribution = field(default_factory=Distribution)
    send_delay_ms: Distribution = field(default_factory=Distribution)
    # Multi-turn workloads: a conversation's first turn, and the later ones that send its history again.
    ttft_ms_first_turn: Distribution = field(default_factory=Distribution)
    ttft_ms_later_turns: Distribution = field(default_factory=Distribution)
    ttfvt_ms: Distribution = field(default_factory=Distribution)  # to the first visible token
    retry_wait_ms: Distribution = field(default_factory=Distribution)  # throttled, then answered: the wait
    connect_ms: Distribution = field(default_factory=Distribution)  # new connections' set-up


@dataclass(frozen=True)
class Tokens:
    """The lengths a level's requests had and the tokens the server reported for them."""

    mean_input_tokens: float
    mean_output_tokens: float
    mean_cached_tokens: float | None = None  # prompt tokens the server served from its prefix cache
    token_count_sources: dict[str, int] = field(default_factory=dict)
    usage: UsageTotals = field(default_factory=UsageTotals)
    # tokens a streamed chunk carried, by the server's own count (None: it reported none): the client's view of
    # tokens per step, above 1 where a step emits several (speculative decoding), whatever the server publishes
    mean_tokens_per_chunk: float | None = None
    # draft tokens accepted / drafted, pooled over the requests whose server said (None: none did)
    request_acceptance_rate: float | None = None


@dataclass(frozen=True)
class ClientSide:
    """The client's check on itself, and what stood between it and the server: the network, the machine."""

    check: ClientCheck | None = None  # several client processes: each figure the worst of theirs
    num_workers: int = 1  # client processes the level was split across
    machine: MachineLoad | None = None  # what else this machine did meanwhile (None: not read)
    tcp_connect_ms: float | None = None  # probed before the level: the network apart from the server
    tls_handshake_ms: float | None = None


STEP_BUCKETS = ((1, 1, "1"), (2, 5, "2-5"), (6, 20, "6-20"), (21, None, "21+"))


@dataclass(frozen=True)
class SessionTokens:
    """What one task (a completed session) sent and got, on average: its calls' prompt tokens, those of them
    served from a cache, and their output tokens (reasoning included): what a provider bills per task."""

    input_tokens: float
    cached_tokens: float
    output_tokens: float
    cached_from: str  # measured (the server's cached_tokens) or implied (the trace's own reuse)


@dataclass(frozen=True)
class AdapterFigures:
    """One LoRA adapter's part of a level (`loadgen.metrics`): its requests and their share of the level's, its
    output tokens a second in the level's steady window (the adapters' sum is the level's), its latencies."""

    adapter: str  # its name; `(base)`: requests of the base model beside adapters'
    num_requests: int
    num_ok: int
    share: float
    output_tokens_per_s: float
    ttft_ms: Distribution
    tpot_ms: Distribution
    e2e_ms: Distribution


@dataclass(frozen=True)
class AdapterCount:
    """A level of a sweep across adapter counts beside the base model alone at the same load and repeat."""

    level: str
    adapters: int  # 0: the base model alone
    output_tokens_per_s: float
    throughput_ratio: float | None  # over the base model's at the same load
    ttft_p95_ms: float | None
    ttft_ratio: float | None


@dataclass(frozen=True)
class SessionFigures:
    """A level of agent sessions, session by session (`loadgen.sessions.figures`). A session is completed when
    every call it holds was answered; cut when the level ended first; failed when one of its calls failed."""

    num_started: int
    num_completed: int
    num_cut: int
    num_failed: int
    duration_s: Distribution  # completed sessions: first call sent -> last call ended
    per_hour: float  # sessions completed per hour, over the level's steady window
    requests_per_session: Distribution  # completed sessions: their calls, subagents' included
    mean_alive: float  # sessions alive, averaged over the steady window
    ttft_ms_by_step: dict[str, Distribution]  # STEP_BUCKETS' labels -> TTFT of the calls at those steps
    input_tokens_by_step: dict[str, float | None]  # mean prompt tokens of the calls at those steps
    implied_hit_rate: float | None  # of the prompt tokens sent, those the session's own earlier calls sent
    measured_hit_rate: float | None  # cached_tokens in the server's usage over prompt tokens (None: not said)
    num_context_overflow: int = 0  # calls longer than the model's context: not sent, their sessions failed
    num_subagent_requests: int = 0
    per_s: float | None = None  # sessions carried a second: sessions alive over the mean duration (Little's law)
    tokens: SessionTokens | None = None  # per completed session (None: none completed)


@dataclass(frozen=True)
class LaneBar:
    """One call of a session drawn as a bar: sent, first token, ended (seconds from the session's first send)."""

    agent: str
    step: int
    send_s: float
    first_token_s: float | None
    end_s: float
    ok: bool


@dataclass(frozen=True)
class SessionLane:
    """One session as a swim lane: each agent a lane, each call a bar, the gaps between them its waits."""

    level: str
    session_id: str
    bars: tuple[LaneBar, ...]


# summary.json's keys, in the order the file has always had them (the groups are this version's).
SUMMARY_KEYS = (
    "engine", "level", "kind", "target", "num_requests", "num_ok", "num_failed", "failure_rate", "failures_by_kind",
    "window_s", "is_steady_window", "request_per_s", "output_tokens_per_s", "total_tokens_per_s",
    "run_request_per_s", "run_output_tokens_per_s", "goodput_request_per_s", "slo_attainment",
    "mean_input_tokens", "mean_output_tokens", "mean_in_flight", "ttft_ms", "itl_ms", "icl_ms", "tpot_ms", "e2e_ms",
    "ttft_from_schedule_ms", "e2e_from_schedule_ms", "schedule_lag_ms", "send_delay_ms", "ttft_ms_first_turn",
    "ttft_ms_later_turns", "mean_cached_tokens", "token_count_sources", "mean_tokens_per_chunk",
    "request_acceptance_rate", "num_usage_mismatch", "num_short_outputs",
    "num_resent", "ttfvt_ms", "num_throttled", "throttle_rate", "num_throttled_attempts", "retry_wait_ms",
    "connect_ms", "tcp_connect_ms", "tls_handshake_ms", "usage", "client", "machine", "num_workers", "is_valid",
    "invalid_reasons", "notes", "base_level", "repeat",
)


@dataclass(frozen=True)
class LevelSummary:
    """One level of one engine, summarized from its records (loadgen.metrics): who and what load, then how
    its requests ended, what it carried, how long things took, its tokens, and the client's side."""

    engine: str
    level: str
    kind: str  # concurrency, rate or trace
    target: float  # users or requests/s (a trace's time scale)
    requests: RequestCounts
    throughput: Throughput
    latency: Latency
    tokens: Tokens
    client: ClientSide = field(default_factory=ClientSide)
    is_valid: bool = True
    invalid_reasons: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what a reader should know that does not invalidate it
    base_level: str = ""  # the level without its repeat (c8 for c8#2)
    repeat: int = 1
    sessions: SessionFigures | None = None  # a level of agent sessions
    quality: Accuracy | None = None  # a level of graded lines: how many answers were right
    validity: Validity | None = None  # a level of shaped answers (JSON, a schema, tool calls): how many were valid
    adapters: tuple[AdapterFigures, ...] | None = None  # a level across LoRA adapters: each one's part

    def to_json(self) -> dict[str, Any]:
        """summary.json's row: one object, the groups' fields side by side (the file's keys as they were)."""
        client = self.client
        values: dict[str, Any] = {
            **asdict(self.requests), **asdict(self.throughput), **asdict(self.latency), **asdict(self.tokens),
            "client": asdict(client.check) if client.check else None,
            "machine": asdict(client.machine) if client.machine else None, "num_workers": client.num_workers,
            "tcp_connect_ms": client.tcp_connect_ms, "tls_handshake_ms": client.tls_handshake_ms,
            "engine": self.engine, "level": self.level, "kind": self.kind, "target": self.target,
            "is_valid": self.is_valid, "invalid_reasons": self.invalid_reasons, "notes": self.notes,
            "base_level": self.base_level, "repeat": self.repeat,
        }
        row = {key: values[key] for key in SUMMARY_KEYS}
        if self.sessions is not None:  # only then: other runs' summary.json stays as it was
            row["sessions"] = asdict(self.sessions)
        if self.quality is not None:
            row["quality"] = asdict(self.quality)
        if self.validity is not None:
            row["validity"] = asdict(self.validity)
        if self.adapters is not None:
            row["adapters"] = [asdict(figures) for figures in self.adapters]
        return row

    def flat(self) -> dict[str, Any]:
        """One flat row (for CSV and tables): distributions become `<name>_<stat>` columns, the client's check
        its own columns, the machine's load two; the same columns whatever a level has."""
        row: dict[str, Any] = {}
        machine = self.client.machine
        for key, value in self.to_json().items():
            if key == "sessions":
                row.update(_session_columns(value))
            elif key == "quality":
                row.update({f"quality_{name}": figure for name, figure in value.items()})
            elif key == "validity":
                row.update({f"validity_{name}": figure for name, figure in value.items() if name != "faults"})
                row["validity_faults"] = ";".join(f"{k}:{v}" for k, v in sorted(value["faults"].items()))
            elif key == "adapters":  # one cell: each adapter's requests and output tokens/s
                row["adapters"] = "; ".join(f"{a['adapter']}:{a['num_requests']}:{a['output_tokens_per_s']:.2f}"
                                            for a in value)
            elif key == "machine":
                row["others_cpu_cores"] = round(machine.others_cores, 3) if machine else None
                row["steal_cores"] = round(machine.steal_cores, 3) if machine else None
            elif key == "client":
                row.update({g.name: (value or {}).get(g.name) for g in fields(ClientCheck)})
            elif isinstance(value, dict) and key in _NESTED:
                row.update({f"{key}_{name}": stat for name, stat in value.items()})
            elif isinstance(value, dict):
                row[key] = ";".join(f"{k}:{v}" for k, v in sorted(value.items()))
            elif isinstance(value, list):
                row[key] = "; ".join(value)
            else:
                row[key] = value
        return row


_NESTED = {f.name for f in fields(Latency)} | {"usage"}  # records whose fields are columns of their own


def _session_columns(figures: dict[str, Any]) -> dict[str, Any]:
    """A session level's figures as columns: `session_<name>`, distributions and step buckets spread out."""
    row: dict[str, Any] = {}
    for name, value in figures.items():
        if name == "ttft_ms_by_step":
            for bucket, stats in value.items():
                row.update({f"session_ttft_ms_step_{bucket}_{stat}": v for stat, v in stats.items()})
        elif name == "input_tokens_by_step":
            row.update({f"session_input_tokens_step_{bucket}": v for bucket, v in value.items()})
        elif isinstance(value, dict):
            row.update({f"session_{name}_{stat}": v for stat, v in value.items()})
        else:
            row[f"session_{name}"] = value
    return row


# Tokens per streamed chunk past which a level is shown as speculating, though its server publishes nothing: a
# detokenizer holding back a character's first bytes (or a stop string's start) makes a few chunks of two
SEVERAL_TOKENS_A_CHUNK = 1.5


@dataclass(frozen=True)
class SpecDecodeView:
    """Speculative decoding over one level, as the server counted it: drafts proposed and tokens accepted
    (vLLM's counters, differenced over the level), or only the mean acceptance length where the server
    publishes no more (SGLang's gauge, averaged over the level's samples).

    As vLLM defines them: acceptance rate = accepted / drafted tokens; mean acceptance length = tokens a
    verification step yields, 1 + accepted / drafts (the token the target model adds counted); acceptance at
    position k = the share of drafts whose k-th token was accepted (it falls with k: a rejection ends a draft)."""

    drafts: float | None = None  # verification steps that carried drafts
    draft_tokens: float | None = None
    accepted_tokens: float | None = None
    acceptance_rate: float | None = None
    mean_acceptance_length: float | None = None
    acceptance_by_position: tuple[float, ...] = ()

    def positions_text(self, most: int = 8) -> str:
        """Acceptance at the first `most` draft positions, as a reader scans it: "90% 70% 40%" ("" if unknown)."""
        return " ".join(f"{rate:.0%}" for rate in self.acceptance_by_position[:most])

    @property
    def is_counted(self) -> bool:
        return self.drafts is not None and self.draft_tokens is not None and self.accepted_tokens is not None

    @classmethod
    def of_counts(cls, drafts: float, draft_tokens: float, accepted_tokens: float,
                  accepted_by_position: Sequence[float] = ()) -> SpecDecodeView:
        return cls(drafts=drafts, draft_tokens=draft_tokens, accepted_tokens=accepted_tokens,
                   acceptance_rate=accepted_tokens / draft_tokens if draft_tokens else None,
                   mean_acceptance_length=1 + accepted_tokens / drafts if drafts else None,
                   acceptance_by_position=tuple(a / drafts for a in accepted_by_position) if drafts else ())


@dataclass(frozen=True)
class ServerView:
    """One level as the server saw it, from the samples taken while it ran."""

    level: str
    num_samples: int
    mean_running: float | None
    mean_waiting: float | None
    max_kv_cache_usage: float | None  # 1 = every block in use
    preemptions: float | None
    prefix_cache_hit_rate: float | None
    generated_tokens: float | None = None  # tokens it generated during the level (its share of the load)
    prefix_cache_queries: float | None = None  # tokens looked up in its prefix cache during the level
    num_replicas: int = 1  # > 1: the sum of that many replicas' views (behind a router)
    mean_running_adapters: float | None = None  # distinct LoRA adapters in the running batch (vLLM's LoRA series)
    mean_waiting_adapters: float | None = None  # distinct LoRA adapters of waiting requests
    spec: SpecDecodeView | None = None  # speculative decoding, where the server publishes it


def speculates(summaries: Sequence[LevelSummary], views: Sequence[ServerView]) -> bool:
    """Whether a run shows speculative decoding: its server said so (counters, or per-request figures), or its
    chunks carried several tokens though the server publishes nothing."""
    return any(v.spec is not None for v in views) or any(
        (s.tokens.mean_tokens_per_chunk or 0.0) > SEVERAL_TOKENS_A_CHUNK or s.tokens.request_acceptance_rate is not None
        for s in summaries)


@dataclass(frozen=True)
class GpuView:
    """The GPUs over one level, from their readings once a second: power summed over the GPUs (what the
    machine draws for them), utilization and SM clock averaged over them, the most memory and heat."""

    level: str
    num_samples: int
    num_gpus: int
    names: tuple[str, ...]
    mean_power_w: float | None
    max_power_w: float | None
    mean_utilization_pct: float | None
    max_memory_used_mib: float | None
    mean_sm_clock_mhz: float | None
    max_temperature_c: float | None

    def joules_per_output_token(self, output_tokens_per_s: float) -> float | None:
        if self.mean_power_w is None or output_tokens_per_s <= 0:
            return None
        return self.mean_power_w / output_tokens_per_s


@dataclass(frozen=True)
class DatasetInfo:
    """A replayed file as a report states it: which one (its sha256, never its text), how many requests,
    and their lengths."""

    name: str
    path: str
    sha256: str
    format: str
    num_requests: int  # requests it sends (a conversation sends one per turn)
    num_entries: int  # lines, conversations or trace rows kept
    num_in_file: int
    input_tokens: Distribution
    output_tokens: Distribution
    lengths: str  # how the lengths are known: from the trace, counted with the tokenizer, or estimated
    turns: str | None = None  # conversations replayed turn by turn: how many turns
    time_scale: float | None = None  # traces
    span_s: float | None = None  # traces: from the first arrival to the last, unscaled
    notes: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> DatasetInfo:
        known = {k: v for k, v in raw.items() if k in cls.__dataclass_fields__}
        for key in ("input_tokens", "output_tokens"):
            known[key] = Distribution(**known.get(key, {}))
        known["notes"] = tuple(known.get("notes", ()))
        return cls(**known)


@dataclass(frozen=True)
class Interval:
    """A figure measured in repeats: their mean, the 95 % Student-t interval of that mean, and each value.
    One value gives an interval of zero width (nothing is known about the spread)."""

    mean: float
    low: float
    high: float
    values: tuple[float, ...]

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2


@dataclass(frozen=True)
class RepeatedLevel:
    """One level of one engine over its repeats: each headline figure as an Interval."""

    engine: str
    level: str  # the base label: c8
    kind: str
    target: float
    labels: tuple[str, ...]  # the repeats' own labels: c8, c8#2, c8#3
    figures: dict[str, Interval]  # HEADLINE_FIGURES -> interval

    @property
    def num_repeats(self) -> int:
        return len(self.labels)
