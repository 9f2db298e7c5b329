# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

# Package rule (_bench): the benchmark client. It may import the flat files of module_utils and _http; never a module.

"""The headline figures of a benchmark's result: the medians over the repeats of the figures a summary line shows, and
what was sent. Every figure is None when the benchmark has none (check mode, no repeat finished).

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import typing as t

MEDIANS = ("median_tpot_ms", "median_ttft_ms", "median_itl_ms", "output_throughput", "request_throughput")
AS_IS = ("url", "model", "endpoint", "endpoint_fallback", "workload", "per_turn", "schedule_slip_ms", "prefix_cache", "save_result")


def _figure(metrics: t.Mapping[str, t.Any], name: str, key: str = "median") -> t.Any:
    figure = metrics.get(name)
    return figure.get(key) if isinstance(figure, t.Mapping) else None


def headline(spec: t.Any, result: t.Mapping[str, t.Any]) -> t.Dict[str, t.Any]:
    """``spec``: the run's BenchSpec (None when the options were refused); ``result``: the module's result so far."""
    metrics = result.get("metrics") or {}
    runs = [run for run in result.get("runs") or [] if isinstance(run, t.Mapping)]
    figures: t.Dict[str, t.Any] = {key: result.get(key) for key in AS_IS}
    figures.update({
        "input_len": getattr(spec, "input_len", None), "output_len": getattr(spec, "output_len", None),
        "num_requests": getattr(spec, "num_requests", None), "concurrency": getattr(spec, "concurrency", None),
        "repeats": len(runs),
        "decode_tok_s": _figure(metrics, "decode_tok_s"), "decode_tok_s_min": _figure(metrics, "decode_tok_s", "min"),
        "decode_tok_s_max": _figure(metrics, "decode_tok_s", "max"),
        "completed": sum(int(run.get("completed") or 0) for run in runs), "failed": sum(int(run.get("failed") or 0) for run in runs),
    })
    figures.update({name: _figure(metrics, name) for name in MEDIANS})
    return figures
