"""Price catalogs: every row sourced and dated, a bad row named by file, row and field, names resolved."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest

from costmodel.prices import PriceError, load_catalog, parse_price_file, stale_prices, undated_prices

GPUS_REQUIRED = {"h100-sxm", "h200", "a100-80gb", "l40s", "l4", "a10g", "rtx-4090"}
COMPILED = date(2026, 10, 31)  # the catalog's rows come from ../shared/PRICES-2026-10.md
A_YEAR_BEFORE = date(2025, 10, 31)
CATALOG = load_catalog()
KINDS = ("on-demand", "spot", "reserved", "reserved-1y", "reserved-3y", "serverless")


def test_shipped_catalogs_cover_the_gpus_kinds_clouds_and_models_the_issue_names() -> None:
    assert GPUS_REQUIRED <= set(CATALOG.gpu_names())
    assert {r.pricing for r in CATALOG.gpus} == {"on-demand", "spot", "reserved", "serverless"}
    assert len({r.cloud for r in CATALOG.gpus}) >= 6
    assert {"llama-3.1-8b", "llama-3.3-70b", "qwen3-235b-a22b", "deepseek-v3.1", "gpt-oss-120b"} <= set(
        CATALOG.model_ids())
    assert any(r.model.startswith("mistral") for r in CATALOG.providers)
    assert any(not r.open_weights for r in CATALOG.providers)


def test_every_row_has_a_source_a_date_or_says_it_is_undated_and_a_pricing_kind() -> None:
    for row in (*CATALOG.gpus, *CATALOG.providers):
        assert row.source.startswith("https://") and row.note, row.id
        assert row.retrieved is None or row.retrieved <= COMPILED, row.id  # no date after the compilation
        if row.retrieved is None:  # undated: chosen by its id alone, and says why
            assert not row.is_default and ("no date" in row.note or "no check date" in row.note), row.id
    for row in CATALOG.gpus:
        assert row.pricing in KINDS, row.id
        if row.gpus_per_node > 1:  # a node price divided: says so, and the division is right
            assert "8-GPU node / 8" in row.note and row.node_usd_per_hour is not None, row.id


def test_history_rows_name_a_newer_row_and_are_never_defaults() -> None:
    by_id = {r.id: r for r in (*CATALOG.gpus, *CATALOG.providers)}
    history = [r for r in by_id.values() if r.superseded_by]
    assert {r.id for r in history} >= {"aws/h100-sxm/on-demand-2023", "together/llama-3.3-70b-2025-07"}
    for row in history:
        newer = by_id[row.superseded_by]
        assert newer.is_default and (row.retrieved is None or row.retrieved < newer.retrieved), row.id
        assert not row.is_default and row.note.startswith("history"), row.id
    # the AWS H100 price before the June-2025 cut is there, but only by its id
    assert CATALOG.gpu("aws/h100-sxm/on-demand-2023").usd_per_gpu_hour == 12.29
    assert CATALOG.provider_rows(["llama-3.3-70b"])[-1].id != "together/llama-3.3-70b-2025-07"
    assert [r.usd_per_m_input for r in CATALOG.provider_rows(["llama-3.3-70b"]) if r.host == "together"] == [1.04]


def test_the_defaults_come_from_rows_dated_within_a_year_of_the_compilation() -> None:
    """What a GPU name or a model id picks: dated, current rows, none older than a year before 2026-10-31."""
    for name in CATALOG.gpu_names():
        for kind in KINDS:
            for row in CATALOG.gpu_pool(name, kind):
                assert row.is_default and row.retrieved is not None and row.retrieved >= A_YEAR_BEFORE, row.id
    for model in CATALOG.model_ids():
        if not any(r.is_default for r in CATALOG.providers if r.model == model):
            continue  # only history, undated or older rows: a model id is refused (next test)
        for row in CATALOG.provider_rows([model]):
            assert row.retrieved is not None and row.retrieved >= A_YEAR_BEFORE, row.id
    for row in (*CATALOG.gpus, *CATALOG.providers):  # and every dated row over a year old says it is no default
        if row.retrieved is not None and row.retrieved < A_YEAR_BEFORE:
            assert not row.is_default, row.id


def test_a_model_with_no_current_row_is_refused_by_model_id_and_its_rows_named() -> None:
    with pytest.raises(PriceError, match=r"--provider deepseek-v3: .*\(deepseek/deepseek-v3, fireworks/deepseek-v3\)"):
        CATALOG.provider_rows(["deepseek-v3"])
    assert CATALOG.provider_rows(["deepseek/deepseek-v3"])[0].usd_per_m_cached_input == 0.07  # by id: fine


def test_a_gpu_name_resolves_to_its_median_single_gpu_row_and_a_row_id_to_itself() -> None:
    # single-GPU on-demand H100 SXM rows: runpod community 2.69, runpod 3.49, together 3.99, lambda 1x 4.29,
    # aws p5.4xlarge 6.88 -> the lower median is the 3rd of 5: together at $3.99. The 8-GPU node shares (aws,
    # gcp, azure, coreweave, lambda 8x) and the history rows are not in it.
    assert CATALOG.gpu("h100-sxm").id == "together/h100-sxm/on-demand"
    assert CATALOG.gpu("H100").gpu == "h100-sxm"  # alias, any case
    assert CATALOG.gpu("aws/h100-sxm/on-demand").usd_per_gpu_hour == pytest.approx(55.04 / 8)  # by id: a node row
    assert CATALOG.gpu("h100-sxm", "spot").id == "together/h100-sxm/spot"  # not gcp's, azure's or coreweave's nodes
    reserved = CATALOG.gpu("h100-sxm", "reserved")
    assert (reserved.term, reserved.label()) == ("91-180 days",
                                                 "together/h100-sxm/reserved ($3.19/GPU-h, reserved for 91-180 days)")
    with pytest.raises(PriceError, match="no reserved-1y price for h100-sxm; the catalog has on-demand, reserved, "
                                         "serverless, spot.*no hyperscaler commitment"):
        CATALOG.gpu("h100-sxm", "reserved-1y")


def test_node_rows_are_never_a_single_gpu_median_while_a_single_gpu_row_exists() -> None:
    for name in CATALOG.gpu_names():
        for kind in KINDS:
            pool = CATALOG.gpu_pool(name, kind)
            rows = [r for r in CATALOG.gpu_rows(name) if r.pricing == kind and r.is_default]
            if any(r.gpus_per_node == 1 for r in rows):
                assert all(r.gpus_per_node == 1 for r in pool), (name, kind)
    # with no single-GPU row of a kind, the node shares are what there is
    nodes = parse_price_file("gpus:\n" + "".join(
        f"  - {{id: {c}/h200/on-demand, gpu: h200, cloud: {c}, pricing: on-demand, usd_per_gpu_hour: {p / 8},\n"
        f"     gpus_per_node: 8, node_usd_per_hour: {p}, source: s, retrieved: 2026-10-06}}\n"
        for c, p in (("a", 40.0), ("b", 48.0), ("c", 64.0))), "nodes.yaml")
    assert nodes.gpu("h200").id == "b/h200/on-demand"


def test_a_month_only_date_is_kept_as_a_month_and_ages_from_its_first_day() -> None:
    row = CATALOG.gpu("vast/h100-nvl/on-demand")
    assert (row.retrieved, row.retrieved_precision, row.retrieved_text) == (date(2026, 6, 1), "month", "2026-06")
    assert stale_prices([row], today=date(2026, 8, 30)) == []  # 90 days after 2026-06-01
    assert stale_prices([row], today=date(2026, 8, 31))[0].age_days == 91


def test_a_serverless_hour_is_its_second_times_3600() -> None:
    row = CATALOG.gpu("runpod/h100-sxm/serverless")
    assert row.usd_per_gpu_hour == pytest.approx(row.usd_per_gpu_second * 3600, abs=0.005)
    assert row.retrieved is None and not row.is_default


def test_unknown_gpu_and_provider_names_say_what_is_accepted() -> None:
    catalog = CATALOG
    with pytest.raises(PriceError, match=r"unknown GPU 'h1000'.*known GPUs: .*h100-sxm.*--gpu-price"):
        catalog.gpu("h1000")
    with pytest.raises(PriceError, match=r"no spot price for h200; the catalog has on-demand, serverless"):
        catalog.gpu("h200", "spot")
    with pytest.raises(PriceError, match=r"spot prices for a100-80gb are history or undated only; .*a100-80gb/spot"):
        catalog.gpu("a100-80gb", "spot")
    with pytest.raises(PriceError, match=r"unknown provider 'togther/llama-3.1-8b' \(did you mean together/llama"):
        catalog.provider_rows(["togther/llama-3.1-8b"])


def test_providers_by_model_id_give_every_current_host_and_by_row_id_one() -> None:
    catalog = CATALOG
    hosts = catalog.provider_rows(["llama-3.1-8b"])
    assert {r.host for r in hosts} == {"deepinfra", "novita", "groq", "cloudflare", "coreweave", "fireworks",
                                       "bedrock", "cerebras"}  # not together: its one figure is from 2025-07
    assert catalog.provider_rows(["together/llama-3.1-8b"])[0].usd_per_m_output == 0.18  # by id: still there
    assert [r.id for r in catalog.provider_rows(["groq/llama-3.1-8b", "groq/llama-3.1-8b"])] == ["groq/llama-3.1-8b"]


ROW = ("  - {id: acme/llama-3.1-8b, host: acme, model: llama-3.1-8b, usd_per_m_input: 0.1, usd_per_m_output: 0.2,\n"
       "     source: 'https://acme.example/pricing', retrieved: 2025-05-01}\n")


def test_a_user_file_adds_rows_and_replaces_rows_with_the_same_id(tmp_path: Path) -> None:
    path = tmp_path / "ours.yaml"
    path.write_text("providers:\n" + ROW + "gpus:\n"
                    "  - {id: lambda/h100-sxm/on-demand, gpu: h100-sxm, cloud: lambda, pricing: on-demand,\n"
                    "     usd_per_gpu_hour: 2.49, source: 'https://lambda.ai/pricing', retrieved: 2025-06-01}\n")
    catalog = load_catalog([path])
    assert catalog.gpu("lambda/h100-sxm/on-demand").usd_per_gpu_hour == 2.49
    assert catalog.provider_rows(["acme/llama-3.1-8b"])[0].usd_per_m_output == 0.2
    assert str(path) in catalog.origins


@pytest.mark.parametrize(("text", "message"), [
    ("providers:\n" + ROW.replace(" usd_per_m_output: 0.2,", ""),
     "providers[0] (id 'acme/llama-3.1-8b'): usd_per_m_output: Field required"),
    ("providers:\n" + ROW.replace("retrieved: 2025-05-01", "retrieved: last week"),
     "providers[0] (id 'acme/llama-3.1-8b'): retrieved:"),
    ("providers:\n" + ROW.replace("host: acme,", "host: acme, colour: red,"),
     "providers[0] (id 'acme/llama-3.1-8b'): colour: unknown field"),
    ("providers:\n" + ROW + ROW, "providers[1] (id 'acme/llama-3.1-8b'): id appears twice"),
    ("gpus:\n  - {id: x/h100-sxm/on-demand, gpu: h100-sxm, cloud: x, pricing: on-demand, usd_per_gpu_hour: 3,\n"
     "     gpus_per_node: 8, node_usd_per_hour: 40, source: 'https://x', retrieved: 2025-01-01}\n",
     "gpus[0] (id 'x/h100-sxm/on-demand'): usd_per_gpu_hour 3.0 is not node_usd_per_hour 40.0 / gpus_per_node 8"),
    ("gpus:\n  - {id: x/l4/cheap, gpu: l4, cloud: x, pricing: cheap, usd_per_gpu_hour: 1, source: s,"
     " retrieved: 2025-01-01}\n", "gpus[0] (id 'x/l4/cheap'): pricing: Input should be 'on-demand', 'spot', "
     "'reserved', 'reserved-1y', 'reserved-3y' or 'serverless'"),
    ("gpus:\n  - {id: x/l4/sl, gpu: l4, cloud: x, pricing: serverless, usd_per_gpu_hour: 1, usd_per_gpu_second: 0.001,"
     " source: s, retrieved: 2025-01-01}\n", "usd_per_gpu_hour 1.0 is not usd_per_gpu_second 0.001 x 3600 = 3.6000"),
    ("gpus:\n  - {id: x/l4/od, gpu: l4, cloud: x, pricing: on-demand, usd_per_gpu_hour: 1, cold_start_s: 5,"
     " source: s, retrieved: 2025-01-01}\n", "usd_per_gpu_second and cold_start_s are for pricing: serverless"),
    ("gpus:\n  - {id: x/l4/r, gpu: l4, cloud: x, pricing: reserved, usd_per_gpu_hour: 1, source: s,"
     " retrieved: 2025-01-01}\n", "pricing reserved needs its term in commitment (e.g. '6 months')"),
    ("gpus:\n  - {id: x/l4/od, gpu: l4, cloud: x, pricing: on-demand, usd_per_gpu_hour: 1, commitment: 1 year,"
     " source: s, retrieved: 2025-01-01}\n", "commitment is for the reserved kinds, not pricing on-demand"),
    ("providers:\n" + ROW.replace("retrieved: 2025-05-01", "retrieved: 2025-05, retrieved_precision: day"),
     "retrieved YYYY-MM goes with retrieved_precision month"),
    ("providers:\n" + ROW.replace(", retrieved: 2025-05-01", ""), "retrieved: Field required"),
    ("providers: {id: x}\n", "providers: expected a list of rows"),
    ("- a list\n", "expected a mapping with `gpus`, `providers` and/or `finetunes` lists"),
    ("providers: [\n", "not valid YAML"),
])
def test_a_bad_price_file_names_the_file_the_row_and_the_field(text: str, message: str) -> None:
    with pytest.raises(PriceError) as error:
        parse_price_file(text, "ours.yaml")
    assert str(error.value).startswith("ours.yaml: ") and message in str(error.value)


def test_a_missing_price_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(PriceError, match="--prices .*nope.yaml: no such file"):
        load_catalog([tmp_path / "nope.yaml"])


def test_prices_older_than_90_days_are_stale() -> None:
    catalog = parse_price_file("providers:\n" + ROW, "x.yaml")
    (row,) = catalog.providers
    assert stale_prices([row], today=date(2025, 7, 30)) == []  # 90 days: still fresh
    (stale,) = stale_prices([row], today=date(2025, 7, 31))  # 91 days
    assert (stale.id, stale.age_days) == ("acme/llama-3.1-8b", 91)


def test_on_2026_12_01_the_october_figures_are_fresh_and_the_may_ones_stale() -> None:
    """90 days still fits prices that move monthly: the 2026-10-06 compilation is 56 days old on 2026-12-01,
    the TB figures of 2026-05-07 are 208 days old and are called so; undated rows are named apart."""
    rows = [CATALOG.gpu(i) for i in ("together/h100-sxm/on-demand", "modal/h100-sxm/serverless",
                                     "runpod/h100-sxm/serverless")]
    assert [(s.id, s.age_days) for s in stale_prices(rows, today=date(2026, 12, 1))] == [
        ("modal/h100-sxm/serverless", 208)]
    assert undated_prices(rows) == ["runpod/h100-sxm/serverless"]


def test_a_row_over_a_year_old_on_the_day_of_the_decision_is_not_picked_by_a_name() -> None:
    """Age is counted to the day the decision is made, not to the day the catalog was compiled: on 2026-12-03 a
    row retrieved 2025-11-01 (397 days) is left out of the median a GPU name picks, and still named by its id."""
    catalog = parse_price_file("gpus:\n" + "".join(
        f"  - {{id: {c}/h200/on-demand, gpu: h200, cloud: {c}, pricing: on-demand, usd_per_gpu_hour: {p},\n"
        f"     source: s, retrieved: {day}}}\n"
        for c, p, day in (("a", 2.0, "2025-11-01"), ("b", 3.0, "2026-10-06"), ("c", 4.0, "2026-10-06"))), "h.yaml")
    assert catalog.gpu("h200").id == "b/h200/on-demand"  # the lower median of 2, 3, 4 as compiled
    today = catalog.as_of(date(2026, 12, 3))
    assert [r.id for r in today.gpu_pool("h200", "on-demand")] == ["b/h200/on-demand", "c/h200/on-demand"]
    assert today.gpu("a/h200/on-demand").usd_per_gpu_hour == 2.0  # by its id, whatever its age
    assert catalog.as_of(date(2026, 10, 31)).gpu_pool("h200", "on-demand")[0].id == "a/h200/on-demand"  # 364 days
