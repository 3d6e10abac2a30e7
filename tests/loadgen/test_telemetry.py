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


def test_vllms_spec_decode_counters_and_their_positions_are_read() -> None:
    page = ('vllm:spec_decode_num_drafts_total{model_name="m"} 10\n'
            'vllm:spec_decode_num_draft_tokens_total{model_name="m"} 40\n'
            'vllm:spec_decode_num_accepted_tokens_total{model_name="m"} 25\n'
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="m",position="0"} 9\n'
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="m",position="1"} 7\n'
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="m",position="x"} 99\n'
            'vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="m",position="1000000"} 99\n')
    values = parse_metrics(page)
    assert (values["spec_drafts_total"], values["spec_draft_tokens_total"], values["spec_accepted_tokens_total"]) \
        == (10, 40, 25)
    # a position that is no small number is no position (a hostile page names no million columns)
    assert {k: v for k, v in values.items() if k.startswith("spec_accepted_pos_")} == \
        {"spec_accepted_pos_0": 9, "spec_accepted_pos_1": 7}


def test_a_levels_acceptance_is_the_growth_of_the_counters_over_it() -> None:
    before = {"t": 10.0, "spec_drafts_total": 100, "spec_draft_tokens_total": 400, "spec_accepted_tokens_total": 150,
              "spec_accepted_pos_0": 80, "spec_accepted_pos_1": 50, "spec_accepted_pos_2": 20}
    after = {"t": 12.0, "spec_drafts_total": 120, "spec_draft_tokens_total": 480, "spec_accepted_tokens_total": 180,
             "spec_accepted_pos_0": 96, "spec_accepted_pos_1": 60, "spec_accepted_pos_2": 24,
             "spec_accepted_pos_3": 0}  # a position first published within the level
    spec = server_view("c1", [before, after], 10.0, 12.0).spec
    assert spec is not None and (spec.drafts, spec.draft_tokens, spec.accepted_tokens) == (20, 80, 30)
    assert spec.acceptance_rate == 30 / 80 and spec.mean_acceptance_length == 1 + 30 / 20
    assert spec.acceptance_by_position == (16 / 20, 10 / 20, 4 / 20, 0.0)


def test_sglangs_mean_acceptance_length_is_averaged_over_ranks_and_samples() -> None:
    page = ('sglang:spec_accept_length{model_name="m",dp_rank="0"} 2.0\n'
            'sglang:spec_accept_length{model_name="m",dp_rank="1"} 3.0\n')
    assert parse_metrics(page)["spec_accept_length"] == 2.5
    samples = [{"t": 1.0, "spec_accept_length": 2.5}, {"t": 2.0, "spec_accept_length": 3.5}]
    spec = server_view("c1", samples, 1.0, 2.0).spec
    assert spec is not None and spec.mean_acceptance_length == 3.0 and spec.acceptance_rate is None
    idle = server_view("c1", [{"t": 1.0, "spec_accept_length": 0.0}, {"t": 2.0, "spec_accept_length": 0.0}], 1, 2)
    assert idle.spec is None  # SGLang's default without speculation


def test_replicas_acceptance_pools_their_drafts() -> None:
    from loadgen.telemetry import summed_view
    from loadgen.types import ServerView, SpecDecodeView

    def view(spec: SpecDecodeView) -> ServerView:
        return ServerView("c8", 3, 1.0, 0.0, 0.1, 0.0, None, spec=spec)

    pooled = summed_view("c8", [view(SpecDecodeView.of_counts(10, 40, 30, [9, 8, 7, 6])),
                                view(SpecDecodeView.of_counts(30, 120, 30, [20, 10]))]).spec
    assert pooled is not None and pooled.acceptance_rate == 60 / 160 and pooled.mean_acceptance_length == 1 + 60 / 40
    assert pooled.acceptance_by_position == pytest.approx((29 / 40, 18 / 40, 7 / 40, 6 / 40))
