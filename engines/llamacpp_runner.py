"""llama.cpp's own HTTP server, embedded in the `xllamacpp` package, as a process of its own.

    python -m engines.llamacpp_runner --model FILE.gguf --port 8080 [--parallel 32] [--ctx-per-slot 2048]

It serves until SIGTERM / SIGINT. Used by the `llamacpp` engine when no `llama-server` binary is on PATH.
"""

from __future__ import annotations

import argparse
import os
import signal
import threading


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m engines.llamacpp_runner", description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="a .gguf file")
    parser.add_argument("--alias", default=None, help="the model name clients send (default: the file name)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--parallel", type=int, default=32, help="slots: requests decoded together")
    parser.add_argument("--ctx-per-slot", type=int, default=2048, help="context tokens of each slot")
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--ubatch-size", type=int, default=None)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    import xllamacpp

    args = parse_args(argv)
    params = xllamacpp.CommonParams()
    params.model.path = args.model
    params.model_alias = [args.alias or os.path.basename(args.model)]
    params.hostnames = [args.host]
    params.port = args.port
    params.n_parallel = args.parallel
    params.n_ctx = args.parallel * args.ctx_per_slot  # llama.cpp splits the context over the slots
    params.cpuparams.n_threads = args.threads
    params.cpuparams_batch.n_threads = args.threads
    params.endpoint_metrics = True
    if args.batch_size:
        params.n_batch = args.batch_size
    if args.ubatch_size:
        params.n_ubatch = args.ubatch_size
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    server = xllamacpp.Server(params)
    print(f"llama.cpp server ready on {server.listening_address}/v1", flush=True)
    stop.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
