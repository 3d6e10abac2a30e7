"""OpenAI-compatible request parsing and response bodies, for /v1/completions and /v1/chat/completions.

Contract: `parse_generation_request(body, kind, limits)` turns a decoded JSON body into a
`GenerationRequest` (token ids + SamplingParams + streaming options) or raises `ApiError` whose message
names the bad field and what would be accepted. Unknown fields are ignored, as vLLM does; vLLM's extra
sampling fields (`ignore_eos`, `min_tokens`, `top_k`, `seed`, `stop_token_ids`) are accepted; structured outputs
and tools are read by serving/structured.py. Features this engine lacks (n > 1, logprobs, penalties, vLLM's
guided_* fields, tool_choice auto) are refused rather than silently ignored. The response helpers build plain
dicts. Nothing here does I/O or touches the engine.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from engines.reference.core.engine import RequestOutput
from engines.reference.core.sampling import SamplingParams
from engines.reference.loading.tokenizer import Tokenizer
from engines.reference.serving.structured import Structure, StructureRequestError, read_structure

Kind = Literal["completion", "chat"]
_MISSING = object()
# field -> values that mean "off"; anything else asks for something this engine does not do
_UNSUPPORTED: dict[str, tuple[Any, ...]] = {
    "n": (None, 1),
    "best_of": (None, 1),
    "logprobs": (None, False),
    "top_logprobs": (None, 0),
    "echo": (None, False),
    "presence_penalty": (None, 0, 0.0),
    "frequency_penalty": (None, 0, 0.0),
    "repetition_penalty": (None, 1, 1.0),
    # vLLM's own ways to ask for structure (response_format and tools are served): free text would pass for success
    "guided_json": (None,),
    "guided_regex": (None,),
    "guided_choice": (None,),
    "guided_grammar": (None,),
    "structured_outputs": (None,),
}


class ApiError(Exception):
    """An error answered as OpenAI-style JSON: {"error": {"message", "type", "param", "code"}}."""

    def __init__(
        self, message: str, param: str | None = None, status: int = 400, code: str | None = None, type_: str = ""
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.status = status
        self.code = code
        self.type = type_ or ("invalid_request_error" if status < 500 else "server_error")

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


ROLES = ("system", "user", "assistant", "developer", "tool")  # OpenAI's chat roles
BODY_BYTES_PER_TOKEN = 64  # far more than a token's text takes, in JSON and escaped
MIN_BODY_BYTES = 1024**2


@dataclass(frozen=True)
class Limits:
    """What the served model accepts."""

    model_name: str
    max_model_len: int
    vocab_size: int
    tokenizer: Tokenizer | None
    adapters: frozenset[str] = frozenset()  # LoRA adapters a request may name as its model
    # each stop string is matched against every generated token's text, on the one step thread
    max_stop_strings: int = 16
    max_stop_chars: int = 1024
    max_stop_token_ids: int = 256

    @property
    def max_body_bytes(self) -> int:
        """The largest request body taken: a body past it cannot fit the context, so it is refused unread."""
        return max(MIN_BODY_BYTES, BODY_BYTES_PER_TOKEN * self.max_model_len)

    def body_too_large(self, size: int | None) -> ApiError:
        told = f"{size:,} bytes, over" if size else "over"
        return ApiError(f"the request body is {told} the {self.max_body_bytes:,} bytes this server takes "
                        f"({BODY_BYTES_PER_TOKEN} for each of the model's {self.max_model_len:,} tokens of context, "
                        f"--max-model-len; {MIN_BODY_BYTES // 1024**2} MiB at least)", status=413,
                        code="request_too_large")  # fmt: skip


@dataclass(frozen=True)
class GenerationRequest:
    kind: Kind
    prompt_token_ids: list[int]
    params: SamplingParams
    is_stream: bool = False
    include_usage: bool = False
    continuous_usage_stats: bool = False
    adapter: str | None = None  # the LoRA adapter named as `model`; None: the base model
    structure: Structure = Structure()  # what the answer is held to (response_format, a tool call), if anything


# ---- field readers: each raises ApiError naming the field ------------------------------------------


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


MAX_TEMPERATURE = 100.0  # a bound, so a huge integer can't overflow float()


def _shown(value: Any, limit: int = 100) -> str:
    """A value as an error quotes it: its repr, cut (a hostile body is not echoed back whole)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def _read(body: dict, name: str, ok: Callable[[Any], bool], accepted: str, default: Any = None) -> Any:
    value = body.get(name, _MISSING)
    if value is _MISSING or value is None:
        return default
    if not ok(value):
        raise ApiError(f"{name} must be {accepted}, got {_shown(value)}", param=name)
    return value


