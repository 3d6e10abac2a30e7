"""Each fuzz test's cases, read and refused, said at the end of the run (the issue asks how many each ran)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.fuzz.mutations import CASES


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One folder per test module for the mutated files (a fresh name per case)."""
    return tmp_path_factory.mktemp("fuzz")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    tests = sorted({test for test, _ in CASES if test != "files"})
    if not tests:
        return
    terminalreporter.section("fuzz cases")
    for test in tests:
        counts = {kind: n for (name, kind), n in CASES.items() if name == test}
        reads = counts.get("read", 0) + counts.get("refused", 0)
        terminalreporter.write_line(f"{test}: {counts.get('examples', 0)} cases, {reads} reads "
                                    f"({counts.get('read', 0)} read, {counts.get('refused', 0)} refused)")
