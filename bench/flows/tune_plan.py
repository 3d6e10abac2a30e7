"""What a tune tries (`bench tune`): an engine's configurations as a sweep dimension, and tune.json.

A tune is a folder holding one run directory per configuration and `tune.json`, which lists the
configurations and the run each one has (written after every step, so a tune that was stopped goes on with
`--resume`: a configuration whose run is complete is not run again, an interrupted one resumes). The
configurations are the default (no engine argument changed), then the cartesian product of `--grid`s or the
rows of a `--configs` file. How each is judged is `bench.flows.tune_ranking`'s; the flow that runs them is
`bench.flows.tune`'s.
"""

from __future__ import annotations

import itertools
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.inputs.flag_text import key_value, listed
from common.names import UnsafeNameError, inside
from common.validation import parse_yaml_mapping, read_text

TUNE_FILE = "tune.json"
OBJECTIVES = ("capacity", "cost", "throughput", "latency")
DEFAULT_NAME = "default"


class TuneError(ValueError):
    """A bad grid, configs file or tune folder; the message names the flag and what is accepted."""


@dataclass(frozen=True)
class TuneConfig:
    """One configuration: the engine arguments it changes from the engine's defaults (`model` included)."""

    name: str
    args: dict[str, str] = field(default_factory=dict)


def parse_grids(grids: list[str]) -> list[TuneConfig]:
    """`KEY=V1,V2` for each `--grid`: every combination, in the order given. Values holding commas (vLLM's
    --speculative-config) are given as a JSON list: `speculative-config=[{"method": "ngram", ...}, ...]`."""
    axes: list[tuple[str, list[str]]] = []
    for grid in grids:
        key, text = key_value(grid)
        values = _json_values(grid, text) if text.lstrip().startswith("[") else listed(text)
        if not key or not values:
            raise TuneError(f"--grid {grid}: expected KEY=V1,V2,... (an engine argument and its values), e.g. "
                            "max-num-seqs=16,64,256")
        if key in (k for k, _ in axes):
            raise TuneError(f"--grid {grid}: {key} is given twice; list all its values in one --grid")
        axes.append((key, values))
    return [TuneConfig(_name(dict(zip([k for k, _ in axes], combo, strict=True))),
                       dict(zip([k for k, _ in axes], combo, strict=True)))
            for combo in itertools.product(*(values for _, values in axes))]


def _json_values(grid: str, text: str) -> list[str]:
    """A grid's values written as a JSON list, each as the engine's flag takes it (a mapping as JSON)."""
    try:
        values = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TuneError(f"--grid {grid[:120]}: a value list that starts with [ must be a JSON list ({exc.msg})") \
            from None
    if not isinstance(values, list) or not values:
        raise TuneError(f"--grid {grid[:120]}: expected a non-empty JSON list of values")
    return [_text(value) for value in values]


def read_configs(path: Path) -> list[TuneConfig]:
    """A YAML file: `configs:` a list of mappings of engine arguments (an optional `name` each)."""
    if not path.is_file():
        raise TuneError(f"--configs {path}: no such file")
    raw = parse_yaml_mapping(read_text(path, TuneError), str(path), TuneError, "a mapping with a `configs:` list")
    rows = raw.get("configs")
    if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) and r for r in rows):
        raise TuneError(f"{path}: expected `configs:` a non-empty list of mappings of engine arguments, e.g. "
                        "[{max-num-seqs: 64}, {max-num-seqs: 256, max-num-batched-tokens: 4096}]")
    configs = []
    for row in rows:
        args = {str(k): _text(v) for k, v in row.items() if k != "name"}
        configs.append(TuneConfig(str(row.get("name") or _name(args)), args))
    return configs


def _text(value: Any) -> str:
    """A YAML value as the engine's flag takes it: true/false, or a mapping or list as JSON (vLLM's
    --speculative-config and the like)."""
    if isinstance(value, dict | list):
        return json.dumps(value)
    return str(value).lower() if isinstance(value, bool) else str(value)


