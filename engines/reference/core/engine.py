"""The synchronous engine core: requests in, one step of the whole batch at a time, token deltas out.

    engine.add_request("r1", prompt_token_ids, SamplingParams(max_tokens=32))
    while engine.has_unfinished():
        for output in engine.step():          # schedule -> run -> sample -> postprocess -> stop rules
            print(output.new_text, end="")

Contract: `step()` returns one `RequestOutput` per request that got a token in that step (prefill chunks
that did not finish a prompt produce none); a request's outputs concatenate to its whole completion. With
speculative decoding (config.speculative), a greedy request's step verifies drafts proposed from its own
tokens (`core/speculative.py`) and may yield several tokens, the same ones it would have yielded one a step.
`add_request` and `abort` are called between steps from the thread that calls `step()`: the engine is
not thread-safe and never blocks. It knows nothing of HTTP, asyncio or Prometheus; `stats()` exposes
the counters a server turns into metrics.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from engines.reference.core.config import EngineConfig
from engines.reference.core.grammar import Grammars, GrammarState, mask_logits
from engines.reference.core.lora import LoraAdapter
from engines.reference.core.memory import default_kv_cache_tokens
from engines.reference.core.model_runner import BatchItem, ModelRunner
from engines.reference.core.request_state import RequestState
from engines.reference.core.sampling import SamplingParams, make_generator, sample
from engines.reference.core.scheduler import QueueFullError, Scheduler, SchedulerOutput
from engines.reference.core.sequence import Sequence
from engines.reference.core.speculative import SpecDecodeCounters, accepted_tokens, propose
from engines.reference.core.step_cost import StepCost, StepCostModel, StepShape
from engines.reference.loading.tokenizer import Tokenizer, byte_tokenizer
from engines.reference.loading.weights import LoadedModel, resolve_model

__all__ = ["EngineStats", "LLMEngine", "QueueFullError", "RequestOutput"]


@dataclass(frozen=True)
class RequestOutput:
    """What one step produced for one request.

    new_token_ids: tokens sampled this step (one; several where drafts were accepted; none when only the final
        text flush is left).
    new_text: text that became final this step (held back while it might be part of a stop string or
        of an incomplete UTF-8 character); all of a request's new_text concatenated is its completion.
    finish_reason: None while running, then "stop" (EOS, a stop token or a stop string) or "length"
        (max_tokens or max_model_len).
    num_output_tokens: tokens generated so far (a stop token included, its text never).
    ttft_s / itl_s: time from add_request to this (first) output, or since the request's previous output.
    """

    request_id: str
    new_token_ids: tuple[int, ...]
    new_text: str
    finished: bool
    finish_reason: str | None
    num_prompt_tokens: int
    num_output_tokens: int
    num_cached_tokens: int
    ttft_s: float | None = None
    itl_s: float | None = None


@dataclass(frozen=True)
class EngineStats:
    """A snapshot of the engine's gauges and cumulative counters (tokens, not requests, where it says so)."""

    num_running: int
    num_waiting: int
    kv_cache_usage_perc: float  # 0..1, blocks referenced by sequences
    num_free_blocks: int  # free plus evictable cached blocks
    num_blocks: int
    num_prefix_cache_query_tokens: int
    num_prefix_cache_hit_tokens: int
    num_preemptions: int
    num_prompt_tokens: int  # prompts whose first token was generated
    num_generation_tokens: int
    num_requests_added: int = 0  # every request accepted; each ends finished or aborted
    running_adapters: tuple[str, ...] = ()  # LoRA adapters of the running batch, distinct, sorted
    waiting_adapters: tuple[str, ...] = ()  # LoRA adapters of waiting requests, distinct, sorted
    num_steps: int = 0  # steps run (a step's figures below: the latest one's)
    last_step_ms: float | None = None
    last_step_shape: StepShape | None = None
    step_cost: StepCost | None = None  # what a step costs, as learned (`core/step_cost.py`)
    spec_decode: SpecDecodeCounters | None = None  # speculative decoding's drafts and acceptance; None: off


