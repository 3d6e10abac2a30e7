"""A stand-in for `trtllm-serve ENGINE_DIR --tokenizer MODEL --backend tensorrt ...`: refuses a folder that
is not a built engine, as the real one does, then serves the OpenAI API (the scripted server, which starts
in a second) under the engine folder's name, which is what trtllm-serve lists at /v1/models for a local
folder."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(prog="trtllm-serve")
    parser.add_argument("model")
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--backend", default="pytorch")
    parser.add_argument("--host", default="localhost")
    parser.add_argument("--port", type=int, default=8000)
    args, _runtime_flags = parser.parse_known_args()
    engine = Path(args.model)
    if args.backend != "tensorrt" or not (engine / "config.json").is_file() or not list(engine.glob("rank*.engine")):
        sys.exit(f"trtllm-serve: {engine} is not a TensorRT engine folder (backend {args.backend})")
    os.execv(sys.executable, [sys.executable, "-m", "scripted", "--model", engine.name,
                              "--host", args.host, "--port", str(args.port), "--ttft-ms", "10", "--itl-ms", "2"])


if __name__ == "__main__":
    main()
