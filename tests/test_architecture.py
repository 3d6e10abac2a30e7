"""The shape of the code (ARCHITECTURE.md): which package may import which, and no module importing itself
back through another. Every import counts, a function's lazy ones included."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("bench", "common", "costmodel", "engines", "loadgen", "reports", "scripted")

# package (or module prefix) -> what it may import of ours besides itself; the most specific prefix wins
MAY_IMPORT: dict[str, tuple[str, ...]] = {
    "bench": PACKAGES,
    "common": (),
    "loadgen": ("common",),
    "costmodel": ("common",),
    "reports": ("common", "loadgen.types", "costmodel.types"),
    "engines": ("common",),
    "engines.reference": (),
    "scripted": (),
}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def our_modules() -> dict[str, Path]:
    return {module_name(path): path for package in PACKAGES for path in (ROOT / package).rglob("*.py")}


def imports_of(path: Path) -> set[str]:
    """Every module of ours that `path` imports (`from a.b import c` counts a.b, and a.b.c when it is one)."""
    modules = our_modules()
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        found.update(name for name in names if name in modules)
    return found


def rule_for(module: str) -> tuple[str, tuple[str, ...]]:
    owner = max((prefix for prefix in MAY_IMPORT if module == prefix or module.startswith(prefix + ".")), key=len)
    return owner, MAY_IMPORT[owner]


def allowed(module: str, imported: str) -> bool:
    owner, may = rule_for(module)
    within = imported == owner or imported.startswith(owner + ".")
    if owner == "engines" and imported.startswith("engines.reference"):
        within = imported == "engines.reference"  # launchers run it by name, they don't reach inside
    return within or any(imported == m or imported.startswith(m + ".") for m in may)


@pytest.mark.parametrize("module", sorted(our_modules()))
def test_each_module_imports_only_what_its_package_may(module: str) -> None:
    path = our_modules()[module]
    bad = sorted(imported for imported in imports_of(path) if not allowed(module, imported))
    assert not bad, f"{module} ({rule_for(module)[0]} may import {rule_for(module)[1] or 'nothing of ours'}) " \
                    f"imports {bad}"


def test_no_module_imports_itself_back_through_another() -> None:
    graph = {module: imports_of(path) - {module} for module, path in our_modules().items()}
    cycles = []
    for start in graph:
        stack, seen = [(start, (start,))], set()
        while stack:
            node, trail = stack.pop()
            for nxt in graph.get(node, ()):
                if nxt == start:
                    cycles.append(" -> ".join((*trail, start)))
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, (*trail, nxt)))
    # a package's __init__ is imported by each of its modules' imports; only real modules count
    real = [c for c in cycles if not any(part in PACKAGES for part in c.split(" -> "))]
    assert not real, "import circles:\n" + "\n".join(sorted(set(real)))


def test_the_run_record_is_typed_through() -> None:
    """run.json is read into records, not dicts: no field of RunInfo, nor of the records it holds, is an
    open mapping, but for an engine's own details that the toolkit only shows (typed `object`, not `Any`)."""
    import dataclasses
    import typing

    from bench.run import runinfo

    def open_fields(cls: type) -> list[str]:
        hints = typing.get_type_hints(cls, vars(runinfo))
        return [f"{cls.__name__}.{name}" for name, hint in hints.items() if "Any" in str(hint)]

    records = [obj for obj in vars(runinfo).values()
               if dataclasses.is_dataclass(obj) and isinstance(obj, type) and obj.__module__ == runinfo.__name__]
    assert runinfo.RunInfo in records and len(records) > 10
    assert [bad for cls in records for bad in open_fields(cls)] == []


# Inside bench: commands (typer, printing) -> flows (what happens, returning typed outcomes) -> run, inputs,
# imports, exports (records and formats). A layer imports only its own and those below it; the top imports anything.
BENCH_LAYERS: dict[str, int] = {"bench.__main__": 0, "bench.commands": 0, "bench.flows": 1, "bench.run": 2,
                                "bench.inputs": 2, "bench.imports": 2, "bench.exports": 2}
PRINTERS = ("rich", "typer", "bench.commands")  # what only the top layer may import: the console and its tools


def layer_of(module: str) -> int | None:
    return next((layer for prefix, layer in BENCH_LAYERS.items()
                 if module == prefix or module.startswith(prefix + ".")), None)


def every_import(path: Path) -> set[str]:
    """Every module `path` imports, ours or not, a function's lazy imports included."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


BENCH_MODULES = sorted(m for m in our_modules() if layer_of(m) is not None)


@pytest.mark.parametrize("module", BENCH_MODULES)
def test_bench_layers_import_only_downwards(module: str) -> None:
    """flows never import commands; run, inputs, imports and exports never import flows or commands."""
    layer = layer_of(module)
    assert layer is not None
    up = sorted(imported for imported in imports_of(our_modules()[module])
                if (other := layer_of(imported)) is not None and other < layer)
    assert not up, f"{module} (layer {layer}) imports {up}, a layer above it"


@pytest.mark.parametrize("module", [m for m in BENCH_MODULES if layer_of(m) != 0])
def test_only_commands_print(module: str) -> None:
    """Below commands nothing imports rich, typer or the console: flows return outcomes, commands print them."""
    printing = sorted(name for name in every_import(our_modules()[module])
                      if any(name == p or name.startswith(p + ".") for p in PRINTERS))
    assert not printing, f"{module} imports {printing}; return a record (or take a callback) and let the command print"
