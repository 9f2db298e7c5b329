# Copyright (c) gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Goodput (_bench/goodput): the share of requests within every target given, by hand."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._argspec import SpecError
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.goodput import goodput
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.request import Outcome
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.spec import build_spec


def finished(index, ttft, latency, tokens):
    o = Outcome(index)
    o.success, o.ttft, o.latency, o.output_tokens = True, ttft, latency, tokens
    return o


def test_goodput_by_hand():
    outcomes = [
        finished(0, 0.1, 1.1, 11),   # TTFT 100 ms, TPOT 100 ms, E2EL 1100 ms
        finished(1, 0.6, 1.1, 11),   # TTFT 600 ms: over the TTFT target
        finished(2, 0.1, 2.1, 11),   # TPOT 200 ms and E2EL 2100 ms: over both
        finished(3, 0.2, 0.2, 1),    # one token: TPOT 0 (vllm bench serve), good
        Outcome(4),                  # failed: never good
    ]
    outcomes[4].reason = "http_error"
    figures = goodput(outcomes, {"ttft_ms": 500.0, "tpot_ms": 150.0, "e2el_ms": 2000.0}, 4.0)
    assert figures == {"good_requests": 2, "goodput_pct": 40.0, "request_goodput": 0.5,
                       "slo_missed": {"ttft_ms": 1, "tpot_ms": 1, "e2el_ms": 1}}
    assert goodput(outcomes, {"ttft_ms": 500.0}, 4.0)["good_requests"] == 3
    assert goodput([], {"ttft_ms": 1.0}, 1.0)["goodput_pct"] is None


@pytest.mark.parametrize("value, message", [
    ({"ttft_ms": -1}, "goodput.ttft_ms: -1 must be a positive"),
    ({"tpot_ms": 0}, "goodput.tpot_ms: 0 must be a positive"),
    ({"e2el_ms": "soon"}, "goodput.e2el_ms: 'soon' is not a number"),
    ({"ttft": 500}, "goodput: unknown key 'ttft' in {'ttft': 500}; the targets are ttft_ms, tpot_ms, e2el_ms"),
    ({}, "goodput: {} sets no target"),
    ({"ttft_ms": None, "tpot_ms": None, "e2el_ms": None}, "sets no target"),
    ("fast", "goodput: 'fast' is not a dict"),
])
def test_goodput_values_are_checked(value, message):
    with pytest.raises(SpecError) as caught:
        build_spec({"goodput": value})
    assert message in str(caught.value)


def test_goodput_keeps_only_the_targets_given():
    assert build_spec({"goodput": {"ttft_ms": 500, "tpot_ms": None, "e2el_ms": None}}).goodput == {"ttft_ms": 500.0}
    assert build_spec({}).goodput is None
