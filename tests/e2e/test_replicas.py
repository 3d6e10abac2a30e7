"""Replicas of the reference engine behind vllm-router (an existing router, never ours): launched, measured
through the router, each replica's own metrics sampled, and everything stopped."""

from __future__ import annotations

import json
import os

import pytest

from bench.run.rundir import read_run
from tests.bench.test_cli import bench, only_run_dir
from tests.servers import is_running


def test_two_replicas_behind_the_router_are_measured_and_each_is_sampled(tmp_path) -> None:
    result = bench("sweep", "--model", "dummy:tiny", "--replicas", "2", "--router-policy", "round_robin",
                   "--concurrency", "4", "--duration", "3", "--input-tokens", "32", "--output-tokens", "8",
                   "--shared-prefix", "2:16", "--no-report", "--out", str(tmp_path), timeout=240)
    assert result.returncode == 0, result.stderr
    run_dir = only_run_dir(tmp_path)
    run = json.loads((run_dir / "run.json").read_text())
    details = run["engine"]["details"]
    assert run["engine"]["name"] == "reference x2" and details["router"]["policy"] == "round_robin"
    replicas = details["replicas"]
    assert len(replicas) == 2 and len({r["base_url"] for r in replicas}) == 2
    summary = json.loads((run_dir / "summary.json").read_text())[0]
    assert summary["num_ok"] > 0 and summary["num_failed"] == 0
    read = read_run(run_dir)
    views = read.replica_views
    assert {index for index, _ in views} == {0, 1}
    tokens = [view.generated_tokens for _, view in views]
    assert all(t is not None and t > 0 for t in tokens)  # round robin: both replicas generated
    assert "each replica behind the router" in result.stdout
    # each replica had its own share of the cores, a thread per core, said in run.json and on the terminal
    budgets = [r["budget"] for r in replicas]
    cores = [set(b["cpus"]) for b in budgets]
    assert set().union(*cores) <= os.sched_getaffinity(0) and all(b["threads"] == len(b["cpus"]) for b in budgets)
    if len(os.sched_getaffinity(0)) >= 2:
        assert not cores[0] & cores[1]  # no core fought over
    assert all(b["env"]["OMP_NUM_THREADS"] == str(b["threads"]) for b in budgets)
    assert replicas[0]["budget_text"] in result.stdout
    # the server's table is the replicas summed, not the router's port
    (server,) = read.server_views
    assert server.num_replicas == 2 and server.generated_tokens == pytest.approx(sum(tokens))
    assert server.mean_running == pytest.approx(sum(v.mean_running or 0 for _, v in views))
    assert "2 replicas summed" in result.stdout and "share of tokens" in result.stdout
    assert not is_running(details["router"]["pid"])
    assert not any(is_running(r["details"]["pid"]) for r in replicas)


def test_bad_replica_flags_are_one_line_errors_naming_what_to_change(cli, tmp_path) -> None:
    base = ["sweep", "--requests", "1", "--out", str(tmp_path)]
    zero = cli(*base, "--replicas", "0")
    assert zero.exit_code != 0 and "--replicas 0: expected a whole number >= 1" in zero.stderr
    policy = cli(*base, "--replicas", "2", "--router-policy", "fastest")
    assert policy.exit_code != 0 and "--router-policy fastest: choose one of round_robin" in policy.stderr
    endpoint = cli(*base, "--replicas", "2", "--engine", "endpoint", "--base-url", "http://127.0.0.1:9/v1",
                   "--model", "m")
    assert endpoint.exit_code != 0 and "only local engines" in endpoint.stderr
    missing = cli(*base, "--replicas", "2", "--model", "dummy:tiny", env={"BENCH_VLLM_ROUTER": "/no/such/router"})
    assert missing.exit_code != 0 and "BENCH_VLLM_ROUTER=/no/such/router is not an executable" in missing.stderr
    router_flag = cli(*base, "--replicas", "2", "--model", "dummy:tiny", "--router-arg", "port=9")
    assert router_flag.exit_code != 0 and "--router-arg port: set by bench itself" in router_flag.stderr
    assert not list(tmp_path.glob("*/replica-*/engine.log"))  # the router was looked for before any replica started


