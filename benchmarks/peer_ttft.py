"""Does a peer's client read the reference engine's real TTFT? `vllm bench serve` against `bench serve`.

Starts the reference engine (`bench serve`), runs vLLM's own benchmark client against it (from vLLM's
environment: `--vllm-python`), then this toolkit's load generator with prompts of the same lengths, and puts
the mean TTFT each client reports beside the engine's own, read from its Prometheus histogram
(`vllm:time_to_first_token_seconds`: from the request's arrival to its first token) over exactly the
requests that client sent. A stream that sent a chunk before the first token would make vLLM's figure far
smaller than the engine's. Usage:

    python benchmarks/peer_ttft.py --vllm-python /opt/vllm/bin/python --tokenizer DIR [--concurrency 1,4]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx

from benchmarks._servers import ready_engine

VLLM_CLIENT = (
    "import sys\n"
    "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
    "from vllm.benchmarks.serve import add_cli_args, main\n"
    "parser = FlexibleArgumentParser(); add_cli_args(parser); main(parser.parse_args(sys.argv[1:]))\n"
)


def server_ttft(port: int) -> tuple[float, float]:
    """(sum of seconds, count) of the engine's TTFT histogram so far."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    total = float(re.search(r"^vllm:time_to_first_token_seconds_sum\{[^}]*\} (\S+)", text, re.M).group(1))
    count = float(re.search(r"^vllm:time_to_first_token_seconds_count\{[^}]*\} (\S+)", text, re.M).group(1))
    return total, count


def report(concurrency: int, client: str, client_ms: float, before: tuple[float, float],
           after: tuple[float, float]) -> None:
    served = after[1] - before[1]
    engine_ms = (after[0] - before[0]) / served * 1000
    print(f"concurrency {concurrency}: {client:16s} mean TTFT {client_ms:8.1f} ms, the engine's own {engine_ms:8.1f} "
          f"ms over the same {served:.0f} requests: {client_ms / engine_ms - 1:+.1%}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vllm-python", required=True)
    parser.add_argument("--tokenizer", required=True, help="a directory with the model's tokenizer (vLLM's client "
                        "loads it to make prompts of a given length)")
    parser.add_argument("--concurrency", default="1,4")
    parser.add_argument("--prompts", type=int, default=24)
    parser.add_argument("--input-len", type=int, default=256)
    parser.add_argument("--output-len", type=int, default=32)
    parser.add_argument("--port", type=int, default=8127)
    args = parser.parse_args()
    with ready_engine([sys.executable, "-m", "bench", "serve", "--port", str(args.port)]):
        model = httpx.get(f"http://127.0.0.1:{args.port}/v1/models", timeout=10).json()["data"][0]["id"]
        for concurrency in (int(c) for c in args.concurrency.split(",")):
            before = server_ttft(args.port)
            with tempfile.TemporaryDirectory() as out:
                subprocess.run([args.vllm_python, "-c", VLLM_CLIENT, "--backend", "openai-chat", "--base-url",
                                f"http://127.0.0.1:{args.port}", "--endpoint", "/v1/chat/completions", "--model",
                                model, "--tokenizer", args.tokenizer, "--dataset-name", "random", "--random-input-len",
                                str(args.input_len), "--random-output-len", str(args.output_len), "--num-prompts",
                                str(args.prompts), "--max-concurrency", str(concurrency), "--ignore-eos",
                                "--save-result", "--result-dir", out, "--result-filename", "r.json",
                                "--num-warmups", "0", "--disable-tqdm"],
                               check=True, capture_output=True, text=True, timeout=600)
                result = json.loads(Path(out, "r.json").read_text())
            report(concurrency, "vllm bench serve", result["mean_ttft_ms"], before, server_ttft(args.port))
            before = server_ttft(args.port)
            with tempfile.TemporaryDirectory() as out:
                subprocess.run([sys.executable, "-m", "bench", "sweep", "--engine", "endpoint", "--base-url",
                                f"http://127.0.0.1:{args.port}/v1", "--model", model, "--concurrency", str(concurrency),
                                "--requests", str(args.prompts), "--warmup", "0", "--input-tokens", str(args.input_len),
                                "--output-tokens", str(args.output_len), "--tokenizer",
                                str(Path(args.tokenizer, "tokenizer.json")), "--out", out, "--no-report"],
                               check=True, capture_output=True, text=True, timeout=600)
                (summary,) = json.loads(next(Path(out).glob("*/summary.json")).read_text())
            report(concurrency, "bench sweep", summary["ttft_ms"]["mean"], before, server_ttft(args.port))


if __name__ == "__main__":
    main()
