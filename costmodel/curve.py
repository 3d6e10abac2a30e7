"""Monthly cost against monthly volume, for the plot a report draws: each sized engine's fleet (a step
function of volume) beside each provider's straight line, with the crossovers and the traffic marked."""

from __future__ import annotations

import numpy as np

from costmodel.fleet import fleet_for
from costmodel.types import CostCurve, Decision

CURVE_POINTS = 400


def monthly_cost_curve(decision: Decision, points: int = CURVE_POINTS) -> CostCurve | None:
    """From 1/30 of the smallest volume of interest (the traffic, each crossover) to 30x the largest."""
    best = decision.best
    if best is None:
        return None
    anchors = [v for v in [decision.pricing.monthly_tokens,
                           *[p.crossover.monthly_tokens for p in best.providers if p.crossover]] if v]
    low, high = (min(anchors) / 30, max(anchors) * 30) if anchors else (1e8, 1e12)
    volumes = [float(v) for v in np.geomspace(max(low, 1e6), max(high, 1e7), points)]
    a = decision.pricing.assumptions
    self_host = {r.engine: [fleet_for(v, r.operating_point.request_per_s, r.isl, r.osl, a).monthly_usd for v in volumes]
                 for r in decision.results if r.operating_point and r.isl + r.osl > 0}
    providers = {p.id: [v * p.usd_per_m_tokens / 1e6 for v in volumes] for p in best.providers}
    crossovers = {p.id: p.crossover.monthly_tokens for p in best.providers if p.crossover}
    return CostCurve(volumes=volumes, self_host=self_host, providers=providers, crossovers=crossovers,
                     traffic=decision.pricing.monthly_tokens)
