"""The one way bench splits a flag's text: KEY=VALUE, comma-separated values, and which flags were given."""

from __future__ import annotations

from bench.inputs.flag_text import given_flags, key_value, listed


def test_key_value_splits_at_the_first_equals_and_strips_each_side() -> None:
    assert key_value(" a = b=c ") == ("a", "b=c")
    assert key_value("a=") == ("a", "")


def test_key_value_without_an_equals_has_no_value_and_an_empty_key_is_empty() -> None:
    assert key_value("a") == ("a", None)
    assert key_value("=b") == ("", "b")


def test_listed_strips_each_value_and_leaves_out_empty_ones_across_several_texts() -> None:
    assert listed("a, b,,c ,") == ["a", "b", "c"]
    assert listed(None) == [] and listed() == [] and listed(" , ") == []
    assert listed("a,b", None, "c") == ["a", "b", "c"]


def test_given_flags_are_those_off_their_default_named_as_typed_in_order() -> None:
    values = {"max_load": (8.0, None), "rate": (False, False), "slo": ([], None), "start": (2.0, 1.0)}
    assert given_flags(values) == ["--max-load", "--start"]


def test_a_capacity_or_sweep_ask_names_only_the_flags_given_off_their_defaults() -> None:
    """What `--resume` refuses: a flag the person gave, never one left at its default."""
    from bench.flows.capacity import CapacityAsk
    from bench.inputs.options import LoadOverrides

    assert CapacityAsk().given() == [] and LoadOverrides().given() == []
    assert CapacityAsk(slo=[], tolerance=0.1, rate=True).given() == ["--tolerance", "--rate"]
    assert LoadOverrides(concurrency="1,8", max_concurrency=4).given() == ["--concurrency", "--max-concurrency"]
