"""The JSON of a decision (report.json, `bench cost --json`): a field the cost model keeps in memory only
(NOT_IN_FILES) stays out, and every other field is written as it always was."""

from __future__ import annotations

from dataclasses import asdict
from datetime import date

from costmodel.decide import decide_given
from costmodel.inputs import Pricing, Requirements, Traffic
from costmodel.prices import load_catalog
from reports.data import jsonable


def test_the_operating_point_s_kind_stays_in_memory_and_its_other_fields_reach_the_json() -> None:
    d = decide_given(2400, 256, 128, Traffic(monthly_tokens=3e9), Pricing(gpu="h100-sxm", model="llama-3.1-8b"),
                     Requirements(), load_catalog(), date(2026, 12, 1))
    assert d.best is not None and d.best.operating_point is not None
    point = d.best.operating_point
    assert point.kind == "given"
    written = jsonable(d)["best"]["operating_point"]
    assert written == jsonable({name: value for name, value in asdict(point).items() if name != "kind"})
