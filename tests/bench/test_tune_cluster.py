"""A tune's configurations placed side by side (`bench tune --cluster`), without Ray: the placement and the
shipping of run directories, driven through a stand-in that speaks the placer's interface and runs each
configuration with the real node process (tests/bench/placer_stand_in.py). Ray's own placer is checked on
a real local cluster under `pytest -m ray` (tests/e2e/test_ray_tune.py)."""

from __future__ import annotations

import json
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import pytest

from bench.flows.node_run import Shipment
from bench.flows.run_pieces import FilePiece, Pieces, ShipmentError, write_piece
from bench.flows.tune import TuneAsk, run_tune
from bench.flows.tune_cluster import run_tune_placed
from bench.flows.tune_plan import Tune, TuneConfig, TuneEntry
from bench.flows.tune_ranking import ConfigResult, hardware_note
from bench.inputs.measure_options import MeasureFlags
from engines.lifeline import OWNER_ENV
from tests.bench.placer_stand_in import LocalPlacer
from tests.servers import is_running

SHORT = {"model": "dummy:tiny", "duration": 1.0, "input_tokens": "16", "output_tokens": "8"}


class Watch:
    """A tune watcher that keeps what was said, and runs `on_line` on each line (a fault at a chosen moment)."""

    def __init__(self, on_line: Any = None) -> None:
        self.lines: list[str] = []
        self.failures: list[tuple[str, str]] = []
        self.on_line = on_line

    def progress(self, job: Any) -> Any:
        return nullcontext()

    def say(self, line: str) -> None:
        self.lines.append(line)
        if self.on_line is not None:
            self.on_line(line)

    def failed(self, engine: str, reason: str) -> None:
        self.failures.append((engine, reason))
        if self.on_line is not None:
            self.on_line(f"failed: {engine}")

    def configuration(self, name: str) -> None:
        pass

    def warn(self, line: str) -> None:
        self.lines.append(line)


def _handle(placer: LocalPlacer, name: str) -> Any:
    return next(h for h in placer.handles if h.name == name)


def _check_complete(run_dir: Path) -> None:
    """A run directory as a sweep on this machine leaves it: complete, every record of every level, a report."""
    assert json.loads((run_dir / "run.json").read_text())["status"] == "complete"
    levels = [json.loads(line) for line in (run_dir / "levels.jsonl").read_text().splitlines()]
    records = (run_dir / "requests.jsonl").read_text().splitlines()
    assert len(records) == sum(level["num_records"] + level["num_warmup"] for level in levels) > 0
    assert all(json.loads(line)["level"] for line in records)  # no record cut in two by shipping
    assert (run_dir / "report.json").is_file() and (run_dir / "engine.log").stat().st_size > 0