def _name(args: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in args.items()) or DEFAULT_NAME


def with_default(configs: list[TuneConfig]) -> list[TuneConfig]:
    """The default first (what an untuned engine gives), then each configuration once."""
    seen: dict[str, TuneConfig] = {DEFAULT_NAME: TuneConfig(DEFAULT_NAME)}
    for config in configs:
        if seen.setdefault(config.name, config).args != config.args:
            raise TuneError(f"configuration name '{config.name}' is given to two different configurations; name "
                            "each one once (`default` is the engine's own, with no argument changed)")
    return list(seen.values())


@dataclass
class TuneEntry:
    config: TuneConfig
    run_dir: str | None = None  # relative to the tune folder
    status: str = "pending"  # pending, complete, interrupted, failed: REASON
    node: str | None = None  # the cluster node it ran on (bench tune --cluster); None: where bench ran


@dataclass
class Tune:
    folder: Path
    engine: str
    objective: str
    entries: list[TuneEntry]
    # The measuring flags every configuration shares (MeasureFlags' fields, and the levels), as given: a
    # resumed tune measures what is left exactly as it began.
    settings: dict[str, Any] = field(default_factory=dict)
    min_accuracy: float | None = None  # a configuration whose accuracy interval lies below it can't be the best
    # On a cluster (bench tune --cluster): what each configuration asks of a node, kept for --resume
    placement: dict[str, float] | None = None
    created_at: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))

    def save(self) -> None:
        data = {"engine": self.engine, "objective": self.objective, "created_at": self.created_at,
                "settings": self.settings, "min_accuracy": self.min_accuracy,
                **({"placement": self.placement} if self.placement else {}),
                "configs": [{**asdict(e.config), "run_dir": e.run_dir, "status": e.status,
                             **({"node": e.node} if e.node else {})} for e in self.entries]}
        temporary = self.folder / (TUNE_FILE + ".tmp")
        temporary.write_text(json.dumps(data, indent=2) + "\n")
        temporary.replace(self.folder / TUNE_FILE)  # never a half-written tune.json

    @classmethod
    def load(cls, folder: Path) -> Tune:
        path = folder / TUNE_FILE
        if not path.is_file():
            raise TuneError(f"--resume {folder}: no {TUNE_FILE} there (not a tune folder)")
        try:
            data = json.loads(path.read_text())
            entries = [TuneEntry(TuneConfig(c["name"], c["args"]), _run_dir_inside(folder, c.get("run_dir"), i),
                                 c.get("status", "pending"), _text_or_none(c.get("node")))
                       for i, c in enumerate(data["configs"])]
            placement = {str(k): float(v) for k, v in data["placement"].items()} if data.get("placement") else None
            return cls(folder, data["engine"], data["objective"], entries, data.get("settings", {}),
                       data.get("min_accuracy"), placement, data["created_at"])
        except UnsafeNameError as error:
            raise TuneError(f"--resume {folder}: {error}") from None
        except (ValueError, KeyError, TypeError, AttributeError) as error:  # a file not written by bench tune
            raise TuneError(f"--resume {folder}: {TUNE_FILE} is not a tune record ({type(error).__name__}: "
                            f"{str(error)[:200]})") from None


def _run_dir_inside(folder: Path, run_dir: object, index: int) -> str | None:
    """A configuration's run directory, as tune.json names it: one folder inside the tune folder, or none."""
    if run_dir is None:
        return None
    inside(folder, str(run_dir), f"{TUNE_FILE} configs[{index}].run_dir")
    return str(run_dir)


def _text_or_none(value: object) -> str | None:
    return None if value is None else str(value)[:200]


def check_objective(objective: str) -> str:
    if objective not in OBJECTIVES:
        raise TuneError(f"--objective {objective}: choose one of {', '.join(OBJECTIVES)}")
    return objective
