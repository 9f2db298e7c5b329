# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Summary statistics (_bench/stats): percentiles as numpy computes them, means, spreads, t quantiles, percentile names."""

from __future__ import annotations

import math

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._bench.stats import (
    mean, median, percentile, percentile_label, percentile_text, sample_std, spread, std, t_quantile_975)


def test_percentile_names():
    assert [percentile_label(p) for p in (50, 90.0, 99, 99.9, 99.99, 12.5)] == ["p50", "p90", "p99", "p99_9", "p99_99", "p12_5"]
    assert [percentile_text(p) for p in (50.0, 99.9)] == ["50", "99.9"]  # vllm bench serve's own key: p99.9_ttft_ms


def approx(value):
    return pytest.approx(value, rel=1e-9, abs=1e-9)


def test_percentile_like_numpy_linear():
    values = [4.0, 1.0, 3.0, 2.0]
    assert percentile(values, 90) == approx(3.7)   # rank 2.7: 3 + 0.7 * (4 - 3)
    assert percentile(values, 99) == approx(3.97)
    assert percentile(values, 0) == 1.0 and percentile(values, 100) == 4.0
    assert median(values) == approx(2.5)
    assert percentile([5.0], 99) == 5.0
    assert percentile([], 50) == 0.0  # vllm bench serve's `values or 0`


def test_mean_and_standard_deviations():
    values = [1.0, 2.0, 3.0, 4.0]
    assert mean(values) == 2.5
    assert std(values) == approx(math.sqrt(1.25))          # population, as numpy.std
    assert sample_std(values) == approx(math.sqrt(5 / 3))  # ddof=1
    assert std([]) == 0.0 and mean([]) == 0.0 and sample_std([7.0]) == 0.0


def test_t_quantiles():
    assert t_quantile_975(1) == 12.706 and t_quantile_975(2) == 4.303 and t_quantile_975(30) == 2.042
    assert t_quantile_975(35) == 2.042   # between entries: the wider, lower one
    assert t_quantile_975(1000) == 1.960
    with pytest.raises(ValueError):
        t_quantile_975(0)


def test_spread_with_confidence_interval():
    s = spread([14.0, 10.0, 12.0])
    half = 4.303 * 2.0 / math.sqrt(3)  # sample std 2, t(2) = 4.303
    assert s["median"] == 12.0 and s["min"] == 10.0 and s["max"] == 14.0 and s["n"] == 3
    assert s["stdev"] == approx(2.0)
    assert s["ci95"] == [approx(12 - half), approx(12 + half)]


def test_spread_without_enough_repeats_has_no_interval():
    assert spread([1.0, 3.0])["ci95"] is None
    assert spread([1.0, 3.0])["median"] == 2.0