def test_a_grid_on_two_stand_in_nodes_ships_every_run_back_and_a_lost_node_resumes_from_its_shipped_level(
        tmp_path: Path) -> None:
    placer = LocalPlacer(slots=2, root=tmp_path / "nodes")

    def lose_mid_configuration(line: str) -> None:  # its first level shipped, its second under way
        if line == "max-num-seqs=1: level c2 started":
            placer.lose(_handle(placer, "max-num-seqs=1"))

    watch = Watch(lose_mid_configuration)
    flags = MeasureFlags(**SHORT, out=tmp_path)
    outcome = run_tune(flags, TuneAsk(grid=["max-num-seqs=1,8"], concurrency="1,2", objective="throughput"), watch,
                       placer)
    assert not outcome.interrupted and outcome.num_failed == 1
    assert sorted(name for name, _ in placer.placements) == ["default", "max-num-seqs=1", "max-num-seqs=8"]
    assert placer.most_at_once == 2  # the third waited for a slot
    plan = Tune.load(outcome.plan.folder)
    by_name = {e.config.name: e for e in plan.entries}
    assert by_name["max-num-seqs=1"].status == "interrupted"
    assert [n for n, r in watch.failures] == ["max-num-seqs=1"] and "stand-in node" in watch.failures[0][1]
    assert {e.node for e in plan.entries} <= {"stand-in-0", "stand-in-1"}
    lost = plan.folder / str(by_name["max-num-seqs=1"].run_dir)
    shipped_level = (lost / "levels.jsonl").read_text()
    assert [json.loads(line)["level"] for line in shipped_level.splitlines()] == ["c1"]
    for name in ("default", "max-num-seqs=8"):
        assert by_name[name].status == "complete"
        _check_complete(plan.folder / str(by_name[name].run_dir))
    assert len({e.run_dir for e in plan.entries}) == 3

    again = LocalPlacer(slots=2, root=tmp_path / "nodes-again")
    watch_again = Watch()
    resumed = run_tune(MeasureFlags(resume=[plan.folder], out=tmp_path), TuneAsk(), watch_again, again)
    assert resumed.num_failed == 0 and [name for name, _ in again.placements] == ["max-num-seqs=1"]
    after = {e.config.name: e for e in Tune.load(plan.folder).entries}
    first_node = by_name["max-num-seqs=1"].node
    # its levels come from the node it began on, then the one it went on on: both named, and said once
    assert after["max-num-seqs=1"].node == ("stand-in-0" if first_node == "stand-in-0"
                                            else f"{first_node}, then stand-in-0")
    assert [line for line in watch_again.lines if ": running on " in line] == \
        [f"max-num-seqs=1: running on {after['max-num-seqs=1'].node}"]
    assert all(e.status == "complete" for e in after.values())
    assert after["max-num-seqs=1"].run_dir == by_name["max-num-seqs=1"].run_dir  # went on, not afresh
    assert (lost / "levels.jsonl").read_text().startswith(shipped_level)  # the shipped level kept as it was
    _check_complete(lost)
    report = json.loads((plan.folder / "tune-report.json").read_text())
    assert report["best"] in by_name and report["nodes"]
    assert "| Node |" in (plan.folder / "tune.md").read_text()
    assert not list((tmp_path / "nodes").iterdir()) and not list((tmp_path / "nodes-again").iterdir())
    nodes = [h.run.process.pid for h in placer.handles + again.handles if h.run is not None]
    assert not any(is_running(pid) for pid in nodes) and _marked_by(nodes) == []  # the lost node's engine included


def test_a_failed_engine_fails_its_configuration_and_ctrl_c_stops_every_node_and_its_engine(tmp_path: Path) -> None:
    placer = LocalPlacer(slots=2, root=tmp_path / "nodes")
    seen: set[str] = set()

    def interrupt_once_one_failed_and_one_measures(line: str) -> None:
        seen.update(what for what, said in (("measuring", "default: level c4 started"),
                                            ("failed", "failed: max-num-seqz=4")) if line == said)
        if seen == {"measuring", "failed"}:
            seen.add("interrupted")  # once, as one Ctrl-C
            raise KeyboardInterrupt

    watch = Watch(interrupt_once_one_failed_and_one_measures)
    flags = MeasureFlags(**{**SHORT, "duration": 30.0}, out=tmp_path)
    outcome = run_tune(flags, TuneAsk(grid=["max-num-seqz=4"], concurrency="4"), watch, placer)
    assert outcome.interrupted
    default, typo = Tune.load(outcome.plan.folder).entries
    # The engine that did not start: its configuration failed with what the engine said, as on one machine
    assert typo.status.startswith("failed: ") and "unrecognized arguments: --max-num-seqz 4" in typo.status
    assert [name for name, _ in watch.failures] == ["max-num-seqz=4"]
    # The one measuring was asked to stop as Ctrl-C would: its run saved as interrupted, and shipped
    assert default.status == "interrupted", "\n".join(watch.lines)
    assert json.loads((outcome.plan.folder / str(default.run_dir) / "run.json").read_text())["status"] == "interrupted"
    nodes = [h.run.process.pid for h in placer.handles if h.run is not None]
    assert len(nodes) == 2 and not any(is_running(pid) for pid in nodes)
    assert _marked_by(nodes) == []  # no engine a node launched is left


