"""How long `bench --help` takes, and what it imports: the command line must answer at once.

Runs `python -m bench --help` (and `bench sweep --help`) N times after one warm-up run and prints the
median, min and max wall time of each, with the heavy modules (torch, matplotlib, pandas, numpy, jinja2)
that were imported, which should be none.

    python benchmarks/cli_startup.py [--runs 15]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

HEAVY = ("torch", "matplotlib", "pandas", "numpy", "jinja2", "aiohttp")
IMPORTS = ("import sys; sys.argv = ['bench', *sys.argv[1:]]\n"
           "from bench.commands.cli import app\n"
           "try:\n    app()\nexcept SystemExit:\n    pass\n"
           f"print('HEAVY', [m for m in {HEAVY!r} if m in sys.modules], file=sys.stderr)\n")


def time_once(args: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "bench", *args], capture_output=True, check=True)
    return time.perf_counter() - start


def heavy_imports(args: list[str]) -> str:
    result = subprocess.run([sys.executable, "-c", IMPORTS, *args], capture_output=True, text=True, check=True)
    return next(line for line in result.stderr.splitlines() if line.startswith("HEAVY")).removeprefix("HEAVY ")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    for command in (["--help"], ["sweep", "--help"]):
        time_once(command)  # warm the file cache
        times = [time_once(command) for _ in range(args.runs)]
        print(f"bench {' '.join(command):<13s} median {statistics.median(times) * 1000:6.0f} ms  "
              f"min {min(times) * 1000:5.0f}  max {max(times) * 1000:5.0f}  heavy modules imported: "
              f"{heavy_imports(command)}")


if __name__ == "__main__":
    main()
