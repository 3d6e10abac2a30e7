"""An OpenAI-compatible endpoint that is already running (a provider, or a server someone started).

Nothing is launched, so nothing is stopped; the launcher only checks that the URL answers, that the key
(if any) is accepted and that the model is listed, so a bad flag fails in a second with a clear message
instead of as a thousand failed requests.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from engines.types import Endpoint, EngineInfo


class EndpointError(Exception):
    """A problem with the endpoint the user pointed us at; the message says what to change."""


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


def list_models(endpoint: Endpoint, timeout_s: float = 10.0) -> tuple[list[str], httpx.Headers]:
    url = endpoint.base_url.rstrip("/") + "/models"
    try:
        response = _get_models(endpoint, timeout_s)
    except httpx.HTTPError as exc:
        raise EndpointError(f"cannot reach --base-url {endpoint.base_url}: {exc or type(exc).__name__}") from None
    if response.status_code in (401, 403):
        raise EndpointError(f"{url} refused the API key (HTTP {response.status_code}); check --api-key-env")
    if response.status_code != 200:
        raise EndpointError(f"{url} answered HTTP {response.status_code}; is --base-url an OpenAI-compatible /v1?")
    try:
        models = [str(item["id"]) for item in response.json()["data"]]
    except (ValueError, KeyError, TypeError):
        raise EndpointError(f"{url} did not return an OpenAI model list") from None
    return models, response.headers


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
