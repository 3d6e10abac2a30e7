"""The answer in words a manager reads in ten seconds: which side is cheaper, by how much, and from where.

Answers: `self-host`, `pay-per-token`, `self-host-required` (a requirement decides, the cost only sizes it),
`depends-on-volume` (no traffic volume given, but a crossover exists), `undecided` (nothing to compare).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from common.units import tokens, usd, usd_rate
from costmodel.inputs import Requirements
from costmodel.types import (
    CostResult,
    Crossover,
    LatencyLimits,
    OwnedComparison,
    ProviderCost,
    ResolvedPricing,
    Verdict,
)


def verdict(results: Sequence[CostResult], best: CostResult | None, compared: ProviderCost | None,
            resolved: ResolvedPricing, requirements: Requirements, slo: LatencyLimits,
            attainment_target: float) -> Verdict:
    lines: list[str] = []
    floor = requirements.min_accuracy
    rejected = [r for r in results if below_floors(r, requirements)]
    if best is None and rejected and any(r.operating_point is not None for r in rejected):
        return _not_good_enough(rejected, requirements, compared)
    if best is None:
        lines.append(f"No measured level met the SLO ({slo.describe(attainment_target)}).")
        lines += [f"{r.engine}: {r.no_operating_point_reason}" for r in results]
        lines.append("Measure lower loads, a faster engine or GPU, or relax the SLO; the per-level costs are below.")
        if requirements.is_self_hosting_required():
            return _required(requirements, lines, None, None, None)
        return Verdict("undecided", "Can't size self-hosting: no measured load met the latency targets.", tuple(lines))
    lines.append(_operating_line(best, resolved, slo, attainment_target))
    lines += accuracy_lines(best, [r for r in rejected if below_accuracy(r, floor)], floor)
    lines += validity_lines(best, [r for r in rejected if below_validity(r, requirements.min_validity)],
                            requirements.min_validity)
    fleet, volume = best.fleet, resolved.monthly_tokens
    self_usd = fleet.monthly_usd if fleet else None
    api_usd = compared.monthly_usd if compared else None
    cross = compared.crossover if compared else None
    cross_tokens = cross.monthly_tokens if cross else None
    if fleet:
        lines.append(f"Fleet for {tokens(volume)} tokens/month: {fleet.serving_replicas} serving + "
                     f"{fleet.spare_replicas} spare replica(s) x {resolved.assumptions.gpus_per_replica} GPU = "
                     f"{fleet.gpus} GPUs ({resolved.gpu_label}), {fleet.utilization:.0%} busy on average; "
                     f"{usd(fleet.gpu_usd_per_month)} GPUs + {usd(fleet.ops_usd_per_month)} operations.")
    if compared and cross:
        lines.append(_crossover_line(cross, compared, volume, self_usd, api_usd))
    range_line = _range_line(best, compared, volume)
    if range_line:
        lines.append(range_line)
    if requirements.is_self_hosting_required():
        return _required(requirements, lines, self_usd, api_usd, cross_tokens)
    if compared is None:
        head = f"Self-hosting costs {usd(self_usd)}/month" if self_usd is not None else "Self-hosting is sized below"
        return Verdict("undecided", f"{head}; there is no provider price to compare it with.", tuple(lines), self_usd)
    if fleet is None or api_usd is None or self_usd is None:
        return _without_volume(compared, cross_tokens, lines)
    return _cheaper_side(self_usd, api_usd, cross_tokens, compared, volume, lines)


def below_floors(result: CostResult, requirements: Requirements) -> bool:
    """An option that can't win: its accuracy or its validity lies wholly below the floor required of it."""
    return below_accuracy(result, requirements.min_accuracy) or below_validity(result, requirements.min_validity)


def below_validity(result: CostResult, floor: float | None) -> bool:
    """Its shaped answers' validity interval lies wholly below the floor."""
    return floor is not None and result.validity is not None and result.validity.high < floor


