"""schemathesis against the reference engine, from OpenAI's own OpenAPI document: every request it generates for
POST /completions, POST /chat/completions and GET /models is answered without a server error (5xx).

Opt-in (`pytest -m schemathesis`): schemathesis runs from an environment of its own ($BENCH_SCHEMATHESIS, a
virtual environment) against the document at $BENCH_OPENAI_OPENAPI (openai/openai-openapi's openapi.yaml); the
README's "Opt-in checks" says how to install both. The count of requests comes from schemathesis's HAR record of
every request and answer, so it is the server's answers that are counted, not schemathesis's verdicts.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
from pathlib import Path

import pytest

from engines.reference.serving.options import ServerOptions
from engines.reference.serving.server import running_server

pytestmark = pytest.mark.schemathesis

OPERATIONS = ("createCompletion", "createChatCompletion", "listModels")  # the three routes the engine serves
MAX_EXAMPLES = 50  # per operation in the fuzzing phase; the coverage phase adds its own (about 1,500 in all)
HOOKS = Path(__file__).with_name("schemathesis_hooks.py")


def _tool() -> tuple[Path, Path]:
    venv, document = os.environ.get("BENCH_SCHEMATHESIS"), os.environ.get("BENCH_OPENAI_OPENAPI")
    if not venv or not document:
        pytest.skip("set BENCH_SCHEMATHESIS (a venv with schemathesis) and BENCH_OPENAI_OPENAPI (OpenAI's "
                    "openapi.yaml)")
    executable = Path(venv) / "bin" / "schemathesis"
    if not executable.is_file() or not Path(document).is_file():
        pytest.fail(f"BENCH_SCHEMATHESIS={venv} has no bin/schemathesis, or BENCH_OPENAI_OPENAPI={document} is no file")
    return executable, Path(document)


def test_no_generated_request_gets_a_server_error(tmp_path: Path) -> None:
    executable, document = _tool()
    options = ServerOptions(model="dummy:tiny", port=0, kv_cache_tokens=8192, max_model_len=512)
    har = tmp_path / "requests.har"
    with running_server(options) as server:
        command = [str(executable), "run", str(document), "--url", server.base_url, "--checks", "not_a_server_error",
                   "--max-examples", str(MAX_EXAMPLES), "--seed", "1", "--workers", "1", "--request-timeout", "120",
                   "--no-color", "--report", "har", "--report-har-path", str(har),
                   *(arg for operation in OPERATIONS for arg in ("--include-operation-id", operation))]  # fmt: skip
        env = {**os.environ, "SCHEMATHESIS_HOOKS": str(HOOKS), "BENCH_SCHEMATHESIS_MODEL": server.model_name}
        run = subprocess.run(command, capture_output=True, text=True, timeout=1800, env=env, cwd=tmp_path)
    entries = json.loads(har.read_text())["log"]["entries"]
    statuses = collections.Counter(entry["response"]["status"] for entry in entries)
    server_errors = [entry for entry in entries if entry["response"]["status"] >= 500]
    print(f"schemathesis sent {len(entries)} requests; answers by status: {dict(sorted(statuses.items()))}")
    assert not server_errors, (len(server_errors), server_errors[0]["request"], run.stdout[-3000:])
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert statuses[200] > 0 and len(entries) > 500  # it did reach the engine, many times
