"""The decision: measured engines + scenario sections + price catalog -> costs per engine and one verdict.

`decide` is the one library call behind `bench report` and `bench cost`. It resolves names to prices
(`resolve`), evaluates every engine (`costmodel.evaluate`), picks the cheapest, and says what it means
(`verdict`), first what was measured where it is not what is priced (`subject`).
Pure: the catalog and today's date come in as arguments.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import date

from common.units import usd_rate
from costmodel.evaluate import evaluate
from costmodel.hardware import gpu_spec
from costmodel.inputs import (
    DEFAULT_PEAK_TO_AVERAGE,
    HOURS_PER_MONTH,
    Pricing,
    Requirements,
    Traffic,
    bills_every_hour,
)
from costmodel.model import PER_MILLION, cost_per
from costmodel.owned import compare_owned
from costmodel.precision import precision_warning
from costmodel.prices import GpuPrice, PriceCatalog, PriceError, ProviderPrice, stale_prices, undated_prices
from costmodel.sanity import sanity_warnings
from costmodel.sensitivity import sensitivity
from costmodel.subject import subject, with_subject
from costmodel.types import (
    Assumptions,
    CostResult,
    Decision,
    EngineLevels,
    LatencyLimits,
    MeasuredLevel,
    ProviderCost,
    ResolvedPricing,
)
from costmodel.verdict import below_floors, verdict, with_owned

GIVEN = "given"  # the label of a throughput typed on the command line rather than measured


def resolve(traffic: Traffic | None, pricing: Pricing, catalog: PriceCatalog) -> ResolvedPricing:
    """Names -> catalog rows, defaults -> numbers. Raises PriceError naming what is missing or unknown."""
    traffic = traffic or Traffic()
    gpu: GpuPrice | None = None
    chosen = None
    if pricing.gpu_usd_per_hour is not None:
        price = pricing.gpu_usd_per_hour
        label = f"{pricing.gpu or 'GPU'} at your price ({usd_rate(price)}/GPU-h, {pricing.gpu_pricing})"
        reserved = bills_every_hour(pricing.gpu_pricing)
    elif pricing.gpu:
        gpu = catalog.gpu(pricing.gpu, pricing.gpu_pricing)
        price, label, reserved = gpu.usd_per_gpu_hour, gpu.label(), bills_every_hour(gpu.pricing)
        pool = catalog.gpu_pool(pricing.gpu, pricing.gpu_pricing)
        if gpu.id != pricing.gpu:  # picked by a GPU name: say how
            chosen = (f"{gpu.id}, the median of {len(pool)} dated {pricing.gpu_pricing} rows for {gpu.gpu} under a "
                      "year old (--gpu ROW_ID picks another)")
    else:
        raise PriceError("no GPU price: give --gpu NAME (e.g. h100-sxm) or --gpu-price USD_PER_GPU_HOUR, "
                         "or pricing.gpu in the scenario")
    assumed = []
    if traffic.hourly_profile is None and traffic.peak_to_average is None:
        assumed.append(f"peak-to-average {DEFAULT_PEAK_TO_AVERAGE:g} (assumed; set traffic.peak_to_average)")
    hours = traffic.hours_per_month or HOURS_PER_MONTH
    base = Assumptions(gpu_usd_per_hour=price, operating_hours_per_month=hours, billed_hours_per_month=hours,
                       peak_to_average=traffic.peak_to_average or DEFAULT_PEAK_TO_AVERAGE,
                       hourly_profile=tuple(traffic.hourly_profile or ()), autoscale=not reserved,
                       cache_hit_rate=traffic.cache_hit_rate or 0.0, uses_batch_api=traffic.uses_batch_api,
                       gpus_per_replica=pricing.gpus_per_replica, headroom=pricing.headroom,
                       spare_replicas=pricing.spare_replicas, min_serving_replicas=pricing.min_serving_replicas,
                       ops_usd_per_month=pricing.ops_usd_per_month)
    if traffic.days_per_month is not None:
        base = replace(base, days_per_month=traffic.days_per_month)
    billed = pricing.billed_hours_per_month or (HOURS_PER_MONTH if reserved else base.hours_of_operation)
    names = pricing.providers or ([pricing.model] if pricing.model else [])
    return ResolvedPricing(
        assumptions=replace(base, billed_hours_per_month=billed), gpu=gpu, gpu_label=label,
        providers=tuple(catalog.provider_rows(names)), references=tuple(catalog.provider_rows(pricing.references)),
        monthly_tokens=traffic.total_tokens(), input_share=traffic.input_share(), assumed=tuple(assumed),
        gpu_choice=chosen)


def decide(engines: Sequence[EngineLevels], slo: LatencyLimits, traffic: Traffic | None, pricing: Pricing,
           requirements: Requirements, catalog: PriceCatalog, today: date) -> Decision:
    """Self-host or pay per token: the whole decision from what was measured and what things cost.

    From each engine's measured levels (`engines`, with a capacity search's answer where one ran), the latency
    limits a level must meet (`slo`, by at least `pricing.slo_attainment_target` of its requests), the traffic
    (monthly volume and its shape; None: the defaults), the pricing (the GPU and replica, the providers to
    compare with, operations, owned hardware), the requirements that can make self-hosting necessary, the
    catalog the names are priced from, and `today` (to call a price stale).

    Gives the Decision: each engine's costs (per level, at its operating point, the fleet for the traffic,
    each provider's price and crossover), the cheapest engine and the provider it is held against, how the
    answer moves with each assumption, the verdict (owning beside renting with pricing.owned; first, where the
    first engine measured another model or other hardware than is priced, that its figures illustrate the method),
    and what the inputs leave out, as warnings. Raises PriceError when a name is not in the catalog.
    """
    catalog = catalog.as_of(today)
    resolved = resolve(traffic, pricing, catalog)
    results = tuple(replace(evaluate(engine, slo, pricing.slo_attainment_target, resolved), accuracy=engine.accuracy,
                            validity=engine.validity) for engine in engines)
    best = _best([r for r in results if not below_floors(r, requirements)])
    priced = best or _best(results)  # none accurate enough: the provider is still priced against the cheapest
    compared = _compared_to(priced) if priced else None
    rows = sensitivity(best, compared, resolved, catalog) if best and compared else None
    rows_used: list[GpuPrice | ProviderPrice] = [*resolved.providers, *resolved.references]
    if resolved.gpu:
        rows_used.append(resolved.gpu)
    warnings = _price_warnings(resolved, pricing, traffic, rows_used) + _sanity(results, pricing, resolved)
    precision = {engine.engine: engine.precision for engine in engines}
    mismatch = precision_warning(precision.get(priced.engine), compared) if priced else None
    warnings += [mismatch] if mismatch else []
    said = verdict(results, best, compared, resolved, requirements, slo, pricing.slo_attainment_target)
    owned = None
    if best is not None and pricing.owned is not None:
        power = _owned_power(best, pricing)
        if power is None:
            warnings.append("pricing.owned: no power per GPU: the GPUs were not read and the hardware catalog does "
                            f"not know '{pricing.gpu}'; set pricing.owned.power_w_per_gpu")
        else:
            owned = compare_owned(best, compared, resolved.assumptions, resolved.monthly_tokens, pricing.owned, power)
            said = with_owned(said, owned)
    about = subject(pricing.model or (best.engine if best else "this model"),
                    resolved.gpu.gpu if resolved.gpu else (pricing.gpu or "your GPU"),
                    resolved.assumptions.gpus_per_replica, engines[0] if engines else None)
    return Decision(
        results=results, best=best, compared_to=compared, verdict=with_subject(said, about), sensitivity=rows,
        pricing=resolved, requirements=requirements, slo=slo, attainment_target=pricing.slo_attainment_target,
        stale_prices=tuple(stale_prices(rows_used, today)), today=today, warnings=tuple(warnings), owned=owned,
        subject=about)


def _owned_power(best: CostResult, pricing: Pricing) -> tuple[float, str] | None:
    """Watts per GPU for owned hardware: the scenario's figure, else the draw measured at the operating
    point, else the board power of the GPU priced."""
    assert pricing.owned is not None
    if pricing.owned.power_w_per_gpu is not None:
        return pricing.owned.power_w_per_gpu, "as given (power_w_per_gpu)"
    point = best.operating_point
    if point is not None and point.power_w_per_gpu is not None:
        return point.power_w_per_gpu, f"measured: the GPUs' mean draw at the operating point ({point.level})"
    spec = gpu_spec(pricing.gpu)
    if spec is None:
        return None
    return spec.board_power_w, (f"the {spec.name}'s board power from the hardware catalog (not measured here: "
                                "an upper bound on its draw)")


def _price_warnings(resolved: ResolvedPricing, pricing: Pricing, traffic: Traffic | None,
                    rows_used: Sequence[GpuPrice | ProviderPrice]) -> list[str]:
    """What the prices leave out: operations at $0, a provider to compare with, a date on each row, serverless
    cold starts, a batch discount for traffic that can use the batch API."""
    warnings = []
    if resolved.assumptions.ops_usd_per_month == 0:
        warnings.append("operations cost is $0/month: people's time to run the fleet is not counted "
                        "(set pricing.ops_usd_per_month)")
    if not resolved.providers and not resolved.references:
        warnings.append("no provider to compare with: set pricing.model or pass --provider")
    undated = undated_prices(rows_used)
    if undated:
        warnings.append(f"undated price(s), their source gives no date: {', '.join(undated)}")
    kind = resolved.gpu.pricing if resolved.gpu else pricing.gpu_pricing
    if kind == "serverless":
        cold = resolved.gpu.cold_start_s if resolved.gpu else None
        wait = f"about {cold:g} s" if cold is not None else "a time this price row does not give"
        warnings.append(f"serverless GPUs bill per second and scale to zero: billed for the hours of operation "
                        f"({resolved.assumptions.billed_hours_per_month:g} h/month here), and a request after an "
                        f"idle spell waits a cold start ({wait}) that the measured TTFT does not include")
    if traffic is not None and traffic.uses_batch_api and not any(
            row.batch_discount for row in (*resolved.providers, *resolved.references)):
        warnings.append("uses_batch_api: no compared price row has a batch discount, so none is applied "
                        "(give one in a --prices file)")
    return warnings


def _sanity(results: Sequence[CostResult], pricing: Pricing, resolved: ResolvedPricing) -> list[str]:
    """Each engine's cost per 1M output tokens at its operating point against the published bands."""
    assumptions = resolved.assumptions
    models = {row.model for row in resolved.providers}
    model = pricing.model or (models.pop() if len(models) == 1 else None)
    gpu = resolved.gpu.gpu if resolved.gpu else pricing.gpu
    warnings = []
    for result in results:
        point = result.operating_point
        usd_per_m_output_tokens = (cost_per(assumptions.replica_usd_per_hour, point.output_tokens_per_s, PER_MILLION)
                                   if point else None)
        if point is None or usd_per_m_output_tokens is None:
            continue
        concurrency = point.load if point.kind == "concurrency" else None
        warnings += [f"{result.engine} {point.level}: {text}" for text in sanity_warnings(
            usd_per_m_output_tokens, model, gpu, assumptions.gpus_per_replica, assumptions.gpu_usd_per_hour,
            concurrency)]
    return warnings


