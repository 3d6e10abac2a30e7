"""Paged attention over a flat batch: several sequences, each at its own position, in one pass.

Contract: the caller (the model runner) says where every new token sits (`AttentionMetadata`); this
module writes each new token's K/V into its cache slot and lets every new token at position p attend
to positions <= p of its own sequence, earlier positions being read from the paged cache (prefix-cached
blocks or earlier prefill chunks). It never allocates blocks and knows nothing of scheduling.

Layout: per layer, one cache of shape (num_blocks, block_size, 2, num_kv_heads, head_dim), a token's K then its V
side by side, so that one write stores both and one gather reads both (a decode step is a few hundred small
calls, and each costs; only the matmul path below gathers K and V apart); the token at position p of a sequence
lives in slot `block_table[p // block_size] * block_size + p % block_size`.

Speed: sequences with one new token (decodes) share one attention call per layer, their K/V gathered
block-wise into a padded (B, n_kv, L, hd) batch with a length mask, the query heads of a KV group folded
into the query dimension (GQA without copying K/V); on CPU, a group of many keys attends by plain batched
matmuls, faster there than the fused kernel for one-token queries (`MATMUL_DECODE_MIN_KEYS`).
Gathering and attending cost what the padded batch holds, so decodes of very different lengths are split
into a few groups of similar length (one long conversation would otherwise make every short one pay for its
length). Longer chunks (prefills) run one call per sequence with a lower-right causal mask. The index
tensors are built once per forward (`AttentionPlan.build`) and shared by every layer.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right


@dataclass(frozen=True)
class KVCache:
    """Per-layer paged K/V tensors, each (num_blocks, block_size, 2, num_kv_heads, head_dim): [..., 0, :, :] the
    keys, [..., 1, :, :] the values."""

    caches: tuple[torch.Tensor, ...]

    @classmethod
    def allocate(
        cls,
        num_layers: int,
        num_blocks: int,
        block_size: int,
        num_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device | str,
    ) -> KVCache:
        if min(num_layers, num_blocks, block_size, num_kv_heads, head_dim) < 1:
            raise ValueError("KVCache sizes (layers, blocks, block_size, kv heads, head_dim) must all be >= 1")
        shape = (num_blocks, block_size, 2, num_kv_heads, head_dim)
        return cls(tuple(torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)))

    @property
    def num_blocks(self) -> int:
        return self.caches[0].shape[0]

    @property
    def block_size(self) -> int:
        return self.caches[0].shape[1]


@dataclass(frozen=True)
class AttentionMetadata:
    """Where the T new tokens of one forward sit. Sequences are contiguous in the flat batch, in order.

    positions: (T,) int64, the position of each new token in its sequence.
    slot_mapping: (T,) int64, the cache slot each new token's K/V is written to.
    query_lens: per sequence, new tokens this step (sum = T).
    context_lens: per sequence, tokens attended to, the new ones included.
    block_tables: per sequence, block ids covering at least context_lens tokens.
    num_logits: per sequence, how many of its last new tokens need logits (None: one each, the last; a
        verified draft needs one after each of its tokens).
    """

    positions: torch.Tensor
    slot_mapping: torch.Tensor
    query_lens: list[int]
    context_lens: list[int]
    block_tables: list[list[int]]
    num_logits: list[int] | None = None

    def __post_init__(self) -> None:
        num_seqs = len(self.query_lens)
        if num_seqs == 0 or len(self.context_lens) != num_seqs or len(self.block_tables) != num_seqs:
            raise ValueError("query_lens, context_lens and block_tables need one entry per sequence (>= 1)")
        num_tokens = self.positions.numel()
        if sum(self.query_lens) != num_tokens or self.slot_mapping.numel() != num_tokens:
            raise ValueError(f"sum(query_lens) and slot_mapping must match the {num_tokens} positions")
        if any(q < 1 or c < q for q, c in zip(self.query_lens, self.context_lens, strict=True)):
            raise ValueError("each sequence needs 1 <= query_len <= context_len")
        if self.num_logits is not None and (len(self.num_logits) != num_seqs or any(
                not 1 <= n <= q for n, q in zip(self.num_logits, self.query_lens, strict=True))):
            raise ValueError("num_logits needs one entry per sequence, each 1 <= num_logits <= query_len")


@dataclass(frozen=True)
class DecodeGroup:
    """All sequences with a single new token, attended to in one batched call."""

    token_idx: torch.Tensor | None  # (B,) flat index of each decode token; None: the whole batch, in order
    block_idx: torch.Tensor  # (B * max_blocks,) block ids, padded with each row's first block
    # the matmul path's (`MATMUL_DECODE_MIN_KEYS`): (2, B * n_kv * L) rows of a cache viewed (slots * 2 * n_kv, hd),
    # K's then V's, so each gather gives K or V as (B, n_kv, L, hd), contiguous; None where SDPA attends
    head_rows: torch.Tensor | None
    mask: torch.Tensor | None  # (B, 1, 1, L) additive: 0 inside the context, -inf on padding
    num_seqs: int
    num_keys: int  # L = max_blocks * block_size


@dataclass(frozen=True)
class PrefillSegment:
    """One sequence with several new tokens: flat rows [start, end), attending to num_keys keys."""

    start: int
    end: int
    num_keys: int
    block_idx: torch.Tensor | None  # (ceil(num_keys / block_size),) or None when nothing was cached


@dataclass(frozen=True)
class AttentionPlan:
    """Index tensors derived once per forward from AttentionMetadata, shared by all layers."""

    slot_mapping: torch.Tensor  # (T,)
    decodes: tuple[DecodeGroup, ...]
    prefills: tuple[PrefillSegment, ...]
    logit_token_idx: torch.Tensor  # (sum of num_logits,) flat index of each token whose logits are wanted
    num_tokens: int

    @classmethod
    def build(
        cls, meta: AttentionMetadata, block_size: int, num_kv_heads: int, device: torch.device, dtype: torch.dtype
    ) -> AttentionPlan:
        """`dtype` is the model's: the decode mask is additive, in the dtype of the scores."""
        starts = _cumulative_starts(meta.query_lens)
        decode_ids = [i for i, q in enumerate(meta.query_lens) if q == 1]
        prefills = tuple(
            _prefill_segment(starts[i], q, meta.context_lens[i], meta.block_tables[i], block_size, device)
            for i, q in enumerate(meta.query_lens)
            if q > 1
        )
        num_logits = meta.num_logits or [1] * len(meta.query_lens)
        wanted = [start + q - n + i for start, q, n in zip(starts, meta.query_lens, num_logits, strict=True)
                  for i in range(n)]
        return cls(
            slot_mapping=meta.slot_mapping.to(device),
            decodes=tuple(_decode_group(meta, ids, starts, block_size, num_kv_heads, device, dtype)
                          for ids in _similar_lengths(decode_ids, meta.context_lens, block_size)),
            prefills=prefills,
            logit_token_idx=torch.tensor(wanted, dtype=torch.long, device=device),
            num_tokens=starts[-1] + meta.query_lens[-1],
        )


