"""`bench sweep` beside a bare socket client, on one core each, against a server whose timing is known.

The scripted server (TTFT 100 ms, ITL 20 ms, 128 tokens) runs pinned to the last core; each client runs in
a process of its own pinned to the first: `bench sweep` exactly as a user types it, and
`benchmarks/raw_client.py`, the floor. They take turns at every level and repeat, and each figure is the
median over the repeats. Errors are against what the server says it really sent (`GET /_sent`: on one
core it writes chunks due together one after another, so at 1,000 users it is itself a little late), the
programmed truth in brackets.

With `--sessions`, a third client runs beside them: `bench sweep --workload agent` keeping as many agent
sessions alive as the level's users (8 calls a session, each 128 tokens, a 500 ms tool wait between calls, the
context growing by 160 tokens a call), so the client's cost per request and the load it holds can be read against
plain users': CPU per request, calls in flight, and sessions held alive against the level. Usage:

    python benchmarks/loadgen_vs_raw.py [--levels 1,8,50,256,1000] [--repeats 3] [--duration 15] [--sessions]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from benchmarks._servers import scripted_server

TTFT_MS, ITL_MS, TOKENS, PROMPT_TOKENS = 100.0, 20.0, 128, 64
AGENT_SCENARIO = f"""name: agent-bench
workload:
  agent: {{sessions: 4096, steps: 8, shared_prefix_tokens: 64, task_tokens: {PROMPT_TOKENS}, tool_result_tokens: 32,
          output_tokens: {TOKENS}, tool_wait_ms: 500, subagent_probability: 0}}
load: {{concurrency: [1]}}
"""


@dataclass(frozen=True)
class Figures:
    """One client's run of one level, beside what the server sent meanwhile."""

    ttft_p50_ms: float
    ttft_p99_ms: float
    itl_p99_ms: float
    in_flight: float
    loop_lag_p99_ms: float
    cpu_s_per_1k_tokens: float
    sent_ttft_p50_ms: float
    sent_ttft_p99_ms: float
    sent_itl_p99_ms: float
    is_valid: bool
    cpu_ms_per_request: float = 0.0
    sessions_alive: float | None = None  # agent sessions: those the client held alive


def client_core() -> str:
    return str(sorted(os.sched_getaffinity(0))[0])


def run_bench(port: int, users: int, duration_s: float, agent: bool = False) -> tuple[dict[str, Any], float, float]:
    """`bench sweep` against the server (agent sessions with `agent`): its level's summary, and its CPU seconds per
    1k measured tokens and per request."""
    with tempfile.TemporaryDirectory() as out:
        workload = ["--output-tokens", str(TOKENS), "--input-tokens", str(PROMPT_TOKENS)]
        if agent:
            scenario = Path(out) / "agent-bench.yaml"
            scenario.write_text(AGENT_SCENARIO)
            workload = ["--scenario", str(scenario)]
        command = ["taskset", "-c", client_core(), sys.executable, "-m", "bench", "sweep", "--engine", "endpoint",
                   "--base-url", f"http://127.0.0.1:{port}/v1", "--model", "scripted", "--concurrency", str(users),
                   "--duration", str(duration_s), *workload, "--no-report", "--out", str(Path(out) / "runs")]
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        run_dir = next((Path(out) / "runs").iterdir())
        summary = json.loads((run_dir / "summary.json").read_text())[0]
        level = json.loads((run_dir / "levels.jsonl").read_text().splitlines()[0])
        measured = [row for row in map(json.loads, (run_dir / "requests.jsonl").open()) if not row["is_warmup"]]
        tokens = sum(row["output_tokens"] for row in measured)
        cpu_s = level["client"]["client_cpu_fraction"] * level["wall_s"]
        return summary, cpu_s / tokens * 1000, cpu_s / len(measured)


def run_raw(port: int, users: int, duration_s: float) -> tuple[dict[str, Any], float, float]:
    command = ["taskset", "-c", client_core(), sys.executable, "-m", "benchmarks.raw_client", "--port", str(port),
               "--users", str(users), "--duration", str(duration_s), "--json"]
    raw = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)
    return raw["summary"], raw["cpu_s"] / raw["num_tokens"] * 1000, raw["cpu_s"] / raw["summary"]["num_requests"]