def validity_lines(best: CostResult, rejected: Sequence[CostResult], floor: float | None) -> list[str]:
    """What the judged shapes say: the options below the floor, the winner's validity, and a warning when the floor
    lies inside its interval or was never checked."""
    required = f" the required {floor:.0%}" if floor is not None else ""
    lines = [f"{r.engine} can't win: its answers are {r.validity.describe()}, below{required}." for r in rejected
             if r.validity is not None]
    said = best.validity
    if said is not None:
        lines.append(f"{best.engine}'s shaped answers: {said.describe()}"
                     + (f"; invalid: {said.faults_text()}." if said.faults else "."))
        lines += _holds_floor(best.engine, "validity", said.low, said.high, floor, "measure more requests to tell")
    elif floor is not None:
        lines.append(f"Warning: {best.engine}'s answers were not judged for their shape, so{required} validity is "
                     "not checked (give the workload `structured`, e.g. `--scenario structured`).")
    return lines


def below_accuracy(result: CostResult, floor: float | None) -> bool:
    """An option that can't win: its accuracy's whole interval lies below the floor."""
    return floor is not None and result.accuracy is not None and result.accuracy.high < floor


def accuracy_lines(best: CostResult, rejected: Sequence[CostResult], floor: float | None) -> list[str]:
    """What the eval says of the options: those below the floor, the winner's accuracy and its cost per correct
    answer, and a warning when the floor lies inside the winner's interval or was never checked."""
    required = f" the required {floor:.0%}" if floor is not None else ""
    lines = [f"{r.engine} can't win: its accuracy {r.accuracy.describe()} lies below{required}." for r in rejected
             if r.accuracy is not None]
    said = best.accuracy
    if said is not None:
        per_correct = best.usd_per_correct_answer
        lines.append(f"{best.engine} answers the eval right {said.describe()}"
                     + (f": {usd(per_correct)} per correct answer, against {usd(best.usd_per_request)} per request."
                        if per_correct is not None and best.usd_per_request is not None else "."))
        lines += _holds_floor(best.engine, "accuracy", said.low, said.high, floor, "grade more items to tell")
    elif floor is not None:
        lines.append(f"Warning: {best.engine}'s accuracy was not measured, so{required} is not checked (run "
                     "`bench quality` on the same engine and report that run beside this one).")
    return lines


def _holds_floor(engine: str, what: str, low: float, high: float, floor: float | None, advice: str) -> list[str]:
    """A warning when the floor lies inside the winner's interval: it may fall short of it."""
    if floor is None or not low < floor <= high:
        return []
    return [f"Warning: {engine}'s {what} interval holds the required {floor:.0%}: it may fall short of it; {advice}."]


def _not_good_enough(rejected: Sequence[CostResult], requirements: Requirements,
                     compared: ProviderCost | None) -> Verdict:
    """Every self-hosted option that met the SLO answers below the accuracy or the validity floor."""
    lines = [f"{r.engine}: accuracy {r.accuracy.describe()}." for r in rejected
             if r.accuracy is not None and below_accuracy(r, requirements.min_accuracy)]
    lines += [f"{r.engine}: shaped answers {r.validity.describe()}." for r in rejected
              if r.validity is not None and below_validity(r, requirements.min_validity)]
    if any(below_accuracy(r, requirements.min_accuracy) for r in rejected):
        lines.append("The providers' accuracy on this eval is not known from these runs: measure the one you would "
                     "pay with `bench quality --engine endpoint` before relying on it.")
    if any(below_validity(r, requirements.min_validity) for r in rejected):
        lines.append("The providers' shaped answers are not judged by these runs: sweep the one you would pay "
                     "(`--engine endpoint`) with the same workload before relying on it.")
    wanted = _floors_missed(rejected, requirements)
    if requirements.is_self_hosting_required():
        reasons = "; ".join(requirements.reasons())
        return Verdict("self-host-required", f"Self-host: required because {reasons}, but no measured option "
                       f"reaches {wanted}: find a better model or configuration.", tuple(lines))
    where = f" at {compared.id}" if compared else ""
    return Verdict("pay-per-token", f"Pay per token{where}: no self-hosted option reaches {wanted}.", tuple(lines),
                   provider_usd_per_month=compared.monthly_usd if compared else None)


