"""Stop sweeps at random moments and check that nothing is left behind.

Runs N sweeps of the reference engine (random weights, so it starts fast), as a process or inside a podman
container (`--engine container`), each started the way a shell script starts a background job (SIGINT
ignored), and sends each one SIGINT, SIGTERM, SIGHUP or SIGKILL at a random moment, start-up included.
Then it checks that the sweep stopped in time (within 5 s of the signal) with 128 + the signal's number,
that no engine process or container is left (waiting up to 5 s for a process, 20 s for a container after
SIGKILL, when only the watcher can remove it), that every run directory has a run.json and every record
line in it is whole. Prints one line per sweep and a verdict.

    python benchmarks/interrupt_soak.py [--sweeps 20] [--signals INT,TERM,HUP,KILL] [--engine reference|container]
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: tests/podman.py
from tests.podman import podman_docker_api, reference_container_file  # noqa: E402

STOP_WITHIN_S = 5.0
PROCESS_GONE_WITHIN_S = 5.0
CONTAINER_GONE_WITHIN_S = 20.0


def engines_running() -> list[str]:
    out = subprocess.run(["ps", "-eo", "pid,stat,args"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "engines.reference" in line and " Z" not in line
            and "interrupt_soak" not in line]


def containers_left() -> list[str]:
    import docker

    return [c.name for c in docker.from_env().containers.list(all=True, filters={"label": "llm-selfhost-bench"})]


def wait_for_nothing_left(check: object, timeout_s: float) -> tuple[list[str], float]:
    start = time.monotonic()
    while True:
        left = check()  # type: ignore[operator]
        if not left or time.monotonic() - start > timeout_s:
            return left, time.monotonic() - start
        time.sleep(0.05)


def check_run_dir(run_dir: Path) -> str:
    run = json.loads((run_dir / "run.json").read_text())
    records = run_dir / "requests.jsonl"
    lines = records.read_text().splitlines() if records.exists() else []
    for line in lines:
        json.loads(line)  # every record whole
    return f"status={run['status']:<12s} records={len(lines)}"


def as_background_job() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGQUIT, signal.SIG_IGN)


def soak_one(index: int, engine_args: list[str], sig: signal.Signals, delay: float, out: Path,
             container: bool) -> list[str]:
    command = [sys.executable, "-m", "bench", "sweep", *engine_args, "--concurrency", "1,4", "--duration", "30",
               "--input-tokens", "32", "--output-tokens", "16", "--no-report", "--out", str(out)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               preexec_fn=as_background_job)
    time.sleep(delay)
    process.send_signal(sig)
    problems = []
    sent = time.monotonic()
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        problems.append(f"sweep {index}: did not stop within 60 s of {sig.name}")
    stopped_s = time.monotonic() - sent
    if stopped_s > STOP_WITHIN_S:
        problems.append(f"sweep {index}: took {stopped_s:.1f} s to stop after {sig.name}")
    expected = -signal.SIGKILL if sig == signal.SIGKILL else 128 + sig
    if process.returncode not in (expected, 2):  # 2: a signal during argument parsing ends like a bad flag
        problems.append(f"sweep {index}: exit {process.returncode}, expected {expected}")
    left, gone_s = wait_for_nothing_left(engines_running, PROCESS_GONE_WITHIN_S)
    if left:
        problems.append(f"sweep {index}: engine still running {gone_s:.1f} s after: {left}")
    boxes: list[str] = []
    if container:
        boxes, box_s = wait_for_nothing_left(containers_left, CONTAINER_GONE_WITHIN_S)
        gone_s = max(gone_s, box_s)
        if boxes:
            problems.append(f"sweep {index}: containers left {box_s:.1f} s after: {boxes}")
    run_dirs = list(out.iterdir()) if out.exists() else []
    state = check_run_dir(run_dirs[0]) if run_dirs else "no run directory (stopped before it existed)"
    print(f"sweep {index:2d}: {sig.name:7s} after {delay:5.1f} s -> exit {process.returncode:4d} in "
          f"{stopped_s:4.1f} s, {state}, left: {len(left) + len(boxes)} (all gone after {gone_s:.1f} s)", flush=True)
    return problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sweeps", type=int, default=20)
    parser.add_argument("--max-delay", type=float, default=12.0)
    parser.add_argument("--signals", default="INT,TERM,HUP,KILL")
    parser.add_argument("--engine", choices=["reference", "container"], default="reference")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    signals = [signal.Signals[f"SIG{name.strip().upper()}"] for name in args.signals.split(",")]
    problems = []
    with tempfile.TemporaryDirectory() as tmp:
        container = args.engine == "container"
        with podman_docker_api(Path(tmp)) if container else nullcontext():
            engine_args = ["--model", "dummy:tiny"]
            if container:
                spec = Path(tmp) / "engine.yaml"
                spec.write_text(yaml.safe_dump(reference_container_file("dummy:tiny")))
                engine_args = ["--engine-file", str(spec)]
            for index in range(args.sweeps):
                sig, delay = rng.choice(signals), rng.uniform(0.5, args.max_delay)
                problems += soak_one(index, engine_args, sig, delay, Path(tmp) / f"sweep{index}", container)
    print("\n".join(problems) if problems else f"all {args.sweeps} stopped sweeps left nothing running")


if __name__ == "__main__":
    main()
