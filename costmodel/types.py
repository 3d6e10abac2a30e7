"""The cost model's records: what it takes in (measured levels, latency limits) and what it gives back
(costs per level and engine, the fleet, the crossover, the sensitivity, the verdict, the whole decision).

Frozen dataclasses and nothing else; the functions that fill them live in `model`, `fleet`, `sensitivity`,
`verdict` and `decide`. A report reads these and nothing more of the cost model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date
from typing import Literal, get_args

from common.accuracy import Accuracy, Validity
from costmodel.inputs import DAYS_PER_MONTH, DEFAULT_PEAK_TO_AVERAGE, HOURS_PER_MONTH, Requirements
from costmodel.prices import GpuPrice, ProviderPrice, StalePrice

# What a level's `load` counts: users (concurrency), requests/s (rate), a trace's time scale (trace), or
# nothing (given: a throughput typed in, not measured).
LevelKind = Literal["concurrency", "rate", "trace", "given"]
LEVEL_KINDS: tuple[LevelKind, ...] = get_args(LevelKind)
# A field's metadata that keeps it out of report.json and `bench cost --json` (reports.data.jsonable).
NOT_IN_FILES = {"in_files": False}


@dataclass(frozen=True)
class LatencyLimits:
    """The SLO's latency targets, in ms; None is not checked. (The scenario's SLO, as the cost model needs it.)"""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None
    ttfvt_ms: float | None = None  # to the first visible token, after a reasoning model's reasoning
    session_s: float | None = None  # agent sessions: p95 of a completed session's duration, in seconds
    step_ttft_ms: float | None = None  # agent sessions: the worst p95 TTFT of any step bucket (1, 2-5, 6-20, 21+)

    def describe(self, attainment_target: float) -> str:
        """`p95 TTFT <= 500 ms, ..., at least 95% of requests meeting every target`."""
        parts = [f"p95 {name} <= {limit:,.0f} ms" for name, limit in
                 (("TTFT", self.ttft_ms), ("TTFVT", self.ttfvt_ms), ("TPOT", self.tpot_ms), ("E2E", self.e2e_ms),
                  ("step TTFT", self.step_ttft_ms))
                 if limit is not None]
        if self.session_s is not None:
            parts.append(f"p95 session <= {self.session_s:,.0f} s")
        parts.append(f"at least {attainment_target:.0%} of requests meeting every target")
        return ", ".join(parts)


@dataclass(frozen=True)
class MeasuredLevel:
    """What the cost model needs of one measured level of one engine on one replica (k GPUs).

    `request_per_s` is R(c). From a run it is X_out / OSL: tokens are counted as they arrive in the steady
    window, while whole requests count only when they end inside it, so in short levels the token count is
    the steadier estimate of the same rate (`summary_request_per_s` keeps the window's own count).
    """

    label: str
    load: float
    request_per_s: float
    output_tokens_per_s: float
    input_tokens_per_s: float
    slo_attainment: float = 1.0
    ttft_p95_ms: float | None = None
    tpot_p95_ms: float | None = None
    e2e_p95_ms: float | None = None
    mean_input_tokens: float = 0.0
    mean_output_tokens: float = 0.0
    num_ok: int = 1
    is_valid: bool = True
    summary_request_per_s: float | None = None
    # Measured in repeats: R's 95 % interval across them (the other figures are their means).
    request_per_s_range: tuple[float, float] | None = None
    num_repeats: int = 1
    ttfvt_p95_ms: float | None = None  # to the first visible token (a reasoning model's reasoning before it)
    power_w_per_gpu: float | None = None  # the GPUs' mean draw at this level, where they were read
    # Why an invalid level is not a measurement of its load, in a few words (the level's own reasons are longer).
    why_invalid: str = field(default="the client fell behind", metadata=NOT_IN_FILES)
    # Filled where the level is built (a run's summary, a throughput typed in); its label is only its name.
    kind: LevelKind = "concurrency"
    # Agent sessions (a level priced in tasks: request_per_s is then tasks a second, the lengths a task's).
    session_p95_s: float | None = None
    step_ttft_p95_ms: float | None = None

    def __post_init__(self) -> None:
        if self.kind not in LEVEL_KINDS:
            raise ValueError(f"kind must be one of {', '.join(LEVEL_KINDS)}, got {self.kind!r}")


@dataclass(frozen=True)
class LevelCost:
    """Self-hosted cost at one level; None where the level completed nothing (the cost is unbounded)."""

    label: str
    load: float
    usd_per_request: float | None
    usd_per_m_output_tokens: float | None
    usd_per_m_total_tokens: float | None
    goodput_usd_per_request: float | None
    goodput_usd_per_m_output_tokens: float | None
    slo_problems: tuple[str, ...]

    @property
    def meets_slo(self) -> bool:
        return not self.slo_problems


@dataclass(frozen=True)
class OperatingPoint:
    """c*: the highest measured load meeting the SLO; with repeats, its throughput's 95 % interval."""

    load: float
    request_per_s: float
    output_tokens_per_s: float
    level: str  # the measured level it is
    # Its level's kind; the files name the level by its label only, so they keep the fields they had.
    kind: LevelKind = field(metadata=NOT_IN_FILES)
    next_failing: str | None  # the level above it that does not meet the SLO, if one was measured
    limited_by: str
    request_per_s_range: tuple[float, float] | None = None
    output_tokens_per_s_range: tuple[float, float] | None = None
    num_repeats: int = 1
    power_w_per_gpu: float | None = None  # the GPUs' mean draw at this load, where they were read
    skipped: str | None = None  # higher levels that met the SLO above one that did not, and why they are not used


@dataclass(frozen=True)
class Assumptions:
    """The resolved numbers, other than the measurements and the volume, that set a monthly cost."""

    gpu_usd_per_hour: float
    gpus_per_replica: int = 1
    operating_hours_per_month: float = HOURS_PER_MONTH
    billed_hours_per_month: float = HOURS_PER_MONTH
    peak_to_average: float = DEFAULT_PEAK_TO_AVERAGE
    hourly_profile: tuple[float, ...] = ()
    days_per_month: float = DAYS_PER_MONTH
    autoscale: bool = True
    headroom: float = 0.8
    spare_replicas: int = 1
    min_serving_replicas: int = 1
    ops_usd_per_month: float = 0.0
    cache_hit_rate: float = 0.0
    uses_batch_api: bool = False

    def __post_init__(self) -> None:
        if self.gpu_usd_per_hour < 0 or self.ops_usd_per_month < 0:
            raise ValueError("prices must be >= 0")
        if not 0 < self.headroom <= 1:
            raise ValueError(f"headroom must be in (0, 1], got {self.headroom}")
        if self.peak_to_average < 1 or self.min_serving_replicas < 1 or self.spare_replicas < 0:
            raise ValueError("peak_to_average >= 1, min_serving_replicas >= 1, spare_replicas >= 0")
        if self.hourly_profile and (len(self.hourly_profile) != 24 or sum(self.hourly_profile) <= 0):
            raise ValueError("hourly_profile: 24 weights >= 0, at least one > 0")

    @property
    def replica_usd_per_hour(self) -> float:
        """P = k * p_gpu."""
        return self.gpus_per_replica * self.gpu_usd_per_hour

    @property
    def is_autoscaled(self) -> bool:
        return bool(self.hourly_profile) and self.autoscale

    @property
    def hours_of_operation(self) -> float:
        """H_op: given, or the profile's open hours times its days."""
        if self.hourly_profile:
            return self.days_per_month * sum(1 for w in self.hourly_profile if w > 0)
        return self.operating_hours_per_month

    @property
    def peak_ratio(self) -> float:
        """PAR: given, or the profile's busiest hour over its mean open hour."""
        if self.hourly_profile:
            open_hours = [w for w in self.hourly_profile if w > 0]
            return max(open_hours) * len(open_hours) / sum(open_hours)
        return self.peak_to_average

    @property
    def max_utilization(self) -> float:
        """U_max: about the highest average utilization a fleet can reach (less with spares and rounding)."""
        if self.is_autoscaled:
            return self.headroom
        return self.headroom * (self.hours_of_operation / self.billed_hours_per_month) / self.peak_ratio


@dataclass(frozen=True)
class FleetPlan:
    monthly_tokens: float
    requests_per_month: float
    average_request_per_s: float
    peak_request_per_s: float
    serving_replicas: int
    spare_replicas: int
    total_replicas: int
    gpus: int
    replica_hours_per_month: float
    gpu_usd_per_month: float
    ops_usd_per_month: float
    monthly_usd: float
    utilization: float
    hourly_serving_replicas: tuple[int, ...] = ()


@dataclass(frozen=True)
class Crossover:
    """Where self-hosting becomes cheaper than one provider: a monthly volume, or None and why not."""

    monthly_tokens: float | None
    serving_replicas: int | None
    break_even_utilization: float | None
    max_utilization: float
    reason: str
    stays_cheaper_above: float | None = None  # past the sawtooth's last gap (closed form only)


@dataclass(frozen=True)
class Variation:
    label: str
    self_host_usd_per_month: float | None
    provider_usd_per_month: float | None
    crossover_tokens: float | None

    @property
    def saving_usd_per_month(self) -> float | None:
        """Provider minus self-hosted: positive when self-hosting saves money."""
        if self.self_host_usd_per_month is None or self.provider_usd_per_month is None:
            return None
        return self.provider_usd_per_month - self.self_host_usd_per_month


@dataclass(frozen=True)
class SensitivityRow:
    name: str
    base_label: str
    variations: tuple[Variation, ...]


@dataclass(frozen=True)
class Sensitivity:
    baseline: Variation
    rows: tuple[SensitivityRow, ...]

    def drivers(self, count: int = 3) -> list[tuple[SensitivityRow, float, float]]:
        """The rows that move the monthly saving most, largest first: (row, lowest saving, highest saving), the
        baseline included in the span."""
        base = self.baseline.saving_usd_per_month
        if base is None:
            return []
        spans = []
        for row in self.rows:
            savings = [base, *(v.saving_usd_per_month for v in row.variations if v.saving_usd_per_month is not None)]
            spans.append((row, min(savings), max(savings)))
        return sorted(spans, key=lambda span: span[2] - span[1], reverse=True)[:count]

    def flips(self, row: SensitivityRow) -> bool:
        """Does some variation of this row change which side is cheaper?"""
        base = self.baseline.saving_usd_per_month
        if base is None:
            return any((v.crossover_tokens is None) != (self.baseline.crossover_tokens is None)
                       for v in row.variations)
        return any(v.saving_usd_per_month is not None and (v.saving_usd_per_month > 0) != (base > 0)
                   for v in row.variations)


@dataclass(frozen=True)
class Verdict:
    answer: str
    headline: str
    lines: tuple[str, ...]
    self_host_usd_per_month: float | None = None
    provider_usd_per_month: float | None = None
    crossover_tokens: float | None = None


@dataclass(frozen=True)
class MeasuredOn:
    """What an engine the toolkit launched served, as its run recorded it: the model the engine named ("" where it
    named none) and the machine's GPUs (() for none; None where the run does not say)."""

    model: str = ""
    gpu_names: tuple[str, ...] | None = None


@dataclass(frozen=True)
class EngineLevels:
    """One engine's measured levels; `capacity`, when a capacity search found it, is the operating point's
    level (its throughput at the highest load that met the SLO), used instead of the highest passing level."""

    engine: str
    levels: tuple[MeasuredLevel, ...]
    capacity: MeasuredLevel | None = None
    accuracy: Accuracy | None = None  # on the team's eval (quality.json, or its graded levels); None: not graded
    precision: str | None = None  # the weights' stated dtype or quantization (bf16, fp8, q4_1); None: not stated
    # What it ran on; None where the run can't tell (an endpoint already running) or nothing was run (`bench cost`).
    measured_on: MeasuredOn | None = None
    validity: Validity | None = None  # its shaped answers, pooled over its levels; None: none judged


@dataclass(frozen=True)
class Subject:
    """What a decision is about: the model and GPU priced (`llama-3.1-8b on 2 x h100-sxm`), and what the first
    engine measured instead (`SmolLM2-135M-Instruct.Q4_1 measured on CPU`) where that was another model or other
    hardware: its figures then show the method, not the answer (costmodel.subject)."""

    priced: str = ""
    measured_instead: str | None = None


@dataclass(frozen=True)
class ResolvedPricing:
    assumptions: Assumptions
    gpu: GpuPrice | None
    gpu_label: str
    providers: tuple[ProviderPrice, ...]
    references: tuple[ProviderPrice, ...]
    monthly_tokens: float | None
    input_share: float | None
    assumed: tuple[str, ...] = ()
    gpu_choice: str | None = None  # how a GPU name picked its row (None: a row id, or your own price)


@dataclass(frozen=True)
class ProviderCost:
    id: str
    model: str
    model_name: str
    open_weights: bool
    is_secondary: bool
    quantization: str | None
    usd_per_request: float
    usd_per_m_tokens: float
    monthly_usd: float | None
    break_even_utilization: float | None
    crossover: Crossover | None
    # With a throughput interval: the crossover volume at its high end and at its low end (None: no crossover).
    crossover_range: tuple[float | None, float | None] | None = None


@dataclass(frozen=True)
class CostResult:
    engine: str
    isl: float
    osl: float
    replica_usd_per_hour: float
    levels: tuple[LevelCost, ...]
    operating_point: OperatingPoint | None
    no_operating_point_reason: str
    usd_per_request: float | None
    fleet: FleetPlan | None
    providers: tuple[ProviderCost, ...]
    warnings: tuple[str, ...] = ()
    # With a throughput interval: the fleet sized at its high end (fewer replicas) and at its low end.
    fleet_range: tuple[FleetPlan, FleetPlan] | None = None
    usd_per_request_range: tuple[float, float] | None = None
    accuracy: Accuracy | None = None  # its answers on the team's eval, where graded
    validity: Validity | None = None  # its shaped answers (JSON, a schema, tool calls), where judged

    @property
    def usd_per_correct_answer(self) -> float | None:
        """Cost per request over the share answered right: beside the cost per request, never instead of the
        accuracy floor."""
        if self.usd_per_request is None or self.accuracy is None or self.accuracy.accuracy <= 0:
            return None
        return self.usd_per_request / self.accuracy.accuracy

    def provider(self, provider_id: str) -> ProviderCost | None:
        return next((p for p in self.providers if p.id == provider_id), None)


@dataclass(frozen=True)
class Decision:
    results: tuple[CostResult, ...]
    best: CostResult | None
    compared_to: ProviderCost | None
    verdict: Verdict
    sensitivity: Sensitivity | None
    pricing: ResolvedPricing
    requirements: Requirements
    slo: LatencyLimits
    attainment_target: float
    stale_prices: tuple[StalePrice, ...]
    today: date
    warnings: tuple[str, ...] = field(default_factory=tuple)
    owned: OwnedComparison | None = None  # with pricing.owned: own vs rent vs pay per token
    subject: Subject = field(default=Subject(), metadata=NOT_IN_FILES)  # what is priced, and what was measured


@dataclass(frozen=True)
class CostCurve:
    """Monthly cost (USD) at each monthly volume (tokens): per engine's fleet and per provider."""

    volumes: list[float]
    self_host: dict[str, list[float]]
    providers: dict[str, list[float]]
    crossovers: dict[str, float | None]
    traffic: float | None


@dataclass(frozen=True)
class TokenUsage:
    """One level's tokens: as asked, as the client counted them arriving, and as the server reported them."""

    num_requests: int
    num_with_usage: int
    prompt_tokens: int
    cached_prompt_tokens: int
    completion_tokens: int  # reasoning included
    asked_output_tokens: int
    counted_output_tokens: int
    reasoning_tokens: int | None = None


@dataclass(frozen=True)
class LevelBill:
    """What one level's requests would cost at one provider's prices: expected from the workload, and as
    the server's usage bills it (uncached prompt, cached prompt and completion tokens, each at its price)."""

    level: str
    provider_id: str
    usage: TokenUsage
    expected_usd: float  # the prompts at the assumed cache-hit rate and the output asked for
    billed_usd: float  # the usage the server reported
    input_usd: float
    cached_input_usd: float
    output_usd: float
    assumed_cache_hit_rate: float
    mismatches: tuple[str, ...] = ()


@dataclass(frozen=True)
class OwnedServerCost:
    """One owned server for a month: its purchase spread over its life, hosting, and the energy it draws."""

    capex_usd: float  # (price - residual) / months of life; with a cost of capital, the annuity that repays it
    hosting_usd: float
    energy_usd: float
    energy_kwh: float  # at the wall: the GPUs' draw and the server's overhead, times PUE, for the hours operated
    power_w_per_gpu: float
    power_source: str  # "measured at c8 ..." or "board power ... (not measured)"
    maintenance_usd: float = 0.0  # support contracts and spares

    @property
    def total_usd(self) -> float:
        return self.capex_usd + self.hosting_usd + self.energy_usd + self.maintenance_usd


@dataclass(frozen=True)
class OwnedFleet:
    """The servers a traffic needs (whole servers: GPUs come eight to a box), and their monthly cost."""

    monthly_tokens: float
    replicas: int  # serving + spare, sized for the peak (owned hardware does not scale to zero)
    gpus_used: int
    servers: int
    server: OwnedServerCost
    ops_usd_per_month: float
    monthly_usd: float
    purchase_usd: float


@dataclass(frozen=True)
class OwnedComparison:
    """Own vs rent vs pay per token at the traffic given, the crossovers between each pair, the payback."""

    usd_per_gpu_hour: float  # all-in, for one GPU of an owned server running all month
    server: OwnedServerCost
    fleet: OwnedFleet | None
    rent_monthly_usd: float | None
    provider_id: str | None
    provider_monthly_usd: float | None
    own_beats_rent_above: float | None  # monthly tokens; None: not within the volumes looked at
    own_beats_provider_above: float | None
    payback_months_vs_rent: float | None  # None: owning saves nothing on renting at this traffic
    payback_months_vs_provider: float | None
    life_months: float = 0.0  # the amortization period: a payback past it is no payback
    sensitivity: tuple[SensitivityRow, ...] = ()
    notes: tuple[str, ...] = ()
    # At the operating point: the GPUs' energy per output token (J) at the power used (measured or board power)
    joules_per_output_token: float | None = None
    usd_per_request: float | None = None  # at the operating point, fully busy, at the owned GPU-hour
    usd_per_m_tokens: float | None = None  # the same per 1M tokens (input + output)
    usd_per_m_output_tokens: float | None = None  # the same per 1M output tokens
    to_rent_ratio: float | None = None  # the owned GPU-hour over the rented one

    def payback_phrase(self) -> str:
        """How long the purchase (less its residual value) takes to pay back against each alternative, to a tenth
        of a month; past the hardware's life it does not pay back at all: `in 19.9 months against renting and not
        within its 4-year life against paying per token (770.2 months)`."""
        years = f"{self.life_months / 12:g}-year life"
        said = []
        for months, what in ((self.payback_months_vs_rent, "renting"),
                             (self.payback_months_vs_provider, "paying per token")):
            if self.provider_id is None and what == "paying per token":
                continue
            if months is None:
                said.append(f"never against {what} (owning saves nothing on it each month)")
            elif self.life_months and months > self.life_months:
                said.append(f"not within its {years} against {what} ({months:,.1f} months)")
            else:
                said.append(f"in {months:,.1f} months against {what}")
        return " and ".join(said)


@dataclass(frozen=True)
class TaskTokens:
    """One task's tokens: its calls' input (of it, `cached_tokens` served from a cache) and output."""

    input_tokens: float
    cached_tokens: float
    output_tokens: float
    # measured (the server's cached_tokens), server metrics (its prefix-cache hit rate), implied (the trace's own
    # reuse), or mixed (levels that differ)
    cached_from: str = "measured"

    @property
    def total(self) -> float:
        return self.input_tokens + self.output_tokens

    @property
    def cached_share(self) -> float:
        return self.cached_tokens / self.input_tokens if self.input_tokens else 0.0


@dataclass(frozen=True)
class ProviderTask:
    id: str
    usd_per_task: float
    crossover_tasks: float | None  # tasks a month from which self-hosting is cheaper; None: never
    crossover_reason: str
    monthly_usd: float | None


@dataclass(frozen=True)
class TaskCosts:
    """The cheapest engine's answer in tasks."""

    engine: str
    level: str | None  # the operating point's level
    sessions_alive: float | None
    tasks_per_hour_per_gpu: float | None
    usd_per_task: float | None  # self-hosted, at the operating point
    usd_per_m_tokens: float | None  # the same, per 1M of a task's tokens (input and output)
    tokens: TaskTokens
    monthly_tasks: float | None
    self_usd_per_month: float | None
    providers: tuple[ProviderTask, ...]


@dataclass(frozen=True)
class TaskDecision:
    decision: Decision  # the decision with tasks as its requests
    costs: TaskCosts | None  # None: no level of sessions met the SLO
    lines: tuple[str, ...]
    answer: str = "undecided"  # as Verdict.answer
    headline: str = ""


@dataclass(frozen=True)
class FinetuneOption:
    """One way to serve the N fine-tunes, its monthly cost at the traffic (None: no traffic given), and why."""

    label: str
    kind: str  # self-host, serverless-lora or dedicated
    monthly_usd: float | None
    detail: str
    row_id: str | None = None
    retrieved: date | None = None
    is_stale: bool = False  # the row is undated, or over a year old on the day of the decision


@dataclass(frozen=True)
class FinetuneDecision:
    num_adapters: int
    monthly_tokens: float | None
    options: tuple[FinetuneOption, ...]
    crossover_tokens: float | None  # self-hosting against the cheapest serverless LoRA
    crossover_reason: str
    crossover_adapters: int | None  # the fewest fine-tunes for which N dedicated deployments cost more
    lines: tuple[str, ...]

    @property
    def cheapest(self) -> FinetuneOption | None:
        priced = [o for o in self.options if o.monthly_usd is not None]
        return min(priced, key=lambda o: o.monthly_usd or 0.0) if priced else None