def _floors_missed(rejected: Sequence[CostResult], requirements: Requirements) -> str:
    """`the required accuracy of 80% on the eval`, `the required validity of 95%`, or both."""
    missed = []
    if any(below_accuracy(r, requirements.min_accuracy) for r in rejected):
        missed.append(f"the required accuracy of {requirements.min_accuracy:.0%} on the eval")
    if any(below_validity(r, requirements.min_validity) for r in rejected):
        missed.append(f"the required validity of {requirements.min_validity:.0%} for its shaped answers")
    return " or ".join(missed)


def _without_volume(compared: ProviderCost, cross_tokens: float | None, lines: list[str]) -> Verdict:
    """No traffic volume: the crossover alone says whether self-hosting can win, and above what volume."""
    said = ("No traffic volume given: set traffic.monthly_tokens in the scenario or pass --monthly-tokens "
            "to get monthly costs and a fleet size.", *lines)
    if cross_tokens is None:
        return Verdict("pay-per-token", f"Pay per token at any volume: {compared.id} is cheaper than any fleet "
                       "that meets the SLO.", said, crossover_tokens=None)
    return Verdict("depends-on-volume", f"Depends on volume: self-hosting is cheaper than {compared.id} above "
                   f"{_volume_span(cross_tokens, compared.crossover_range)} tokens/month.", said,
                   crossover_tokens=cross_tokens)


def _cheaper_side(self_usd: float, api_usd: float, cross_tokens: float | None, compared: ProviderCost,
                  volume: float | None, lines: list[str]) -> Verdict:
    """Both monthly costs known: the cheaper side, by how much, at the traffic's volume (to the cent, as the
    table beside it says them)."""
    where = f"{compared.id}, the cheapest of the compared hosts" if not compared.is_secondary else compared.id
    if self_usd < api_usd:
        head = (f"Self-host: {usd(self_usd, True)}/month against {usd(api_usd, True)}/month at {where}: "
                f"{usd(api_usd - self_usd, True)}/month less at {tokens(volume)} tokens/month.")
        return Verdict(answer="self-host", headline=head, lines=tuple(lines), self_host_usd_per_month=self_usd,
                       provider_usd_per_month=api_usd, crossover_tokens=cross_tokens)
    head = (f"Pay per token: {usd(api_usd, True)}/month at {where}, against {usd(self_usd, True)}/month to self-host "
            f"{tokens(volume)} tokens/month.")
    return Verdict(answer="pay-per-token", headline=head, lines=tuple(lines), self_host_usd_per_month=self_usd,
                   provider_usd_per_month=api_usd, crossover_tokens=cross_tokens)


def _operating_line(best: CostResult, resolved: ResolvedPricing, slo: LatencyLimits, target: float) -> str:
    point = best.operating_point
    assert point is not None
    if point.kind == "given":
        return (f"At {point.request_per_s:.2f} requests/s per replica ({point.output_tokens_per_s:,.0f} output "
                f"tokens/s, as given) a request costs {usd(best.usd_per_request)} on "
                f"{resolved.assumptions.gpus_per_replica} x {resolved.gpu_label}.")
    spread = ""
    if point.request_per_s_range is not None:
        low, high = point.request_per_s_range
        spread = f", {low:.2f} to {high:.2f} in {point.num_repeats} repeats (95 % interval)"
    skipped = f" {point.skipped[0].upper()}{point.skipped[1:]}." if point.skipped else ""
    return (f"{best.engine} meets the SLO ({slo.describe(target)}) up to {point.request_per_s:.2f} requests/s "
            f"per replica{spread} (its steady window's {point.output_tokens_per_s:,.0f} output tokens/s over "
            f"{best.osl:,.0f} output tokens a request, load {point.load:.3g}, at "
            f"{point.level}; limited by {point.limited_by}): {usd(best.usd_per_request)} per request on "
            f"{resolved.assumptions.gpus_per_replica} x {resolved.gpu_label}.{skipped}")