class LLMEngine:
    """Scheduler + model runner + per-request sampling, detokenization and stop rules."""

    def __init__(
        self,
        model: str | LoadedModel,
        config: EngineConfig,
        *,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> None:
        """Load `model` (a spec for `resolve_model`, on device/dtype) unless already loaded; allocate the
        KV cache of config.num_kv_blocks blocks. `from_model` sizes the cache from tokens or free memory."""
        loaded = model if isinstance(model, LoadedModel) else resolve_model(model, dtype=dtype, device=device)
        self.loaded = loaded
        self.model_name = loaded.name
        self.config = config
        self.tokenizer: Tokenizer | None = loaded.tokenizer or byte_tokenizer(loaded.model.config.vocab_size)
        self.vocab_size = loaded.model.config.vocab_size
        self.device = loaded.model.device
        self.step_cost = StepCostModel()
        self.scheduler = Scheduler(config, step_cost=self.step_cost)
        kv_cache = loaded.model.allocate_kv_cache(config.num_kv_blocks, config.block_size)
        self.runner = ModelRunner(loaded.model, kv_cache, config.block_size, self.device)
        self._requests: dict[str, RequestState] = {}
        self.adapters: dict[str, LoraAdapter] = {}  # LoRA adapters a request may name (`add_adapter`)
        self._num_prompt_tokens = 0
        self._num_generation_tokens = 0
        self._num_requests_added = 0
        self._num_steps = 0
        self._last_step: tuple[float, StepShape] | None = None
        self.spec_counters = SpecDecodeCounters()
        # constrained decoding's compiled grammars (xgrammar, loaded on first use); None: no tokenizer to build one
        self.grammars = Grammars(self.tokenizer, self.vocab_size) if self.tokenizer is not None else None

    @classmethod
    def from_model(
        cls,
        model: str | LoadedModel = "default",
        *,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
        kv_cache_tokens: int | None = None,
        kv_cache_memory_fraction: float | None = None,
        max_model_len: int | None = None,
        weights: str = "auto",
        **config_fields: object,
    ) -> LLMEngine:
        """Load a model spec (see `resolve_model`) and size the KV cache.

        The cache holds `kv_cache_tokens`, or else a fraction of the free memory (0.85 on CUDA, 0.25
        elsewhere, capped as `default_kv_cache_tokens` says). max_model_len defaults to the model's
        context length, lowered to what the cache holds. `weights`: how the weights are kept (`resolve_model`).
        Other keyword arguments go to EngineConfig.
        """
        loaded = model if isinstance(model, LoadedModel) else \
            resolve_model(model, dtype=dtype, device=device, weights=weights)
        model_len = max_model_len or loaded.model.config.max_position_embeddings
        if kv_cache_tokens is None:
            is_cuda = loaded.model.device.type == "cuda"
            fraction = kv_cache_memory_fraction or (0.85 if is_cuda else 0.25)
            max_num_seqs = int(config_fields.get("max_num_seqs", EngineConfig.max_num_seqs))  # type: ignore[call-overload]
            kv_cache_tokens = default_kv_cache_tokens(loaded, fraction, max_num_seqs * model_len)
        if max_model_len is None:
            block_size = int(config_fields.get("block_size", EngineConfig.block_size))  # type: ignore[call-overload]
            model_len = min(model_len, kv_cache_tokens // block_size * block_size)
        config = EngineConfig.for_kv_cache_tokens(kv_cache_tokens, max_model_len=model_len, **config_fields)
        return cls(loaded, config)

    # ---- requests in and out (between steps) -----------------------------------------------------

    def can_add(self) -> bool:
        """Whether the waiting queue has room (else `add_request` raises QueueFullError). Changes nothing."""
        return self.scheduler.can_add()

    def check_prompt(self, prompt_token_ids: list[int]) -> None:
        """Raise ValueError unless the prompt is non-empty, in the vocabulary and leaves room for a token."""
        if not prompt_token_ids:
            raise ValueError("the prompt must hold at least one token")
        bad = next((t for t in prompt_token_ids if not 0 <= t < self.vocab_size), None)
        if bad is not None:
            raise ValueError(f"prompt token id {bad} is outside the vocabulary [0, {self.vocab_size})")
        if len(prompt_token_ids) >= self.config.max_model_len:
            raise ValueError(
                f"the prompt has {len(prompt_token_ids)} tokens; this model's maximum context length is "
                f"{self.config.max_model_len} tokens (prompt and output together)"
            )

    def add_adapter(self, adapter: LoraAdapter) -> None:
        """Serve a LoRA adapter (loaded for this model: `loading/lora.py`); requests name it in `add_request`."""
        if adapter.name in self.adapters or adapter.name == self.model_name:
            raise ValueError(f"adapter name {adapter.name!r} is already served")
        if len(adapter.layers) != len(self.loaded.model.layers):
            raise ValueError(f"adapter {adapter.name!r} has {len(adapter.layers)} layers, the model "
                             f"{len(self.loaded.model.layers)}")
        self.adapters[adapter.name] = adapter

    def add_request(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        params: SamplingParams,
        arrival_time_s: float | None = None,
        adapter: str | None = None,
        grammar: GrammarState | None = None,
    ) -> None:
        """Queue a request (on LoRA `adapter`, by name, or the base model; its answer held to `grammar`, from
        `self.grammars`). Raises ValueError (bad prompt, id in use, unknown adapter) or QueueFullError (queue bound)."""
        self.check_prompt(prompt_token_ids)
        if request_id in self._requests:
            raise ValueError(f"request id {request_id!r} is already in use")
        if adapter is not None and adapter not in self.adapters:
            raise ValueError(f"adapter {adapter!r} is not served (served: {', '.join(self.adapters) or 'none'})")
        seq = Sequence(request_id, prompt_token_ids, sampling_params=params, adapter=adapter)
        self.scheduler.add(seq)
        stop_ids = set(params.stop_token_ids)
        if not params.ignore_eos and self.tokenizer is not None:
            stop_ids.update(self.tokenizer.stop_token_ids or ())
            if self.tokenizer.eos_token_id is not None:
                stop_ids.add(self.tokenizer.eos_token_id)
        self._requests[request_id] = RequestState(
            seq=seq,
            params=params,
            generator=make_generator(params, self.device),
            tokenizer=self.tokenizer,
            stop_token_ids=frozenset(stop_ids),
            arrival_time_s=time.monotonic() if arrival_time_s is None else arrival_time_s,
            grammar=grammar,
        )
        self._num_requests_added += 1

    def abort(self, request_id: str) -> bool:
        """Drop a request and free its blocks; False if it is not known (finished or never added)."""
        state = self._requests.pop(request_id, None)
        if state is None:
            return False
        self.scheduler.abort(request_id)
        return True

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished()

    def warm_up(self, num_rounds: int = 2) -> StepCost | None:
        """Run a few steps of made-up requests before serving, so that the first client meets warm kernels and
        the step cost is known from the start: a prompt alone, its decodes, a longer prompt beside them, then
        two decodes a step. The first round's steps (one-time costs) are forgotten. Counters and the prefix
        cache's figures are left as they were; call it with no request in flight."""
        if self.has_unfinished():
            raise RuntimeError("warm_up runs before any request is added")
        counters = self._counters()
        generator = torch.Generator().manual_seed(0)
        params = SamplingParams(max_tokens=4, ignore_eos=True, temperature=0.0)
        length = max(2, min(256, self.config.max_model_len // 2, self.config.max_num_batched_tokens))
        for round_index in range(num_rounds):
            if round_index:
                self.step_cost.forget()
            for index, prompt_len in enumerate((max(1, length // 4), length)):
                prompt = torch.randint(0, self.vocab_size, (prompt_len,), generator=generator).tolist()
                self.add_request(f"warm-up-{round_index}-{index}", prompt, params)
                self.step()
                self.step()
            while self.has_unfinished():
                self.step()
        self._restore_counters(counters)
        return self.step_cost.cost

    def _counters(self) -> tuple:
        cache = self.scheduler.block_manager.prefix_cache
        return (self._num_prompt_tokens, self._num_generation_tokens, self._num_requests_added,
                self.scheduler.num_preemptions, cache.num_query_tokens, cache.num_hit_tokens,
                self.spec_counters.snapshot())

    def _restore_counters(self, counters: tuple) -> None:
        cache = self.scheduler.block_manager.prefix_cache
        (self._num_prompt_tokens, self._num_generation_tokens, self._num_requests_added,
         self.scheduler.num_preemptions, cache.num_query_tokens, cache.num_hit_tokens, self.spec_counters) = counters

    @property
    def num_unfinished(self) -> int:
        return len(self._requests)

    # ---- one step ----------------------------------------------------------------------------------

    def step(self) -> list[RequestOutput]:
        """Run one scheduled batch; returns an output for each request that got a token."""
        self._propose_drafts()
        out = self.scheduler.schedule()
        if out.is_empty:
            return []
        shape = out.shape  # before postprocess advances what is computed
        started = time.perf_counter()
        outputs = self._run(out)
        elapsed_ms = (time.perf_counter() - started) * 1000
        self.step_cost.observe(shape, elapsed_ms)  # the model's run, sampling and detokenizing: what a user waits
        self._num_steps += 1
        self._last_step = (elapsed_ms, shape)
        return outputs

    def _propose_drafts(self) -> None:
        """Drafts for each running greedy decode (speculation on), within what the request may still generate:
        its accepted drafts and the model's own next token must fit max_tokens and max_model_len."""
        spec = self.config.speculative
        if spec is None:
            return
        for seq in self.scheduler.running:
            state = self._requests[seq.request_id]
            if seq.num_uncomputed_tokens != 1 or not state.params.is_greedy or state.banned_token_ids() \
                    or state.grammar is not None:
                continue
            room = self.config.max_model_len - seq.num_tokens - 1
            if state.params.max_tokens is not None:
                room = min(room, state.params.max_tokens - seq.num_output_tokens - 1)
            seq.draft_token_ids = propose(seq.token_ids, spec, room)

    def _run(self, out: SchedulerOutput) -> list[RequestOutput]:
        adapters = self.adapters
        items = [
            BatchItem(entry.seq.token_ids, entry.seq.num_computed_tokens, entry.num_new_tokens, entry.seq.block_table,
                      adapters[entry.seq.adapter] if entry.seq.adapter is not None else None,
                      tuple(entry.seq.draft_token_ids[:entry.num_draft_tokens]))
            for entry in out.scheduled
        ]  # fmt: skip
        logits = self.runner.run(items)  # (sum of the items' num_logits, vocab)
        sampled = self._sample(out, items, logits)
        now = time.monotonic()
        num_new = {entry.seq.request_id: len(tokens) if isinstance(tokens, list) else 1
                   for entry, tokens in zip(out.scheduled, sampled, strict=True) if tokens is not None}
        return [self._process_tokens(self._requests[seq.request_id], num_new[seq.request_id], now)
                for seq in self.scheduler.postprocess(out, sampled)]

    def _sample(self, out: SchedulerOutput, items: list[BatchItem],
                logits: torch.Tensor) -> list[int | list[int] | None]:
        """Each sampling entry's token; an entry with drafts gets the tokens its verification yields (greedy:
        the drafts the model agrees with, then its own next token)."""
        sampled: list[int | list[int] | None] = [None] * len(out.scheduled)
        first_row = 0
        plain: list[tuple[int, int]] = []  # (entry, its logits row)
        for i, (entry, item) in enumerate(zip(out.scheduled, items, strict=True)):
            if entry.is_sampling and item.draft_token_ids:
                rows = logits[first_row:first_row + item.num_logits]
                choices = rows.max(dim=-1).indices.tolist()  # as `sample` picks a greedy row's token
                tokens = accepted_tokens(item.draft_token_ids, choices)
                self.spec_counters.record(len(item.draft_token_ids), len(tokens) - 1)
                sampled[i] = tokens
            elif entry.is_sampling:
                plain.append((i, first_row))
            first_row += item.num_logits
        if not plain:
            return sampled
        states = [self._requests[out.scheduled[i].seq.request_id] for i, _ in plain]
        if len(plain) < logits.shape[0]:  # a prefill chunk that ends no prompt samples nothing
            logits = logits.index_select(0, torch.tensor([row for _, row in plain], device=logits.device))
        mask_logits(logits, [state.grammar for state in states])  # constrained rows: what their grammar allows
        tokens = sample(
            logits,
            [state.params for state in states],
            [state.generator for state in states],
            [state.banned_token_ids() for state in states],
        ).tolist()
        for (i, _), token_id in zip(plain, tokens, strict=True):
            sampled[i] = token_id
        return sampled

    def _process_tokens(self, state: RequestState, num_new: int, now: float) -> RequestOutput:
        """The stop rules over the step's new tokens, one at a time; tokens after one that stops are dropped."""
        seq = state.seq
        ttft_s, itl_s = state.record_token_time(now)
        if ttft_s is not None:
            self._num_prompt_tokens += seq.num_prompt_tokens
        new_ids = seq.token_ids[-num_new:]
        texts, finish_reason = [], None
        for index, token_id in enumerate(new_ids):
            text, finish_reason = state.append_token(token_id, self.config.max_model_len, num_new - 1 - index)
            texts.append(text)
            if finish_reason is not None:
                del seq.token_ids[len(seq.token_ids) - (num_new - 1 - index):]  # as if never generated
                new_ids = new_ids[:index + 1]
                break
        self._num_generation_tokens += len(new_ids)
        if finish_reason is not None:
            self.scheduler.finish(seq)
            del self._requests[seq.request_id]
        return RequestOutput(
            request_id=seq.request_id,
            new_token_ids=tuple(new_ids),
            new_text="".join(texts),
            finished=finish_reason is not None,
            finish_reason=finish_reason,
            num_prompt_tokens=seq.num_prompt_tokens,
            num_output_tokens=seq.num_output_tokens,
            num_cached_tokens=seq.num_cached_tokens,
            ttft_s=ttft_s,
            itl_s=itl_s,
        )

    def stats(self) -> EngineStats:
        manager = self.scheduler.block_manager
        scheduler = self.scheduler
        running: tuple[str, ...] = ()
        waiting: tuple[str, ...] = ()
        if self.adapters:
            running = tuple(sorted(scheduler.running_adapters()))
            waiting = tuple(sorted({seq.adapter for seq in scheduler.waiting if seq.adapter is not None}))
        return EngineStats(
            num_running=self.scheduler.num_running,
            num_waiting=self.scheduler.num_waiting,
            kv_cache_usage_perc=manager.kv_cache_usage_perc,
            num_free_blocks=manager.num_free_blocks,
            num_blocks=manager.num_blocks,
            num_prefix_cache_query_tokens=manager.prefix_cache.num_query_tokens,
            num_prefix_cache_hit_tokens=manager.prefix_cache.num_hit_tokens,
            num_preemptions=self.scheduler.num_preemptions,
            num_prompt_tokens=self._num_prompt_tokens,
            num_generation_tokens=self._num_generation_tokens,
            num_requests_added=self._num_requests_added,
            running_adapters=running,
            waiting_adapters=waiting,
            num_steps=self._num_steps,
            last_step_ms=self._last_step[0] if self._last_step else None,
            last_step_shape=self._last_step[1] if self._last_step else None,
            step_cost=self.step_cost.cost,
            spec_decode=self.spec_counters.snapshot() if self.config.speculative is not None else None,
        )

