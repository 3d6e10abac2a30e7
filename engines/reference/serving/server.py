"""OpenAI-compatible HTTP server around the reference engine (aiohttp), with Prometheus /metrics.

    python -m engines.reference --model default --port 8000  # engines/reference/__main__.py runs main()
    serve(ServerOptions(model="dummy:tiny", port=0))         # what `bench serve` calls (serving/options.py)

Routes: POST /v1/completions and /v1/chat/completions (SSE streaming or one JSON body), GET /v1/models,
/health (503 once the step loop died) and /metrics. The engine steps on its own thread
(`AsyncEngine`); handlers only parse, tokenize and forward deltas, so HTTP stays responsive during a
forward. A client that disconnects cancels its handler, which aborts its request and frees its blocks.
Errors are OpenAI-style JSON; a server error says only `internal error` and an id the log has the detail
under. The server binds 127.0.0.1 unless told otherwise; with an API key, every /v1 route wants
`Authorization: Bearer <key>` (compared in constant time).

One client can't hold the server up: connections past --max-connections get a 503 (`connections.py`), headers
must arrive within --idle-timeout-s (aiohttp's keep-alive timer runs until they are complete), a body within
--body-timeout-s, a body over the limit is refused by its Content-Length without being read to its end, and a
stream whose client stops reading is cut (--send-timeout-s, --max-pending-outputs) and its request aborted.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import signal
import sys
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from aiohttp import HttpVersion11, web

from engines.reference.core.config import EngineConfig
from engines.reference.core.engine import LLMEngine, QueueFullError, RequestOutput
from engines.reference.core.grammar import GrammarError, GrammarState
from engines.reference.core.step_cost import StepCost
from engines.reference.loading.lora import load_adapter, parse_lora_modules, read_adapter_config
from engines.reference.loading.weights import LoadedModel
from engines.reference.serving.async_engine import AsyncEngine, EngineDeadError, RequestStream, SlowConsumerError
from engines.reference.serving.connections import CappedSite, drop_connection, open_host_warning
from engines.reference.serving.metrics import CONTENT_TYPE, EngineMetrics
from engines.reference.serving.openai_api import ApiError, GenerationRequest, Kind, Limits, choice, envelope, usage
from engines.reference.serving.openai_api import parse_generation_request as parse
from engines.reference.serving.options import DTYPE_NAMES, ServerOptions, api_key_of, parse_args
from engines.reference.serving.structured import ToolCallStream, tool_call_choice, tool_call_delta

logger = logging.getLogger(__name__)
_DTYPES = dict(zip(DTYPE_NAMES, (torch.float32, torch.bfloat16, torch.float16), strict=True))


def build_engine(options: ServerOptions, loaded: LoadedModel | None = None) -> LLMEngine:
    """Load the model (or take the one already `loaded`) and size the cache as the options say."""
    device = options.device if options.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    dtype_name = options.dtype if options.dtype != "auto" else _default_dtype(device)
    if dtype_name not in _DTYPES:
        raise ValueError(f"dtype must be one of auto, {', '.join(_DTYPES)}, got {options.dtype!r}")
    modules = parse_lora_modules(options.lora_modules)
    for path in modules.values():  # a bad adapter is said before the model loads
        read_adapter_config(Path(path), options.max_lora_rank)
    engine = LLMEngine.from_model(
        loaded if loaded is not None else options.model,
        device=device,
        dtype=_DTYPES[dtype_name],
        kv_cache_tokens=options.kv_cache_tokens,
        max_model_len=options.max_model_len,
        batching=options.batching,
        max_num_seqs=options.max_num_seqs,
        max_num_batched_tokens=options.max_num_batched_tokens,
        max_num_waiting=options.max_num_waiting,
        max_step_ms=options.max_step_ms or None,
        max_step_ratio=options.max_step_ratio or None,
        min_prefill_share=options.min_prefill_share,
        wave_share=None if options.wave_share == 1 else options.wave_share,  # 1: never (others the config checks)
        min_prefill_chunk_tokens=options.min_prefill_chunk_tokens,
        enable_prefix_caching=options.prefix_cache,
        weights=options.weights_dtype,
        max_loras=options.max_loras,
        speculative=options.speculative(),
    )
    model = engine.loaded.model
    for name, path in modules.items():
        engine.add_adapter(load_adapter(name, path, model.config, model.device, options.max_lora_rank))
    return engine


def _default_dtype(device: str) -> str:
    """bfloat16 on CUDA and on CPUs with native bfloat16 math (AVX512-BF16 or AMX), else float32.

    Why on such CPUs: through the server on a 2-core EPYC with SmolLM2-135M, 32 concurrent streams gave 218
    output tokens/s in bfloat16 against 159 in float32 (prefill about 2x faster too), for ~4 ms more per token
    with a single stream (33.6 vs 29.5 ms).
    """
    if device.startswith("cuda"):
        return "bfloat16"
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            flags = next((line.split() for line in cpuinfo if line.startswith("flags")), [])
    except OSError:
        return "float32"
    return "bfloat16" if device == "cpu" and ("avx512_bf16" in flags or "amx_bf16" in flags) else "float32"


def _sse(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, ensure_ascii=False).encode() + b"\n\n"


class Server:
    """The engine, its step thread, its metrics and the aiohttp app, started and stopped on one event loop."""

    def __init__(self, options: ServerOptions, engine: LLMEngine | None = None) -> None:
        self.options = options
        self._api_key = api_key_of(options)  # before the model loads: a key named but not set is said at once
        self.engine = engine if engine is not None else build_engine(options)
        self.model_name = options.served_model_name or self.engine.model_name
        self.metrics = EngineMetrics(self.model_name, self.engine.config.max_loras if self.engine.adapters else None,
                                     speculative=self.engine.config.speculative is not None)
        self.async_engine = AsyncEngine(self.engine, self.metrics, options.max_pending_outputs)
        self.limits = Limits(
            self.model_name, self.engine.config.max_model_len, self.engine.vocab_size, self.engine.tokenizer,
            frozenset(self.engine.adapters), options.max_stop_strings, options.max_stop_chars,
            options.max_stop_token_ids,
        )
        self._runner: web.AppRunner | None = None
        self.site: CappedSite | None = None
        self.base_url = ""

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._errors, self._auth], client_max_size=self.limits.max_body_bytes)
        app.router.add_post("/v1/completions", self._completions, expect_handler=self._expect)
        app.router.add_post("/v1/chat/completions", self._chat, expect_handler=self._expect)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        app.router.add_get("/metrics", self._metrics)
        return app

    async def start(self, start_step_thread: bool = True) -> str:
        """Start the step thread (unless the caller runs the step loop itself) and listen; returns the base
        URL (…/v1) with the port actually bound."""
        if start_step_thread:
            self.async_engine.start(asyncio.get_running_loop())
        self._runner = web.AppRunner(self.app(), handler_cancellation=True, access_log=None, shutdown_timeout=5.0,
                                     keepalive_timeout=self.options.idle_timeout_s)  # fmt: skip
        await self._runner.setup()
        self.site = CappedSite(self._runner, self.options.host, self.options.port, self.options.max_connections,
                               "--max-connections")  # fmt: skip
        await self.site.start()
        host, port = self._runner.addresses[0][:2]
        self.base_url = f"http://{f'[{host}]' if ':' in host else host}:{port}/v1"
        if self._api_key is None and (warning := open_host_warning(self._runner.addresses)) is not None:
            print(warning, file=sys.stderr, flush=True)
        return self.base_url

    async def stop(self) -> None:
        """Stop the step thread first (open streams end with an error event), then the HTTP side."""
        await asyncio.get_running_loop().run_in_executor(None, self.async_engine.stop)
        if self._runner is not None:
            await self._runner.cleanup()

    # ---- middlewares -------------------------------------------------------------------------------

    @web.middleware
    async def _errors(self, request: web.Request, handler: Callable[[web.Request], Awaitable]) -> web.StreamResponse:
        try:
            return await handler(request)
        except ApiError as error:
            response = web.json_response(error.body(), status=error.status)
            if error.status in (408, 413):  # the body was not read to its end: this connection carries no more
                response.force_close()
            return response
        except web.HTTPException as exc:  # unknown route, wrong method
            if exc.status < 400:
                raise
            http_error = ApiError(f"{request.method} {request.path}: {exc.reason}", status=exc.status)
            return web.json_response(http_error.body(), status=exc.status)
        except ConnectionError:  # the client went away mid-stream; nothing left to answer
            raise
        except Exception:  # a bug: answer JSON, keep serving; what failed goes to the log only
            error_id = f"err-{uuid.uuid4().hex[:16]}"
            logger.exception("error %s handling %s %s", error_id, request.method, request.path)
            return web.json_response(ApiError(f"internal error (id {error_id})", status=500).body(), status=500)

    @web.middleware
    async def _auth(self, request: web.Request, handler: Callable[[web.Request], Awaitable]) -> web.StreamResponse:
        if self._api_key and request.path.startswith("/v1") and not _is_key(request, self._api_key):
            raise ApiError("Incorrect or missing API key: send 'Authorization: Bearer <key>'", status=401,
                           code="invalid_api_key")  # fmt: skip
        return await handler(request)

    async def _expect(self, request: web.Request) -> web.StreamResponse | None:
        """`Expect: 100-continue`: a body too large is refused before the client sends it."""
        if (request.content_length or 0) > self.limits.max_body_bytes:
            response = web.json_response(self.limits.body_too_large(request.content_length).body(), status=413)
            response.force_close()
            return response
        if request.version != HttpVersion11:
            return None
        if request.headers.get("Expect", "").lower() != "100-continue":
            error = ApiError(f"Expect: {request.headers['Expect'][:100]} is not supported (only 100-continue)",
                             status=417)  # fmt: skip
            return web.json_response(error.body(), status=417)
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")  # what aiohttp's own expect handler does
        request.writer.output_size = 0
        return None

    # ---- routes ------------------------------------------------------------------------------------

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(status=200 if self.async_engine.is_alive else 503)

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=self.metrics.render(), headers={"Content-Type": CONTENT_TYPE})

    async def _models(self, request: web.Request) -> web.Response:
        card = {"id": self.model_name, "object": "model", "created": 0, "owned_by": "reference",
                "root": self.engine.model_name, "parent": None, "max_model_len": self.engine.config.max_model_len}
        # each adapter as vLLM lists one, the base model as parent, but its own name as root: vLLM's root is the
        # adapter's directory, which tells every client a path on this host
        adapters = [{"id": a.name, "object": "model", "created": 0, "owned_by": "reference", "root": a.name,
                     "parent": self.model_name, "max_model_len": self.engine.config.max_model_len}
                    for a in self.engine.adapters.values()]  # fmt: skip
        return web.json_response({"object": "list", "data": [card, *adapters]})

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, "completion")

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, "chat")

    async def _generate(self, request: web.Request, kind: Kind) -> web.StreamResponse:
        if (request.content_length or 0) > self.limits.max_body_bytes:
            # Answered unread, the connection then closed; aiohttp reads what the client still sends for a few
            # seconds (its lingering time), so the client gets to read the answer, never for longer.
            raise self.limits.body_too_large(request.content_length)
        try:
            async with asyncio.timeout(self.options.body_timeout_s):
                body = await request.json()
        except web.HTTPRequestEntityTooLarge:  # a body sent without its length
            raise self.limits.body_too_large(None) from None
        except TimeoutError:
            raise ApiError(f"the request body took longer than {self.options.body_timeout_s:g} s to arrive (this "
                           "server's --body-timeout-s)", status=408, code="request_timeout") from None
        except ValueError:
            raise ApiError("the request body must be valid JSON") from None
        except RecursionError:  # the parser's own limit: answered as the bad input it is, not a server error
            raise ApiError("the request body is nested too deeply to read (JSON nested past Python's recursion "
                           "limit)") from None
        generation = parse(body, kind, self.limits)
        grammar = await self._grammar(generation)
        request_id = f"{'cmpl' if kind == 'completion' else 'chatcmpl'}-{uuid.uuid4().hex}"
        try:
            stream = self.async_engine.generate(
                request_id, generation.prompt_token_ids, generation.params, generation.adapter, grammar
            )
        except EngineDeadError as exc:
            raise ApiError(str(exc), status=503, code="engine_dead") from None
        except QueueFullError as exc:
            raise ApiError(f"the server is overloaded: {exc}", status=503, code="queue_full") from None
        async with contextlib.aclosing(stream):  # leaving early (disconnect, error) aborts the request
            if generation.is_stream:
                stream.on_cut = lambda: drop_connection(request)
                return await self._stream(request, generation, request_id, stream)
            return await self._complete(generation, request_id, stream)

    async def _grammar(self, generation: GenerationRequest) -> GrammarState | None:
        """The request's grammar, compiled off the step thread (once per distinct schema), or None."""
        constraint = generation.structure.constraint
        if constraint is None:
            return None
        grammars = self.async_engine.engine.grammars
        param = "tools" if generation.structure.tool_call is not None else "response_format"
        if grammars is None:
            raise ApiError(f"{param}: this model has no tokenizer to build a grammar from", param=param)
        try:
            return await asyncio.to_thread(grammars.new_state, constraint)
        except GrammarError as exc:
            raise ApiError(f"{param}: {exc}", param=param) from None

    async def _complete(self, generation: GenerationRequest, request_id: str, outputs: RequestStream) -> web.Response:
        texts: list[str] = []
        last: RequestOutput | None = None
        try:
            async for last in outputs:
                texts.append(last.new_text)
        except EngineDeadError as exc:
            raise ApiError(str(exc), status=503, code="engine_dead") from None
        assert last is not None and last.finished
        kind, plan = generation.kind, generation.structure.tool_call
        answer = choice(kind, "".join(texts), last.finish_reason, False, role="assistant")
        if plan is not None:
            calls = ToolCallStream(plan)
            calls.feed("".join(texts), finished=True)
            answer = tool_call_choice(calls.whole(), last.finish_reason)
        body = envelope(kind, request_id, int(time.time()), generation.adapter or self.model_name, False, [answer])
        body["usage"] = usage(last)
        return web.json_response(body)

    async def _stream(
        self, request: web.Request, generation: GenerationRequest, request_id: str, outputs: RequestStream
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        kind, created = generation.kind, int(time.time())

        async def send(data: bytes) -> None:
            try:
                async with asyncio.timeout(self.options.send_timeout_s):
                    await response.write(data)
            except TimeoutError:
                logger.warning("request %s cut: its client read nothing for %g s (--send-timeout-s)", request_id,
                               self.options.send_timeout_s)  # fmt: skip
                drop_connection(request)
                raise SlowConsumerError("the client stopped reading") from None

        def chunk(choices: list, usage_stats: dict | None) -> bytes:
            payload = envelope(kind, request_id, created, generation.adapter or self.model_name, True, choices)
            if usage_stats is not None:
                payload["usage"] = usage_stats
            return _sse(payload)

        is_continuous = generation.continuous_usage_stats
        # No chunk before the first generated token (a client timing the first chunk reads the true TTFT);
        # a chat stream's role rides with that token, as vLLM's server sends it.
        role: str | None = "assistant" if kind == "chat" else None
        last: RequestOutput | None = None
        calls = ToolCallStream(generation.structure.tool_call) if generation.structure.tool_call else None
        try:
            try:
                async for last in outputs:
                    if calls is None:
                        choices = [choice(kind, last.new_text, last.finish_reason, True, role)]
                    else:  # a tool call's text goes out as tool_calls deltas (none while its name is incomplete)
                        deltas = calls.feed(last.new_text, last.finished)
                        if not deltas and not last.finished:
                            continue
                        choices = [tool_call_delta(deltas, last.finish_reason, role)]
                    role = None
                    await send(chunk(choices, usage(last) if is_continuous else None))
            except EngineDeadError as exc:
                await send(_sse(ApiError(str(exc), status=503, code="engine_dead").body()))
            if generation.include_usage and last is not None and last.finished:
                await send(chunk([], usage(last)))
            await send(b"data: [DONE]\n\n")
            await response.write_eof()
        except (SlowConsumerError, ConnectionError):  # cut, or gone: aiohttp ends it as a client gone away, quietly
            pass
        return response


def _is_key(request: web.Request, key: str) -> bool:
    """Whether the request's Authorization header carries `key`, compared in constant time (no timing tells
    how much of a guess was right)."""
    sent = request.headers.get("Authorization", "").encode("utf-8", "surrogatepass")  # any str encodes
    return hmac.compare_digest(sent, f"Bearer {key}".encode("utf-8", "surrogatepass"))


# ---- running it -------------------------------------------------------------------------------------


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def serve(options: ServerOptions) -> int | None:
    """Load the model, serve until SIGINT, SIGTERM or SIGHUP, then stop the step loop and close every
    connection. Returns the number of the signal that stopped it.

    The step loop runs on this thread, the one that loaded the model, and HTTP on a second one. Why: PyTorch's
    OpenMP pool belongs to the thread that ran the first parallel op; stepping on another thread adds a second
    pool, and with more OpenMP threads than cores libgomp stops spin-waiting between parallel regions. On a
    2-core CPU that made every decode step about 2x slower (SmolLM2-135M, batch 1: 29 -> 55 ms).
    """
    server = Server(options)
    learned = server.engine.warm_up()  # on this thread, the one that steps
    loop = asyncio.new_event_loop()
    http_thread = threading.Thread(target=loop.run_forever, name="reference-server-loop", daemon=True)
    http_thread.start()
    received: list[int] = []

    def stop(signum: int, frame: object) -> None:
        received.append(signum)
        server.async_engine.request_stop()

    for sig in STOP_SIGNALS:
        signal.signal(sig, stop)
    try:
        server.async_engine.attach_current_thread(loop)
        base_url = asyncio.run_coroutine_threadsafe(server.start(start_step_thread=False), loop).result()
        print(f"reference engine ready on {base_url}", flush=True)
        print(step_cost_line(learned, server.engine.config), flush=True)
        for choice in server.engine.loaded.kernels:
            print(f"weights: {choice.line()}", flush=True)
        if server.engine.config.speculative is not None:
            print(f"speculative decoding: {server.engine.config.speculative.describe()}", flush=True)
        server.async_engine.run()
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(timeout=60)
        loop.call_soon_threadsafe(loop.stop)
        http_thread.join(10)
        loop.close()
    return received[0] if received else None


def step_cost_line(cost: StepCost | None, config: EngineConfig) -> str:
    """What a step costs on this machine, as the warm-up measured it, and how steps are sized from it."""
    measured = ("step cost not measured" if cost is None else
                f"step cost here: {cost.fixed_ms:.1f} ms a step + {cost.decode_row_ms:.2f} ms a decode row + "
                f"{cost.prefill_token_ms:.3f} ms a prompt token")
    if config.max_step_ms is None:
        return f"{measured}; steps sized by tokens alone (--max-num-batched-tokens {config.max_num_batched_tokens})"
    ratio = "" if config.max_step_ratio is None else (
        f" and {config.max_step_ratio:g}x what their decodes alone take (--max-step-ratio)")
    return (f"{measured}; steps with decodes kept within {config.max_step_ms:g} ms (--max-step-ms){ratio}, or "
            f"where decodes alone take longer, {config.min_prefill_share:.0%} of a step left to prompts "
            f"(--min-prefill-share){_wave(config)}; learned as it runs")


def _wave(config: EngineConfig) -> str:
    if config.wave_share is None:
        return ""
    return (f"; while more than {config.wave_share:.0%} of the users wait for their prompt, steps sized by tokens "
            f"(--wave-share)")


@contextlib.contextmanager
def running_server(options: ServerOptions, engine: LLMEngine | None = None) -> Iterator[Server]:
    """A server on its own event-loop thread (for tests and embedding); stopped on exit."""
    server = Server(options, engine)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="reference-server-loop", daemon=True)
    thread.start()
    try:
        asyncio.run_coroutine_threadsafe(server.start(), loop).result(timeout=60)
        yield server
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(timeout=60)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def main(argv: list[str] | None = None) -> int:
    try:
        options = parse_args(argv)
        serve(options)
    except (ValueError, OSError) as exc:  # a bad flag (config, model path, port in use): one line, no traceback
        print(f"error: {exc}", flush=True)
        return 2
    return 0

