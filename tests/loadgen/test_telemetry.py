"""Reading engines' Prometheus pages into our series, and a level's view from the samples."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from loadgen.telemetry import metrics_url, parse_metrics, server_view
from tests.servers import is_running


def test_the_reference_engines_page_gives_vllm_named_series() -> None:
    from engines.reference.core.engine import EngineStats
    from engines.reference.serving.metrics import EngineMetrics

    metrics = EngineMetrics("m")
    metrics.record_step(EngineStats(
        num_running=3, num_waiting=5, kv_cache_usage_perc=0.25, num_free_blocks=30, num_blocks=40,
        num_prefix_cache_query_tokens=100, num_prefix_cache_hit_tokens=40, num_preemptions=1, num_prompt_tokens=100,
        num_generation_tokens=9,
    ))
    values = parse_metrics(metrics.render().decode())
    assert values["requests_running"] == 3 and values["requests_waiting"] == 5
    assert values["kv_cache_usage"] == 0.25 and values["preemptions_total"] == 1
    assert values["prefix_cache_queries_total"] == 100 and values["prefix_cache_hits_total"] == 40


def test_series_published_per_model_are_summed() -> None:
    page = ('# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name="a"} 2\n'
            'vllm:num_requests_running{model_name="b"} 3\n')
    assert parse_metrics(page) == {"requests_running": 5}


def test_a_levels_view_uses_only_the_samples_taken_while_it_ran() -> None:
    samples = [
        {"t": 9.0, "requests_running": 100, "kv_cache_usage": 1.0},  # before the level
        {"t": 10.0, "requests_running": 2, "requests_waiting": 0, "kv_cache_usage": 0.1,
         "prefix_cache_queries_total": 1000, "prefix_cache_hits_total": 100, "preemptions_total": 4},
        {"t": 11.0, "requests_running": 4, "requests_waiting": 2, "kv_cache_usage": 0.5,
         "prefix_cache_queries_total": 3000, "prefix_cache_hits_total": 1100, "preemptions_total": 6},
        {"t": 13.0, "requests_running": 100},  # after it
    ]
    view = server_view("c4", samples, 10.0, 12.0)
    assert (view.num_samples, view.mean_running, view.mean_waiting, view.max_kv_cache_usage) == (2, 3, 1, 0.5)
    assert view.preemptions == 2 and view.prefix_cache_hit_rate == 0.5


def test_the_metrics_page_sits_beside_the_api() -> None:
    assert metrics_url("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000/metrics"
    assert metrics_url("http://host/v1/") == "http://host/metrics"



@pytest.mark.parametrize("kill_after_s", [0.0, 1.5])  # before the sampler is up, and while it samples
def test_the_sampler_stops_by_itself_when_its_parent_is_killed(tmp_path, kill_after_s: float) -> None:
    """A sweep killed with SIGKILL can't stop its sampler; the sampler notices and exits."""
    script = (
        "import os, subprocess, sys, time\n"
        "p = subprocess.Popen([sys.executable, '-m', 'loadgen.telemetry', 'http://127.0.0.1:9/metrics', "
        f"'{tmp_path / 't.jsonl'}', '--interval', '0.1', '--parent', str(os.getpid())])\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    sampler = int(parent.stdout.readline())
    time.sleep(kill_after_s)
    assert is_running(sampler)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 10
    while is_running(sampler) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not is_running(sampler), "the sampler outlived its parent"
