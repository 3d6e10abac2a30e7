"""The OpenAI-compatible server on dummy:tiny, over real HTTP on 127.0.0.1: the official client, errors,
disconnects that free their blocks, prefix caching, preemption under a tiny cache, /metrics and SIGTERM.

dummy:tiny's text comes from the byte-level stand-in tokenizer, so it is gibberish; these tests check
the protocol and the bookkeeping, test_server_smollm2.py checks real text.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import aiohttp
import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from engines.reference.loading.weights import LoadedModel, resolve_model
from engines.reference.serving.options import ServerOptions
from engines.reference.serving.server import Server, build_engine, running_server

NUM_STRESS_REQUESTS = int(os.environ.get("REFERENCE_STRESS_REQUESTS", "1000"))
MAX_MODEL_LEN = 512
METRIC_NAMES = (
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total",
    "vllm:time_to_first_token_seconds_bucket",
    "vllm:inter_token_latency_seconds_bucket",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:num_preemptions_total",
)


@pytest.fixture(scope="module")
def tiny() -> LoadedModel:
    return resolve_model("dummy:tiny")


@contextmanager
def tiny_server(tiny: LoadedModel, **fields: object) -> Iterator[Server]:
    options = ServerOptions(
        **{"model": "dummy:tiny", "port": 0, "kv_cache_tokens": 4096, "max_model_len": MAX_MODEL_LEN, **fields}
    )
    with running_server(options, build_engine(options, tiny)) as server:
        yield server


@pytest.fixture(scope="module")
def server(tiny: LoadedModel) -> Iterator[Server]:
    with tiny_server(tiny) as server:
        yield server


@pytest.fixture()
def client(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=30)


def wait_until_idle(server: Server, timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while server.engine.num_unfinished or server.async_engine.num_waiting:
        assert time.monotonic() < deadline, f"{server.engine.num_unfinished} requests still unfinished"
        time.sleep(0.02)
    time.sleep(0.05)  # let the step thread return to idle


def assert_no_blocks_held(server: Server) -> None:
    wait_until_idle(server)
    manager = server.engine.scheduler.block_manager
    manager.check_integrity()
    assert manager.num_free_blocks == manager.num_blocks
    assert manager.kv_cache_usage_perc == 0


def metric_samples(server: Server) -> dict[str, float]:
    text = httpx.get(server.base_url.removesuffix("/v1") + "/metrics").text
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()) if k != "model_name")
            samples[sample.name + (f"{{{labels}}}" if labels else "")] = sample.value
    return samples


# ---- the official client -------------------------------------------------------------------------------


def test_models_lists_the_served_model(client: openai.OpenAI) -> None:
    assert [model.id for model in client.models.list()] == ["dummy:tiny"]


def test_completion_non_streaming_has_text_usage_and_cached_tokens(client: openai.OpenAI) -> None:
    response = client.completions.create(
        model="dummy:tiny", prompt="Hello there", max_tokens=7, temperature=0, extra_body={"ignore_eos": True}
    )
    assert response.object == "text_completion" and response.choices[0].finish_reason == "length"
    assert isinstance(response.choices[0].text, str)
    assert response.usage.prompt_tokens == len("Hello there") and response.usage.completion_tokens == 7
    assert response.usage.total_tokens == response.usage.prompt_tokens + 7
    assert response.usage.prompt_tokens_details.cached_tokens == 0


def test_completion_streaming_matches_non_streaming(client: openai.OpenAI) -> None:
    kwargs = {"model": "dummy:tiny", "prompt": [5, 6, 7, 8], "max_tokens": 12, "temperature": 0}
    kwargs["extra_body"] = {"ignore_eos": True}
    whole = client.completions.create(**kwargs)
    chunks = list(
        client.completions.create(
            stream=True, stream_options={"include_usage": True, "continuous_usage_stats": True}, **kwargs
        )
    )
    content = [c for c in chunks if c.choices]
    assert len(content) == 12  # one chunk per token
    assert "".join(c.choices[0].text for c in content) == whole.choices[0].text
    assert [c.usage.completion_tokens for c in content] == list(range(1, 13))  # continuous usage stats
    assert content[-1].choices[0].finish_reason == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 12
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens == 0


def test_chat_non_streaming_and_streaming_agree(client: openai.OpenAI) -> None:
    messages = [{"role": "user", "content": "Say something."}]
    kwargs = {"model": "dummy:tiny", "messages": messages, "max_tokens": 10, "temperature": 0}
    kwargs["extra_body"] = {"ignore_eos": True}
    whole = client.chat.completions.create(**kwargs)
    assert whole.object == "chat.completion" and whole.choices[0].message.role == "assistant"
    assert whole.usage.completion_tokens == 10 and whole.choices[0].finish_reason == "length"
    options = {"include_usage": True, "continuous_usage_stats": True}
    chunks = list(client.chat.completions.create(stream=True, stream_options=options, **kwargs))  # type: ignore[arg-type]
    assert chunks[0].choices[0].delta.role == "assistant" and chunks[0].usage.completion_tokens == 1
    assert chunks[0].choices[0].delta.content  # the role comes with the first token, not before it
    assert [c.usage.completion_tokens for c in chunks[:-1]] == list(range(1, 11))
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].usage.completion_tokens == 10
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens > 0  # the same prompt ran just before


def test_a_shared_system_prompt_is_served_from_the_prefix_cache(client: openai.OpenAI) -> None:
    system = {"role": "system", "content": "You are a terse assistant. " * 8}
    cached = []
    for question in ("First question?", "Another one, longer?"):
        response = client.chat.completions.create(
            model="dummy:tiny", messages=[system, {"role": "user", "content": question}], max_tokens=2
        )
        cached.append(response.usage.prompt_tokens_details.cached_tokens)
    assert cached[0] == 0 and cached[1] >= 16 * (len(system["content"]) // 16) - 16


def test_stop_and_vllm_extra_fields_are_accepted(client: openai.OpenAI) -> None:
    response = client.completions.create(
        model="dummy:tiny",
        prompt=[1, 2, 3],
        max_tokens=20,
        temperature=0.7,
        top_p=0.9,
        seed=3,
        stop=["\n"],
        extra_body={"top_k": 20, "min_tokens": 2, "stop_token_ids": [7], "ignore_eos": False, "unknown_field": 1},
    )
    assert response.usage.completion_tokens >= 2 and "\n" not in response.choices[0].text


# ---- errors ---------------------------------------------------------------------------------------------

COMPLETIONS, CHAT = "/completions", "/chat/completions"
PROMPT = {"prompt": "hi"}
BAD_REQUESTS = [
    (COMPLETIONS, {**PROMPT, "max_tokens": -1}, 400, "max_tokens"),
    (COMPLETIONS, {**PROMPT, "max_tokens": "ten"}, 400, "max_tokens"),
    (CHAT, {"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 0}, 400, "max_completion_tokens"),
    (COMPLETIONS, {**PROMPT, "temperature": -0.5}, 400, "temperature"),
    (COMPLETIONS, {**PROMPT, "temperature": "hot"}, 400, "temperature"),
    (COMPLETIONS, {**PROMPT, "top_p": 0}, 400, "top_p"),
    (COMPLETIONS, {**PROMPT, "top_k": -2}, 400, "top_k"),
    (COMPLETIONS, {**PROMPT, "seed": "x"}, 400, "seed"),
    (COMPLETIONS, {**PROMPT, "stop": 5}, 400, "stop"),
    (COMPLETIONS, {**PROMPT, "stop": [f"s{i}" for i in range(1000)]}, 400, "stop"),  # at most 16, said so
    (COMPLETIONS, {**PROMPT, "stop_token_ids": [-1]}, 400, "stop_token_ids"),
    (COMPLETIONS, {**PROMPT, "min_tokens": -1}, 400, "min_tokens"),
    (COMPLETIONS, {**PROMPT, "min_tokens": 20, "max_tokens": 5}, 400, "min_tokens"),
    (COMPLETIONS, {**PROMPT, "ignore_eos": "yes"}, 400, "ignore_eos"),
    (COMPLETIONS, {**PROMPT, "stream": "yes"}, 400, "stream"),
    (COMPLETIONS, {**PROMPT, "n": 2}, 400, "n"),
    (COMPLETIONS, {"max_tokens": 3}, 400, "prompt"),
    (COMPLETIONS, {"prompt": ""}, 400, "prompt"),
    (COMPLETIONS, {"prompt": [1, 100000]}, 400, "prompt"),
    (COMPLETIONS, {"prompt": "x" * MAX_MODEL_LEN}, 400, "prompt"),
    (COMPLETIONS, {"prompt": "x" * 100, "max_tokens": MAX_MODEL_LEN}, 400, "max_tokens"),
    (CHAT, {"messages": []}, 400, "messages"),
    (CHAT, {"messages": [{"content": "no role"}]}, 400, "messages[0]"),
    (CHAT, {"messages": [{"role": "user", "content": 5}]}, 400, "messages[0].content"),
    (COMPLETIONS, {**PROMPT, "model": "no-such-model"}, 404, "model"),
]


@pytest.mark.parametrize(("path", "body", "status", "param"), BAD_REQUESTS)
def test_bad_requests_get_openai_errors_naming_the_field(
    server: Server, path: str, body: dict, status: int, param: str
) -> None:
    response = httpx.post(server.base_url + path, json=body, timeout=30)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["param"] == param
    assert param.split("[")[0] in error["message"] or (param == "prompt" and "context length" in error["message"])


def test_malformed_bodies_and_unknown_routes_get_json_errors(server: Server) -> None:
    bad_json = httpx.post(server.base_url + COMPLETIONS, content=b"{not json", timeout=10)
    assert bad_json.status_code == 400 and "JSON" in bad_json.json()["error"]["message"]
    not_object = httpx.post(server.base_url + COMPLETIONS, json=[1, 2], timeout=10)
    assert not_object.status_code == 400 and "object" in not_object.json()["error"]["message"]
    unknown = httpx.get(server.base_url + "/nothing-here", timeout=10)
    assert unknown.status_code == 404 and "error" in unknown.json()
    deep = httpx.post(server.base_url + COMPLETIONS, content=b"[" * 100_000 + b"]" * 100_000, timeout=10)
    assert deep.status_code == 400 and "nested too deeply" in deep.json()["error"]["message"]


def test_unknown_fields_are_ignored(server: Server) -> None:
    response = httpx.post(server.base_url + COMPLETIONS, json={**PROMPT, "max_tokens": 2, "foo": {"bar": 1}})
    assert response.status_code == 200 and response.json()["usage"]["completion_tokens"] <= 2


def test_vllms_own_structure_fields_are_refused_by_name_not_ignored(server: Server) -> None:
    """A server that answers free text to a JSON request passes for a success in a latency table: vLLM's guided_*
    fields, which this engine does not read, are refused (response_format and tools are served:
    test_structured_outputs.py)."""
    chat = {"messages": [{"role": "user", "content": "Give me JSON"}], "max_tokens": 2}
    asked = {"guided_json": {"type": "object"}, "guided_regex": "[a-z]+", "guided_choice": ["yes", "no"],
             "guided_grammar": "root ::= \"a\"", "structured_outputs": {"json": {"type": "object"}}}
    for field, value in asked.items():
        response = httpx.post(server.base_url + CHAT, json={**chat, field: value}, timeout=30)
        assert response.status_code == 400, (field, response.text)
        error = response.json()["error"]
        assert error["param"] == field and f"{field}=" in error["message"] and "not supported" in error["message"]
    response = httpx.post(server.base_url + CHAT, json={**chat, "response_format": {"type": "text"}, "tools": [],
                                                          "tool_choice": "none"}, timeout=30)
    assert response.status_code == 200 and response.json()["usage"]["completion_tokens"] <= 2


def test_request_stop_takes_no_lock_so_a_signal_handler_can_call_it(tiny: LoadedModel) -> None:
    """SIGTERM's handler runs on the step thread, maybe while that thread holds its wake-up event's lock inside
    Event.wait: a stop that took the lock would wait for itself forever (it did: the server hung on SIGTERM)."""
    with tiny_server(tiny) as server:
        engine = server.async_engine
        with engine._wakeup._cond:  # the lock a handler may find held
            engine.request_stop()  # returns at once
        engine.stop(timeout_s=10)
        assert not engine.is_alive


def test_api_key_is_required_on_v1_routes_only(tiny: LoadedModel) -> None:
    with tiny_server(tiny, api_key="sekret") as server:
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=server.base_url, api_key="wrong", max_retries=0).models.list()
        assert httpx.post(server.base_url + COMPLETIONS, json=PROMPT).status_code == 401
        good = openai.OpenAI(base_url=server.base_url, api_key="sekret", max_retries=0)
        assert good.completions.create(model="dummy:tiny", prompt="a", max_tokens=1).usage.completion_tokens == 1
        assert httpx.get(server.base_url.removesuffix("/v1") + "/health").status_code == 200


def test_a_full_waiting_queue_answers_503(tiny: LoadedModel) -> None:
    """batching=none runs one request; one more may wait; the third is refused until room frees."""

    async def scenario(server: Server) -> None:
        url = server.base_url + COMPLETIONS
        long = {"prompt": [1, 2], "max_tokens": 400, "ignore_eos": True, "stream": True}
        async with aiohttp.ClientSession() as session:
            running = await session.post(url, json=long)
            await running.content.readline()  # its first chunk: it is running
            waiting = asyncio.create_task(session.post(url, json={"prompt": [3], "max_tokens": 1}))
            while server.async_engine.num_waiting < 1:
                await asyncio.sleep(0.01)
            refused = await session.post(url, json={"prompt": [4], "max_tokens": 1})
            assert refused.status == 503
            assert "overloaded" in (await refused.json())["error"]["message"]
            running.close()  # the client goes away: the waiting request runs
            assert (await (await waiting).json())["usage"]["completion_tokens"] == 1

    with tiny_server(tiny, batching="none", max_num_waiting=1) as server:
        asyncio.run(scenario(server))
        assert_no_blocks_held(server)


# ---- disconnects, the prefix cache and preemption ------------------------------------------------------


async def _request(session: aiohttp.ClientSession, url: str, index: int, is_abort: bool) -> str:
    prompt = [index % 500, *range(1, 1 + index % 40)]
    if is_abort and index % 2:  # a non-streaming client that gives up
        body = {"prompt": prompt, "max_tokens": 400, "ignore_eos": True}

        async def fetch() -> bytes:
            async with session.post(url, json=body) as response:
                return await response.read()

        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(fetch(), 0.05)
        return "aborted"
    body = {"prompt": prompt, "max_tokens": 400 if is_abort else 6, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}  # fmt: skip
    async with session.post(url, json=body) as response:
        assert response.status == 200
        num_chunks = 0
        async for line in response.content:
            if line.startswith(b"data: {"):
                num_chunks += 1
            if is_abort and num_chunks == 2:
                response.close()  # disconnect mid-stream
                return "aborted"
            if line.startswith(b"data: [DONE]"):
                assert num_chunks == 7  # 6 tokens + usage
                return "done"
    raise AssertionError("stream ended without [DONE]")


async def _stress(url: str, num_requests: int, concurrency: int = 32) -> list[str]:
    limit = asyncio.Semaphore(concurrency)

    async def one(session: aiohttp.ClientSession, index: int) -> str:
        async with limit:
            return await _request(session, url, index, is_abort=index % 3 == 0)

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as session:
        return list(await asyncio.gather(*(one(session, i) for i in range(num_requests))))


def test_no_block_leaks_when_a_third_of_many_clients_disconnect(server: Server) -> None:
    aborts, lengths, added = (
        "vllm:request_success_total{finished_reason=abort}",
        "vllm:request_success_total{finished_reason=length}",
        "reference:requests_added_total",
    )
    before = metric_samples(server)
    outcomes = asyncio.run(_stress(server.base_url + COMPLETIONS, NUM_STRESS_REQUESTS))
    num_aborted = sum(1 for i in range(NUM_STRESS_REQUESTS) if i % 3 == 0)
    num_stream_aborted = sum(1 for i in range(NUM_STRESS_REQUESTS) if i % 6 == 0)
    assert outcomes.count("aborted") == num_aborted and outcomes.count("done") == NUM_STRESS_REQUESTS - num_aborted
    assert_no_blocks_held(server)
    samples = metric_samples(server)
    # A streaming client saw tokens, so the engine held its request; a non-streaming one that gives up
    # after 50 ms may leave before its request reaches the engine on a busy machine (vLLM counts those nowhere).
    # Every request the engine did accept ends as exactly one finished or aborted request: none is lost.
    num_counted_aborts = samples[aborts] - before.get(aborts, 0)
    assert num_stream_aborted <= num_counted_aborts <= num_aborted
    assert samples[lengths] - before.get(lengths, 0) == NUM_STRESS_REQUESTS - num_aborted
    assert samples[added] - before.get(added, 0) == num_counted_aborts + NUM_STRESS_REQUESTS - num_aborted
    assert samples["vllm:num_requests_running"] == samples["vllm:num_requests_waiting"] == 0
    assert samples["vllm:kv_cache_usage_perc"] == 0


def test_a_tiny_kv_cache_under_pressure_still_answers_correctly(tiny: LoadedModel) -> None:
    """12 blocks for 16 concurrent requests: preemptions happen and every answer equals the one alone."""
    prompts = [[i, *range(10, 10 + 3 * i)] for i in range(16)]
    with tiny_server(tiny, kv_cache_tokens=192, max_model_len=192) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0)

        def complete(prompt: list[int]) -> str:
            response = client.completions.create(
                model="dummy:tiny", prompt=prompt, max_tokens=24, temperature=0, extra_body={"ignore_eos": True}
            )
            return response.choices[0].text

        alone = [complete(prompt) for prompt in prompts]

        async def concurrently() -> list[str]:
            return list(await asyncio.gather(*(asyncio.to_thread(complete, p) for p in prompts)))

        assert asyncio.run(concurrently()) == alone
        assert metric_samples(server)["vllm:num_preemptions_total"] > 0
        assert_no_blocks_held(server)


# ---- /metrics, /health and the process -----------------------------------------------------------------


def test_metrics_expose_vllm_names(server: Server, client: openai.OpenAI) -> None:
    client.completions.create(model="dummy:tiny", prompt="metrics please", max_tokens=3,
                              extra_body={"ignore_eos": True})
    samples = metric_samples(server)
    for name in METRIC_NAMES:
        assert any(key.split("{")[0] == name for key in samples), name
    assert samples["vllm:prompt_tokens_total"] > 0 and samples["vllm:generation_tokens_total"] >= 3
    assert samples["vllm:time_to_first_token_seconds_count"] >= 1
    assert httpx.get(server.base_url.removesuffix("/v1") + "/health").status_code == 200


def test_metrics_show_each_step_its_tokens_and_the_learned_step_cost(server: Server, client: openai.OpenAI) -> None:
    before = metric_samples(server)
    # sampled at temperature 1, the random model may end early; the count below needs all four tokens
    client.completions.create(model="dummy:tiny", prompt="steps please", max_tokens=4, extra_body={"ignore_eos": True})
    samples = metric_samples(server)

    def grew(name: str) -> float:
        return samples[name] - before.get(name, 0.0)

    steps = grew("reference:step_duration_seconds_count")
    assert steps >= 4  # the prompt (with the first token), then one decode a token
    assert grew("vllm:iteration_tokens_total_count") == steps == grew("reference:step_decode_tokens_count")
    assert grew("reference:step_prefill_tokens_sum") >= len("steps please")  # byte tokens: one a character
    assert grew("reference:step_decode_tokens_sum") >= 3
    assert grew("vllm:iteration_tokens_total_sum") == (grew("reference:step_prefill_tokens_sum")
                                                        + grew("reference:step_decode_tokens_sum"))
    assert grew("reference:step_duration_seconds_sum") > 0
    costs = [v for key, v in samples.items() if key.startswith("reference:step_cost_milliseconds")]
    assert len(costs) == 3 and all(v >= 0 for v in costs)


def test_the_server_process_starts_answers_and_stops_on_sigterm() -> None:
    command = [sys.executable, "-m", "engines.reference", "--model", "dummy:tiny", "--port", "0",
               "--kv-cache-tokens", "2048", "--device", "cpu"]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = process.stdout.readline()
        assert line.startswith("reference engine ready on http://127.0.0.1:"), line
        base_url = line.split()[-1]
        assert httpx.get(base_url + "/models", timeout=10).json()["data"][0]["id"] == "dummy:tiny"
        with httpx.stream("POST", base_url + COMPLETIONS, json={"prompt": [1], "max_tokens": 2000,
                          "ignore_eos": True, "stream": True}, timeout=10) as stream:  # fmt: skip
            next(stream.iter_lines())  # a request is in flight when the signal comes
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=20) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_a_stopped_step_loop_ends_open_streams_and_answers_503(tiny: LoadedModel) -> None:
    """After the step thread stops, an open stream ends with an error event and [DONE]; /health and new
    requests answer 503."""
    with tiny_server(tiny) as server:
        body = {"prompt": [1], "max_tokens": 400, "ignore_eos": True, "stream": True}
        with httpx.stream("POST", server.base_url + COMPLETIONS, json=body, timeout=10) as stream:
            lines = stream.iter_lines()
            assert next(lines).startswith("data: {")
            server.async_engine.stop()
            rest = [line for line in lines if line]
        assert '"error"' in rest[-2] and rest[-1] == "data: [DONE]"
        assert httpx.get(server.base_url.removesuffix("/v1") + "/health").status_code == 503
        refused = httpx.post(server.base_url + COMPLETIONS, json=PROMPT)
        assert refused.status_code == 503 and refused.json()["error"]["code"] == "engine_dead"
