from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

STANDIN = Path(__file__).with_name("standin_nvidia_smi.py")


@pytest.fixture
def standin_gpus(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`nvidia-smi` on PATH is the stand-in (two H100s at 312.45 W unless STANDIN_* says otherwise); NVML,
    were it installed, is kept out so the stand-in is what answers."""
    bin_dir = tmp_path_factory.mktemp("bin")
    script = bin_dir / "nvidia-smi"
    script.write_text(f"#!/bin/sh\nexec {sys.executable} {STANDIN} \"$@\"\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setitem(sys.modules, "pynvml", None)
    return bin_dir
