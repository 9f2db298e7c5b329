# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Goodput: the requests that met every service-level target given, as `vllm bench serve --goodput` counts them.

A completed request is good when its TTFT, its TPOT ((E2EL - TTFT) / (output tokens - 1), 0 for a single token,
as vllm bench serve has it) and its E2EL are each at most the target given for it; targets not given do not count.
A failed request is never good. `request_goodput` is good requests per second of the run (vllm bench serve's
figure); `goodput_pct` is their share of the requests that ended (completed or failed; a request still in flight
at the end of a time-bounded run has no verdict and is left out).

Package rule (_bench): vllm_benchmark's load generator and numbers. It imports the flat files of module_utils, _http
and its own files: never _gpu, _host, _reclaim, _server or _report, and never a module; nothing in _gpu or _host imports it.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import typing as t

from ansible_collections.gpuops.fleet.plugins.module_utils._bench.request import Outcome

# Figures a run gets when goodput targets are given (aggregated across repeats like the others)
GOODPUT_FIGURES = ("request_goodput", "goodput_pct", "good_requests")


def request_times_ms(outcome: Outcome) -> t.Dict[str, float]:
    """A completed request's TTFT, TPOT and E2EL in milliseconds, keyed like the goodput targets."""
    tpot = (outcome.latency - outcome.ttft) / (outcome.output_tokens - 1) if outcome.output_tokens > 1 else 0.0
    return {"ttft_ms": outcome.ttft * 1000, "tpot_ms": tpot * 1000, "e2el_ms": outcome.latency * 1000}


def goodput(outcomes: t.Sequence[Outcome], targets: t.Mapping[str, float], duration: float) -> t.Dict[str, t.Any]:
    """The goodput figures of one run's ended requests against `targets` ({ttft_ms, tpot_ms, e2el_ms}, some of them)."""
    good = 0
    missed = {key: 0 for key in targets}
    for outcome in outcomes:
        if not outcome.success:
            continue
        times = request_times_ms(outcome)
        met = True
        for key, limit in targets.items():
            if times[key] > limit:
                missed[key] += 1
                met = False
        good += met
    return {
        "good_requests": good,
        "goodput_pct": 100.0 * good / len(outcomes) if outcomes else None,
        "request_goodput": good / duration if duration > 0 else None,
        "slo_missed": missed,
    }