def _marked_by(owners: list[int]) -> list[int]:
    """Processes still running that carry one of `owners`' marks (an engine they launched)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        marks = [v.split(b"=", 1)[1] for v in environ if v.startswith(OWNER_ENV.encode() + b"=")]
        if marks and int(marks[0].split(b":")[0]) in owners and is_running(int(entry.name)):
            found.append(int(entry.name))
    return found


def test_pieces_bring_the_drivers_copy_up_to_date_whatever_the_node_did_to_its_files(tmp_path: Path) -> None:
    node, driver = tmp_path / "node", tmp_path / "driver"
    node.mkdir()
    driver.mkdir()
    pieces = Pieces()

    def ship() -> list[FilePiece]:
        sent = pieces.changed(node)
        for piece in sent:
            write_piece(driver, piece)
        return sent

    def same(name: str) -> bool:
        return (driver / name).read_bytes() == (node / name).read_bytes()

    records = node / "requests.jsonl"
    records.write_bytes(b'{"a": 1}\n{"a": 2}\n{"a": ')  # the third record half written
    (node / "run.json").write_text('{"status": "running"}')
    ship()
    assert (driver / "requests.jsonl").read_bytes() == b'{"a": 1}\n{"a": 2}\n' and same("run.json")
    with records.open("ab") as file:
        file.write(b"3}\n")
    (sent,) = ship()
    assert (sent.offset, sent.data) == (len(b'{"a": 1}\n{"a": 2}\n'), b'{"a": 3}\n') and same("requests.jsonl")
    # A resumed run drops the records of the level that was cut, then writes on: longer than before, not a
    # continuation of it.
    records.write_bytes(b'{"a": 1}\n{"b": 1}\n{"b": 2}\n{"b": 3}\n')
    (node / "run.json").write_text('{"status": "complete"}')
    (node / "plots").mkdir()
    (node / "plots" / "ttft.png").write_bytes(b"\x89PNG")
    ship()
    assert same("requests.jsonl") and same("run.json") and same("plots/ttft.png")
    assert ship() == []  # nothing changed, nothing sent


def test_pieces_lost_on_the_way_or_written_in_part_are_sent_again_and_written_as_once(tmp_path: Path) -> None:
    node, driver = tmp_path / "node", tmp_path / "driver"
    node.mkdir()
    driver.mkdir()
    pieces = Pieces()
    records, state = node / "requests.jsonl", node / "run.json"
    records.write_bytes(b'{"a": 1}\n')
    state.write_text('{"status": "running"}')
    for piece in pieces.changed(node):
        write_piece(driver, piece)
    pieces.confirm()
    with records.open("ab") as file:
        file.write(b'{"a": 2}\n')
    state.write_text('{"status": "complete"}')
    lost = pieces.changed(node)
    write_piece(driver, next(p for p in lost if p.path == "requests.jsonl"))  # one of two written, then Ctrl-C
    pieces.rewind()  # the driver said it wrote only the first shipment
    for piece in pieces.changed(node):
        write_piece(driver, piece)
    assert (driver / "requests.jsonl").read_bytes() == records.read_bytes() == b'{"a": 1}\n{"a": 2}\n'
    assert (driver / "run.json").read_text() == '{"status": "complete"}'
    with pytest.raises(ShipmentError, match="starts at byte 99"):
        write_piece(driver, FilePiece("requests.jsonl", 99, b"x"))  # past the end of the copy: never a gap


def test_a_resumed_cluster_tune_keeps_what_each_configuration_asked_of_a_node(tmp_path: Path) -> None:
    from bench.inputs.measure_settings import settings_of

    folder = tmp_path / "tune"
    folder.mkdir()
    Tune(folder, "reference", "capacity", [TuneEntry(TuneConfig("default"), status="complete")],
         settings_of(MeasureFlags(**SHORT, out=tmp_path), None, None),
         placement={"gpus_per_config": 1.0, "cpus_per_config": 4.0}).save()
    with pytest.raises(ValueError, match="--gpus-per-config 2: this tune's configurations asked for 1 each when "
                                         "it began, and --resume keeps it; drop --gpus-per-config"):
        run_tune(MeasureFlags(resume=[folder], out=tmp_path), TuneAsk(gpus_per_config=2), Watch(),
                 LocalPlacer(1, tmp_path / "nodes"))
    watch = Watch()
    run_tune(MeasureFlags(resume=[folder], out=tmp_path), TuneAsk(cpus_per_config=4), watch,
             LocalPlacer(1, tmp_path / "nodes"))
    assert "each asking for 1 GPUs and 4 CPUs" in " ".join(watch.lines)
    assert Tune.load(folder).placement == {"gpus_per_config": 1.0, "cpus_per_config": 4.0}


class _HostileNode:
    """A placer whose node answers with a run directory name, then a file path, that lead outside the tune
    folder: what a node must never be able to do to the driver."""

    def __init__(self, run_dir: str, piece: str) -> None:
        self.answer = Shipment("evil", run_dir=run_dir, pieces=(FilePiece(piece, 0, b"owned"),), status="complete")
        self.released = 0

    def start(self, name: str, spec: dict[str, Any], files: dict[str, bytes]) -> str:
        return name

    def poll(self, handle: str, applied: int) -> Shipment:
        return self.answer

    def stop(self, handle: str) -> None:
        pass

    def release(self, handle: str) -> None:
        self.released += 1

    def close(self) -> None:
        pass


@pytest.mark.parametrize(("run_dir", "piece"), [("../outside", "run.json"), ("run", "../../outside/x"),
                                                ("run", "/etc/x"), ("run", "a/../../x"),
                                                (".history", "history.sqlite")])  # the folder's own history
def test_a_node_cannot_write_outside_the_tune_folder(tmp_path: Path, run_dir: str, piece: str) -> None:
    folder = tmp_path / "tune"
    folder.mkdir()
    plan = Tune(folder, "reference", "capacity", [TuneEntry(TuneConfig("default"))])
    failures: list[tuple[str, str]] = []
    node = _HostileNode(run_dir, piece)
    assert run_tune_placed(plan, node, lambda line: None, lambda name, why: failures.append((name, why))) == 1
    assert plan.entries[0].status.startswith("failed: ") and failures and node.released == 1
    assert not (tmp_path / "outside").exists() and not list(tmp_path.rglob("x"))
    assert sorted(p.name for p in folder.rglob("*") if p.is_file()) == ["tune.json"]


def test_configurations_measured_on_different_hardware_are_ranked_with_a_warning() -> None:
    def result(name: str, hardware: str | None) -> ConfigResult:
        return ConfigResult(name, {}, "complete", name, hardware=hardware)

    same = [result("a", "Xeon x16, 1x H100 (driver 570)"), result("b", "Xeon x16, 1x H100 (driver 570)"),
            result("c", None)]
    assert hardware_note(same) is None
    mixed = [*same, result("d", "EPYC x32, 1x H100 (driver 580)")]
    assert hardware_note(mixed) == ("measured on different hardware, so ranked with care: a, b on Xeon x16, 1x H100 "
                                    "(driver 570); d on EPYC x32, 1x H100 (driver 580)")


def test_gpus_per_config_without_a_cluster_is_refused_naming_the_flags(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="give --cluster ADDRESS with them"):
        run_tune(MeasureFlags(**SHORT, out=tmp_path), TuneAsk(grid=["max-num-seqs=2"], gpus_per_config=1), Watch())
    assert not list(tmp_path.iterdir())  # nothing made
