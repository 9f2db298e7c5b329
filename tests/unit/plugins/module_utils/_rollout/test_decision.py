# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The rollout gate's rule (module_utils/_rollout/decision.py): a regression is worse by more than the threshold AND by
more than the run-to-run spread (and, for TTFT, by more than the floor); the settings are checked with clear errors."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._rollout.decision import (
    RolloutError, check_settings, compare_metric, judge_batch, judge_host,
)

SETTINGS = {"threshold_pct": 3.0, "ttft_threshold_pct": 10.0, "ttft_floor_ms": 20.0, "repeats": 3}


def runs(decode, ttft=(100.0, 100.0, 100.0)):
    return [{"decode_tok_s": d, "median_ttft_ms": f, "p99_ttft_ms": f * 1.5, "completed": 4} for d, f in zip(decode, ttft)]


def test_drop_beyond_threshold_and_spread_is_a_regression():
    out = compare_metric("decode_tok_s", runs([47.3, 47.2, 47.4]), runs([45.5, 45.4, 45.6]), 3.0)
    assert out["regression"] and out["spread"] == pytest.approx(0.2)
    assert out["worse_pct"] == pytest.approx((47.3 - 45.5) / 47.3 * 100)


def test_drop_beyond_threshold_but_within_spread_is_noise():
    # medians 47.3 -> 45.5 (3.8%), but one repeat of each side swings by 3 tok/s: the machine's noise is larger
    out = compare_metric("decode_tok_s", runs([47.3, 44.0, 47.4]), runs([45.5, 48.5, 45.4]), 3.0)
    assert not out["regression"] and "within the run-to-run spread" in out["verdict"]


def test_drop_beyond_spread_but_within_threshold_passes():
    out = compare_metric("decode_tok_s", runs([47.30, 47.31, 47.29]), runs([46.50, 46.51, 46.49]), 3.0)
    assert not out["regression"] and "within the 3.0% threshold" in out["verdict"]


def test_a_gain_is_never_a_regression_and_threshold_zero_still_needs_the_spread():
    assert compare_metric("decode_tok_s", runs([47.3, 47.2, 47.4]), runs([57.6, 57.5, 57.7]), 0.0)["verdict"] == "better"
    assert not compare_metric("decode_tok_s", runs([47.3, 47.0, 47.4]), runs([47.1, 47.2, 47.0]), 0.0)["regression"]
    assert compare_metric("decode_tok_s", runs([47.3, 47.3, 47.3]), runs([47.0, 47.0, 47.0]), 0.0)["regression"]


def test_ttft_rise_needs_threshold_spread_and_floor():
    base, slow = runs([47] * 3, (100, 101, 99)), runs([47] * 3, (130, 131, 129))
    assert compare_metric("median_ttft_ms", base, slow, 10.0, 20.0)["regression"]
    small = runs([47] * 3, (30, 30.5, 29.5))
    assert not compare_metric("median_ttft_ms", small, runs([47] * 3, (34, 34.2, 34.1)), 10.0, 20.0)["regression"]
    assert not compare_metric("p99_ttft_ms", base, slow, None)["gated"]


def test_judge_host_and_batch():
    ok = judge_host("a", {"runs": runs([47.3, 47.2, 47.4])}, {"runs": runs([57.6, 57.5, 57.7])}, None, SETTINGS)
    assert ok["verdict"] == "pass" and "decode tok/s per stream 47.30 -> 57.60" in ok["reason"]
    failed = judge_host("b", None, None, {"task": "Wait for /health", "msg": "exited"}, SETTINGS)
    assert failed["verdict"] == "failed" and 'failed at "Wait for /health": exited' in failed["reason"]
    assert judge_host("c", {"runs": runs([47.0] * 3)}, None, None, SETTINGS)["verdict"] == "failed"
    batch = judge_batch(["a", "b"], {"a": {"runs": runs([47.3, 47.2, 47.4])}},
                        {"a": {"runs": runs([57.6, 57.5, 57.7])}}, {"b": {"task": "t", "msg": "m"}}, SETTINGS)
    assert batch["halt"] and batch["reason"].startswith("b failed")