def _read_stop(body: dict, limits: Limits) -> tuple[str, ...]:
    stop = body.get("stop")
    if stop is None:
        return ()
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
        raise ApiError(f"stop must be a string or a list of strings, got {_shown(stop)}", param="stop")
    if len(stop) > limits.max_stop_strings:
        raise ApiError(f"stop takes at most {limits.max_stop_strings} strings (this server's --max-stop-strings; "
                       f"OpenAI's API takes 4), got {len(stop)}", param="stop")
    longest = max(map(len, stop), default=0)
    if longest > limits.max_stop_chars:
        raise ApiError(f"each stop string may be at most {limits.max_stop_chars} characters long (this server's "
                       f"--max-stop-chars), got one of {longest:,}", param="stop")
    return tuple(s for s in stop if s)


def _read_sampling(body: dict, kind: Kind, limits: Limits) -> SamplingParams:
    for name, off_values in _UNSUPPORTED.items():
        if body.get(name) not in off_values:
            raise ApiError(f"{name}={_shown(body[name])} is not supported by the reference engine", param=name)
    is_positive_int = lambda v: _is_int(v) and v >= 1  # noqa: E731
    # OpenAI's defaults: 16 for completions, up to the context length for chat
    max_tokens = _read(body, "max_tokens", is_positive_int, "an integer >= 1", 16 if kind == "completion" else None)
    if kind == "chat":
        max_tokens = _read(body, "max_completion_tokens", is_positive_int, "an integer >= 1", max_tokens)
    top_k = _read(body, "top_k", lambda v: _is_int(v) and v >= -1, "an integer >= 1 (or -1 or 0: no top-k)")
    stop_ids = _read(
        body,
        "stop_token_ids",
        lambda v: isinstance(v, list) and all(_is_int(t) and 0 <= t < limits.vocab_size for t in v),
        f"a list of token ids in [0, {limits.vocab_size})",
        [],
    )
    if len(stop_ids) > limits.max_stop_token_ids:
        raise ApiError(f"stop_token_ids takes at most {limits.max_stop_token_ids} ids (this server's "
                       f"--max-stop-token-ids), got {len(stop_ids)}", param="stop_token_ids")
    min_tokens = _read(body, "min_tokens", lambda v: _is_int(v) and v >= 0, "an integer >= 0", 0)
    if max_tokens is not None and min_tokens > max_tokens:
        raise ApiError(f"min_tokens ({min_tokens}) must be <= max_tokens ({max_tokens})", param="min_tokens")
    return SamplingParams(
        temperature=float(_read(body, "temperature", lambda v: _is_number(v) and 0 <= v <= MAX_TEMPERATURE,
                                f"a number in [0, {MAX_TEMPERATURE:g}]", 1.0)),
        top_p=float(_read(body, "top_p", lambda v: _is_number(v) and 0 < v <= 1, "a number in (0, 1]", 1.0)),
        top_k=top_k if top_k and top_k > 0 else None,
        seed=_read(body, "seed", lambda v: _is_int(v) and 0 <= v < 2**63, "an integer in [0, 2**63)"),
        max_tokens=max_tokens,
        min_tokens=min_tokens,
        ignore_eos=_read(body, "ignore_eos", lambda v: isinstance(v, bool), "true or false", False),
        stop=_read_stop(body, limits),
        stop_token_ids=tuple(stop_ids),
    )


def _read_stream_options(body: dict) -> tuple[bool, bool, bool]:
    is_stream = _read(body, "stream", lambda v: isinstance(v, bool), "true or false", False)
    options = _read(body, "stream_options", lambda v: isinstance(v, dict), "an object", {})
    flags = []
    for name in ("include_usage", "continuous_usage_stats"):
        value = options.get(name)
        if value is not None and not isinstance(value, bool):
            raise ApiError(
                f"stream_options.{name} must be true or false, got {_shown(value)}", param=f"stream_options.{name}"
            )
        flags.append(bool(value))
    return is_stream, flags[0], flags[1]


# ---- prompts ---------------------------------------------------------------------------------------


def _need_tokenizer(limits: Limits, field: str) -> Tokenizer:
    if limits.tokenizer is None:
        raise ApiError(f"{field}: this model has no tokenizer; send the prompt as a list of token ids", param=field)
    return limits.tokenizer


def _completion_prompt(body: dict, limits: Limits) -> list[int]:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str) and prompt:
        return _need_tokenizer(limits, "prompt").encode(prompt)
    if isinstance(prompt, list) and prompt and all(_is_int(t) for t in prompt):
        bad = next((t for t in prompt if not 0 <= t < limits.vocab_size), None)
        if bad is not None:
            raise ApiError(f"prompt: token id {bad} is outside the vocabulary [0, {limits.vocab_size})", "prompt")
        return list(prompt)
    raise ApiError(
        "prompt must be a non-empty string or a non-empty list of token ids (one prompt per request)", param="prompt"
    )


