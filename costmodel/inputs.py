"""What a decision needs besides measurements: the traffic, the money, and the reasons that override money.

These are the `traffic`, `pricing` and `requirements` sections of a scenario, validated with pydantic so an
error names the field. They describe; they do not compute (that is `costmodel.model`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

HOURS_PER_MONTH = 730.0  # 8,760 hours a year / 12
HOURS_PER_DAY = 24
DAYS_PER_MONTH = HOURS_PER_MONTH / HOURS_PER_DAY
DEFAULT_PEAK_TO_AVERAGE = 2.0

# How a GPU is rented. `reserved-1y` / `reserved-3y`: a 1- or 3-year commitment; `reserved`: a commitment of
# another or unstated term. Every reserved kind bills all 730 hours of a month whether used or not.
# `serverless`: billed per second of use and scaled to zero between requests, so billed hours follow the
# hours of operation (as an autoscaled fleet's do), at the price of a cold start after an idle spell.
PricingKind = Literal["on-demand", "spot", "reserved", "reserved-1y", "reserved-3y", "serverless"]
RESERVED_KINDS = frozenset({"reserved", "reserved-1y", "reserved-3y"})
RESERVED_TERMS = {"reserved-1y": "1 year", "reserved-3y": "3 years"}  # `reserved` names its own


def bills_every_hour(kind: str) -> bool:
    """A reserved GPU bills all month; on-demand, spot and serverless GPUs only the hours they run."""
    return kind in RESERVED_KINDS


class Traffic(BaseModel):
    """The traffic to serve: how many tokens a month, how they are spread over time, how they are billed.

    Volume: `monthly_tokens` (split at the measured input/output mix), or `monthly_input_tokens` and
    `monthly_output_tokens`. Shape: `peak_to_average` with `hours_per_month` (730 = always on), or an
    `hourly_profile` of 24 relative weights for the hours of a day (0 = closed) with `days_per_month`.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    monthly_tokens: float | None = Field(default=None, gt=0)
    monthly_input_tokens: float | None = Field(default=None, ge=0)
    monthly_output_tokens: float | None = Field(default=None, ge=0)
    peak_to_average: float | None = Field(default=None, ge=1)
    hours_per_month: float | None = Field(default=None, gt=0, le=744)
    hourly_profile: list[float] | None = None
    days_per_month: float | None = Field(default=None, gt=0, le=31)
    cache_hit_rate: float | None = Field(default=None, ge=0, le=1)  # None: as measured, else 0
    uses_batch_api: bool = False
    monthly_tasks: float | None = Field(default=None, gt=0)  # agent sessions: tasks a month (else from the tokens)

    @field_validator("hourly_profile")
    @classmethod
    def _day_of_weights(cls, values: list[float] | None) -> list[float] | None:
        if values is None:
            return None
        if len(values) != HOURS_PER_DAY:
            raise ValueError(f"expected 24 weights, one per hour of the day, got {len(values)}")
        if any(v < 0 for v in values) or not any(v > 0 for v in values):
            raise ValueError("weights must be >= 0 and at least one > 0")
        return values

    @model_validator(mode="after")
    def _one_way_each(self) -> Traffic:
        split = (self.monthly_input_tokens, self.monthly_output_tokens)
        if self.monthly_tokens is not None and any(v is not None for v in split):
            raise ValueError("give monthly_tokens, or monthly_input_tokens and monthly_output_tokens, not both")
        if (split[0] is None) != (split[1] is None):
            raise ValueError("monthly_input_tokens and monthly_output_tokens go together")
        if split[0] is not None and split[1] is not None and split[0] + split[1] <= 0:
            raise ValueError("monthly_input_tokens + monthly_output_tokens must be > 0")
        if self.hourly_profile is not None and (self.peak_to_average is not None or self.hours_per_month is not None):
            raise ValueError("hourly_profile sets the peak and the hours itself: drop peak_to_average/hours_per_month")
        if self.days_per_month is not None and self.hourly_profile is None:
            raise ValueError("days_per_month goes with hourly_profile (otherwise use hours_per_month)")
        return self

    def total_tokens(self) -> float | None:
        """T_in + T_out per month, or None when the volume is not known."""
        if self.monthly_tokens is not None:
            return self.monthly_tokens
        if self.monthly_input_tokens is not None and self.monthly_output_tokens is not None:
            return self.monthly_input_tokens + self.monthly_output_tokens
        return None

    def input_share(self) -> float | None:
        """T_in / (T_in + T_out) when the traffic says it; None means: the measured mix."""
        total = self.total_tokens()
        if self.monthly_input_tokens is None or not total:
            return None
        return self.monthly_input_tokens / total


