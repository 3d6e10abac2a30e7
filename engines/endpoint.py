"""An OpenAI-compatible endpoint that is already running (a provider, or a server someone started).

Nothing is launched, so nothing is stopped; the launcher only checks that the URL answers, that the key
(if any) is accepted and that the model is listed, so a bad flag fails in a second with a clear message
instead of as a thousand failed requests.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from engines.types import Endpoint, EngineInfo


class EndpointError(Exception):
    """A problem with the endpoint the user pointed us at; the message says what to change."""


MODELS_TIMEOUT_S = 10.0  # for the whole answer, not each read: a server that sends a byte a second is cut
MAX_MODELS_BYTES = 4 << 20  # a model list is kilobytes; a server sending more is not sending one
MAX_NAMES_SHOWN = 20


def read_api_key(api_key_env: str | None) -> str | None:
    if api_key_env is None:
        return None
    value = os.environ.get(api_key_env)
    if not value:
        raise EndpointError(f"--api-key-env names {api_key_env}, but that environment variable is not set")
    return value


def _get_models(endpoint: Endpoint, timeout_s: float = 10.0) -> httpx.Response:
    """GET <base_url>/models with the endpoint's key; raises httpx.HTTPError."""
    key = read_api_key(endpoint.api_key_env)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.get(endpoint.base_url.rstrip("/") + "/models", headers=headers, timeout=timeout_s)


def _read_models(endpoint: Endpoint, timeout_s: float) -> tuple[int, bytes, httpx.Headers]:
    """GET <base_url>/models with the endpoint's key: status, body and headers, within `timeout_s` in all and
    MAX_MODELS_BYTES; raises httpx.HTTPError, or EndpointError for an answer past either bound."""
    url = endpoint.base_url.rstrip("/") + "/models"
    key = read_api_key(endpoint.api_key_env)
    deadline = time.monotonic() + timeout_s
    with httpx.stream("GET", url, headers={"Authorization": f"Bearer {key}"} if key else {},
                      timeout=timeout_s) as response:
        body = bytearray()
        for chunk in response.iter_bytes():
            body += chunk
            if len(body) > MAX_MODELS_BYTES:
                raise EndpointError(f"{url} sent more than {MAX_MODELS_BYTES >> 20} MiB: not a model list")
            if time.monotonic() > deadline:
                raise EndpointError(f"{url} took more than {timeout_s:g} s to send its model list")
        return response.status_code, bytes(body), response.headers


def list_models(endpoint: Endpoint, timeout_s: float = MODELS_TIMEOUT_S) -> tuple[list[str], httpx.Headers]:
    url = endpoint.base_url.rstrip("/") + "/models"
    try:
        status, body, headers = _read_models(endpoint, timeout_s)
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        raise EndpointError(f"cannot reach --base-url {endpoint.base_url}: {exc or type(exc).__name__}") from None
    if status in (401, 403):
        raise EndpointError(f"{url} refused the API key (HTTP {status}); check --api-key-env")
    if status != 200:
        raise EndpointError(f"{url} answered HTTP {status}; is --base-url an OpenAI-compatible /v1?")
    try:  # the answer is the server's: anything but {"data": [{"id": "name"}, ...]} is refused, not guessed at
        models = [item["id"] for item in json.loads(body)["data"]]
    except (ValueError, KeyError, TypeError, RecursionError):
        models = None
    if models is None or not all(isinstance(model, str) and model for model in models):
        raise EndpointError(f"{url} did not return an OpenAI model list ({{\"data\": [{{\"id\": NAME}}, ...]}})")
    return models, headers


def served_model(endpoint: Endpoint) -> str:
    """The one model the endpoint lists, for an endpoint given no --model (as vLLM's and guidellm's clients
    take it); an error naming --model and --base-url when it lists none or several, or can't be asked."""
    read_api_key(endpoint.api_key_env)  # a key named but not set is said as it is, not as a question for --model
    try:
        models, _ = list_models(endpoint)
    except EndpointError as exc:
        raise EndpointError(f"--engine endpoint without --model: could not ask --base-url {endpoint.base_url} which "
                            f"model it serves ({exc}); give --model") from None
    if len(models) == 1:
        return models[0]
    if not models:
        raise EndpointError(f"--engine endpoint without --model: --base-url {endpoint.base_url} lists no model at "
                            "/models; give --model")
    # repr: a name is the server's text, shown quoted on one line, its control characters escaped
    shown = ", ".join(repr(model[:200]) for model in models[:MAX_NAMES_SHOWN])
    more = f" and {len(models) - MAX_NAMES_SHOWN} more" if len(models) > MAX_NAMES_SHOWN else ""
    raise EndpointError(f"--engine endpoint without --model: --base-url {endpoint.base_url} serves "
                        f"{len(models)} models; choose one with --model: {shown}{more}")


CONTEXT_FIELDS = ("max_model_len", "context_length", "context_window")  # vLLM and ours, OpenRouter, others


def context_length(endpoint: Endpoint) -> int | None:
    """The model's context in tokens, as its /models entry states it (vLLM, SGLang, llama.cpp, ours and
    some providers do); None when it does not say or can't be read."""
    try:
        cards = _get_models(endpoint).json()["data"]
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        return None
    card = next((c for c in cards if isinstance(c, dict) and c.get("id") == endpoint.model), None)
    if card is None:
        return None
    meta = card.get("meta")
    meta = meta if isinstance(meta, dict) else {}
    for value in (*(card.get(name) for name in CONTEXT_FIELDS), meta.get("n_ctx"), meta.get("n_ctx_train")):
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


@contextmanager
def use_endpoint(endpoint: Endpoint, replica_metrics: list[str] | None = None
                 ) -> Iterator[tuple[Endpoint, EngineInfo]]:
    """The endpoint, checked; behind a gateway, `replica_metrics` are its pods' /metrics URLs, recorded so
    the sweep samples each one as it does replicas it launched."""
    models, headers = list_models(endpoint)
    if endpoint.model not in models:
        served = ", ".join(models[:10]) or "none"
        raise EndpointError(f"--model '{endpoint.model}' is not served at {endpoint.base_url}; it serves: {served}")
    info = EngineInfo(
        name="endpoint",
        model=endpoint.model,
        details={"base_url": endpoint.base_url, "server": headers.get("server"), "models": models[:50],
                 "api_key_env": endpoint.api_key_env,
                 **({"replicas": [{"metrics_url": url} for url in replica_metrics]} if replica_metrics else {})},
    )
    yield endpoint, info
