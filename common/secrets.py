"""Secrets kept out of everything the toolkit writes: run.json, engine details, reports, the history, logs.

    is_secret_name("HF_TOKEN") -> True          a name (flag, argument, variable) that holds a secret
    redact({"args": {"api-key": "K"}})          -> {"args": {"api-key": "***"}}
    redact_argv(["--api-key", "K", "--port", "8000"]) -> ["--api-key", "***", "--port", "8000"]
    env_reference("${HF_TOKEN}") -> "HF_TOKEN"  a value that names a variable instead of holding a secret

What makes a name secret is one of its words (split on `-`, `_`, `.` and case): key, token, password, secret,
credential(s), and their run-together forms (apikey, hftoken, ...). A value written as `${NAME}` is a
reference to an environment variable: it is kept as written (a name is no secret) and read at launch
time (`expand_env`). Nothing here knows what a run or an engine is.
"""

from __future__ import annotations

import os
import re
from typing import Any

REDACTED = "***"
SECRET_WORDS = ("key", "password", "passwd", "secret", "credential", "credentials", "apikey")
_REFERENCE_WORDS = ("env", "file", "path", "dir", "name", "var", "id")
_TOKEN_KINDS = ("first", "last", "next", "output", "input", "stop", "eos", "bos", "pad", "per", "special", "unk")
_WORDS = re.compile(r"[-_.\s]+|(?<=[a-z])(?=[A-Z])")
_REFERENCE = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")
# A scheme's length bounded: unbounded, every start in a long word scanned to its end (0.6 s for 20,000 letters).
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]{0,31}://)[^/@\s:]*:[^/@\s]*@")


def is_secret_name(name: str) -> bool:
    """Whether a flag, argument or variable name holds a secret (`api-key`, `HF_TOKEN`, `aws_secret_access_key`;
    not `max-tokens`, `tokenizer`, `api_key_env` or `time_to_first_token`)."""
    words = [word.lower() for word in _WORDS.split(name.strip().lstrip("-")) if word]
    if not words or words[-1] in _REFERENCE_WORDS:  # `api_key_env`, `ssl-key-file`: where a secret is, not it
        return False
    if words == ["key"]:  # alone, a lookup key (a cache's, a build's); `api-key`, `access_key` are secrets
        return False
    if words[-1] == "token" and len(words) > 1 and words[-2] in _TOKEN_KINDS:  # `first_token`: a model's token
        return False
    return any(word in SECRET_WORDS or word.endswith(("apikey", "password", "secret")) for word in words) or \
        words[-1].endswith("token")


def env_reference(value: object) -> str | None:
    """`NAME` when `value` is written `${NAME}` (a reference to an environment variable), else None."""
    match = _REFERENCE.match(value) if isinstance(value, str) else None
    return match.group(1) if match else None


class MissingVariable(ValueError):
    """A `${NAME}` reference to a variable that is not set; the message names it and where it was used."""


def expand_env(value: str, where: str) -> str:
    """The value of a `${NAME}` reference (from this process's environment), or `value` itself."""
    name = env_reference(value)
    if name is None:
        return value
    if name not in os.environ:
        raise MissingVariable(f"{where}: ${{{name}}} names the environment variable {name}, which is not set")
    return os.environ[name]


def redact_value(name: str, value: Any) -> Any:
    """`value` as it may be written under `name`: a secret's value is `***` (a `${NAME}` reference stays)."""
    if is_secret_name(name) and isinstance(value, (str, int, float)) and value not in ("", False):
        return value if env_reference(value) else REDACTED
    if is_secret_name(name) and isinstance(value, (list, tuple)):  # `api_keys: [...]`
        return [REDACTED if isinstance(item, (str, int, float)) else redact(item) for item in value]
    return redact(value)


def redact(value: Any) -> Any:
    """A copy of a JSON-like value with every secret in it written `***`: the values of secret-named keys,
    the values after secret-named flags in lists of arguments, and the credentials in URLs."""
    if isinstance(value, dict):
        return {key: redact_value(str(key), item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        if all(isinstance(item, str) for item in value):
            return redact_argv(list(value))
        return [redact(item) for item in value]
    if isinstance(value, str):
        return _URL_CREDENTIALS.sub(lambda m: m.group("scheme") + REDACTED + "@", value)
    return value


def redact_argv(argv: list[str]) -> list[str]:
    """A command line with the value of each secret flag (`--api-key K`, `--api-key=K`) and of each
    secret `NAME=VALUE` (an environment given on a command line) written `***`."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next and not arg.startswith("-"):  # a flag's value (`--api-key K`), not the next flag
            out.append(REDACTED if env_reference(arg) is None else arg)
            hide_next = False
            continue
        hide_next = False
        name, sep, value = arg.partition("=")
        if sep and is_secret_name(name) and value and env_reference(value) is None:
            out.append(f"{name}={REDACTED}")
        elif arg.startswith("-") and not sep and is_secret_name(arg):
            out.append(arg)
            hide_next = True
        else:
            out.append(redact(arg) if isinstance(arg, str) else arg)
    return out
