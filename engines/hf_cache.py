"""The Hugging Face cache a container engine sees: read-only unless the model must be downloaded into it.

Engine images run as root, so a cache mounted read-write is one any engine (or a model's remote code) can
rewrite for every later run. It is mounted read-only where nothing needs writing: the model is a path inside
the container, or its weights are already complete in the cache (then the engine is also told to stay
offline, `HF_HUB_OFFLINE=1`, so it neither asks the hub for news nor tries to write there). A Hugging Face id
not in the cache is downloaded by the engine, so the cache is read-write for that run, and run.json says so.
`--engine-arg hf-cache=ro|rw` overrides the choice (a speculative draft model or tokenizer from another
repository is one thing this check can't see).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

WEIGHTS = ("*.safetensors", "*.bin", "*.pt", "*.gguf")
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
CHOICES = ("ro", "rw")


@dataclass(frozen=True)
class CacheMount:
    """The cache on the host, whether the container may write it, and why (for run.json)."""

    host_path: str
    read_only: bool
    why: str
    offline: bool = False  # the model is complete in the cache: the engine needs no hub

    def record(self) -> dict[str, object]:
        return {"path": self.host_path, "mode": "ro" if self.read_only else "rw", "why": self.why}


def hf_cache_dir() -> Path:
    path = Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def cache_mount(model: str, choice: str | None = None) -> CacheMount:
    """How to mount the cache for `model` (a Hugging Face id, or a path inside the container); `choice` is
    `hf-cache=` as given, which wins."""
    root = hf_cache_dir()
    if choice is not None:
        if choice not in CHOICES:
            raise ValueError(f"--engine-arg hf-cache={choice}: expected ro (read-only) or rw (read-write)")
        return CacheMount(str(root), choice == "ro", f"hf-cache={choice} was asked for")
    if model.startswith("/"):
        return CacheMount(str(root), True, f"{model} is a path inside the container: nothing to download")
    if is_cached(model, root):
        return CacheMount(str(root), True, f"{model} is in the cache: nothing to download (HF_HUB_OFFLINE=1)",
                          offline=True)
    return CacheMount(str(root), False, f"{model} is not in the cache: the engine downloads it there")


def is_cached(model: str, root: Path) -> bool:
    """Whether the snapshot the engine would load (refs/main's, else any) holds a config and all its weights."""
    repo = root / "hub" / f"models--{model.replace('/', '--')}"
    main = repo / "refs" / "main"
    snapshots = [repo / "snapshots" / main.read_text().strip()] if main.is_file() else \
        sorted((repo / "snapshots").glob("*"))
    return any(_complete(snapshot) for snapshot in snapshots)


def _complete(snapshot: Path) -> bool:
    if not (snapshot / "config.json").is_file():
        return False
    index = snapshot / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = set(json.loads(index.read_text())["weight_map"].values())
        except (ValueError, KeyError, TypeError, AttributeError):
            return False
        return all((snapshot / shard).is_file() for shard in shards)
    return any(path.is_file() for pattern in WEIGHTS for path in snapshot.glob(pattern))
