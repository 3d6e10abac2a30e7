"""The capacity search against scripted pass/fail oracles whose true capacity is known."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from bench.flows.search import CapacitySearch, Probe, SearchResult, SearchSettings

Oracle = Callable[[float], Probe]


def search(oracle: Oracle, **settings: object) -> SearchResult:
    state = CapacitySearch(SearchSettings(**settings))  # type: ignore[arg-type]
    while (load := state.next_load()) is not None:
        state.record(oracle(load))
    return state.result()


def decode_slows(users: float, noise: float = 0.0, rng: random.Random | None = None) -> Probe:
    """TPOT = 10 ms + 0.5 ms per other stream, SLO 40 ms: the true capacity is 61 users."""
    tpot = (10 + 0.5 * (users - 1)) * (1 + (rng.gauss(0, noise) if rng else 0.0))
    margin = tpot / 40
    return Probe(users, "pass" if margin <= 1 else "fail", () if margin <= 1 else (f"p95 TPOT {tpot:.1f} ms",),
                 users * 1000 / tpot, margin, 100 + 64 * tpot)


def capped_at_24(users: float) -> Probe:
    """24 stream slots; past them a request waits for one, and any wait fails the TTFT SLO of 110 ms."""
    duration_ms = 100 + 31 * 10
    wait_ms = 0 if users <= 24 else duration_ms * (users - 24) / 24
    margin = (100 + wait_ms) / 110
    return Probe(users, "pass" if margin <= 1 else "fail", (), min(users, 24) * 32000 / duration_ms, margin,
                 duration_ms + wait_ms)


def test_a_smooth_slowdown_is_found_within_tolerance_in_at_most_ten_probes() -> None:
    result = search(decode_slows)
    assert result.capacity is not None and abs(result.capacity - 61) / 61 <= 0.05
    assert result.num_probes == 9  # the secant lands by the failing end, whose margin is close to the limit: kept
    assert result.lowest_failing is not None and result.lowest_failing - result.capacity <= 0.05 * result.capacity
    assert [p.load for p in result.probes[:7]] == [1, 2, 4, 8, 16, 32, 64]  # the geometric ramp
    assert not result.saturated and "within 5%" in result.stopped_because


def test_a_stream_cap_is_found_to_the_user_in_ten_probes_without_climbing_one_user_at_a_time() -> None:
    """Past the cap the margin jumps: a secant step from 16 and 32 aims at 17, and again at 18 after it; Brent's
    guard bisects after the first slow step instead (13 probes without it)."""
    result = search(capped_at_24)
    assert (result.capacity, result.lowest_failing) == (24, 25)
    assert [p.load for p in result.probes] == [1, 2, 4, 8, 16, 32, 17, 24, 28, 25]


def test_a_wall_with_flat_latency_below_it_is_bisected_not_crept_up_on() -> None:
    """TTFT flat (margin 0.6) up to 22 users, a queue past them: the secant from 16 and 32 would aim at 19, by
    the passing end whose margin is far from the limit, so the search bisects."""
    def wall(users: float) -> Probe:
        margin = 0.6 if users <= 22 else 1.1 + 2.5 * (users - 22) / 22
        return Probe(users, "pass" if margin <= 1 else "fail", (), min(users, 22) * 100, margin, 500)

    result = search(wall)
    assert (result.capacity, result.lowest_failing) == (22, 23) and result.num_probes <= 10
    assert result.probes[6].load == 24  # the midpoint of 16 and 32


def test_noise_at_the_boundary_still_ends_with_a_pass_right_below_a_fail() -> None:
    for seed in range(20):
        rng = random.Random(seed)
        result = search(lambda users, rng=rng: decode_slows(users, noise=0.03, rng=rng))
        assert result.capacity is not None and result.lowest_failing is not None
        assert result.lowest_failing - result.capacity <= max(0.05 * result.capacity, 1)
        assert 54 <= result.capacity <= 66 and result.num_probes <= 14
        by_load = {p.load: p.verdict for p in result.probes}
        assert by_load[result.capacity] == "pass" and by_load[result.lowest_failing] == "fail"


def test_passing_all_the_way_to_the_bound_says_so() -> None:
    result = search(decode_slows, max_load=50)
    assert (result.capacity, result.lowest_failing) == (50, None)
    assert [p.load for p in result.probes] == [1, 2, 4, 8, 16, 32, 50]
    assert result.stopped_because == "the SLO held up to --max-load 50 users"


def test_failing_at_the_start_load_gives_no_capacity_and_says_what_to_change() -> None:
    result = search(lambda users: Probe(users, "fail", ("p95 TTFT 900 ms > 500 ms",), 10.0, 1.8, 900.0))
    assert result.capacity is None and result.lowest_failing == 1 and result.num_probes == 1
    assert "fails at the start load 1 users (p95 TTFT 900 ms > 500 ms): lower --start" in result.stopped_because


def test_a_server_that_stops_gaining_throughput_ends_the_ramp_as_saturated() -> None:
    def saturating(users: float) -> Probe:  # flat from 8 users on, latency growing, no SLO ever missed
        return Probe(users, "pass", (), 100.0 * min(users, 8), 0.2, 50.0 * users)

    result = search(saturating)
    assert result.saturated and result.capacity == 16 and result.lowest_failing is None
    assert [p.load for p in result.probes] == [1, 2, 4, 8, 16]
    assert "saturated at about 800 output tokens/s" in result.stopped_because


def test_a_probe_where_the_client_fell_behind_is_run_again_once_then_the_search_stops() -> None:
    calls: list[float] = []

    def client_limited(users: float) -> Probe:
        calls.append(users)
        return decode_slows(users) if users < 16 else Probe(users, "invalid", ("client fell behind",))

    result = search(client_limited)
    assert calls == [1, 2, 4, 8, 16, 16]
    assert result.capacity == 8 and result.lowest_failing is None
    assert "fell behind twice at 16 users" in result.stopped_because

    flaky = iter([True])
    result = search(lambda users: Probe(users, "invalid") if users == 4 and next(flaky, False) else decode_slows(users))
    assert [p.load for p in result.probes][:4] == [1, 2, 4, 4] and result.capacity == 61


def test_the_probe_budget_bounds_the_search() -> None:
    result = search(decode_slows, max_probes=5)
    assert result.num_probes == 5 and result.capacity == 16 and result.stopped_because == "reached --max-probes 5"


def test_an_arrival_rate_search_goes_in_hundredths_of_a_request_per_second() -> None:
    def rate_limited(rate: float) -> Probe:  # the SLO holds up to 3.7 requests/s
        margin = rate / 3.7
        return Probe(rate, "pass" if margin <= 1 else "fail", (), rate * 100, margin, 100 * rate)

    result = search(rate_limited, kind="rate", start=0.5)
    assert result.capacity is not None and 3.7 / 1.05 <= result.capacity <= 3.7
    assert all(round(p.load, 2) == p.load for p in result.probes)


@pytest.mark.parametrize(("settings", "message"), [
    ({"tolerance": 0}, "--tolerance 0: expected a share between 0 and 1"),
    ({"tolerance": 1.5}, "--tolerance 1.5: expected a share between 0 and 1"),
    ({"start": 2.5}, "--start 2.5: expected a load > 0"),
    ({"start": 8, "max_load": 4}, "--max-load 4 is below --start 8"),
])
def test_bad_settings_name_the_flag(settings: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SearchSettings(**settings)  # type: ignore[arg-type]