def _range_line(best: CostResult, compared: ProviderCost | None, volume: float | None) -> str | None:
    """What the throughput's interval does to the money: the fleet's cost and the crossover as ranges."""
    point = best.operating_point
    if point is None or point.request_per_s_range is None:
        return None
    low, high = point.request_per_s_range
    parts = []
    if best.fleet_range is not None:
        cheap, dear = best.fleet_range
        if cheap.gpus == dear.gpus:
            parts.append(f"the fleet for {tokens(volume)} tokens/month is the same at either end ({cheap.gpus} GPUs, "
                         f"{usd(dear.monthly_usd)}/month)")
        else:
            parts.append(f"the fleet for {tokens(volume)} tokens/month costs {usd(cheap.monthly_usd)} to "
                         f"{usd(dear.monthly_usd)}/month ({cheap.gpus} to {dear.gpus} GPUs)")
    if compared is not None and compared.crossover_range is not None and any(
            end is not None for end in compared.crossover_range):
        cross = compared.crossover.monthly_tokens if compared.crossover else None
        parts.append(f"self-hosting is cheaper than {compared.id} above "
                     f"{_volume_span(cross, compared.crossover_range)} tokens/month")
    if not parts:
        return None
    return f"Over the throughput's 95 % interval ({low:.2f} to {high:.2f} requests/s per replica): " + \
        "; ".join(parts) + "."


def _volume_span(point: float | None, span: tuple[float | None, float | None] | None) -> str:
    """`18 to 21 B` from a crossover range; the point itself without one (or an open end: `18 B or more`)."""
    if span is None:
        return tokens(point)
    low, high = span
    if low is None and high is None:
        return tokens(point)
    if high is None:
        return f"{tokens(low)} or more"
    if low is None or tokens(low) == tokens(high):
        return tokens(high if low is None else low)
    return _shared_unit(low, high)


def _shared_unit(low: float, high: float) -> str:
    """`18 to 21 B` when both read in the same unit, else `900 M to 1.2 B`."""
    a, b = tokens(low), tokens(high)
    unit_a, unit_b = a.rsplit(" ", 1)[-1], b.rsplit(" ", 1)[-1]
    if " " in a and unit_a == unit_b:
        return f"{a.rsplit(' ', 1)[0]} to {b}"
    return f"{a} to {b}"


def _crossover_line(cross: Crossover, compared: ProviderCost, volume: float | None, self_usd: float | None,
                    api_usd: float | None) -> str:
    """Where self-hosting becomes cheaper; with whole replicas the cost is a sawtooth, so where it is first
    cheaper and where it stays cheaper are both said, with what it costs at this traffic when that lies between."""
    at = cross.monthly_tokens
    if at is None:
        return f"No crossover with {compared.id}: {cross.reason}."
    times = f" ({at / volume:.2g}x this traffic)" if volume else ""
    stays = cross.stays_cheaper_above
    if stays is None or tokens(stays) == tokens(at) or stays <= at:
        return f"Crossover with {compared.id}: self-hosting is cheaper above {tokens(at)} tokens/month{times}."
    said = (f"Crossover with {compared.id}: self-hosting is first cheaper at {tokens(at)} tokens/month{times} and "
            f"cheaper for good above {tokens(stays)} (whole replicas make its cost a sawtooth)")
    if volume is not None and at <= volume < stays and self_usd is not None and api_usd:
        change = self_usd / api_usd - 1
        said += (f"; at this traffic ({tokens(volume)}) it costs {abs(change):.0%} "
                 f"{'more' if change > 0 else 'less'} than {compared.id}")
    return said + "."