class Owned(BaseModel):
    """Hardware you own, or would buy: its purchase spread over its life, plus hosting, power and cooling.

    Figures are yours (a quote, a colocation contract, the electricity tariff): no catalog gives purchase
    prices. `power_w_per_gpu` left unset means: the GPUs' draw as measured at the operating load, else the
    GPU's board power from the hardware catalog (an upper bound), and the report says which.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    server_usd: float = Field(gt=0)  # the purchase price of one server, GPUs included
    gpus_per_server: int = Field(default=8, ge=1)
    amortization_years: float = Field(gt=0, le=15)
    residual_share: float = Field(default=0.0, ge=0, lt=1)  # of the price, recovered at the end of its life
    hosting_usd_per_server_month: float = Field(default=0.0, ge=0)  # colocation, or the share of a data centre
    power_w_per_gpu: float | None = Field(default=None, gt=0)
    server_overhead_w: float = Field(default=0.0, ge=0)  # CPUs, memory, fans, NICs of one server
    pue: float = Field(default=1.3, ge=1, le=3)  # facility power over IT power (cooling, conversion)
    usd_per_kwh: float = Field(ge=0)
    # What the money costs (an annual rate): the purchase is paid as an annuity over the life, not straight-line.
    cost_of_capital: float = Field(default=0.0, ge=0, lt=1)
    maintenance_share_per_year: float = Field(default=0.0, ge=0, lt=1)  # support contracts and spares, of the price


class Pricing(BaseModel):
    """The money side: which GPU at what price, how a fleet is sized, and which providers to compare.

    `gpu` is a GPU name (`h100-sxm`: the median `gpu_pricing` row of the catalog for it) or a catalog row
    id (`lambda/h100-sxm/on-demand`); `gpu_usd_per_hour` is your own price and wins over the catalog's.
    `model` is the provider catalog's id of the model you would self-host (`llama-3.1-8b`): every host of
    it is compared unless `providers` names rows or models. `references` are secondary (often closed).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str | None = None
    gpu: str | None = None
    gpu_pricing: PricingKind = "on-demand"
    gpu_usd_per_hour: float | None = Field(default=None, ge=0)
    gpus_per_replica: int = Field(default=1, ge=1)
    owned: Owned | None = None  # compare owning this hardware too (own vs rent vs pay per token)
    providers: list[str] = Field(default_factory=list)
    references: list[str] = Field(default_factory=list)
    ops_usd_per_month: float = Field(default=0.0, ge=0)
    headroom: float = Field(default=0.8, gt=0, le=1)
    spare_replicas: int = Field(default=1, ge=0)
    min_serving_replicas: int = Field(default=1, ge=1)
    billed_hours_per_month: float | None = Field(default=None, gt=0, le=744)
    slo_attainment_target: float = Field(default=0.95, gt=0, le=1)


class Requirements(BaseModel):
    """Reasons that decide for self-hosting whatever the cost; the cost section then sizes the fleet."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    data_must_stay_on_premises: bool = False
    model_not_offered: bool = False
    version_must_be_pinned: bool = False
    reason: str = ""
    # The least accuracy on the team's eval (`bench quality`): an option whose 95 % interval lies below it can't
    # win the verdict; one whose interval holds it wins with a warning (COSTMODEL.md, "Quality").
    min_accuracy: float | None = Field(default=None, gt=0, le=1)
    # The least share of valid shaped answers (JSON, a schema, tool calls: a workload's `structured`): an option whose
    # 95 % interval lies below it can't win, as with accuracy.
    min_validity: float | None = Field(default=None, gt=0, le=1)

    def reasons(self) -> list[str]:
        said = [text for flag, text in (
            (self.data_must_stay_on_premises, "data must stay on our own infrastructure"),
            (self.model_not_offered, "no provider offers this model or quantization"),
            (self.version_must_be_pinned, "the model version must be pinned"),
        ) if flag]
        return said

    def is_self_hosting_required(self) -> bool:
        return bool(self.reasons())
