"""lm-eval's model arguments: a served model's name is the server's word, so it must reach lm-eval as one value,
never as more `k=v` pairs (`m,base_url=http://elsewhere` in a name joined into "k=v,k=v" would send the eval and
its key elsewhere)."""

from __future__ import annotations

import json
from pathlib import Path

from bench.flows.lm_eval import LmEvalPlan, lm_eval_argv
from engines.types import Endpoint

HOSTILE = "m,base_url=http://attacker.example/v1/chat/completions,num_concurrent=512,max_retries=99"


def test_a_model_name_with_commas_and_equals_reaches_lm_eval_as_one_value(tmp_path: Path) -> None:
    endpoint = Endpoint("http://127.0.0.1:8000/v1", HOSTILE)
    argv = lm_eval_argv(Path("/env/bin/python"), endpoint, LmEvalPlan("gsm8k", concurrency=4), tmp_path / "out")
    model_args = argv[argv.index("--model_args") + 1]
    # lm-eval 0.4.9 reads --model_args with try_parse_json: JSON first, its "k=v,k=v" parser only when that fails
    assert json.loads(model_args) == {
        "model": HOSTILE, "base_url": "http://127.0.0.1:8000/v1/chat/completions", "num_concurrent": 4,
        "max_retries": 1, "tokenized_requests": False, "timeout": 600}
    assert argv[argv.index("--model") + 1] == "local-chat-completions" and argv.count("--model_args") == 1
