"""N LoRA fine-tunes priced three ways: self-hosted together on the measured fleet, each host's serverless LoRA
at the traffic's tokens, or N dedicated deployments, one per fine-tune.

- Self-hosted: the decision's own fleet (`costmodel.decide`), sized from levels measured with the N adapters
  sharing one engine, so what mixing adapters in a batch costs in throughput is in it.
- Serverless LoRA at a host: the base model's per-token bill (the decision's compared host, every call priced
  as it is) times the host's markup, plus its fee per adapter a month. A host's own base price can differ from
  the compared one's: the markup is what the catalog knows.
- N dedicated deployments: each fine-tune its own fleet (`costmodel.fleet.fleet_for`) for 1/N of the traffic,
  at one replica's measured throughput and the decision's GPU price (or a host's dedicated GPU-hour), so each
  runs at least one replica all month, busy or not.

The crossover in tokens a month is the decision's crossover against the cheapest serverless LoRA's price per
request (its adapter fees left out: no catalog row has one). The crossover in adapters is the fewest
fine-tunes for which N dedicated deployments cost more than self-hosting them together, the self-hosted
fleet held at what was measured. Pure functions: the catalog rows come in, nothing is read.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import date

from common.units import usd
from costmodel.fleet import crossover, fleet_for
from costmodel.prices import MAX_DEFAULT_AGE_DAYS, FinetunePrice
from costmodel.types import Decision, FinetuneDecision, FinetuneOption

MAX_ADAPTERS = 10_000  # the crossover in adapters is looked for up to this many


def decide_finetunes(decision: Decision, num_adapters: int, rows: tuple[FinetunePrice, ...]) -> FinetuneDecision | None:
    """The three ways side by side, for the decision's best engine and compared host; None when the decision has
    no operating point or no open-model host to take a base price from."""
    best, base = decision.best, decision.compared_to
    if best is None or best.operating_point is None or base is None or num_adapters < 1:
        return None
    point, assumptions = best.operating_point, decision.pricing.assumptions
    tokens = decision.pricing.monthly_tokens
    today = decision.today
    options = [FinetuneOption(
        f"self-hosted, {num_adapters} adapter{'s' * (num_adapters > 1)} on one fleet", "self-host",
        best.fleet.monthly_usd if best.fleet else None,
        f"{best.engine} at {point.level} ({point.request_per_s:.3g} requests/s a replica, measured with the adapters "
        f"sharing its batches); {best.fleet.total_replicas if best.fleet else '-'} replicas")]
    serverless = [r for r in rows if r.kind == "serverless-lora"]
    per_request: dict[str, float] = {}  # each serverless row's price of one request of this traffic
    for row in serverless:
        markup, fee = row.base_price_markup or 1.0, row.usd_per_adapter_month
        own = next((p for p in best.providers if p.id.startswith(f"{row.host}/") and p.model == base.model), None)
        priced = own or base  # the host's own base price where the catalog has it, else the compared host's
        monthly = None if priced.monthly_usd is None else priced.monthly_usd * markup + num_adapters * fee
        per_request[row.id] = priced.usd_per_request * markup
        fees = f" + {num_adapters} x {usd(fee)} a month" if fee else ""
        whose = "" if own else f" (no {row.host} row for {base.model})"
        options.append(FinetuneOption(row.label(), "serverless-lora", monthly,
                                      f"{priced.id}'s per-token bill x {markup:g}{fees}{whose}", row.id,
                                      row.retrieved, _is_stale(row, today)))
    dedicated_rates = [(f"{num_adapters} dedicated deployments on {decision.pricing.gpu_label}",
                        assumptions.gpu_usd_per_hour, None)]
    dedicated_rates += [(f"{num_adapters} x {row.label()}", row.usd_per_gpu_hour or 0.0, row)
                        for row in rows if row.kind == "dedicated"]
    for label, rate, row in dedicated_rates:
        per_adapter = _dedicated_usd(tokens, num_adapters, point.request_per_s, best.isl, best.osl,
                                     replace(assumptions, gpu_usd_per_hour=rate))
        options.append(FinetuneOption(
            label, "dedicated", None if per_adapter is None else num_adapters * per_adapter,
            f"each fine-tune its own fleet for 1/{num_adapters} of the traffic at {usd(rate)}/GPU-h, "
            f"{assumptions.gpus_per_replica} GPU a replica, billed all month",
            row.id if row else None, row.retrieved if row else None, _is_stale(row, today) if row else False))
    cheapest_serverless = min(serverless, key=lambda r: (per_request[r.id], r.id), default=None)
    if cheapest_serverless is not None:
        cross = crossover(point.request_per_s, best.isl, best.osl, assumptions, per_request[cheapest_serverless.id])
        crossover_tokens, reason = cross.monthly_tokens, cross.reason
    else:
        crossover_tokens, reason = None, "no serverless LoRA price in the catalog"
    adapters_at = _adapter_crossover(decision, tokens) if best.fleet else None
    result = FinetuneDecision(num_adapters, tokens, tuple(options), crossover_tokens, reason, adapters_at, ())
    return replace(result, lines=tuple(_lines(result, cheapest_serverless)))


def _dedicated_usd(tokens: float | None, num_adapters: int, request_per_s: float, isl: float, osl: float,
                   assumptions: object) -> float | None:
    """One fine-tune's dedicated fleet a month, for its share of the traffic."""
    if tokens is None:
        return None
    return fleet_for(tokens / num_adapters, request_per_s, isl, osl, assumptions).monthly_usd  # type: ignore[arg-type]


