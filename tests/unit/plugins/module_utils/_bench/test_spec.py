# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""vllm_benchmark's options (_bench/spec): percentiles, sweep levels, duration, and bad values named with the option."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._argspec import SpecError
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.spec import build_spec


def test_percentiles_are_checked_sorted_and_deduplicated():
    assert build_spec({}).percentiles == (50.0, 90.0, 99.0)
    assert build_spec({"percentiles": [99.9, 50, 50.0, 100]}).percentiles == (50.0, 99.9, 100.0)
    for bad in ([0], [101], [-5], [50, "x"], [], [float("nan")], [True]):
        with pytest.raises(SpecError, match=r"^percentiles: "):
            build_spec({"percentiles": bad})


def test_sweep_levels():
    one = build_spec({"concurrency": 4})
    assert one.sweep_option is None and one.concurrency == 4 and [s.concurrency for s in one.levels()] == [4]
    assert build_spec({"concurrency": [4]}).sweep_option is None
    sweep = build_spec({"concurrency": [8, 1, 64]})
    assert sweep.sweep_option == "concurrency" and sweep.concurrency == 8
    assert [(s.concurrency, s.request_rate) for s in sweep.levels()] == [(8, float("inf")), (1, float("inf")), (64, float("inf"))]
    rates = build_spec({"request_rate": [2, "inf", 0.5], "concurrency": 32})
    assert rates.sweep_option == "request_rate" and [s.request_rate for s in rates.levels()] == [2.0, float("inf"), 0.5]
    assert {s.concurrency for s in rates.levels()} == {32}


@pytest.mark.parametrize("params, message", [
    ({"concurrency": []}, "concurrency: [] is an empty sweep"),
    ({"request_rate": []}, "request_rate: [] is an empty sweep"),
    ({"concurrency": [1, 0]}, "concurrency: 0 is out of range"),
    ({"concurrency": [1, 8, 1]}, "concurrency: 1 is given twice in [1, 8, 1]"),
    ({"concurrency": list(range(1, 70))}, "concurrency: 69 levels are more than the 64"),
    ({"request_rate": [1, -1]}, "request_rate: -1 must be a positive number"),
    ({"concurrency": [1, 2], "request_rate": [1, 2]}, "concurrency: [1, 2] and request_rate: [1.0, 2.0] are both lists"),
    ({"knee_tolerance": 0}, "knee_tolerance: 0 must be a positive"),
    ({"knee_tolerance": 100}, "knee_tolerance: 100 must be less than 100 percent"),
    ({"duration": 0}, "duration: 0 must be a positive, finite number of seconds"),
    ({"duration": -3}, "duration: -3 must be a positive"),
    ({"duration": "inf"}, "duration: 'inf' must be a positive, finite number"),
    ({"metrics_url": "ftp://host/metrics"}, "metrics_url: 'ftp://host/metrics' must be an http:// or https:// URL"),
    ({"metrics_url": "http://host:99999/metrics"}, "metrics_url: 'http://host:99999/metrics' is not a valid URL"),
])
def test_bad_values_name_option_and_value(params, message):
    with pytest.raises(SpecError) as caught:
        build_spec(params)
    assert message in str(caught.value)


def test_duration_and_num_requests():
    assert build_spec({}).num_requests == 64 and build_spec({}).duration is None
    timed = build_spec({"duration": 30})
    assert timed.duration == 30.0 and timed.num_requests is None  # no count: as many as the time allows
    assert build_spec({"duration": 30, "num_requests": 10}).num_requests == 10  # a cap