def _cumulative_starts(query_lens: list[int]) -> list[int]:
    starts, total = [], 0
    for q in query_lens:
        starts.append(total)
        total += q
    return starts


def _num_blocks(num_tokens: int, block_size: int) -> int:
    return -(-num_tokens // block_size)


MAX_DECODE_GROUPS = 4
MAX_PADDING_SHARE = 0.5  # a group grows while padding adds at most half again to the keys it holds


def _similar_lengths(seq_ids: list[int], context_lens: list[int], block_size: int) -> list[list[int]]:
    """Decode sequences in at most MAX_DECODE_GROUPS groups of similar length; one group, in batch order,
    when padding them all to the longest wastes little (the common case, and no scatter is needed)."""
    if not seq_ids:
        return []
    blocks = {i: _num_blocks(context_lens[i], block_size) for i in seq_ids}
    if max(blocks.values()) * len(seq_ids) <= (1 + MAX_PADDING_SHARE) * sum(blocks.values()):
        return [seq_ids]
    groups: list[list[int]] = [[]]
    held = 0  # blocks the open group really needs
    for i in sorted(seq_ids, key=blocks.__getitem__):
        padded = blocks[i] * (len(groups[-1]) + 1)
        if groups[-1] and len(groups) < MAX_DECODE_GROUPS and padded > (1 + MAX_PADDING_SHARE) * (held + blocks[i]):
            groups.append([])
            held = 0
        groups[-1].append(i)
        held += blocks[i]
    return groups


def _decode_group(
    meta: AttentionMetadata,
    seq_ids: list[int],
    starts: list[int],
    block_size: int,
    num_kv_heads: int,
    device: torch.device,
    dtype: torch.dtype,
) -> DecodeGroup:
    context_lens = [meta.context_lens[i] for i in seq_ids]
    max_blocks = _num_blocks(max(context_lens), block_size)
    rows = []
    for i, ctx in zip(seq_ids, context_lens, strict=True):
        table = meta.block_tables[i][: _num_blocks(ctx, block_size)]
        rows.extend(table + [table[0]] * (max_blocks - len(table)))
    num_keys = max_blocks * block_size
    mask = None
    if any(ctx != num_keys for ctx in context_lens):
        lens = torch.tensor(context_lens, device=device)
        padding = torch.arange(num_keys, device=device)[None, :] >= lens[:, None]  # (B, L)
        mask = torch.zeros(padding.shape, dtype=dtype, device=device).masked_fill_(padding, float("-inf"))
        mask = mask.view(len(seq_ids), 1, 1, num_keys)
    is_whole_batch = len(seq_ids) == len(meta.query_lens)
    token_idx = None if is_whole_batch else torch.tensor([starts[i] for i in seq_ids], device=device)
    block_idx = torch.tensor(rows, dtype=torch.long, device=device)
    head_rows = None
    if device.type == "cpu" and len(seq_ids) * num_keys >= MATMUL_DECODE_MIN_KEYS:
        head_rows = decode_head_rows(block_idx, len(seq_ids), block_size, num_kv_heads)
    return DecodeGroup(token_idx, block_idx, head_rows, mask, len(seq_ids), num_keys)


def decode_head_rows(block_idx: torch.Tensor, num_seqs: int, block_size: int, num_kv_heads: int) -> torch.Tensor:
    """`DecodeGroup.head_rows` from its padded block ids (B * max_blocks,): for K then V, each sequence, head and
    key in that order, the row of a cache viewed (slots * 2 * n_kv, hd) that holds it."""
    slots = block_idx.view(-1, 1) * block_size + torch.arange(block_size, device=block_idx.device)  # (B * blocks, bs)
    heads = torch.arange(2 * num_kv_heads, device=block_idx.device).view(2, 1, num_kv_heads, 1)  # K's, then V's
    return (slots.view(1, num_seqs, 1, -1) * (2 * num_kv_heads) + heads).view(2, -1)


def _prefill_segment(
    start: int, query_len: int, context_len: int, block_table: list[int], block_size: int, device: torch.device
) -> PrefillSegment:
    block_idx = None
    if context_len > query_len:
        table = block_table[: _num_blocks(context_len, block_size)]
        block_idx = torch.tensor(table, dtype=torch.long, device=device)
    return PrefillSegment(start, start + query_len, context_len, block_idx)


def paged_attention(q: torch.Tensor, kv: torch.Tensor, cache: torch.Tensor, plan: AttentionPlan) -> torch.Tensor:
    """Write kv (T, 2, n_kv, hd), each token's K then V, into the cache, attend q (T, n_heads, hd); returns
    (T, n_heads, hd)."""
    cache.view(-1, *kv.shape[1:]).index_copy_(0, plan.slot_mapping, kv)
    if len(plan.decodes) == 1 and plan.decodes[0].token_idx is None:
        return _decode_attention(q, cache, plan.decodes[0])  # a pure-decode batch: no scatter
    out = torch.empty_like(q)
    for group in plan.decodes:
        assert group.token_idx is not None
        decoded = _decode_attention(q.index_select(0, group.token_idx), cache, group)
        out.index_copy_(0, group.token_idx, decoded)
    for seg in plan.prefills:
        out[seg.start : seg.end] = _prefill_attention(q, kv, cache, seg)
    return out


# From this many keys in a decode group (its sequences times its padded length) on, a CPU group attends by two
# batched matmuls and a float32 softmax rather than SDPA: PyTorch's fused CPU kernel is made for long queries, and
# a decode's query is one token (a KV group's few heads). The matmuls want K/V contiguous per head (a strided
# operand is copied by each), so such a group gathers them by head rows (`DecodeGroup.head_rows`). Measured here
# in bfloat16 (SmolLM2's 3 KV heads of 3 queries, head_dim 64; `benchmarks/decode_attention.py`, the engine README
# has the table), gather and attention, SDPA's time over the matmuls' in two runs: 8 sequences of 128 keys 0.65
# and 0.77, 16 of 128 1.15 and 1.87, 4 of 512 1.05 and 1.32, 8 of 512 1.39 and 1.65; 1 of 128 0.36 and 0.41.
MATMUL_DECODE_MIN_KEYS = 2048


def _decode_attention(q: torch.Tensor, cache: torch.Tensor, group: DecodeGroup) -> torch.Tensor:
    """q (B, n_heads, hd) of single-token sequences -> (B, n_heads, hd)."""
    num_seqs, num_heads, head_dim = q.shape
    num_kv_heads = cache.shape[3]
    q = q.view(num_seqs, num_kv_heads, num_heads // num_kv_heads, head_dim)  # (B, n_kv, group, hd)
    if group.head_rows is not None:  # contiguous: a strided K/V would be copied by each matmul
        # Two gathers, not one of both: one output twice the size was 1.7x slower here (fresh pages, past glibc's
        # threshold for reusing freed memory).
        shape = (num_seqs, num_kv_heads, group.num_keys, head_dim)
        rows = cache.view(-1, head_dim)
        keys, values = (rows.index_select(0, half).view(shape) for half in group.head_rows)  # (B, n_kv, L, hd)
        out = _attend_by_matmul(q, keys, values, group.mask)
    else:
        gathered = cache.index_select(0, group.block_idx).view(num_seqs, group.num_keys, 2, num_kv_heads, head_dim)
        keys, values = gathered.unbind(2)  # (B, L, n_kv, hd) each
        out = F.scaled_dot_product_attention(q, keys.transpose(1, 2), values.transpose(1, 2),
                                             attn_mask=group.mask)  # (B, n_kv, group, hd)
    return out.reshape(num_seqs, num_heads, head_dim)


def _attend_by_matmul(
    q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor | None
) -> torch.Tensor:
    """softmax(q keys^T / sqrt(hd) + mask) values. Each product's result comes in the inputs' dtype; the scores are
    scaled, masked and normalised in float32, and the weights rounded back for the second product (a bfloat16
    step's outputs differ from SDPA's, which keeps its scores in float32, by about one bfloat16 rounding)."""
    scores = torch.matmul(q, keys.transpose(-1, -2)).float().mul_(q.shape[-1] ** -0.5)  # (B, n_kv, group, L)
    if mask is not None:
        scores.add_(mask)
    return torch.matmul(scores.softmax(dim=-1).to(values.dtype), values)


def _prefill_attention(q: torch.Tensor, kv: torch.Tensor, cache: torch.Tensor, seg: PrefillSegment) -> torch.Tensor:
    """One sequence's chunk of Tq queries over its num_keys keys -> (Tq, n_heads, hd)."""
    num_kv_heads = kv.shape[2]
    if seg.block_idx is None:
        keys, values = kv[seg.start : seg.end].unbind(1)  # (Tq, n_kv, hd) each
    else:
        keys, values = cache.index_select(0, seg.block_idx).view(-1, *kv.shape[1:])[: seg.num_keys].unbind(1)
    keys = keys.transpose(0, 1).unsqueeze(0)  # (1, n_kv, L, hd)
    values = values.transpose(0, 1).unsqueeze(0)  # (1, n_kv, L, hd)
    # On CPU each KV head serves its group of query heads without a copy (enable_gqa: the same bits as
    # repeating them, a quarter less time measured at 80 tokens); CUDA's kernels for a masked attention
    # don't take grouped heads (it would fall back to the unfused math), so there K/V are repeated.
    gqa = q.device.type == "cpu"
    if not gqa:
        group = q.shape[1] // num_kv_heads
        keys, values = keys.repeat_interleave(group, dim=1), values.repeat_interleave(group, dim=1)
    query = q[seg.start : seg.end].transpose(0, 1).unsqueeze(0)  # (1, n_heads, Tq, hd)
    query_len = seg.end - seg.start
    if query_len == seg.num_keys:
        out = F.scaled_dot_product_attention(query, keys, values, is_causal=True, enable_gqa=gqa)
    else:
        mask = causal_lower_right(query_len, seg.num_keys)
        out = F.scaled_dot_product_attention(query, keys, values, attn_mask=mask, enable_gqa=gqa)
    return out[0].transpose(0, 1)  # (Tq, n_heads, hd)