def _best(results: Sequence[CostResult]) -> CostResult | None:
    """The engine with an operating point whose fleet costs least a month; without a volume, the cheapest per
    request (of those accurate enough to win)."""
    sized = [result for result in results if result.operating_point is not None]
    if not sized:
        return None
    if all(result.fleet is not None for result in sized):
        return min(sized, key=lambda result: result.fleet.monthly_usd if result.fleet else 0.0)
    return min(sized, key=lambda result: result.usd_per_request if result.usd_per_request is not None
               else float("inf"))


def _compared_to(result: CostResult) -> ProviderCost | None:
    """The cheapest host of the same open model; failing that the cheapest named provider or reference."""
    for pool in ([provider for provider in result.providers if not provider.is_secondary and provider.open_weights],
                 [provider for provider in result.providers if not provider.is_secondary], list(result.providers)):
        if pool:
            return min(pool, key=lambda provider: (provider.usd_per_request, provider.id))
    return None


def decide_given(output_tokens_per_s: float, mean_input_tokens: float, mean_output_tokens: float,
                 traffic: Traffic | None, pricing: Pricing, requirements: Requirements, catalog: PriceCatalog,
                 today: date, engine: str = "self-hosted", precision: str | None = None) -> Decision:
    """The same decision from a throughput typed in (`bench cost`): one replica's output tokens/s at the SLO, and
    the precision its weights run in where it is stated."""
    if output_tokens_per_s <= 0 or mean_output_tokens <= 0 or mean_input_tokens < 0:
        raise ValueError("--throughput and --output-tokens must be > 0, --input-tokens >= 0")
    request_per_s = output_tokens_per_s / mean_output_tokens
    level = MeasuredLevel(label=GIVEN, load=0.0, request_per_s=request_per_s, output_tokens_per_s=output_tokens_per_s,
                          input_tokens_per_s=request_per_s * mean_input_tokens, mean_input_tokens=mean_input_tokens,
                          mean_output_tokens=mean_output_tokens, kind="given")
    return decide([EngineLevels(engine, (level,), precision=precision)], LatencyLimits(), traffic, pricing,
                  requirements, catalog, today)
