# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)

"""A run's figures as `vllm bench serve --save-result` writes them, so tools made for that file read ours.

One repeat is one JSON object with the same keys (`date`, `backend`, `model_id`, `num_prompts`, `request_rate`,
`max_concurrency`, `completed`, `mean_ttft_ms`, `p99_itl_ms` ...); what vllm bench serve does not have lives
under the one extra key `gpuops_fleet`. Several repeats are written one object per line, as its
`--append-result` does.

Package rule (_bench): vllm_benchmark's load generator and numbers. It imports the flat files of module_utils, _http
and its own files: never _gpu, _host, _reclaim, _server or _report, and never a module; nothing in _gpu or _host imports it.

Private to this collection: the API may change without notice.
"""

from __future__ import annotations

import json
import typing as t
from datetime import datetime

from ansible_collections.gpuops.fleet.plugins.module_utils._bench.metrics import LATENCIES, PERCENTILES
from ansible_collections.gpuops.fleet.plugins.module_utils._bench.stats import percentile_label, percentile_text
from ansible_collections.gpuops.fleet.plugins.module_utils._io import write_atomic

_TOTALS = ("duration", "completed", "failed", "total_input_tokens", "total_output_tokens", "request_throughput",
           "output_throughput", "total_token_throughput")
_EXTRAS = ("decode_tok_s", "failed_by_reason", "approximate_token_count", "server_generation_tokens",
           "client_generation_tokens", "in_flight_at_end", "good_requests", "goodput_pct", "slo_missed")


def vllm_result(run: t.Dict[str, t.Any], *, endpoint: str, model: str, num_requests: int, request_rate: float,
                concurrency: int, date: t.Optional[str] = None, percentiles: t.Sequence[float] = PERCENTILES,
                goodput: t.Optional[t.Mapping[str, float]] = None) -> t.Dict[str, t.Any]:
    """One repeat in the shape of vllm bench serve's result JSON (without --save-detailed). Percentile keys are
    vllm bench serve's (p99.9_ttft_ms), not the module's (p99_9_ttft_ms)."""
    backend = "openai-chat" if endpoint == "chat" else "openai"
    result: t.Dict[str, t.Any] = {
        "date": date or datetime.now().strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": backend,
        "backend": backend,
        "label": None,
        "model_id": model,
        "tokenizer_id": None,
        "num_prompts": num_requests,
        "request_rate": request_rate if request_rate != float("inf") else "inf",
        "burstiness": 1.0,
        "max_concurrency": concurrency,
    }
    for key in _TOTALS:
        result[key] = run[key]
    result["request_goodput"] = run.get("request_goodput") if goodput else None
    for name in LATENCIES:
        for stat in ("mean", "median", "std"):
            key = "%s_%s_ms" % (stat, name)
            result[key] = run[key]
        for p in percentiles:
            result["p%s_%s_ms" % (percentile_text(p), name)] = run["%s_%s_ms" % (percentile_label(p), name)]
    result["gpuops_fleet"] = dict({key: run.get(key) for key in _EXTRAS}, repeat=run.get("repeat"),
                                  goodput=dict(goodput) if goodput else None)
    return result


def write_results(path: str, results: t.Sequence[t.Dict[str, t.Any]]) -> None:
    """One object for one repeat, else one object per line; written to a temporary file, then renamed."""
    if len(results) == 1:
        text = json.dumps(results[0]) + "\n"
    else:
        text = "".join(json.dumps(result) + "\n" for result in results)
    write_atomic(path, text, prefix=".vllm_benchmark.")
