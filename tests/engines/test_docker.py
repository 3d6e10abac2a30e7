"""Container engines through the real Docker API (podman here), with a real server inside the container."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import docker
import pytest
import yaml

from engines import lifeline
from engines.docker import (
    ContainerOptions,
    ContainerSpec,
    launch_container,
    run_kwargs,
    sglang_spec,
    trtllm_spec,
    vllm_spec,
)
from engines.launch import EngineStartError
from tests.engines.conftest import IMAGE, ROOT, host_mounts, scripted_server_command


def scripted_spec(**changes) -> ContainerSpec:
    fields = {"engine": "scripted-container", "image": IMAGE, "command": scripted_server_command(),
              "container_port": 8000, "served_model": "scripted", "volumes": host_mounts(), "gpus": None,
              "ipc_host": False, "working_dir": str(ROOT), "ready_timeout_s": 60.0}
    return ContainerSpec(**{**fields, **changes})


def our_containers(client: docker.DockerClient) -> list:
    """Our containers. Listing inspects each one, so a container removed in between fails the listing (podman
    answers 500, "no such container"): it is gone, and the list is asked for again."""
    for _ in range(10):
        try:
            return client.containers.list(all=True, filters={"label": "llm-selfhost-bench"})
        except docker.errors.APIError:
            time.sleep(0.1)
    return client.containers.list(all=True, filters={"label": "llm-selfhost-bench"})


def test_container_is_published_on_localhost_only_measured_and_removed(podman_api, tmp_path, monkeypatch) -> None:
    secret = "hf_test_value_never_written_7d1e"
    monkeypatch.setenv("HF_TOKEN", secret)
    client = docker.from_env()
    spec = scripted_spec(env={"HF_TOKEN": os.environ["HF_TOKEN"]})
    with launch_container(tmp_path, spec) as (endpoint, info):
        (container,) = our_containers(client)
        bindings = container.attrs["HostConfig"]["PortBindings"]["8000/tcp"]
        assert [b["HostIp"] for b in bindings] == ["127.0.0.1"]
        assert f"HF_TOKEN={secret}" in container.attrs["Config"]["Env"]  # passed through to the engine
        assert info.details["time_to_ready_s"] > 0 and info.details["env_names"] == ["HF_TOKEN"]
        assert endpoint.base_url.startswith("http://127.0.0.1:") and endpoint.model == "scripted"
        import httpx

        assert httpx.get(endpoint.base_url + "/models").json()["data"][0]["id"] == "scripted"
        (tmp_path / "run.json").write_text(json.dumps({"engine": info.__dict__}, default=str))
    assert our_containers(client) == []
    for path in tmp_path.iterdir():
        assert secret not in path.read_text(errors="replace"), path.name
    assert "listening on" in (tmp_path / "engine.log").read_text()


def test_container_that_exits_during_startup_reports_its_log_and_is_removed(podman_api, tmp_path) -> None:
    command = [sys.executable, "-c", "print('CUDA out of memory while loading weights', flush=True); exit(3)"]
    with pytest.raises(EngineStartError, match="container exited with code 3 during start-up") as error:
        with launch_container(tmp_path, scripted_spec(command=command)):
            pass
    assert "CUDA out of memory while loading weights" in str(error.value)
    assert our_containers(docker.from_env()) == []


def test_container_that_never_answers_times_out_and_is_removed(podman_api, tmp_path) -> None:
    command = [sys.executable, "-c", "import time; time.sleep(300)"]
    with pytest.raises(EngineStartError, match="was not ready after 2 s"):
        with launch_container(tmp_path, scripted_spec(command=command, ready_timeout_s=2.0)):
            pass
    assert our_containers(docker.from_env()) == []


def test_missing_image_that_cannot_be_pulled_is_one_clear_error(podman_api, tmp_path) -> None:
    with pytest.raises(EngineStartError, match="image localhost/no-such-image:1 is not here and could not be pulled"):
        with launch_container(tmp_path, scripted_spec(image="localhost/no-such-image:1")):
            pass


def _start_container_sweep(tmp_path) -> tuple[subprocess.Popen[str], Path]:
    """`bench sweep` of the scripted server in a container, once its first records are written."""
    spec_file = tmp_path / "engine.yaml"
    spec_file.write_text(yaml.safe_dump({
        "engine": "container", "name": "scripted-container", "image": IMAGE, "command": scripted_server_command(),
        "container_port": 8000, "served_model": "scripted", "volumes": host_mounts(), "gpus": "none",
        "working_dir": str(ROOT), "ready_timeout_s": 60,
    }))
    out = tmp_path / "runs"
    process = subprocess.Popen([sys.executable, "-m", "bench", "sweep", "--engine-file", str(spec_file),
                                "--concurrency", "2", "--duration", "60", "--output-tokens", "8", "--out", str(out)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not any(p.stat().st_size for p in out.glob("*/requests.jsonl")):
        time.sleep(0.2)
    (run_dir,) = [p for p in out.iterdir() if not p.name.startswith('.')]
    return process, run_dir


def test_sweep_interrupted_by_sigint_removes_its_container(podman_api, tmp_path) -> None:
    process, run_dir = _start_container_sweep(tmp_path)
    try:
        (container,) = our_containers(docker.from_env())
        assert container.labels["llm-selfhost-bench.run"] == run_dir.name
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 130, stderr
    assert our_containers(docker.from_env()) == []
    run = json.loads((run_dir / "run.json").read_text())
    assert run["status"] == "interrupted" and run["engine"]["details"]["image"] == IMAGE


def test_a_sweep_killed_outright_still_has_its_container_removed(podman_api, tmp_path) -> None:
    process, run_dir = _start_container_sweep(tmp_path)
    try:
        assert our_containers(docker.from_env()), "the container should be running mid-sweep"
        process.send_signal(signal.SIGKILL)
        process.wait()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and our_containers(docker.from_env()):
            time.sleep(0.2)
    finally:
        process.kill()
    assert our_containers(docker.from_env()) == []
    assert "lifeline: the command that launched this engine died" in (run_dir / "engine.log").read_text()


def test_bench_clean_removes_a_container_whose_command_died(podman_api, tmp_path) -> None:
    client = docker.from_env()
    labels = {"llm-selfhost-bench": "scripted-container", "llm-selfhost-bench.owner": "999999999:1",
              "llm-selfhost-bench.run": "20260101T000000Z-container-chat"}
    alive = {**labels, "llm-selfhost-bench.owner": lifeline.owner_id()}
    for name, marks in (("bench-left-behind", labels), ("bench-still-owned", alive)):
        client.containers.create(IMAGE, ["/bin/true"], name=name, labels=marks)
    try:
        result = subprocess.run([sys.executable, "-m", "bench", "clean"], capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        assert "removing container bench-left-behind of run 20260101T000000Z-container-chat" in result.stdout
        assert [c.name for c in our_containers(client)] == ["bench-still-owned"]
    finally:
        for container in our_containers(client):
            container.remove(force=True)


@pytest.mark.parametrize("gpus", ["all", [0, 2]])
def test_gpu_device_requests_are_in_the_create_request(gpus) -> None:
    """No GPU here, and podman's Docker API drops DeviceRequests from what it stores, so this checks the
    exact host configuration the Docker SDK sends to the daemon."""
    from docker.models.containers import _create_container_args

    kwargs = run_kwargs(scripted_spec(gpus=gpus), host_port=18000)
    kwargs.pop("detach")
    host_config = _create_container_args({**kwargs, "version": "1.41"})["host_config"]
    (request,) = host_config["DeviceRequests"]
    assert request["Capabilities"] == [["gpu"]]
    if gpus == "all":
        assert request["Count"] == -1
    else:
        assert request["DeviceIDs"] == ["0", "2"]
    assert host_config["PortBindings"] == {"8000/tcp": [{"HostIp": "127.0.0.1", "HostPort": "18000"}]}
    assert host_config["Init"] is True  # PID 1 passes SIGTERM on, so a container stopped while loading stops


def test_engine_options_map_to_each_engines_own_flags(monkeypatch) -> None:
    monkeypatch.delenv("HF_TOKEN", raising=False)
    options = ContainerOptions(model="meta-llama/Llama-3.1-8B-Instruct", tensor_parallel_size=2, max_num_seqs=256,
                               gpu_memory_fraction=0.9, max_model_len=8192,
                               extra_args={"enable-prefix-caching": "true"})
    vllm = vllm_spec(options)
    assert vllm.image.startswith("vllm/vllm-openai")
    assert vllm.command == ["--model", "meta-llama/Llama-3.1-8B-Instruct", "--tensor-parallel-size", "2",
                            "--max-num-seqs", "256", "--gpu-memory-utilization", "0.9", "--max-model-len", "8192",
                            "--host", "0.0.0.0", "--port", "8000", "--enable-prefix-caching"]
    sglang = sglang_spec(options)
    assert sglang.command[:3] == ["python3", "-m", "sglang.launch_server"]
    assert ["--tp", "2"] == sglang.command[5:7] and "--mem-fraction-static" in sglang.command
    assert sglang.shm_size == "32g" and sglang.container_port == 30000
    trtllm = trtllm_spec(options)
    assert trtllm.command[:2] == ["trtllm-serve", "meta-llama/Llama-3.1-8B-Instruct"]
    assert "--max_batch_size" in trtllm.command and "--kv_cache_free_gpu_memory_fraction" in trtllm.command
    assert all("/root/.cache/huggingface" in spec.volumes.values() for spec in (vllm, sglang, trtllm))
    assert vllm.env == {}  # no HF_TOKEN in the environment: none passed


STANDIN_TRTLLM = ROOT / "tests" / "engines" / "standin_trtllm"


def standin_trtllm_options(**changes) -> ContainerOptions:
    """TensorRT-LLM options whose image is the test image with the stand-in's `python3` (the LLM API's
    build) and `trtllm-serve` first on PATH."""
    env = {"PATH": f"{STANDIN_TRTLLM / 'bin'}:/usr/bin:/bin", "STANDIN_PYTHON": sys.executable,
           "PYTHONPATH": f"{STANDIN_TRTLLM / 'py'}:{ROOT}"}
    fields = {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpus": None, "image": IMAGE, "max_num_seqs": 64,
              "max_model_len": 4096, "extra_args": {"dtype": "bfloat16"}, "env": env, "volumes": host_mounts(),
              "ready_timeout_s": 60.0}
    return ContainerOptions(**{**fields, **changes})


def test_trtllm_builds_once_then_serves_the_cached_engine(podman_api, tmp_path, monkeypatch) -> None:
    from engines.trtllm import BUILD_RECORD, build_key, ensure_built, find_built, launch_trtllm

    monkeypatch.setenv("BENCH_TRTLLM_ENGINES", str(tmp_path / "engines"))
    options = standin_trtllm_options()
    (tmp_path / "first").mkdir()
    with launch_trtllm(tmp_path / "first", options) as (endpoint, info):
        build = info.details["build"]
        assert build["cached"] is False and build["build_s"] > 0
        assert info.details["time_to_ready_s"] > 0  # serving's own start, apart from the build
        key = build_key(options)
        assert endpoint.model == key.name() and key.name().startswith("Llama-3.1-8B-Instruct-bfloat16-noquant-tp1-b64")
        import httpx

        assert httpx.get(endpoint.base_url + "/models").json()["data"][0]["id"] == key.name()
        command = info.details["command"]
        assert command[:6] == ["trtllm-serve", f"/engines/{key.name()}", "--tokenizer", options.model,
                               "--backend", "tensorrt"]
        assert "--max_seq_len" not in command and "--dtype" not in command  # fixed at build time
    engine_dir = tmp_path / "engines" / key.name()
    record = json.loads((engine_dir / BUILD_RECORD).read_text())
    assert record["key"]["max_batch_size"] == 64 and record["key"]["dtype"] == "bfloat16"
    saved = json.loads((engine_dir / "config.json").read_text())["build_config"]
    assert saved["build_config"]["max_batch_size"] == 64 and saved["build_config"]["max_seq_len"] == 4096
    assert "[TRT-LLM] engine saved" in (tmp_path / "first" / "engine.log").read_text()
    assert our_containers(docker.from_env()) == []
    # The same key is found built: no build container runs; another batch limit is another engine.
    assert find_built(key) is not None
    assert ensure_built(tmp_path, options, key).build_s is None
    other = build_key(standin_trtllm_options(max_num_seqs=256))
    assert other.name() != key.name() and find_built(other) is None


def test_a_failed_trtllm_build_leaves_no_engine_and_no_container(podman_api, tmp_path, monkeypatch) -> None:
    from engines.trtllm import build_key, ensure_built

    monkeypatch.setenv("BENCH_TRTLLM_ENGINES", str(tmp_path / "engines"))
    options = standin_trtllm_options(quantization="bogus8")
    with pytest.raises(EngineStartError, match="trtllm-build exited with code 1") as error:
        ensure_built(tmp_path, options, build_key(options))
    assert "KeyError: 'BOGUS8'" in str(error.value)  # the build's own message, from the end of its log
    assert list((tmp_path / "engines").iterdir()) == []  # the partial folder is gone
    assert our_containers(docker.from_env()) == []


def test_trtllm_backend_choice_is_checked_before_anything_starts() -> None:
    from engines.engine_file import EngineFile
    from engines.registry import EngineError, make_launcher

    with pytest.raises(EngineError, match="backend=onnx: trtllm-docker takes backend=tensorrt"):
        make_launcher(EngineFile(engine="trtllm-docker", model="m", args={"backend": "onnx"}))
    with pytest.raises(EngineError, match="with backend=pytorch: quantization comes with the checkpoint"):
        make_launcher(EngineFile(engine="trtllm-docker", model="m", quantization="fp8", args={"backend": "pytorch"}))
