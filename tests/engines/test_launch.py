"""Process lifecycle: ready when it answers, a clear error with the log when it doesn't, never a leftover."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from engines.launch import EngineStartError, ProcessSpec, check_port_free, free_port, run_process
from tests.servers import is_running


def scripted_spec(port: int, **changes) -> ProcessSpec:
    command = [sys.executable, "-m", "scripted", "--port", str(port)]
    return ProcessSpec("scripted", command, [f"http://127.0.0.1:{port}/health"], **changes)


def python_spec(code: str, timeout_s: float = 30.0) -> ProcessSpec:
    port = free_port()
    return ProcessSpec("toy", [sys.executable, "-c", code], [f"http://127.0.0.1:{port}/health"],
                       ready_timeout_s=timeout_s)


def test_started_engine_is_ready_logged_and_gone_afterwards(tmp_path) -> None:
    port = free_port()
    log = tmp_path / "engine.log"
    with run_process(scripted_spec(port), log) as started:
        assert started.time_to_ready_s > 0
        pid = started.pid
        assert is_running(pid)
        with socket.create_connection(("127.0.0.1", port)):
            pass
    assert not is_running(pid)
    assert "listening on" in log.read_text()


def test_engine_that_dies_during_startup_fails_fast_with_its_log_tail(tmp_path) -> None:
    spec = python_spec("import sys; print('weights not found: /models/x', flush=True); sys.exit(3)")
    started = time.monotonic()
    with pytest.raises(EngineStartError, match="exited with code 3 during start-up") as error:
        with run_process(spec, tmp_path / "engine.log"):
            pass
    assert "weights not found: /models/x" in str(error.value)
    assert time.monotonic() - started < 10


def test_engine_that_never_answers_times_out_and_is_stopped(tmp_path) -> None:
    spec = python_spec("import os, time; print(os.getpid(), flush=True); time.sleep(120)", timeout_s=1.5)
    with pytest.raises(EngineStartError, match="was not ready after 1.5 s"):
        with run_process(spec, tmp_path / "engine.log"):
            pass
    pid = int((tmp_path / "engine.log").read_text().split()[0])
    assert not is_running(pid)


def test_an_exception_inside_the_block_still_stops_the_engine(tmp_path) -> None:
    port = free_port()
    with pytest.raises(RuntimeError, match="boom"):
        with run_process(scripted_spec(port), tmp_path / "engine.log") as started:
            pid = started.pid
            raise RuntimeError("boom")
    assert not is_running(pid)


def test_children_and_a_leader_that_ignores_sigterm_are_killed(tmp_path, monkeypatch) -> None:
    """The whole process group goes, even a leader that ignores SIGTERM and the children it forked."""
    import engines.launch as launch

    monkeypatch.setattr(launch, "STOP_GRACE_S", 1.0)
    port = free_port()
    code = (
        "import signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        f"print(child.pid, flush=True)\n"
        f"subprocess.Popen([sys.executable, '-m', 'scripted', '--port', '{port}'])\n"
        "time.sleep(120)\n"
    )
    spec = ProcessSpec("stubborn", [sys.executable, "-c", code], [f"http://127.0.0.1:{port}/health"])
    with run_process(spec, tmp_path / "engine.log") as started:
        leader = started.pid
        child = int((tmp_path / "engine.log").read_text().split()[0])
        assert is_running(child)
    assert not is_running(leader) and not is_running(child)


def test_a_port_in_use_is_named_in_the_error() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(EngineStartError, match=f"port {port} is already in use"):
            check_port_free(port)


def test_a_missing_binary_is_a_start_error(tmp_path) -> None:
    spec = ProcessSpec("ghost", ["definitely-not-a-binary-xyz"], ["http://127.0.0.1:1/health"])
    with pytest.raises(EngineStartError, match="cannot run 'definitely-not-a-binary-xyz': not found"):
        with run_process(spec, tmp_path / "engine.log"):
            pass


SQUATTER = """\
import http.server, json, sys
log = open(sys.argv[2], "a")
class Answer(http.server.BaseHTTPRequestHandler):
    def reply(self):
        log.write(f"{self.command} {self.path}\\n"); log.flush()
        body = json.dumps({"status": True, "data": [{"id": "not-the-engine"}], "token": "t"}).encode()
        self.send_response(200); self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body))); self.end_headers(); self.wfile.write(body)
    do_GET = do_POST = reply
    def log_message(self, *args): pass
server = http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Answer)
print("listening", flush=True)
server.serve_forever()
"""


@contextmanager
def squatter(port: int, seen: Path) -> Iterator[subprocess.Popen[str]]:
    """Another local process that binds `port` first and answers 200 to anything (/health, /v1/models, a
    sign-in), writing each request it gets to `seen`."""
    process = subprocess.Popen([sys.executable, "-c", SQUATTER, str(port), str(seen)], stdout=subprocess.PIPE,
                               text=True)
    try:
        assert process.stdout is not None and process.stdout.readline().strip() == "listening"
        yield process
    finally:
        process.kill()
        process.wait()


def test_a_port_someone_else_bound_first_is_refused_by_name_and_nothing_is_left(tmp_path) -> None:
    """The port was free when chosen; another process bound it before the engine did and answers the
    readiness check itself. The launch fails naming that process, and the engine it started is gone."""
    from engines import lifeline

    port = free_port()
    with squatter(port, tmp_path / "seen.log") as squat:
        with pytest.raises(EngineStartError) as error:
            with run_process(scripted_spec(port), tmp_path / "engine.log"):
                pytest.fail("a squatted port was taken for the engine")
        assert is_running(squat.pid)  # someone else's: not ours to stop
    message = str(error.value)
    assert f"port {port} was taken by another process (pid {squat.pid}, user " in message, message
    assert "not the engine bench started" in message
    assert lifeline.marked_processes(lifeline.owner_id()) == {}  # the engine bench started is stopped


def test_the_ownership_check_tells_the_childs_socket_from_anyone_elses(tmp_path) -> None:
    """The engine's own socket (its session's) passes; judged as another child's, the same socket is a
    stranger's, named by pid."""
    from engines.launch import refuse_strangers

    port = free_port()
    with run_process(scripted_spec(port), tmp_path / "engine.log") as started:
        refuse_strangers("scripted", port, started.pid)
        other = subprocess.Popen(["sleep", "30"], start_new_session=True)
        try:
            with pytest.raises(EngineStartError, match=f"port {port} was taken by another process \\(pid "
                                                       f"{started.pid}, "):
                refuse_strangers("scripted", port, other.pid)
        finally:
            other.kill()
            other.wait()
