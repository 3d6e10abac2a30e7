"""What counts as a secret, and how it is written: names and references kept, values hidden."""

from __future__ import annotations

import pytest

from common.secrets import REDACTED, is_secret_name, redact, redact_argv
from engines.keys import SecretArgError, take_secrets


@pytest.mark.parametrize("name", ["api-key", "api_key", "VLLM_API_KEY", "OPENAI_API_KEY", "HF_TOKEN", "hf-token",
                                  "HUGGING_FACE_HUB_TOKEN", "aws_secret_access_key", "password", "apiKey",
                                  "db-password", "client_secret", "credentials", "access_token"])
def test_names_that_hold_secrets_are_recognised(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize("name", ["max-tokens", "max_num_batched_tokens", "tokenizer", "api_key_env", "key",
                                  "ssl-keyfile", "time_to_first_token", "eos_token", "keep-alive", "port",
                                  "token_id", "hf-token-file"])
def test_names_that_hold_no_secret_are_kept(name: str) -> None:
    assert not is_secret_name(name)


def test_redact_hides_values_under_secret_names_keeps_references_and_lookup_keys() -> None:
    record = {"args": {"api-key": "K1", "port": 8000, "hf-token": "${HF}"}, "env": {"HF_TOKEN": "hf_x", "A": "1"},
              "api_key_env": "MY_KEY", "key": {"model": "m"}, "url": "https://user:pw@host/v1",
              "command": ["python", "--api-key", "K2", "--enable-thing", "--port", "1", "--api-key=K3"]}
    assert redact(record) == {
        "args": {"api-key": REDACTED, "port": 8000, "hf-token": "${HF}"}, "env": {"HF_TOKEN": REDACTED, "A": "1"},
        "api_key_env": "MY_KEY", "key": {"model": "m"}, "url": "https://***@host/v1",
        "command": ["python", "--api-key", REDACTED, "--enable-thing", "--port", "1", f"--api-key={REDACTED}"]}


def test_a_secret_flag_with_no_value_hides_nothing_after_it() -> None:
    assert redact_argv(["--enable-api-key-check", "--port", "8000"]) == ["--enable-api-key-check", "--port", "8000"]


def test_secrets_leave_the_flags_for_the_engines_environment(monkeypatch) -> None:
    monkeypatch.setenv("MY_TOKEN", "t0k")
    found = take_secrets("vllm", {"api-key": "K", "hf-token": "${MY_TOKEN}", "max-num-seqs": "8"}, {"A": "1"})
    assert found.args == {"max-num-seqs": "8"}
    assert found.env == {"A": "1", "VLLM_API_KEY": "K", "HF_TOKEN": "t0k"}
    assert found.api_key == "K"


def test_the_key_a_reference_engine_inherits_is_the_one_bench_sends(monkeypatch) -> None:
    monkeypatch.setenv("REFERENCE_API_KEY", "inherited")
    assert take_secrets("reference", {}).api_key == "inherited"


def test_an_engine_that_reads_a_secret_only_from_its_command_line_is_refused() -> None:
    with pytest.raises(SecretArgError, match="--engine-arg api-key: sglang takes it only on its command line"):
        take_secrets("sglang", {"api-key": "K"})
