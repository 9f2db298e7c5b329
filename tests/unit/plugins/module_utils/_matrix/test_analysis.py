# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The benchmark matrix's analysis (_matrix/analysis): medians, the spread of the widest host, the winner and its margin."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._matrix import analysis


def test_stats_medians_and_the_spread_of_the_widest_host():
    cells = [{"status": "ok", "summary": {"decode_tok_s": v, "median_tpot_ms": 1000.0 / v}} for v in (50.0, 52.0, 48.0)]
    cells.append({"status": "failed"})
    got = analysis.stats(cells, [cells[:2], cells[2:]])
    assert (got["runs"], got["ok"], got["failed"]) == (4, 3, 1)
    assert got["decode_tok_s"] == 50.0 and got["decode_tok_s_min"] == 48.0 and got["decode_tok_s_max"] == 52.0
    assert got["spread_tok_s"] == 2.0  # one group's max - min; the group of one value has no spread


@pytest.mark.parametrize("a, b, spread, significant", [(57.6, 47.3, 0.5, True), (50.8, 50.0, 4.0, False), (50.8, 50.0, None, False)])
def test_a_margin_is_significant_only_beyond_the_spread(a, b, spread, significant):
    per = {"A": {"decode_tok_s": a, "spread_tok_s": spread}, "B": {"decode_tok_s": b, "spread_tok_s": None}}
    win = analysis.winner(per, ["A", "B"])
    assert win["config"] == "A" and win["runner_up"] == "B" and win["margin_tok_s"] == pytest.approx(a - b)
    assert win["significant"] is significant


def measurement(host, config, decode, failed=0, status="ok", latency=None):
    """One raw measurement of the matrix: its benchmark's one repeat (4 requests, ``failed`` of them failed)."""
    run = {"completed": 4 - failed, "failed": failed, "median_tpot_ms": 1000.0 / decode, "p50_ttft_ms": latency or 20.0}
    if failed:
        run.update(failed_by_reason={"http_error": failed}, errors=[{"error": "HTTP 500: EngineDeadError  engine  died"}])
    return {"host": host, "config": config, "round": 1, "status": status, "raw_file": "raw/%s__%s.json" % (host, config),
            "summary": {"decode_tok_s": decode, "median_tpot_ms": 1000.0 / decode}, "benchmark": {"runs": [run]}}


def test_requests_that_failed_make_a_failed_measurement_that_cannot_win():
    """A configuration whose task succeeded while requests of its repeats failed (its engine died after one) has a fast
    figure from the request that completed: it is a failed measurement, left out of every median, named in the
    failures, and the winner is the fastest configuration measured without a failure."""
    plan = {"configs": [{"name": "base"}, {"name": "LL"}, {"name": "dies"}], "hosts": ["n1", "n2"], "baseline": "base",
            "repeats": 1, "leave": "best"}
    cells = [measurement(host, name, decode) for host in ("n1", "n2") for name, decode in (("base", 47.0), ("LL", 57.0))]
    cells += [measurement("n1", "dies", 90.0, failed=3, latency=5.0), measurement("n2", "dies", 88.0)]
    report = analysis.analyse(plan, cells)
    assert report["winner"]["config"] == "LL" and report["leave"]["config"] == "LL"
    dies = report["fleet"]["dies"]
    assert (dies["runs"], dies["ok"], dies["failed"], dies["decode_tok_s"]) == (2, 1, 1, 88.0), dies
    assert dies["latency"]["ttft_ms"]["p50"] == 20.0, "the failed measurement's latencies are left out too"
    assert report["per_host"]["n1"]["configs"]["dies"]["decode_tok_s"] is None and report["per_host"]["n1"]["winner"]["config"] == "LL"
    assert report["per_host"]["n2"]["winner"]["config"] == "dies", "measured without a failure on n2, it wins there"
    (failure,) = report["failures"]
    assert (failure["host"], failure["config"], failure["status"], failure["stage"]) == ("n1", "dies", analysis.REQUESTS_FAILED, "benchmark")
    assert failure["error"] == "3 of 4 requests failed (http_error: 3); first error: HTTP 500: EngineDeadError engine died"


def test_a_measurement_is_failed_by_its_task_or_by_its_requests():
    assert analysis.status(measurement("n", "c", 50.0)) == "ok" and analysis.measured(measurement("n", "c", 50.0))
    assert analysis.status(measurement("n", "c", 50.0, failed=1)) == analysis.REQUESTS_FAILED
    assert analysis.status({"status": "failed", "stage": "restart"}) == "failed"
    assert analysis.status({"runs": [{"completed": 3, "failed": 0}]}) == "ok", "a rollout side has no status of its own"
    assert analysis.requests_failed([{"completed": 3, "failed": 0}, {"completed": 2}]) is None
    assert analysis.requests_failed([{"completed": 3, "failed": 1}, {"completed": 2, "failed": 2}]) == "3 of 8 requests failed (no reason given)"