def _message_text(message: Any, index: int) -> dict[str, Any]:
    field = f"messages[{index}]"
    if not isinstance(message, dict) or not isinstance(message.get("role"), str):
        raise ApiError(f"{field} must be an object with a string 'role'", param=field)
    if message["role"] not in ROLES:
        raise ApiError(f"{field}.role {_shown(message['role'])} is not a role of the chat API; use one of "
                       f"{', '.join(ROLES)}", param=f"{field}.role")
    content = message.get("content")
    if isinstance(content, list):  # [{"type": "text", "text": ...}, ...]
        if not all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in content):
            raise ApiError(f"{field}.content: only text parts are supported", param=f"{field}.content")
        content = "".join(part["text"] for part in content)
    if content is not None and not isinstance(content, str):
        raise ApiError(f"{field}.content must be a string or a list of text parts", param=f"{field}.content")
    return {**message, "content": content or ""}


def _chat_prompt(body: dict, limits: Limits, tools: tuple[dict[str, Any], ...] = ()) -> list[int]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError("messages must be a non-empty list of {role, content} objects", param="messages")
    tokenizer = _need_tokenizer(limits, "messages")
    add_generation_prompt = _read(body, "add_generation_prompt", lambda v: isinstance(v, bool), "true or false", True)
    try:
        text = tokenizer.apply_chat_template(
            [_message_text(m, i) for i, m in enumerate(messages)], add_generation_prompt,
            **({"tools": list(tools)} if tools else {}),
        )
    except ApiError:
        raise
    except Exception as exc:  # a template that raises on these messages (roles out of order, ...)
        raise ApiError(f"messages: the chat template failed: {exc}", param="messages") from None
    return tokenizer.encode(text, add_special_tokens=False)


def parse_generation_request(body: Any, kind: Kind, limits: Limits) -> GenerationRequest:
    """Validate a decoded JSON body; raises ApiError (400, or 404 for a model that is not served)."""
    if not isinstance(body, dict):
        raise ApiError("the request body must be a JSON object")
    model = body.get("model")
    if model is not None and not isinstance(model, str):  # an object is unhashable: it must not reach `in`
        raise ApiError(f"model must be a string (a served model's name), got {_shown(model)}", param="model")
    if model is not None and model != limits.model_name and model not in limits.adapters:
        raise ApiError(f"The model `{model[:200]}` does not exist.", param="model", status=404, code="model_not_found")
    adapter = model if model is not None and model in limits.adapters else None
    params = _read_sampling(body, kind, limits)
    is_stream, include_usage, continuous = _read_stream_options(body)
    structure = _read_structure(body, kind)
    prompt_field = "prompt" if kind == "completion" else "messages"
    prompt = _completion_prompt(body, limits) if kind == "completion" else \
        _chat_prompt(body, limits, structure.tools)
    num_total = len(prompt) + (params.max_tokens or 1)
    if len(prompt) >= limits.max_model_len or num_total > limits.max_model_len:
        raise ApiError(
            f"This model's maximum context length is {limits.max_model_len} tokens. However, you requested "
            f"{num_total} tokens ({len(prompt)} in the {prompt_field}, {params.max_tokens or 1} in the completion). "
            f"Please reduce the length of the {prompt_field} or max_tokens.",
            param="max_tokens" if len(prompt) < limits.max_model_len else prompt_field,
            code="context_length_exceeded",
        )
    return GenerationRequest(kind, prompt, params, is_stream, include_usage, continuous, adapter, structure)


def _read_structure(body: dict, kind: Kind) -> Structure:
    if kind == "completion" and body.get("tools") not in (None, []):
        raise ApiError("tools are a chat API field: send them to /v1/chat/completions", param="tools")
    try:
        return read_structure(body)
    except StructureRequestError as exc:
        raise ApiError(str(exc), param=exc.param) from None


# ---- responses -------------------------------------------------------------------------------------


def usage(output: RequestOutput) -> dict[str, Any]:
    return {
        "prompt_tokens": output.num_prompt_tokens,
        "completion_tokens": output.num_output_tokens,
        "total_tokens": output.num_prompt_tokens + output.num_output_tokens,
        "prompt_tokens_details": {"cached_tokens": output.num_cached_tokens},
    }


def choice(kind: Kind, text: str, finish_reason: str | None, is_chunk: bool, role: str | None = None) -> dict:
    if kind == "completion":
        return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
    if not is_chunk:  # OpenAI's schema requires `refusal` (null when there is none)
        return {"index": 0, "message": {"role": role, "content": text, "refusal": None}, "logprobs": None,
                "finish_reason": finish_reason}
    delta = {"role": role, "content": text} if role else {"content": text}
    if finish_reason is not None and not text and not role:
        delta = {}
    return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}


def envelope(kind: Kind, request_id: str, created: int, model: str, is_chunk: bool, choices: list) -> dict:
    obj = {"completion": "text_completion", "chat": "chat.completion.chunk" if is_chunk else "chat.completion"}
    return {"id": request_id, "object": obj[kind], "created": created, "model": model, "choices": choices}
