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
    anchors = [volume for volume in [decision.pricing.monthly_tokens,
                                     *[provider.crossover.monthly_tokens for provider in best.providers
                                       if provider.crossover]] if volume]
    low, high = (min(anchors) / 30, max(anchors) * 30) if anchors else (1e8, 1e12)
    volumes = [float(volume) for volume in np.geomspace(max(low, 1e6), max(high, 1e7), points)]
    assumptions = decision.pricing.assumptions
    self_host = {result.engine: [fleet_for(volume, result.operating_point.request_per_s, result.isl, result.osl,
                                           assumptions).monthly_usd for volume in volumes]
                 for result in decision.results if result.operating_point and result.isl + result.osl > 0}
    providers = {provider.id: [volume * provider.usd_per_m_tokens / 1e6 for volume in volumes]
                 for provider in best.providers}
    crossovers = {provider.id: provider.crossover.monthly_tokens for provider in best.providers
                  if provider.crossover}
    return CostCurve(volumes=volumes, self_host=self_host, providers=providers, crossovers=crossovers,
                     traffic=decision.pricing.monthly_tokens)
