"""Multi-turn chat: each user carries its conversations turn by turn, sending the history every time."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import asdict

from loadgen.arrivals import Level
from loadgen.runner import LevelBounds
from loadgen.types import Distribution
from loadgen.workload import LengthDistribution, MultiTurn, Workload
from tests.bench.test_cli import bench, only_run_dir
from tests.e2e.levels import run_one_level


def test_every_turn_sends_the_conversation_so_far_with_the_servers_own_answers(scripted, tmp_path) -> None:
    scripted.set_script(ttft_ms=2, itl_ms=1)
    workload = Workload(input_tokens=LengthDistribution(value=10), output_tokens=LengthDistribution(value=6),
                        multi_turn=MultiTurn(turns=3))
    s, records, _ = run_one_level(scripted.base_url, tmp_path, Level("concurrency", 2), LevelBounds(max_requests=12),
                                  workload=workload)
    measured = [r for r in records if not r.is_warmup]
    assert s.requests.num_failed == 0 and len(measured) == 12
    assert s.latency.ttft_ms_first_turn == Distribution.of([r.ttft_s * 1000 for r in measured if r.turn == 1])
    assert s.latency.ttft_ms_later_turns == Distribution.of([r.ttft_s * 1000 for r in measured if r.turn > 1])
    assert s.latency.ttft_ms_first_turn.p50 is not None and s.latency.ttft_ms_later_turns.p50 is not None
    by_conversation = defaultdict(list)
    for r in measured:
        by_conversation[r.conversation_id].append(r)
    assert len(by_conversation) == 4
    for turns in by_conversation.values():
        assert [r.turn for r in turns] == [1, 2, 3]  # in order...
        assert len({r.user for r in turns}) == 1  # ...by one user
        # The scripted server counts the words of every message: 10 new ones per turn, plus each earlier
        # answer ("x" six times) sent back.
        assert [r.prompt_tokens for r in turns] == [10, 26, 42]
        assert all(r.output_text is None for r in turns)  # read for the next turn, never written


def test_a_sweep_of_conversations_hits_the_prefix_cache_on_later_turns(tmp_path) -> None:
    result = bench("sweep", "--model", "dummy:tiny", "--turns", "3", "--concurrency", "2", "--requests", "6",
                   "--input-tokens", "40", "--output-tokens", "24", "--no-report", "--out", str(tmp_path), timeout=180)
    assert result.returncode == 0, result.stderr
    run_dir = only_run_dir(tmp_path)
    rows = [json.loads(line) for line in (run_dir / "requests.jsonl").read_text().splitlines()]
    measured = [r for r in rows if not r["is_warmup"]]
    assert len(measured) == 6 and all(r["ok"] for r in measured)
    later = [r for r in measured if r["turn"] > 1]
    assert later and all(r["cached_tokens"] >= 64 for r in later)  # the history's full blocks came from cache
    assert json.loads((run_dir / "run.json").read_text())["scenario"]["workload"]["multi_turn"] == {"turns": 3}
    (summary,) = json.loads((run_dir / "summary.json").read_text())
    assert summary["mean_cached_tokens"] == sum(r["cached_tokens"] for r in measured) / len(measured)
    later_ttfts = [r["chunk_times_s"][0] * 1000 for r in later]
    assert summary["ttft_ms_later_turns"] == asdict(Distribution.of(later_ttfts))
    # the note column wraps where the row's other notes (a busy machine's) make it long: read it unwrapped
    assert "later turns" in re.sub(r"[│\s]+", " ", result.stdout)


def test_conversations_refuse_an_arrival_rate(tmp_path) -> None:
    result = bench("sweep", "--engine", "endpoint", "--base-url", "http://127.0.0.1:9/v1", "--model", "m",
                   "--turns", "3", "--rate", "2", "--out", str(tmp_path))
    assert result.returncode == 2
    assert "multi_turn runs with concurrency levels only" in result.stderr
