"""A stand-in for `nvidia-smi` on a machine without a GPU: it answers `--query-gpu=F1,F2,... --format=csv...`
the way nvidia-smi does (one line per GPU, fields in the order asked, `, ` between them, units unless
`nounits`, a header unless `noheader`, `[N/A]` for what a GPU does not report), and refuses a field it does
not know as nvidia-smi does (exit 2).

The GPUs it reports: `STANDIN_GPUS` of them (default 2), each drawing `STANDIN_GPU_POWER_W` (default 312.45),
`STANDIN_GPU_NO_POWER=1` makes power.draw `[N/A]`. `STANDIN_GPU_FAIL=1` makes it fail as a driver that is not
loaded does (exit 9).
"""

from __future__ import annotations

import os
import sys

NAME = "NVIDIA H100 80GB HBM3"
UNITS = {"utilization.gpu": " %", "memory.used": " MiB", "memory.total": " MiB", "power.draw": " W",
         "clocks.sm": " MHz", "temperature.gpu": ""}


def values(index: int) -> dict[str, str]:
    power = "[N/A]" if os.environ.get("STANDIN_GPU_NO_POWER") else os.environ.get("STANDIN_GPU_POWER_W", "312.45")
    return {"index": str(index), "name": NAME, "utilization.gpu": str(87 - index), "memory.used": str(61234 + index),
            "memory.total": "81559", "power.draw": power, "clocks.sm": "1980", "temperature.gpu": str(64 + index)}


def main(argv: list[str]) -> int:
    if os.environ.get("STANDIN_GPU_FAIL"):
        print("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the "
              "latest NVIDIA driver is installed and running.")
        return 9
    query = next((a.split("=", 1)[1] for a in argv if a.startswith("--query-gpu=")), None)
    form = next((a.split("=", 1)[1] for a in argv if a.startswith("--format=")), "")
    if query is None or not form.startswith("csv"):
        print("usage: nvidia-smi --query-gpu=... --format=csv (the stand-in answers only that)", file=sys.stderr)
        return 2
    fields = query.split(",")
    for field in fields:
        if field not in values(0):
            print(f'Field "{field}" is not a valid field to query.', file=sys.stderr)
            return 2
    options = form.split(",")[1:]
    if "noheader" not in options:
        print(", ".join(f + ("" if "nounits" in options else f" [{UNITS.get(f, '').strip()}]") for f in fields))
    for index in range(int(os.environ.get("STANDIN_GPUS", "2"))):
        row = values(index)
        print(", ".join(row[f] if "nounits" in options or row[f].startswith("[") else row[f] + UNITS.get(f, "")
                        for f in fields))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
