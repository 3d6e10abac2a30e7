"""`bench quality --lm-eval TASK`: EleutherAI's lm-evaluation-harness run against each engine's endpoint, its
scores read into quality.json.

lm-eval lives in an environment of its own (it pins its own transformers and datasets): $BENCH_LMEVAL names that
environment's folder or its python. Each engine is launched (or attached to) as a sweep would, lm-eval talks to it
through its OpenAI-compatible chat model (`local-chat-completions`, so generation tasks: a server without
logprobs can't score loglikelihood ones), and its results land in the run directory beside quality.json.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from bench.flows import measure
from bench.inputs.measure_options import MeasureFlags
from bench.inputs.options import LoadOverrides
from bench.run import rundir
from engines.endpoint import read_api_key
from engines.types import Endpoint

LM_EVAL_ENV = "BENCH_LMEVAL"
INSTALL = ("python3 -m venv ~/lmeval && ~/lmeval/bin/pip install torch==2.13.0 'lm-eval[api]==0.4.9' "
           "'transformers<5' 'datasets<4' && export BENCH_LMEVAL=~/lmeval")
LOG_FILE = "lm_eval.log"
OUTPUT_DIR = "lm_eval"


class LmEvalError(ValueError):
    """lm-eval missing, or a run of it that failed: said in one line with what to do."""


@dataclass(frozen=True)
class LmEvalPlan:
    task: str
    include_path: Path | None = None  # a folder of task YAMLs (a task of your own, from a local file)
    concurrency: int = 1
    limit: int | None = None  # the first N documents of each task
    timeout_s: float = 3600.0


@dataclass(frozen=True)
class LmEvalRun:
    name: str
    run_dir: Path
    scores: dict[str, dict[str, Any]]  # task -> {metric: value, metric_stderr: value, n: documents}


def find_lm_eval(setting: str | None = None) -> Path:
    """The python of lm-eval's environment: $BENCH_LMEVAL (its folder or its python); raises LmEvalError with the
    install command when it isn't there."""
    setting = setting or os.environ.get(LM_EVAL_ENV)
    if not setting:
        raise LmEvalError(f"--lm-eval needs lm-evaluation-harness in an environment of its own: {INSTALL}")
    path = Path(setting).expanduser()
    python = path / "bin" / "python" if path.is_dir() else path
    if not python.is_file():
        raise LmEvalError(f"${LM_EVAL_ENV}={setting}: no python there (expected the environment's folder or its "
                          f"bin/python); install it with: {INSTALL}")
    probe = subprocess.run([str(python), "-c", "import lm_eval"], capture_output=True, text=True, timeout=300)
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["no output"])[-1]
        raise LmEvalError(f"${LM_EVAL_ENV}: {python} can't import lm_eval ({last}); install it with: {INSTALL}")
    return python


def lm_eval_argv(python: Path, endpoint: Endpoint, plan: LmEvalPlan, output: Path) -> list[str]:
    """lm-eval's command line against `endpoint`: greedy generation through its chat API, samples logged.

    The model's arguments go as one JSON object (lm-eval 0.4.9, the version INSTALL pins, reads `--model_args {...}`
    as JSON), never joined as `k=v,k=v`: a served model's name is the server's word, and `m,base_url=http://elsewhere`
    in it would add arguments of its own."""
    model_args = json.dumps({"model": endpoint.model,
                             "base_url": f"{endpoint.base_url.rstrip('/')}/chat/completions",
                             "num_concurrent": plan.concurrency, "max_retries": 1, "tokenized_requests": False,
                             "timeout": 600})
    argv = [str(python), "-m", "lm_eval", "--model", "local-chat-completions", "--model_args", model_args,
            "--tasks", plan.task, "--apply_chat_template", "--gen_kwargs", "temperature=0,do_sample=False",
            "--output_path", str(output), "--log_samples"]
    if plan.include_path is not None:
        argv += ["--include_path", str(plan.include_path)]
    if plan.limit is not None:
        argv += ["--limit", str(plan.limit)]
    return argv


def read_scores(output: Path) -> dict[str, dict[str, Any]]:
    """lm-eval's results file (its newest under `output`) -> each task's metrics, their standard errors and the
    number of documents scored."""
    found = sorted(output.rglob("results_*.json"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise LmEvalError(f"lm-eval wrote no results under {output}")
    raw = json.loads(found[-1].read_text())
    samples = raw.get("n-samples", {})
    scores: dict[str, dict[str, Any]] = {}
    for task, metrics in raw.get("results", {}).items():
        row: dict[str, Any] = {}
        for key, value in metrics.items():
            name, _, _filter = key.partition(",")
            if name != "alias" and isinstance(value, int | float):
                row[name] = value
        n = (samples.get(task) or {}).get("effective")
        scores[task] = {**row, "n": n}
    return scores


def run_lm_eval(flags: MeasureFlags, plan: LmEvalPlan, lm_eval_python: Path,
                say: measure.Say = measure.silent) -> tuple[list[LmEvalRun], list[tuple[str, str]]]:
    """lm-eval against each engine in turn: the run directory holds lm-eval's output and log, and quality.json its
    scores with the engine's info. An engine that fails is named and the rest go on."""
    from engines.endpoint import EndpointError
    from engines.launch import EngineStartError
    from engines.registry import EngineError

    jobs = measure.fresh_jobs(replace(flags, scenario=flags.scenario or "quality"), LoadOverrides(), say=say)
    runs, failures = [], []
    for job in jobs:
        run_dir = rundir.new_run_dir(flags.out, job.plan.engine_kind, f"lm-eval-{_safe(plan.task)}")
        try:
            with job.launcher(run_dir) as (endpoint, engine):
                scores = _run_against(endpoint, plan, lm_eval_python, run_dir)
                _write(run_dir, asdict(engine), endpoint, plan, scores)
                runs.append(LmEvalRun(job.plan.engine_kind, run_dir, scores))
        except (LmEvalError, EndpointError, EngineError, EngineStartError, subprocess.TimeoutExpired) as exc:
            failures.append((job.plan.engine_kind, str(exc)))
    return runs, failures


def _run_against(endpoint: Endpoint, plan: LmEvalPlan, python: Path, run_dir: Path) -> dict[str, dict[str, Any]]:
    output = run_dir / OUTPUT_DIR
    key = read_api_key(endpoint.api_key_env) or "EMPTY"
    env = {**os.environ, "OPENAI_API_KEY": key, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    with (run_dir / LOG_FILE).open("w") as log:
        done = subprocess.run(lm_eval_argv(python, endpoint, plan, output), stdout=log, stderr=subprocess.STDOUT,
                              env=env, timeout=plan.timeout_s, cwd=run_dir)
    if done.returncode != 0:
        tail = (run_dir / LOG_FILE).read_text().strip().splitlines()[-3:]
        raise LmEvalError(f"lm-eval exited with {done.returncode}: {' | '.join(tail)} (whole log: "
                          f"{run_dir / LOG_FILE})")
    return read_scores(output)


def _write(run_dir: Path, engine: dict[str, Any], endpoint: Endpoint, plan: LmEvalPlan,
           scores: dict[str, dict[str, Any]]) -> None:
    body = {"engine": engine, "endpoint": {"base_url": endpoint.base_url, "model": endpoint.model},
            "lm_eval": {"task": plan.task, "include_path": str(plan.include_path) if plan.include_path else None,
                        "limit": plan.limit, "concurrency": plan.concurrency, "scores": scores,
                        "output": OUTPUT_DIR}}
    (run_dir / rundir.QUALITY_FILE).write_text(json.dumps(body, indent=2) + "\n")


def _safe(task: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in task)[:40]