def test_bench_serve_runs_replicas_behind_the_router_until_stopped(tmp_path) -> None:
    import re
    import signal
    import subprocess

    import httpx

    from engines.launch import free_port
    from tests.bench.test_cli import BENCH

    port = free_port()
    process = subprocess.Popen([*BENCH, "serve", "--replicas", "2", "--model", "dummy:tiny", "--port", str(port)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        match = re.search(r"at (http://127\.0\.0\.1:\d+/v1) \(replicas: ([^)]*)\)", line)
        assert match, line
        assert match.group(1) == f"http://127.0.0.1:{port}/v1"
        replicas = match.group(2).split(", ")
        assert len(replicas) == 2
        models = httpx.get(match.group(1) + "/models", timeout=10).json()
        assert models["data"]
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
    for url in (match.group(1), *replicas):
        try:
            httpx.get(url + "/models", timeout=2)
            raise AssertionError(f"{url} still answers after bench serve stopped")
        except httpx.ConnectError:
            pass


class _PodMetrics:
    """A pod's /metrics as vLLM serves them, on a real HTTP server: its token counter grows by `step` at
    each scrape, so the sweep's sampling of it is seen in what it recorded."""

    def __init__(self, step: int) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        pod = self
        self.tokens = 0

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                pod.tokens += step
                body = (f"vllm:num_requests_running 1\nvllm:generation_tokens_total {pod.tokens}\n"
                        if self.path == "/metrics" else "").encode()
                self.send_response(200 if body else 404)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def test_an_endpoints_pods_are_sampled_from_replica_metrics(scripted, tmp_path) -> None:
    pods = [_PodMetrics(step=10), _PodMetrics(step=30)]
    try:
        result = bench("sweep", "--engine", "endpoint", "--base-url", scripted.base_url, "--model", "scripted",
                       "--replica-metrics", f"{pods[0].url},{pods[1].url}/metrics", "--concurrency", "2",
                       "--duration", "2", "--no-report", "--out", str(tmp_path))
    finally:
        for pod in pods:
            pod.server.shutdown()
    assert result.returncode == 0, result.stderr
    run_dir = only_run_dir(tmp_path)
    details = json.loads((run_dir / "run.json").read_text())["engine"]["details"]
    assert [r["metrics_url"] for r in details["replicas"]] == [pod.url + "/metrics" for pod in pods]
    views = dict(read_run(run_dir).replica_views)
    assert set(views) == {0, 1}
    assert views[0].generated_tokens and views[1].generated_tokens
    assert views[1].generated_tokens > views[0].generated_tokens  # the second pod's counter grows 3x as fast
    assert "each replica behind the router" in result.stdout


def test_replica_metrics_are_checked_before_anything_is_sent(scripted, tmp_path) -> None:
    base = ["sweep", "--requests", "1", "--out", str(tmp_path), "--model", "scripted"]
    bad = bench(*base, "--engine", "endpoint", "--base-url", scripted.base_url, "--replica-metrics", "pod-1:8000")
    assert bad.returncode != 0 and "--replica-metrics pod-1:8000: expected an http(s) URL" in bad.stderr
    local = bench(*base, "--replica-metrics", "http://127.0.0.1:9/metrics")
    assert local.returncode != 0 and "--replica-metrics is for --engine endpoint" in local.stderr
    assert not list(tmp_path.iterdir())


def test_cache_aware_sends_a_group_back_to_the_replica_that_holds_its_prefix(tmp_path) -> None:
    """Checked, not trusted: a group's second and third requests go where its first went (and where the
    router's thresholds say it balances by load instead, they are passed and recorded)."""
    import httpx

    from engines.engine_file import EngineFile
    from engines.registry import make_launcher
    from loadgen.telemetry import parse_metrics

    spec = EngineFile(engine="reference", model="dummy:tiny", replicas=2, router_policy="cache_aware",
                      router_args={"balance-abs-threshold": 8})
    with make_launcher(spec)(tmp_path) as (endpoint, info):
        roots = [r["base_url"].removesuffix("/v1") for r in info.details["replicas"]]

        def lookups() -> list[float]:
            return [parse_metrics(httpx.get(root + "/metrics").text).get("prefix_cache_queries_total", 0.0)
                    for root in roots]

        def replica_of(text: str) -> int:
            before = lookups()
            answer = httpx.post(endpoint.base_url + "/chat/completions", timeout=60, json={
                "model": endpoint.model, "messages": [{"role": "user", "content": text}], "max_tokens": 2})
            assert answer.status_code == 200, answer.text
            (where,) = [i for i, (a, b) in enumerate(zip(lookups(), before, strict=True)) if a > b]
            return where

        group = " ".join(f"alpha{i}" for i in range(300))
        first = replica_of(group + " first question")
        assert replica_of(group + " second question") == first
        assert replica_of(group + " a third") == first
        command = info.details["router"]["command"]
    assert command[command.index("--balance-abs-threshold") + 1] == "8"
    assert info.details["router"]["args"] == {"balance-abs-threshold": "8"}