def _required(requirements: Requirements, lines: list[str], self_usd: float | None, api_usd: float | None,
              cross_tokens: float | None) -> Verdict:
    reasons = "; ".join(requirements.reasons())
    extra = f" ({requirements.reason})" if requirements.reason else ""
    head = f"Self-host: required whatever the cost, because {reasons}{extra}."
    if self_usd is not None:
        head += f" It costs {usd(self_usd)}/month."
    return Verdict(answer="self-host-required", headline=head, lines=tuple(lines), self_host_usd_per_month=self_usd,
                   provider_usd_per_month=api_usd, crossover_tokens=cross_tokens)


def with_owned(said: Verdict, owned: OwnedComparison | None) -> Verdict:
    """The verdict with owning beside renting and paying per token: its lines, and its answer when owning
    is the cheapest of the three."""
    if owned is None:
        return said
    lines = [*said.lines, *owned_lines(owned)]
    fleet, rent, api = owned.fleet, owned.rent_monthly_usd, owned.provider_monthly_usd
    if fleet is None or rent is None or said.answer in ("self-host-required", "undecided"):
        return replace(said, lines=tuple(lines))
    own = fleet.monthly_usd
    if api is not None and own < min(rent, api):
        head = (f"Own the hardware: {usd(own)}/month for {fleet.servers} server(s), against {usd(rent)}/month "
                f"renting and {usd(api)}/month at {owned.provider_id}.")
        return Verdict(answer="self-host", headline=head, lines=tuple(lines), self_host_usd_per_month=own,
                       provider_usd_per_month=api, crossover_tokens=said.crossover_tokens)
    return replace(said, lines=tuple(lines))


def owned_lines(owned: OwnedComparison) -> list[str]:
    s, fleet = owned.server, owned.fleet
    lines = [f"Owned: a server costs {usd(s.total_usd)}/month ({usd(s.capex_usd)} purchase spread over its life, "
             f"{usd(s.hosting_usd)} hosting, {usd(s.energy_usd)} for {s.energy_kwh:,.0f} kWh), "
             f"{usd_rate(owned.usd_per_gpu_hour)} per GPU-hour"
             + (f", {usd(owned.usd_per_request)} a request and {usd(owned.usd_per_m_tokens)} per 1M tokens fully busy"
                if owned.usd_per_request is not None else "")
             + (f" ({usd_rate(owned.usd_per_m_output_tokens)} per 1M output tokens)"
                if owned.usd_per_m_output_tokens is not None else "")
             + (f", {owned.to_rent_ratio:.3g}x the rented GPU-hour" if owned.to_rent_ratio is not None else "")
             + f"; power {s.power_w_per_gpu:,.0f} W per GPU, {s.power_source}."]
    if owned.joules_per_output_token is not None:
        lines.append(f"Energy at the operating point: {owned.joules_per_output_token:.3g} J per output token "
                     f"({3.6e6 / owned.joules_per_output_token:,.0f} output tokens per kWh, GPUs only), from that "
                     "power.")
    if fleet is not None:
        three = f"own {usd(fleet.monthly_usd)} ({fleet.servers} server(s), {fleet.gpus_used} GPUs used)"
        if owned.rent_monthly_usd is not None:
            three += f", rent {usd(owned.rent_monthly_usd)}"
        if owned.provider_monthly_usd is not None:
            three += f", pay per token {usd(owned.provider_monthly_usd)} ({owned.provider_id})"
        lines.append(f"Per month at {tokens(fleet.monthly_tokens)} tokens: {three}.")
        lines.append(f"The purchase ({usd(fleet.purchase_usd)}, less its residual value) pays back "
                     f"{owned.payback_phrase()}.")
    rent_at, api_at = owned.own_beats_rent_above, owned.own_beats_provider_above
    lines.append("Owning beats renting " + (f"above {tokens(rent_at)} tokens/month" if rent_at else "at no volume")
                 + (f", and beats {owned.provider_id} above {tokens(api_at)} tokens/month" if api_at
                    else f", and never beats {owned.provider_id}" if owned.provider_id else "")
                 + " (whole servers: a sawtooth, not a line).")
    return lines