def _adapter_crossover(decision: Decision, tokens: float | None) -> int | None:
    """The fewest fine-tunes whose dedicated deployments cost more than the measured fleet carrying them all."""
    best = decision.best
    assert best is not None and best.fleet is not None and best.operating_point is not None
    if tokens is None:
        return None
    for count in range(1, MAX_ADAPTERS + 1):
        dedicated = _dedicated_usd(tokens, count, best.operating_point.request_per_s, best.isl, best.osl,
                                   decision.pricing.assumptions)
        if dedicated is not None and count * dedicated > best.fleet.monthly_usd:
            return count
    return None


def _is_stale(row: FinetunePrice, today: date) -> bool:
    return row.retrieved is None or (today - row.retrieved).days > MAX_DEFAULT_AGE_DAYS


def _lines(d: FinetuneDecision, cheapest: FinetunePrice | None) -> list[str]:
    lines = []
    best = d.cheapest
    if best is not None and d.monthly_tokens is not None:
        lines.append(f"For {d.num_adapters} fine-tune{'s' * (d.num_adapters > 1)} at {d.monthly_tokens:,.0f} tokens "
                     f"a month, the cheapest is {best.label}: {usd(best.monthly_usd or 0)} a month.")
    elif d.monthly_tokens is None:
        lines.append("No monthly traffic given: the options are priced per token only (give --monthly-tokens).")
    if cheapest is not None:
        if d.crossover_tokens is not None:
            lines.append(f"Self-hosting the fine-tunes is cheaper than {cheapest.label()} above "
                         f"{d.crossover_tokens:,.0f} tokens a month.")
        else:
            lines.append(f"Against {cheapest.label()}: no crossover ({d.crossover_reason}).")
    if d.crossover_adapters is not None:
        lines.append(f"From {d.crossover_adapters} fine-tune{'s' * (d.crossover_adapters > 1)} on, a dedicated "
                     "deployment each costs more than self-hosting them together on the measured fleet.")
    stale = [o for o in d.options if o.is_stale]
    if stale:
        lines.append("Check before signing: " + "; ".join(
            f"{o.row_id} is {'undated' if o.retrieved is None else 'dated ' + o.retrieved.isoformat()}" for o in stale)
            + " (no newer source was found).")
    return lines
