"""Agent tasks priced (COSTMODEL.md, "Agent tasks"), worked out by hand.

One replica of 1 x H100 at $2.00/h carries 0.5 tasks a second at 16 sessions alive (and fails the session SLO at
32); a task sends 20,000 input tokens over its calls, 15,000 of them cached, and gets 1,000 output tokens back;
the provider charges $0.40 / $0.10 cached / $1.60 per 1M tokens.
"""

from __future__ import annotations

from datetime import date

import pytest

from costmodel.inputs import Pricing, Requirements, Traffic
from costmodel.prices import parse_price_file
from costmodel.tasks import decide_tasks
from costmodel.types import EngineLevels, LatencyLimits, MeasuredLevel, TaskTokens

ROWS = parse_price_file("""providers:
  - {id: host/agent-model, host: host, model: agent-model, usd_per_m_input: 0.40, usd_per_m_cached_input: 0.10,
     usd_per_m_output: 1.60, source: "https://example.test/host", retrieved: 2026-10-06}
""", "rows.yaml")
TOKENS = TaskTokens(input_tokens=20_000, cached_tokens=15_000, output_tokens=1_000)
PRICING = Pricing(gpu="h100-sxm", gpu_usd_per_hour=2.0, providers=["host/agent-model"], spare_replicas=0,
                  headroom=1.0)


def task_level(label: str, alive: float, tasks_per_s: float, session_p95_s: float) -> MeasuredLevel:
    return MeasuredLevel(label=label, load=alive, request_per_s=tasks_per_s,
                         output_tokens_per_s=tasks_per_s * TOKENS.output_tokens,
                         input_tokens_per_s=tasks_per_s * TOKENS.input_tokens, mean_input_tokens=TOKENS.input_tokens,
                         mean_output_tokens=TOKENS.output_tokens, num_ok=40, session_p95_s=session_p95_s)


ENGINE = EngineLevels("ref", (task_level("c16", 16, 0.5, 50.0), task_level("c32", 32, 0.7, 95.0)))
SLO = LatencyLimits(session_s=60.0)


def test_a_task_costs_the_replica_hour_over_the_tasks_it_carries_and_the_provider_its_calls_tokens() -> None:
    said = decide_tasks([ENGINE], TOKENS, SLO, Traffic(monthly_tasks=1_000_000, peak_to_average=1.0), PRICING,
                        Requirements(), ROWS, date(2026, 12, 1))
    costs = said.costs
    assert costs is not None and costs.level == "c16"  # c32 fails p95 session <= 60 s
    assert costs.usd_per_task == pytest.approx(2.0 / (3600 * 0.5))
    assert costs.tasks_per_hour_per_gpu == pytest.approx(1800)
    (provider,) = costs.providers
    a_task = ((20_000 - 15_000) * 0.40 + 15_000 * 0.10 + 1_000 * 1.60) / 1e6  # cached input at the cached price
    assert provider.usd_per_task == pytest.approx(a_task)
    assert provider.monthly_usd == pytest.approx(1_000_000 * a_task)
    # 1M tasks over 730 h at peak 1x: 0.3805 tasks/s, one replica (planned at 100% of its capacity) for $1,460 a month.
    assert costs.self_usd_per_month == pytest.approx(2.0 * 730)
    # Crossover: one replica's $1,460 buys 1,460 / a_task tasks; one replica carries 0.5 * 3600 * 730 of them.
    assert provider.crossover_tasks == pytest.approx(max(1460 / a_task, 0.0), rel=1e-6)
    assert said.answer == "self-host" and "tasks/month" in said.headline
    assert "p95 session 95 s > 60 s" in " ".join(said.decision.results[0].levels[1].slo_problems)


def test_without_a_volume_the_answer_is_where_the_crossover_lies_in_tasks() -> None:
    said = decide_tasks([ENGINE], TOKENS, SLO, Traffic(peak_to_average=1.0), PRICING, Requirements(), ROWS,
                        date(2026, 12, 1))
    assert said.costs is not None and said.costs.monthly_tasks is None
    assert said.answer == "depends-on-volume" and "tasks/month" in said.headline


def test_no_level_meeting_the_session_slo_gives_no_cost_per_task() -> None:
    said = decide_tasks([ENGINE], TOKENS, LatencyLimits(session_s=10.0), Traffic(monthly_tasks=1e6), PRICING,
                        Requirements(), ROWS, date(2026, 12, 1))
    assert said.costs is None and said.answer == "undecided"
