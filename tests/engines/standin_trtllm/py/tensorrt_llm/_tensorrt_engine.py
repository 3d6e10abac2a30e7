"""The TensorRT backend's LLM: "builds" by writing the engine folder the real build writes."""

import json
import os
from dataclasses import asdict


class LLM:
    def __init__(self, model, tensor_parallel_size=1, dtype="auto", build_config=None, quant_config=None):
        self.settings = {"model": model, "tensor_parallel_size": tensor_parallel_size, "dtype": dtype,
                         "build_config": asdict(build_config) if build_config else None,
                         "quant_algo": quant_config.quant_algo.value if quant_config else None}
        print(f"[TRT-LLM] building {model} (tp {tensor_parallel_size}, {dtype})", flush=True)

    def save(self, engine_dir):
        os.makedirs(engine_dir, exist_ok=True)
        with open(os.path.join(engine_dir, "config.json"), "w") as f:
            json.dump({"version": "stand-in", "build_config": self.settings}, f)
        for rank in range(self.settings["tensor_parallel_size"]):
            with open(os.path.join(engine_dir, f"rank{rank}.engine"), "wb") as f:
                f.write(b"\0" * 1024)
        print(f"[TRT-LLM] engine saved to {engine_dir}", flush=True)

    def shutdown(self):
        pass
