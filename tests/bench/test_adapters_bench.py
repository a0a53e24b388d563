"""bench/adapters/run.py's own arithmetic and argument checks (the bench itself runs on
demand only: it starts engines and takes seconds to minutes)."""

from __future__ import annotations

import pytest

from bench.adapters.run import combine, parse, ratios, report, sequence, summarize


def test_a_phase_counts_failures_apart_and_times_only_the_answered() -> None:
    s = summarize([0.010, 0.020, None, 0.030, 0.040], elapsed=2.0)
    assert s == {"requests": 5, "failed": 1, "throughput_rps": 2.0, "ttft_p50_ms": 25.0, "ttft_p90_ms": 37.0}
    assert summarize([None], elapsed=1.0)["ttft_p50_ms"] is None


def test_rounds_combine_by_median_and_ratios_are_shared_over_dedicated() -> None:
    a = {"requests": 10, "failed": 0, "throughput_rps": 4.0, "ttft_p50_ms": 20.0, "ttft_p90_ms": 40.0}
    b = {"requests": 10, "failed": 1, "throughput_rps": 6.0, "ttft_p50_ms": 30.0, "ttft_p90_ms": 60.0}
    both = combine([a, b])
    assert both == {"requests": 20, "failed": 1, "throughput_rps": 5.0, "ttft_p50_ms": 25.0, "ttft_p90_ms": 50.0}
    assert ratios(a, b) == {"throughput_rps": 0.67, "ttft_p50_ms": 0.67, "ttft_p90_ms": 0.67}
    assert ratios(a, {**b, "ttft_p90_ms": None})["ttft_p90_ms"] is None


def test_the_request_sequence_is_the_seeds_and_hot_sends_that_share_to_adapter_0() -> None:
    assert sequence(4, 50, 0.0, 3) == sequence(4, 50, 0.0, 3)
    assert set(sequence(4, 200, 0.0, 3)) == {0, 1, 2, 3}
    hot = sequence(4, 2000, 0.5, 3)
    assert 0.45 < hot.count(0) / len(hot) < 0.55 and set(hot) == {0, 1, 2, 3}


def test_the_report_names_both_layouts_and_the_ratio() -> None:
    r = {"requests": 8, "failed": 0, "throughput_rps": 4.0, "ttft_p50_ms": 20.0, "ttft_p90_ms": 40.0}
    out = {"shared": {"replicas": 2, **r}, "dedicated": {"replicas": 4, **r}, "ratio_shared_to_dedicated": ratios(r, r),
           "settings": {"adapters": 4, "requests": 8, "clients": 2, "rounds": 1, "hot": 0.0}}
    text = report(out)
    assert "shared    2 replicas" in text and "dedicated 4 replicas" in text and "throughput 1.0x" in text


@pytest.mark.parametrize(("argv", "why"), [
    (["--adapters", "0"], "--adapters must be at least 1, not 0"),
    (["--max-tokens", "0"], "--max-tokens must be at least 1"),
    (["--hot", "1"], "--hot is a share of the requests"),
    (["--adapters", "1", "--hot", "0.5"], "--hot needs at least 2 adapters"),
])
def test_bad_arguments_say_what_to_change(argv: list[str], why: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse(argv)
    assert why in capsys.readouterr().err


def test_the_defaults_are_four_adapters_over_two_replicas() -> None:
    args = parse([])
    assert (args.adapters, args.replicas, args.rounds) == (4, 2, 2)
