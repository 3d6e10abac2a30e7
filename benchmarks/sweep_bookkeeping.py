"""A sweep's bookkeeping per level, against the number of levels before it: the time after a level's last
request (its levels.jsonl line, its summary, summary.json / summary.csv / repeats.json written), two ways:

  - before: every level so far summarized again from requests.jsonl (`rundir.summarize_run`, as a sweep did
    after each level until it kept its tally), then the summaries written;
  - after:  the level summarized from the records the sweep wrote (`bench.run.tally`), then written.

No server: each level's `--records` RequestRecords (of `--tokens` streamed tokens each) are made here, from a
seed, and written through the writer the sweep uses (`TallyingWriter`), so the tally sees them as in a sweep.
The time writing a level's records takes while it runs is printed too, before (a plain writer) and after (the
tally's columns grown on the way): it is the load's time, not the bookkeeping's, but it is what the tally costs.

    python benchmarks/sweep_bookkeeping.py [--levels 20] [--records 2000] [--tokens 64]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from bench.run import rundir
from bench.run.runinfo import EngineRecord, RunInfo
from bench.run.tally import RunTally, TallyingWriter
from loadgen.recorder import JsonlWriter
from loadgen.runner import LevelRun
from loadgen.types import SLO, ClientCheck, RequestRecord


def level_records(label: str, first_id: int, n: int, tokens: int, rng: np.random.Generator) -> list[RequestRecord]:
    """One level's requests: 20 ms a token after a ~100 ms first token, a few failed."""
    records = []
    for i in range(n):
        ttft = float(rng.uniform(0.05, 0.15))
        times = [round(ttft + 0.02 * k + float(rng.uniform(0, 0.005)), 6) for k in range(tokens)]
        ok = bool(rng.random() > 0.01)
        send = 0.1 * i
        records.append(RequestRecord(
            run_id="bookkeeping", engine="synthetic", level=label, request_id=first_id + i, send_s=send,
            dispatch_s=send, user=i % 64, chunk_times_s=times if ok else [], chunk_tokens=[1] * tokens if ok else [],
            end_s=send + times[-1], prompt_tokens=512, output_tokens=tokens if ok else 0, max_tokens=tokens, ok=ok,
            error_kind=None if ok else "http_error", finish_reason="length" if ok else None))
    return records


def level_run(label: str, n: int) -> LevelRun:
    return LevelRun(level=label, kind="concurrency", value=64, started_at_unix_s=time.time(), wall_s=0.1 * n,
                    num_records=n, num_warmup=0, client=ClientCheck(0.1, 0.5, 1.0, 0.3), duration_s=0.1 * n)


def sweep(run_dir: Path, levels: int, n: int, tokens: int, old: bool) -> tuple[list[tuple[float, float]], str]:
    """Each level's (bookkeeping seconds after its last request, seconds writing its records while it ran), and
    the summary.json written last."""
    run_dir.mkdir()
    rundir.write_run_info(run_dir, RunInfo(run_id=run_dir.name, engine=EngineRecord(name="synthetic")))
    rng = np.random.default_rng(7)
    tally = RunTally(SLO())
    times = []
    path = run_dir / rundir.REQUESTS_FILE
    with (JsonlWriter(path) if old else TallyingWriter(path, tally)) as writer, \
            JsonlWriter(run_dir / rundir.LEVELS_FILE) as level_lines:
        for index in range(levels):
            label = f"c{index + 1}"
            records = level_records(label, index * n, n, tokens, rng)
            started = time.perf_counter()
            for record in records:  # as the level's requests end
                writer.write(record)
            in_level = time.perf_counter() - started
            row = asdict(level_run(label, n))
            started = time.perf_counter()
            level_lines.write(row)
            if old:
                rundir.write_summaries(run_dir, rundir.summarize_run(run_dir))
            else:
                tally.level_finished(row)
                rundir.write_summaries(run_dir, tally.summaries)
            times.append((time.perf_counter() - started, in_level))
    return times, (run_dir / rundir.SUMMARY_JSON).read_text()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--levels", type=int, default=20)
    parser.add_argument("--records", type=int, default=2000, help="records per level")
    parser.add_argument("--tokens", type=int, default=64, help="streamed tokens per record")
    args = parser.parse_args()
    results, written = {}, {}
    for name, old in (("before", True), ("after", False)):
        with tempfile.TemporaryDirectory() as tmp:
            results[name], written[name] = sweep(Path(tmp) / "run", args.levels, args.records, args.tokens, old)
    print(f"{args.levels} levels of {args.records:,} records ({args.tokens} tokens each): seconds after each "
          "level's last request")
    print(f"{'level':>5} {'before':>9} {'after':>9}   writing the level's records: before, after (with the tally)")
    for index, ((before, wrote), (after, tallied)) in enumerate(zip(results["before"], results["after"], strict=True)):
        print(f"{index + 1:>5} {before:>9.3f} {after:>9.3f}   {wrote:>9.3f} {tallied:>9.3f}")
    print(f"total: before {sum(t for t, _ in results['before']):.2f} s, after "
          f"{sum(t for t, _ in results['after']):.2f} s; the last summary.json the same both ways: "
          f"{written['before'] == written['after']}")


if __name__ == "__main__":
    main()