@pytest.mark.parametrize("settings, named", [
    ({"threshold_pct": -1}, "vllm_rollout_threshold_pct=-1"),
    ({"threshold_pct": "x"}, "vllm_rollout_threshold_pct=x"),
    ({"ttft_threshold_pct": 150}, "vllm_rollout_ttft_threshold_pct=150"),
    ({"ttft_floor_ms": -5}, "vllm_rollout_ttft_floor_ms=-5"),
    ({"serial": 0}, "vllm_rollout_serial=0"),
    ({"serial": "0%"}, "vllm_rollout_serial=0%"),
    ({"serial": "150%"}, "vllm_rollout_serial=150%"),
    ({"serial": 1.5}, "vllm_rollout_serial=1.5"),
    ({"serial": [1, "abc"]}, "vllm_rollout_serial=abc"),
    ({"repeats": 1}, "vllm_server_benchmark_repeats=1"),
])
def test_bad_settings_name_the_variable_and_value(settings, named):
    good = {"threshold_pct": 3, "ttft_threshold_pct": 10, "serial": 1, "repeats": 3}
    with pytest.raises(RolloutError) as raised:
        check_settings(dict(good, **settings))
    assert named in str(raised.value)


def test_good_settings():
    assert check_settings({"threshold_pct": "3", "ttft_threshold_pct": 10, "serial": [1, "25%"], "repeats": "3"}) == {
        "threshold_pct": 3.0, "ttft_threshold_pct": 10.0, "ttft_floor_ms": 20.0, "repeats": 3}


DEAD_ERROR = ('HTTP 500 Internal Server Error: {"error":{"message":"EngineCore encountered an issue.","type":"EngineDeadError",'
              '"param":null,"code":500}}')


def dead(run):
    """A repeat whose every request got vLLM's answer once its engine core died."""
    count = run["completed"]
    return dict(run, completed=0, failed=count, decode_tok_s=None, median_ttft_ms=0.0, p99_ttft_ms=0.0,
                failed_by_reason={"http_error": count}, errors=[{"request": 0, "reason": "http_error", "error": DEAD_ERROR}])


def test_a_canary_whose_engine_died_in_a_repeat_fails_the_gate_not_passes_on_the_others():
    # repeat 3 of the canary: every request HTTP 500 EngineDeadError; repeats 1 and 2 look as good as the baseline
    canary = runs([47.3, 47.2, 47.4])
    canary[2] = dead(canary[2])
    out = judge_host("a", {"runs": runs([47.3, 47.2, 47.4])}, {"runs": canary}, None, SETTINGS)
    assert out["verdict"] == "failed", out
    assert "the new configuration's measurement failed: 4 of 12 requests failed (http_error: 4)" in out["reason"]
    assert "EngineDeadError" in out["reason"]
    assert judge_batch(["a"], {"a": {"runs": runs([47.3, 47.2, 47.4])}}, {"a": {"runs": canary}}, {}, SETTINGS)["halt"]


def test_failed_requests_beside_fast_ones_are_a_failed_measurement_on_either_side():
    # half of each repeat's requests failed at once (HTTP 500): what completed is fast, which must not pass for a gain
    halves = [dict(run, completed=2, failed=2, failed_by_reason={"http_error": 2},
                   errors=[{"request": 1, "reason": "http_error", "error": DEAD_ERROR}]) for run in runs([60.0, 60.1, 60.2])]
    assert judge_host("a", {"runs": runs([47.3, 47.2, 47.4])}, {"runs": halves}, None, SETTINGS)["verdict"] == "failed"
    baseline = judge_host("a", {"runs": halves}, {"runs": runs([47.3, 47.2, 47.4])}, None, SETTINGS)
    assert baseline["verdict"] == "failed" and "the baseline measurement failed: 6 of 12 requests failed" in baseline["reason"]
    timeouts = [dict(run, failed=1, failed_by_reason={"timeout": 1}) for run in runs([47.3, 47.2, 47.4])]
    slow = judge_host("a", {"runs": runs([47.3, 47.2, 47.4])}, {"runs": timeouts}, None, SETTINGS)
    assert slow["verdict"] == "failed" and "(timeout: 3)" in slow["reason"]
    # every request completed: judged by the figures, as before
    assert judge_host("a", {"runs": runs([47.3, 47.2, 47.4])}, {"runs": runs([47.3, 47.2, 47.4])}, None, SETTINGS)["verdict"] == "pass"