def measure(client: str, port: int, users: int, duration_s: float) -> Figures:
    httpx.get(f"http://127.0.0.1:{port}/_sent", timeout=10)  # clears what earlier runs left
    if client == "raw":
        summary, cpu_per_1k, cpu_per_request = run_raw(port, users, duration_s)
    else:
        summary, cpu_per_1k, cpu_per_request = run_bench(port, users, duration_s, agent=client == "agent")
    sent = httpx.get(f"http://127.0.0.1:{port}/_sent", timeout=10).json()
    sessions = summary.get("sessions")
    return Figures(
        ttft_p50_ms=summary["ttft_ms"]["p50"], ttft_p99_ms=summary["ttft_ms"]["p99"],
        itl_p99_ms=summary["itl_ms"]["p99"], in_flight=summary["mean_in_flight"],
        loop_lag_p99_ms=summary["client"]["loop_lag_p99_ms"], cpu_s_per_1k_tokens=cpu_per_1k,
        sent_ttft_p50_ms=sent["ttft_ms"]["p50"], sent_ttft_p99_ms=sent["ttft_ms"]["p99"],
        sent_itl_p99_ms=sent["itl_ms"]["p99"], is_valid=summary.get("is_valid", True),
        cpu_ms_per_request=cpu_per_request * 1000, sessions_alive=sessions["mean_alive"] if sessions else None,
    )


def median(runs: list[Figures], name: str) -> float:
    return statistics.median(getattr(run, name) for run in runs)


def show(users: int, client: str, runs: list[Figures], raw_cpu: float | None) -> None:
    def error(measured: str, sent: str, programmed: float, relative: bool) -> str:
        value, truth = median(runs, measured), median(runs, sent)
        if relative:
            return f"{(value - truth) / truth:+6.1%} [{(value - programmed) / programmed:+6.1%}]"
        return f"{value - truth:+6.2f} [{value - programmed:+6.2f}] ms"

    cpu = median(runs, "cpu_s_per_1k_tokens")
    versus = f" ({cpu / raw_cpu:.2f}x raw)" if raw_cpu else ""
    valid = sum(run.is_valid for run in runs)
    alive = [run.sessions_alive for run in runs if run.sessions_alive is not None]
    held = f"  sessions alive {statistics.median(alive):7.1f}" if alive else ""
    # Per request only for bench's clients, measured alike (the measured window's CPU over its requests).
    per_request = f", {median(runs, 'cpu_ms_per_request'):5.3f} ms/request" if client != "raw" else ""
    print(f"c={users:<5d} {client:5s} TTFT p50 {error('ttft_p50_ms', 'sent_ttft_p50_ms', TTFT_MS, False)}  "
          f"p99 {error('ttft_p99_ms', 'sent_ttft_p99_ms', TTFT_MS, True)}  "
          f"ITL p99 {error('itl_p99_ms', 'sent_itl_p99_ms', ITL_MS, True)}  "
          f"in flight {median(runs, 'in_flight'):7.1f}{held}  lag p99 {median(runs, 'loop_lag_p99_ms'):5.2f} ms  "
          f"cpu {cpu * 1000:6.2f} ms/1k tokens{versus}{per_request}  "
          f"valid {valid}/{len(runs)}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--levels", default="1,8,50,256,1000")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--duration", type=float, default=15.0)
    parser.add_argument("--port", type=int, default=8023)
    parser.add_argument("--sessions", action="store_true", help="agent sessions too, as many alive as the users")
    args = parser.parse_args()
    clients = ("raw", "bench", "agent") if args.sessions else ("raw", "bench")
    with scripted_server(args.port, ["--ttft-ms", str(TTFT_MS), "--itl-ms", str(ITL_MS)]):
        print(f"errors against what the server sent [against the programmed TTFT {TTFT_MS:g} ms, ITL {ITL_MS:g} ms]; "
              f"medians of {args.repeats}")
        for users in (int(v) for v in args.levels.split(",")):
            runs: dict[str, list[Figures]] = {client: [] for client in clients}
            for repeat in range(args.repeats):
                order = clients if repeat % 2 == 0 else clients[::-1]
                for client in order:
                    runs[client].append(measure(client, args.port, users, args.duration))
            show(users, "raw", runs["raw"], None)
            for client in clients[1:]:
                show(users, client, runs[client], median(runs["raw"], "cpu_s_per_1k_tokens"))


if __name__ == "__main__":
    main()
