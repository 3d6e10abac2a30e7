"""A level's usage as a provider bills it, beside what the workload led one to expect.

Providers bill the usage they report: uncached prompt tokens at the input price, cached ones at the
cached-input price, completion tokens (reasoning included) at the output price, less the batch discount.
The expected bill prices the same prompts at the cost model's assumed cache-hit rate and the output asked
for. Where asked, arrived and billed disagree, the bill says so: answers cut short, tokens billed but never
streamed (hidden reasoning, another tokenizer), answers without usage.
"""

from __future__ import annotations

from costmodel.prices import ProviderPrice
from costmodel.types import LevelBill, TokenUsage

TOLERANCE = 0.01  # 1 % between two counts of the same tokens before it is called a mismatch
CACHE_HIT_TOLERANCE = 0.05  # measured vs assumed hit rate, in points


def level_bill(level: str, usage: TokenUsage, price: ProviderPrice, assumed_cache_hit_rate: float = 0.0,
               uses_batch_api: bool = False) -> LevelBill:
    discount = 1 - (price.batch_discount if uses_batch_api else 0.0)
    per_token = 1e-6 * discount
    uncached = usage.prompt_tokens - usage.cached_prompt_tokens
    input_usd = uncached * price.usd_per_m_input * per_token
    cached_usd = usage.cached_prompt_tokens * price.cached_input * per_token
    output_usd = usage.completion_tokens * price.usd_per_m_output * per_token
    blended_input = (1 - assumed_cache_hit_rate) * price.usd_per_m_input + assumed_cache_hit_rate * price.cached_input
    expected = (usage.prompt_tokens * blended_input + usage.asked_output_tokens * price.usd_per_m_output) * per_token
    return LevelBill(level=level, provider_id=price.id, usage=usage, expected_usd=expected,
                     billed_usd=input_usd + cached_usd + output_usd, input_usd=input_usd,
                     cached_input_usd=cached_usd, output_usd=output_usd,
                     assumed_cache_hit_rate=assumed_cache_hit_rate,
                     mismatches=mismatches(usage, assumed_cache_hit_rate))


def mismatches(usage: TokenUsage, assumed_cache_hit_rate: float) -> tuple[str, ...]:
    found = []
    if usage.num_with_usage < usage.num_requests:
        found.append(f"{usage.num_requests - usage.num_with_usage} of {usage.num_requests} answers carried no "
                     "usage: their bill is not known")
    if _differ(usage.counted_output_tokens, usage.asked_output_tokens):
        found.append(f"{usage.counted_output_tokens:,} output tokens arrived of {usage.asked_output_tokens:,} "
                     "asked for: answers ended early (a stop, a length cap)")
    if usage.num_with_usage and _differ(usage.completion_tokens, usage.counted_output_tokens):
        why = ("more than were streamed: hidden reasoning, or a tokenizer that counts differently"
               if usage.completion_tokens > usage.counted_output_tokens else "fewer than the client counted")
        found.append(f"{usage.completion_tokens:,} completion tokens billed, {usage.counted_output_tokens:,} "
                     f"arrived: {why}")
    if usage.prompt_tokens and usage.num_with_usage:
        measured = usage.cached_prompt_tokens / usage.prompt_tokens
        if abs(measured - assumed_cache_hit_rate) > CACHE_HIT_TOLERANCE:
            found.append(f"{measured:.0%} of prompt tokens were billed as cached, not the {assumed_cache_hit_rate:.0%} "
                         "the cost model assumed")
    return tuple(found)


def _differ(a: int, b: int) -> bool:
    return abs(a - b) > TOLERANCE * max(a, b, 1)
