"""Engine specs in YAML (`--engine-file my-vllm.yaml`): which engine, which model, which flags.

    engine: vllm-docker            # any kind of `bench engines`, or `container` for your own image
    model: meta-llama/Llama-3.1-8B-Instruct
    gpus: all                      # all, [0, 1], or none
    tensor_parallel_size: 1
    max_num_seqs: 256
    args: {enable-prefix-caching: true}

A `container` spec runs any image that serves the OpenAI API: `image`, `command`, `container_port`,
`served_model`, and optional `env` and `volumes` (`/host/path: /in/container[:ro]`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from common.validation import parse_yaml_mapping, read_text, validate


class EngineFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    engine: str
    name: str | None = None
    model: str | None = None
    base_url: str | None = None
    api_key_env: str | None = None
    port: int | None = Field(default=None, ge=1, le=65535)
    gpus: Literal["all", "none"] | list[int] = "all"
    tensor_parallel_size: int = Field(default=1, ge=1)
    max_num_seqs: int | None = Field(default=None, ge=1)
    gpu_memory_fraction: float | None = Field(default=None, gt=0, le=1)
    quantization: str | None = None
    max_model_len: int | None = Field(default=None, ge=1)
    image: str | None = None
    args: dict[str, str | int | float | bool] = Field(default_factory=dict)
    command: list[str] | None = None
    container_port: int | None = Field(default=None, ge=1, le=65535)
    served_model: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    cpus: list[int] | None = None  # the CPU cores a local engine is pinned to (each replica's share, by default)
    volumes: dict[str, str] = Field(default_factory=dict)
    working_dir: str | None = None
    ready_timeout_s: float = Field(default=1800.0, gt=0)
    replicas: int = Field(default=1, ge=1)  # > 1: that many replicas behind vllm-router (local engines)
    router_policy: str = "round_robin"
    router_args: dict[str, str | int | float | bool] = Field(default_factory=dict)  # vllm-router's own flags
    replica_metrics: list[str] = Field(default_factory=list)  # an endpoint's pods: each one's /metrics, sampled
    ui: bool = False  # Open WebUI in front: the load goes through its chat API
    lora: dict[str, str] = Field(default_factory=dict)  # LoRA adapters served: NAME -> PEFT folder (local path)
    ui_python: str | None = None  # the Python of Open WebUI's own environment (else $BENCH_OPENWEBUI)

    def engine_args(self) -> list[str]:
        """`args` in the `--engine-arg KEY=VALUE` form every launcher takes."""
        return [f"{key}={str(value).lower() if isinstance(value, bool) else value}" for key, value in self.args.items()]


def load_engine_file(path: Path) -> EngineFile:
    """Parse and validate; errors name the file and the field."""
    if not path.is_file():
        raise ValueError(f"--engine-file {path}: no such file")
    raw = parse_yaml_mapping(read_text(path, ValueError), str(path), ValueError, "a mapping with at least `engine:`")
    return validate(EngineFile, raw, str(path), ValueError)
