"""Secrets an engine is launched with reach it through its environment, never its command line.

A command line is readable by every user of the machine (`ps`, /proc/PID/cmdline) and lands in the engine's
own logs (vLLM prints its arguments), so a secret `--engine-arg` (`api-key`, `hf-token`) is taken out of the
flags and handed to the engine in the variable it reads (vLLM's VLLM_API_KEY, the reference engine's
REFERENCE_API_KEY, Hugging Face's HF_TOKEN). An engine that reads a secret only from its command line is
refused, naming the argument. A value written `${NAME}` is read from this process's environment at launch.

`EngineSecrets.api_key` is the key the server will want, so that bench's own checks and its client send it;
`key_variable` names the variable of this process that holds it while the engine runs (the `Endpoint`
carries names, never values).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from common.secrets import MissingVariable, expand_env, is_secret_name

# engine kind -> {secret argument: the environment variable the engine reads it from}
KEY_VARIABLES: dict[str, dict[str, str]] = {
    "reference": {"api-key": "REFERENCE_API_KEY"},
    "vllm": {"api-key": "VLLM_API_KEY"},
    "vllm-docker": {"api-key": "VLLM_API_KEY"},
}
ANY_ENGINE = {"hf-token": "HF_TOKEN"}  # read by every engine that downloads from the Hugging Face hub


class SecretArgError(ValueError):
    """A secret argument that can't be handed to the engine safely; the message names it and what to do."""


@dataclass(frozen=True)
class EngineSecrets:
    args: dict[str, str]  # the engine's arguments, its secrets taken out and `${NAME}` values read
    env: dict[str, str] = field(default_factory=dict)  # for the engine's environment only
    api_key: str | None = None  # the key its server will ask for


def take_secrets(kind: str, args: dict[str, str], env: dict[str, str] | None = None) -> EngineSecrets:
    """Split `args` into flags and the secrets that go to the engine's environment; `env` (an engine file's)
    has its `${NAME}` values read. Raises SecretArgError for a secret the engine can only take as a flag."""
    variables = {**ANY_ENGINE, **KEY_VARIABLES.get(kind, {})}
    try:
        flags = {key: expand_env(value, f"--engine-arg {key}") for key, value in args.items()}
        child_env = {name: expand_env(value, f"env {name}") for name, value in (env or {}).items()}
    except MissingVariable as exc:
        raise SecretArgError(str(exc)) from None
    for key in [key for key in flags if is_secret_name(key)]:
        variable = variables.get(key.replace("_", "-"))
        if variable is None:
            raise SecretArgError(
                f"--engine-arg {key}: {kind} takes it only on its command line, where every user of this machine "
                f"can read it (ps); bench never puts a secret there. Give it in the engine's environment instead "
                f"(an engine file's env:, e.g. {{NAME: '${{NAME}}'}}), if the engine reads one")
        child_env[variable] = flags.pop(key)
    key_variable = KEY_VARIABLES.get(kind, {}).get("api-key")
    api_key = child_env.get(key_variable) or os.environ.get(key_variable) if key_variable else None
    return EngineSecrets(flags, child_env, api_key or None)


@contextmanager
def key_in_environment(api_key: str | None) -> Iterator[str | None]:
    """The name of a variable of this process that holds `api_key` while the block runs (None without a
    key): what an `Endpoint` names, so that the client, its workers and bench's checks read the key."""
    if not api_key:
        yield None
        return
    name = f"BENCH_ENGINE_KEY_{secrets.token_hex(4).upper()}"
    os.environ[name] = api_key
    try:
        yield name
    finally:
        os.environ.pop(name, None)
