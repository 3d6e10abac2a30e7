"""Price catalogs: every row sourced and dated, a bad row named by file, row and field, names resolved."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest

from costmodel.prices import PriceError, load_catalog, parse_price_file, stale_prices

GPUS_REQUIRED = {"h100-sxm", "h200", "a100-80gb", "l40s", "l4", "a10g", "rtx-4090"}


def test_shipped_catalogs_cover_the_gpus_kinds_clouds_and_models_the_issue_names() -> None:
    catalog = load_catalog()
    assert GPUS_REQUIRED <= set(catalog.gpu_names())
    assert {r.pricing for r in catalog.gpus} == {"on-demand", "spot", "reserved"}
    assert len({r.cloud for r in catalog.gpus}) >= 6
    assert {"llama-3.1-8b", "llama-3.3-70b", "qwen-2.5-72b", "deepseek-v3"} <= set(catalog.model_ids())
    assert any(r.model.startswith("mistral") for r in catalog.providers)
    assert any(not r.open_weights for r in catalog.providers)
    for row in (*catalog.gpus, *catalog.providers):
        assert row.source.startswith("https://") and row.retrieved <= date(2025, 12, 31), row.id
    for row in catalog.gpus:
        if row.gpus_per_node > 1:  # a node price divided: says so, and the division is right
            assert "/ 8" in row.note and row.node_usd_per_hour is not None, row.id


def test_a_gpu_name_resolves_to_its_median_on_demand_row_and_a_row_id_to_itself() -> None:
    catalog = load_catalog()
    rows = sorted(r.usd_per_gpu_hour for r in catalog.gpu_rows("h100-sxm") if r.pricing == "on-demand")
    assert catalog.gpu("h100-sxm").usd_per_gpu_hour == rows[(len(rows) - 1) // 2]
    assert catalog.gpu("H100").gpu == "h100-sxm"  # alias, any case
    assert catalog.gpu("aws/h100-sxm/on-demand").usd_per_gpu_hour == pytest.approx(55.04 / 8)
    assert catalog.gpu("h100-sxm", "spot").pricing == "spot"


def test_unknown_gpu_and_provider_names_say_what_is_accepted() -> None:
    catalog = load_catalog()
    with pytest.raises(PriceError, match=r"unknown GPU 'h1000'.*known GPUs: .*h100-sxm.*--gpu-price"):
        catalog.gpu("h1000")
    with pytest.raises(PriceError, match=r"no spot price for h200"):
        catalog.gpu("h200", "spot")
    with pytest.raises(PriceError, match=r"unknown provider 'togther/llama-3.1-8b' \(did you mean together/llama"):
        catalog.provider_rows(["togther/llama-3.1-8b"])


def test_providers_by_model_id_give_every_host_and_by_row_id_one() -> None:
    catalog = load_catalog()
    hosts = catalog.provider_rows(["llama-3.1-8b"])
    assert len(hosts) >= 4 and {r.model for r in hosts} == {"llama-3.1-8b"}
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
     " retrieved: 2025-01-01}\n", "gpus[0] (id 'x/l4/cheap'): pricing: Input should be 'on-demand', 'spot' or"),
    ("providers: {id: x}\n", "providers: expected a list of rows"),
    ("- a list\n", "expected a mapping with a `gpus` and/or a `providers` list"),
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
