"""Container engines through the real Docker API (podman here), with a real server inside the container."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import replace
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

# A podman call that never returns (seen once: a container's wait that did not end) fails its test here, with the
# stack of the call that hung, rather than holding the whole run until CI's limit. The slowest test takes under
# 5 s on an idle machine; 120 s leaves room for a loaded one.
pytestmark = pytest.mark.timeout(120)


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
        # The runtime picked the port and holds it from creation: no window for another process to take it.
        assert endpoint.base_url == f"http://127.0.0.1:{bindings[0]['HostPort']}/v1"
        assert container.labels[lifeline.HOST_LABEL] == lifeline.host_id()
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


def test_bench_clean_removes_only_this_hosts_containers_whose_command_died(podman_api, tmp_path) -> None:
    """On a daemon other hosts share, an owner pid means nothing in this host's /proc: a container another host
    started (or one that names no host) is left alone, and `bench clean` says so."""
    client = docker.from_env()
    labels = {"llm-selfhost-bench": "scripted-container", "llm-selfhost-bench.owner": "999999999:1",
              "llm-selfhost-bench.run": "20260101T000000Z-container-chat", lifeline.HOST_LABEL: lifeline.host_id()}
    alive = {**labels, "llm-selfhost-bench.owner": lifeline.owner_id()}
    other_host = {**labels, lifeline.HOST_LABEL: "gpu-07/0123456789abcdef"}  # its owner pid is not ours to judge
    no_host = {k: v for k, v in labels.items() if k != lifeline.HOST_LABEL}
    marks = {"bench-left-behind": labels, "bench-still-owned": alive, "bench-of-gpu-07": other_host,
             "bench-of-no-host": no_host}
    for name, labelled in marks.items():
        client.containers.create(IMAGE, ["/bin/true"], name=name, labels=labelled)
    try:
        result = subprocess.run([sys.executable, "-m", "bench", "clean"], capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        assert "removing container bench-left-behind of run 20260101T000000Z-container-chat" in result.stdout
        assert sorted(c.name for c in our_containers(client)) == ["bench-of-gpu-07", "bench-of-no-host",
                                                                  "bench-still-owned"]
        out = " ".join(result.stdout.split())
        assert "left alone 2 container(s) that another host started or that name no host" in out
        assert "bench-of-gpu-07 (host gpu-07/0123456789abcdef)" in out and "bench-of-no-host (host not named)" in out
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


def test_engine_options_map_to_each_engines_own_flags(monkeypatch, tmp_path) -> None:
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
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


def _cached_model(hf_home: Path, model: str) -> None:
    """A model as the Hugging Face cache holds it once downloaded: refs/main naming a snapshot with its config
    and weights."""
    repo = hf_home / "hub" / f"models--{model.replace('/', '--')}"
    snapshot = repo / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (snapshot / "model.safetensors").write_bytes(b"\0" * 16)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")


def _created(spec: ContainerSpec) -> dict:
    """The container the daemon makes of `spec` (on the local test image: the engines' own are not here), as it
    inspects it."""
    kwargs = run_kwargs(replace(spec, image=IMAGE), None, run_id="spec-check")
    kwargs.pop("detach")
    container = docker.from_env().containers.create(**kwargs)
    try:
        return container.attrs
    finally:
        container.remove(force=True)


def _ipc_namespace(spec: ContainerSpec) -> str:
    """The IPC namespace a process of `spec`'s container runs in (podman 4.3 inspects every container's IpcMode
    as `shareable`, so the namespace itself is asked)."""
    probe = replace(spec, image=IMAGE, command=["/usr/bin/readlink", "/proc/self/ns/ipc"],
                    volumes={**spec.volumes, **host_mounts()})
    kwargs = {**run_kwargs(probe, None, run_id="ipc-check"), "detach": False, "remove": True}
    kwargs.pop("ports")
    return docker.from_env().containers.run(**kwargs).decode().strip()


HOST_IPC = os.readlink("/proc/self/ns/ipc")
GIB = 1 << 30
MODEL = "Qwen/Qwen2.5-0.5B-Instruct"


@pytest.mark.parametrize("make", [vllm_spec, sglang_spec, trtllm_spec])
def test_engine_containers_get_their_own_shm_a_pinned_image_and_a_read_only_cache(make, podman_api, tmp_path,
                                                                                  monkeypatch) -> None:
    """No host IPC namespace (a private /dev/shm of the engine's size), a release tag instead of `:latest`, and
    a cache that already holds the model mounted read-only, the engine told to stay offline."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    _cached_model(tmp_path / "hf", MODEL)
    spec = make(ContainerOptions(model=MODEL, gpus=None))
    assert re.search(r":v?\d+\.\d+\.\d+$", spec.image), spec.image
    host = _created(spec)["HostConfig"]
    assert host["IpcMode"] != "host" and _ipc_namespace(spec) != HOST_IPC
    assert host["ShmSize"] == (32 if spec.engine == "sglang" else 16) * GIB
    (cache,) = [m for m in _created(spec)["Mounts"] if m["Destination"] == "/root/.cache/huggingface"]
    assert cache["RW"] is False and cache["Source"] == str(tmp_path / "hf")
    assert spec.env["HF_HUB_OFFLINE"] == "1"
    assert spec.cache is not None
    assert spec.cache.record()["why"] == f"{MODEL} is in the cache: nothing to download (HF_HUB_OFFLINE=1)"


def test_host_ipc_is_a_switch_and_a_model_to_download_gets_a_writable_cache(podman_api, tmp_path,
                                                                            monkeypatch) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    args = {"ipc": "host", "enable-prefix-caching": "true"}
    spec = vllm_spec(ContainerOptions(model=MODEL, gpus=None, extra_args=args))
    assert "--enable-prefix-caching" in spec.command  # the engine's flag passes; the container's do not
    assert "--ipc" not in spec.command and spec.shm_size is None
    assert _ipc_namespace(spec) == HOST_IPC  # (podman 4.3 inspects its IpcMode as `shareable` all the same)
    attrs = _created(spec)
    sized = _created(vllm_spec(ContainerOptions(model=MODEL, gpus=None, extra_args={"shm-size": "8g"})))
    assert sized["HostConfig"]["ShmSize"] == 8 * GIB and sized["HostConfig"]["IpcMode"] != "host"
    (cache,) = [m for m in attrs["Mounts"] if m["Destination"] == "/root/.cache/huggingface"]
    assert cache["RW"] is True and "HF_HUB_OFFLINE" not in spec.env
    assert spec.cache is not None and spec.cache.record() == {
        "path": str(tmp_path / "hf"), "mode": "rw",
        "why": f"{MODEL} is not in the cache: the engine downloads it there"}
    asked = vllm_spec(ContainerOptions(model=MODEL, gpus=None, extra_args={"hf-cache": "ro"}))
    assert asked.volumes[str(tmp_path / "hf")] == "/root/.cache/huggingface:ro"
    with pytest.raises(EngineStartError, match="ipc=shareable: the only choice is ipc=host"):
        vllm_spec(ContainerOptions(model=MODEL, extra_args={"ipc": "shareable"}))
    with pytest.raises(EngineStartError, match="shm-size sizes a private /dev/shm, and ipc=host uses the host's"):
        trtllm_spec(ContainerOptions(model=MODEL, extra_args={"ipc": "host", "shm-size": "8g"}))
    with pytest.raises(EngineStartError, match="hf-cache=maybe: expected ro"):
        sglang_spec(ContainerOptions(model=MODEL, extra_args={"hf-cache": "maybe"}))


def test_run_json_says_how_the_container_shares_memory_and_the_cache(podman_api, tmp_path) -> None:
    from engines.hf_cache import cache_mount

    spec = scripted_spec(shm_size="1g", cache=cache_mount("/models/served"))
    with launch_container(tmp_path, spec) as (_, info):
        (container,) = our_containers(docker.from_env())
        assert container.attrs["HostConfig"]["ShmSize"] == GIB
    assert info.details["ipc"] == "private" and info.details["shm_size"] == "1g"
    assert info.details["hf_cache"]["mode"] == "ro"
    assert info.details["hf_cache"]["why"] == "/models/served is a path inside the container: nothing to download"


def test_a_port_asked_for_and_taken_meanwhile_is_refused_naming_who_holds_it(podman_api, tmp_path,
                                                                            monkeypatch) -> None:
    """--port was free when checked, then another process bound it before the runtime could: the runtime
    refuses, and so does the launch, naming the holder; no container is left."""
    import engines.docker as docker_engines

    monkeypatch.setattr(docker_engines, "check_port_free", lambda port: None)  # the race, made certain
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(EngineStartError, match=f"port {port} is already in use on 127.0.0.1 \\(pid "
                                                   f"{os.getpid()}, user "):
            with launch_container(tmp_path, scripted_spec(), port=port):
                pytest.fail("the container started on a port another process holds")
    assert our_containers(docker.from_env()) == []
